// Command dashboard-check checks Grafana dashboard JSON files with the types of Grafana's own Foundation
// SDK (github.com/grafana/grafana-foundation-sdk/go, Apache-2.0), since Grafana's server cannot be run
// here. A dashboard passes when:
//
//   - it decodes strictly into the SDK's dashboard.Dashboard (no unknown field anywhere, no field of the
//     wrong type, no required field missing), each panel's options and fieldConfig.defaults.custom into
//     its panel kind's own types, and each query into its data source's query type; and the SDK's
//     Validate() finds nothing;
//   - every panel's type is a panel kind the SDK registers, every panel has an id no other panel has, and
//     its gridPos fits the 24-column grid without overlapping another panel;
//   - every data source reference names a data source type the SDK knows and, through a datasource
//     variable of that type, no uid fixed to one Grafana install;
//   - every $variable a panel uses is a template variable of the dashboard or one of Grafana's globals.
//
// Usage: dashboard-check FILE... ; one line per problem ("FILE: WHERE: WHAT"), exit 1 if any, 2 on
// usage errors; one "FILE: ok ..." line per clean file.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const gridColumns = 24

// Grafana's global variables (https://grafana.com/docs/grafana/latest/dashboards/variables/add-template-variables/#global-variables).
var globalVariables = map[string]bool{
	"__dashboard": true, "__from": true, "__to": true, "__interval": true, "__interval_ms": true,
	"__name": true, "__org": true, "__user": true, "__range": true, "__range_s": true, "__range_ms": true,
	"__rate_interval": true, "__rate_interval_ms": true, "timeFilter": true, "__timeFilter": true,
	"__timezone": true, "__field": true, "__series": true, "__value": true, "__data": true, "__url": true,
	"__url_time_range": true, "__all_variables": true, "__cell": true,
}

// $name, ${name}, ${name:format}, [[name]]
var variableUse = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]`)

type problem struct{ where, what string }

type variable struct {
	kind  string
	query string // a datasource variable's query: the data source type it offers
}

type checker struct {
	problems  []problem
	variables map[string]variable
	ids       map[uint32]string
	placed    []placedPanel
	queries   int
	panels    int
	titles    []string // the top panels' titles, to name them in the SDK's errors
}

type placedPanel struct {
	where string
	pos   dashboard.GridPos
}

func (c *checker) add(where, format string, args ...any) {
	c.problems = append(c.problems, problem{where, fmt.Sprintf(format, args...)})
}

// addSDKError records each of the SDK's build errors (path and message) under where.
func (c *checker) addSDKError(where string, err error) {
	var buildErrs cog.BuildErrors
	if errors.As(err, &buildErrs) {
		for _, e := range buildErrs {
			c.add(c.describe(joinWhere(where, e.Path)), "%s", e.Message)
		}
		return
	}
	c.add(c.describe(where), "%s", err.Error())
}

// describe makes an SDK error path readable: the top panel's title after "panels[N]", and without the
// SDK's trailing type name ("options.Options: unexpected field" is about the options).
func (c *checker) describe(path string) string {
	segments := strings.Split(path, ".")
	if last := segments[len(segments)-1]; last != "" && unicode.IsUpper(rune(last[0])) {
		segments = segments[:len(segments)-1]
	}
	path = strings.Join(segments, ".")
	if m := topPanel.FindStringSubmatch(path); m != nil {
		if i, err := strconv.Atoi(m[1]); err == nil && i < len(c.titles) && !strings.HasPrefix(path[len(m[0]):], " (") {
			path = fmt.Sprintf("%s (%q)%s", m[0], c.titles[i], path[len(m[0]):])
		}
	}
	return path
}

var topPanel = regexp.MustCompile(`^panels\[(\d+)\]`)

func joinWhere(prefix, path string) string {
	switch {
	case prefix == "":
		return path
	case path == "":
		return prefix
	}
	return prefix + "." + path
}

// rawPanel is the part of a panel this checker reads itself; everything else is the SDK's to decode.
type rawPanel struct {
	Id          *uint32            `json:"id"`
	Type        string             `json:"type"`
	Title       string             `json:"title"`
	GridPos     *dashboard.GridPos `json:"gridPos"`
	Datasource  json.RawMessage    `json:"datasource"`
	Targets     []json.RawMessage  `json:"targets"`
	FieldConfig json.RawMessage    `json:"fieldConfig"`
	Panels      []json.RawMessage  `json:"panels"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboard-check DASHBOARD.json...")
		os.Exit(2)
	}
	// Panel kinds and query types are known to the SDK's decoders only once registered.
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: cannot read: %v\n", path, err)
			os.Exit(2)
		}
		c := check(raw)
		if len(c.problems) > 0 {
			failed = true
			for _, p := range c.problems {
				fmt.Printf("%s: %s: %s\n", path, orTop(p.where), p.what)
			}
			continue
		}
		fmt.Printf("%s: ok: %d panels, %d queries, %d variables (Grafana Foundation SDK %s types)\n",
			path, c.panels, c.queries, len(c.variables), sdkVersion())
	}
	if failed {
		os.Exit(1)
	}
}

func orTop(where string) string {
	if where == "" {
		return "dashboard"
	}
	return where
}

func sdkVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/grafana/grafana-foundation-sdk/go" {
				return dep.Version
			}
		}
	}
	return "(unknown version)"
}

func check(raw []byte) *checker {
	c := &checker{variables: map[string]variable{}, ids: map[uint32]string{}}
	var top struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []json.RawMessage `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		c.add("", "not a dashboard JSON object: %v", err)
		return c
	}
	for _, p := range top.Panels {
		var titled struct {
			Title string `json:"title"`
		}
		_ = json.Unmarshal(p, &titled)
		c.titles = append(c.titles, titled.Title)
	}
	var decoded dashboard.Dashboard
	if err := decoded.UnmarshalJSONStrict(raw); err != nil {
		c.addSDKError("", err)
	}
	if err := decoded.Validate(); err != nil {
		c.addSDKError("", err)
	}
	c.readVariables(top.Templating.List)
	for i, p := range top.Panels {
		c.checkPanel(fmt.Sprintf("panels[%d]", i), p)
	}
	return c
}

func (c *checker) readVariables(list []json.RawMessage) {
	known := map[dashboard.VariableType]bool{
		dashboard.VariableTypeQuery: true, dashboard.VariableTypeAdhoc: true, dashboard.VariableTypeGroupby: true,
		dashboard.VariableTypeConstant: true, dashboard.VariableTypeDatasource: true,
		dashboard.VariableTypeInterval: true, dashboard.VariableTypeTextbox: true,
		dashboard.VariableTypeCustom: true, dashboard.VariableTypeSystem: true,
		dashboard.VariableTypeSnapshot: true, dashboard.VariableTypeSwitch: true,
	}
	for i, item := range list {
		where := fmt.Sprintf("templating.list[%d]", i)
		var v dashboard.VariableModel
		if err := json.Unmarshal(item, &v); err != nil {
			continue // the strict decoding has said what is wrong with it
		}
		if !known[v.Type] {
			c.add(where+".type", "variable type %q is none of the SDK's variable types", v.Type)
		}
		if _, dup := c.variables[v.Name]; dup {
			c.add(where+".name", "variable %q is defined twice", v.Name)
		}
		query := ""
		if v.Query != nil && v.Query.String != nil {
			query = *v.Query.String
		}
		if v.Type == dashboard.VariableTypeDatasource && !knownDataSourceType(query) {
			c.add(where+".query", "datasource variable %q offers data sources of type %q, which the SDK has no query type for", v.Name, query)
		}
		c.variables[v.Name] = variable{kind: string(v.Type), query: query}
	}
}

func (c *checker) checkPanel(where string, raw json.RawMessage) {
	var p rawPanel
	if err := json.Unmarshal(raw, &p); err != nil {
		return // the strict decoding has said what is wrong with it
	}
	c.panels++
	label := fmt.Sprintf("%s (%q)", where, p.Title)
	if p.Type != "row" {
		if _, found := cog.ConfigForPanelcfgVariant(p.Type); !found {
			c.add(label+".type", "panel type %q is not a panel kind the SDK registers", p.Type)
		}
	}
	c.checkId(label, p.Id)
	c.checkGridPos(label, p.GridPos)
	if len(p.FieldConfig) > 0 && string(p.FieldConfig) != "null" {
		// The SDK's strict panel decoding reads fieldConfig loosely (all but defaults.custom): read it strictly.
		var fc dashboard.FieldConfigSource
		if err := fc.UnmarshalJSONStrict(p.FieldConfig); err != nil {
			c.addSDKError(label+".fieldConfig", err)
		}
	}
	panelType := c.checkDataSource(label+".datasource", p.Datasource)
	for i, t := range p.Targets {
		c.checkTarget(fmt.Sprintf("%s.targets[%d]", label, i), panelType, t)
	}
	c.checkVariableUses(label, raw)
	for i, child := range p.Panels {
		c.checkPanel(fmt.Sprintf("%s.panels[%d]", where, i), child)
	}
}

func (c *checker) checkId(label string, id *uint32) {
	if id == nil {
		c.add(label+".id", "the panel has no id (Grafana needs one per panel to link to it)")
		return
	}
	if other, dup := c.ids[*id]; dup {
		c.add(label+".id", "id %d is already the id of %s", *id, other)
		return
	}
	c.ids[*id] = label
}

func (c *checker) checkGridPos(label string, pos *dashboard.GridPos) {
	if pos == nil {
		c.add(label+".gridPos", "the panel has no gridPos")
		return
	}
	// Width and height > 0 and width <= 24 are the SDK's Validate(); the grid's right edge is not.
	if pos.X+pos.W > gridColumns {
		c.add(label+".gridPos", "x %d + w %d passes the grid's %d columns", pos.X, pos.W, gridColumns)
	}
	for _, other := range c.placed {
		o := other.pos
		if pos.X < o.X+o.W && o.X < pos.X+pos.W && pos.Y < o.Y+o.H && o.Y < pos.Y+pos.H {
			c.add(label+".gridPos", "overlaps %s", other.where)
		}
	}
	c.placed = append(c.placed, placedPanel{label, *pos})
}

// checkDataSource resolves a data source reference; returns its type ("" when there is none).
func (c *checker) checkDataSource(where string, raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var ref common.DataSourceRef
	if err := json.Unmarshal(raw, &ref); err != nil {
		return "" // the strict decoding has said what is wrong with it
	}
	kind := ""
	if ref.Type != nil {
		kind = *ref.Type
	}
	if !knownDataSourceType(kind) {
		c.add(where+".type", "data source type %q has no query type in the SDK", kind)
	}
	if ref.Uid == nil {
		return kind
	}
	uid := *ref.Uid
	name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(uid, "${"), "$"), "}")
	if name == uid {
		c.add(where+".uid", "uid %q is one Grafana install's data source; use a datasource variable (${name}) so the dashboard imports anywhere", uid)
		return kind
	}
	v, found := c.variables[name]
	switch {
	case !found:
		c.add(where+".uid", "%s names no template variable", uid)
	case v.kind != string(dashboard.VariableTypeDatasource):
		c.add(where+".uid", "%s is a %s variable, not a datasource variable", uid, v.kind)
	case kind != "" && v.query != kind:
		c.add(where+".uid", "%s offers %q data sources, not %q", uid, v.query, kind)
	}
	return kind
}

func (c *checker) checkTarget(where, panelType string, raw json.RawMessage) {
	c.queries++
	var own struct {
		Datasource json.RawMessage `json:"datasource"`
	}
	_ = json.Unmarshal(raw, &own)
	ownType := c.checkDataSource(where+".datasource", own.Datasource)
	if ownType != "" {
		return // the SDK's strict panel decoding decoded it as its own data source's query, and validated it
	}
	// Without a type of its own the SDK keeps the query as an untyped map: decode it as the panel's.
	query, err := cog.StrictUnmarshalDataquery(raw, panelType)
	if err != nil {
		c.addSDKError(where, err)
		return
	}
	if _, untyped := query.(variants.UnknownDataquery); untyped {
		c.add(where, "the query has no data source type the SDK knows (neither its own nor its panel's), so nothing can check it")
		return
	}
	if err := query.Validate(); err != nil {
		c.addSDKError(where, err)
	}
}

// checkVariableUses finds each $variable in the panel's strings (a row's own, not its panels').
func (c *checker) checkVariableUses(label string, raw json.RawMessage) {
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return
	}
	delete(fields, "panels")
	var strs []string
	collectStrings(fields, &strs)
	unknown := map[string]bool{}
	for _, s := range strs {
		for _, m := range variableUse.FindAllStringSubmatch(s, -1) {
			name := m[1] + m[2] + m[3]
			if _, ok := c.variables[name]; !ok && !globalVariables[name] {
				unknown[name] = true
			}
		}
	}
	names := make([]string, 0, len(unknown))
	for n := range unknown {
		names = append(names, "$"+n)
	}
	sort.Strings(names)
	for _, n := range names {
		c.add(label, "uses %s, which is neither a template variable nor a Grafana global", n)
	}
}

func collectStrings(value any, out *[]string) {
	switch v := value.(type) {
	case string:
		*out = append(*out, v)
	case []any:
		for _, item := range v {
			collectStrings(item, out)
		}
	case map[string]any:
		for _, item := range v {
			collectStrings(item, out)
		}
	}
}

// knownDataSourceType: the SDK has a query type registered for it (its runtime's registry is private,
// so ask it to decode an empty query with that type as the hint: an unregistered type comes back untyped).
func knownDataSourceType(kind string) bool {
	if kind == "" {
		return false
	}
	query, err := cog.StrictUnmarshalDataquery([]byte("{}"), kind)
	if err != nil {
		return true // a registered type's decoder ran and refused the empty query
	}
	_, untyped := query.(variants.UnknownDataquery)
	return !untyped
}
