/* The sink's ingest hot path in C: check event wire bytes and fold them into a partition's state.
 *
 * Why C: the sink must check every message it stores and deduplicate it against the partition's
 * state. Done per message in Python that costs 3-6 µs, several times what aiokafka spends handing the
 * message over; here it costs a fraction of a microsecond, so the sink keeps pace with the consumer.
 *
 * The Python code stays the definition of the rules (pipeline.formats.wire.rules, which
 * pipeline.formats.wire.probe.WireProbe follows, and pipeline.store.state.ObjectState). This module
 * only takes the common, unambiguous cases and answers "not mine" for everything else, so the
 * callers fall back to the Python rules one event at a time:
 *   scan  -> None for any message it does not accept outright (the probe then accepts or refuses it
 *            with the usual error message), never a head the probe would refuse: the same types,
 *            time range (TS_MAX_MS), key form and resourceVersion form as pipeline.model.events;
 *   fold  -> stops at any event whose duplicate test it cannot decide alone (content comparison,
 *            state entries that are decoded events, non-ASCII resourceVersions).
 * tests/unit/test_wire_native.py checks both against the Python rules on generated and corrupted
 * input; tests/unit/test_wire_validity.py drives one table of valid and invalid messages through the
 * definition (pipeline.formats.wire.rules), the probe and this scan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define MAX_DEPTH 64 /* deeper bodies go to the Python probe (msgpack has its own limit) */

static PyObject *head_type = NULL;     /* pipeline.formats.wire.probe.EventHead */
static PyObject *event_types[5];       /* index = wire code: APPLIED, DELETED, POD_LIFECYCLE, GAP */
static PyObject *zero = NULL;          /* the int 0 (pod_spec_hash of non-lifecycle heads) */

/* ---- msgpack reading ------------------------------------------------------------------------- */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} reader;

static inline int need(reader *r, Py_ssize_t n) { return r->end - r->p >= n; }

static inline uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* An integer of any msgpack int encoding. Returns 0 if the next value is not an int.
 * *neg is set for negative values (which every field here refuses). */
static int read_int(reader *r, uint64_t *out, int *neg) {
    if (!need(r, 1)) return 0;
    uint8_t b = *r->p;
    *neg = 0;
    if (b <= 0x7f) { *out = b; r->p += 1; return 1; }
    if (b >= 0xe0) { *neg = 1; *out = 0; r->p += 1; return 1; }
    int n;
    int is_signed = 0;
    switch (b) {
        case 0xcc: n = 1; break;
        case 0xcd: n = 2; break;
        case 0xce: n = 4; break;
        case 0xcf: n = 8; break;
        case 0xd0: n = 1; is_signed = 1; break;
        case 0xd1: n = 2; is_signed = 1; break;
        case 0xd2: n = 4; is_signed = 1; break;
        case 0xd3: n = 8; is_signed = 1; break;
        default: return 0;
    }
    if (!need(r, 1 + n)) return 0;
    uint64_t v = be(r->p + 1, n);
    if (is_signed && (v >> (8 * n - 1)) & 1) {
        *neg = 1;
        v = 0;
    }
    *out = v;
    r->p += 1 + n;
    return 1;
}

/* A str (never bin): its bytes. Returns 0 if the next value is not a str. */
static int read_str(reader *r, const uint8_t **s, Py_ssize_t *len) {
    if (!need(r, 1)) return 0;
    uint8_t b = *r->p;
    Py_ssize_t n, h;
    if ((b & 0xe0) == 0xa0) { n = b & 0x1f; h = 1; }
    else if (b == 0xd9) { if (!need(r, 2)) return 0; n = r->p[1]; h = 2; }
    else if (b == 0xda) { if (!need(r, 3)) return 0; n = (Py_ssize_t)be(r->p + 1, 2); h = 3; }
    else if (b == 0xdb) { if (!need(r, 5)) return 0; n = (Py_ssize_t)be(r->p + 1, 4); h = 5; }
    else return 0;
    if (!need(r, h + n)) return 0;
    *s = r->p + h;
    *len = n;
    r->p += h + n;
    return 1;
}

static int is_nil(reader *r) { return need(r, 1) && *r->p == 0xc0; }

/* Skip one well-formed msgpack value of any type. Returns 0 on malformed or too-deep input. */
static int skip(reader *r, int depth) {
    if (depth > MAX_DEPTH || !need(r, 1)) return 0;
    uint8_t b = *r->p;
    uint64_t items = 0; /* container entries to skip (a map counts two per entry) */
    Py_ssize_t h = 1, n = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) { r->p += 1; return 1; }
    if ((b & 0xf0) == 0x80) { items = 2 * (uint64_t)(b & 0x0f); }
    else if ((b & 0xf0) == 0x90) { items = b & 0x0f; }
    else if ((b & 0xe0) == 0xa0) { n = b & 0x1f; }
    else {
        switch (b) {
            case 0xc4: case 0xd9: h = 2; break;                     /* bin8, str8 */
            case 0xc5: case 0xda: h = 3; break;                     /* bin16, str16 */
            case 0xc6: case 0xdb: h = 5; break;                     /* bin32, str32 */
            case 0xc7: h = 3; break;                                /* ext8: len, type */
            case 0xc8: h = 4; break;                                /* ext16 */
            case 0xc9: h = 6; break;                                /* ext32 */
            case 0xca: case 0xce: case 0xd2: h = 5; break;         /* float32, (u)int32 */
            case 0xcb: case 0xcf: case 0xd3: h = 9; break;         /* float64, (u)int64 */
            case 0xcc: case 0xd0: h = 2; break;                     /* (u)int8 */
            case 0xcd: case 0xd1: h = 3; break;                     /* (u)int16 */
            case 0xd4: h = 3; break;                                /* fixext 1..16 */
            case 0xd5: h = 4; break;
            case 0xd6: h = 6; break;
            case 0xd7: h = 10; break;
            case 0xd8: h = 18; break;
            case 0xdc: case 0xde: h = 3; break;                     /* array16, map16 */
            case 0xdd: case 0xdf: h = 5; break;                     /* array32, map32 */
            default: return 0;                                      /* 0xc1: never used */
        }
        if (!need(r, h)) return 0;
        switch (b) {
            case 0xc4: case 0xd9: case 0xc7: n = r->p[1]; break;
            case 0xc5: case 0xda: case 0xc8: n = (Py_ssize_t)be(r->p + 1, 2); break;
            case 0xc6: case 0xdb: case 0xc9: n = (Py_ssize_t)be(r->p + 1, 4); break;
            case 0xdc: items = be(r->p + 1, 2); break;
            case 0xdd: items = be(r->p + 1, 4); break;
            case 0xde: items = 2 * be(r->p + 1, 2); break;
            case 0xdf: items = 2 * be(r->p + 1, 4); break;
            default: break;
        }
    }
    if (!need(r, h + n)) return 0;
    r->p += h + n;
    if (items > (uint64_t)(r->end - r->p)) return 0; /* every entry takes at least one byte */
    for (uint64_t i = 0; i < items; i++)
        if (!skip(r, depth + 1)) return 0;
    return 1;
}

/* pipeline.model.keys.is_object_key on UTF-8 bytes: exactly three '/' and no empty part ('/' is one
 * byte in UTF-8 and never part of another character, so counting bytes counts characters). */
static int object_key_ok(const uint8_t *s, Py_ssize_t n) {
    if (n < 7 || s[0] == '/' || s[n - 1] == '/') return 0;
    int count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] != '/') continue;
        if (s[i + 1] == '/') return 0; /* i < n - 1: the last byte is not '/' */
        count++;
    }
    return count == 3;
}

/* The resourceVersion rule of pipeline.model.events (_is_rv): empty, or at most RV_MAX_DIGITS ASCII
 * digits (a non-ASCII character is at least two bytes >= 0x80, never a digit here). */
#define RV_MAX_DIGITS 20
static int rv_ok(const uint8_t *s, Py_ssize_t n) {
    if (n > RV_MAX_DIGITS) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* ---- the object a body names (pipeline.formats.wire.rules.object_problem, as WireProbe reads it) */
/* A map header: its entry count. Returns 0 if the next value is not a map. */
static int read_map(reader *r, uint64_t *entries) {
    if (!need(r, 1)) return 0;
    uint8_t b = *r->p;
    if ((b & 0xf0) == 0x80) { *entries = b & 0x0f; r->p += 1; return 1; }
    if (b == 0xde && need(r, 3)) { *entries = be(r->p + 1, 2); r->p += 3; return 1; }
    if (b == 0xdf && need(r, 5)) { *entries = be(r->p + 1, 4); r->p += 5; return 1; }
    return 0;
}

enum { ABSENT = 0, STRING = 1, NIL = 2, OTHER = 3 };
typedef struct {
    int state; /* the last entry's value: ABSENT, STRING, NIL or OTHER (as a dict keeps the last) */
    const uint8_t *s;
    Py_ssize_t n;
} field;

static int is_key(const uint8_t *k, Py_ssize_t kn, const char *name) {
    Py_ssize_t n = (Py_ssize_t)strlen(name);
    return kn == n && memcmp(k, name, n) == 0;
}

/* One entry's value into ``f``: a str is kept (not decoded), nil noted, anything else skipped. */
static int read_field(reader *r, field *f, int depth) {
    if (read_str(r, &f->s, &f->n)) { f->state = STRING; return 1; }
    if (is_nil(r)) { r->p += 1; f->state = NIL; return 1; }
    f->state = OTHER;
    return skip(r, depth);
}

/* Whether the bytes are valid UTF-8 as Python decodes it (strict); ASCII, the usual case, in C alone. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n && s[i] < 0x80) i++;
    if (i == n) return 1;
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (o == NULL) { PyErr_Clear(); return 0; }
    Py_DECREF(o);
    return 1;
}

/* A map entry's key, which must be a str of valid UTF-8 (WireProbe decodes it; object_problem refuses
 * other keys). Returns 0 otherwise. */
static int entry_key(reader *r, const uint8_t **k, Py_ssize_t *kn) {
    return read_str(r, k, kn) && utf8_ok(*k, *kn);
}

/* Walk the body map (as skip does) and tell whether it is the object ``key`` names: its keys and its
 * metadata's keys strs, apiVersion a non-empty str, kind a str, metadata a map whose name is a str
 * and namespace a str, nil or absent,
 * and key == group/kind/namespace/name (group "core" for apiVersion "v1", namespace "_" when nil,
 * absent or empty). The key is already known to be four non-empty parts, so a kind, namespace or name
 * holding '/' or empty cannot match it. 1 yes, 0 no or malformed (the probe decides, and refuses). */
static int object_of_key(reader *r, const uint8_t *key, Py_ssize_t key_n) {
    uint64_t entries;
    if (!read_map(r, &entries)) return 0;
    field api = {ABSENT, NULL, 0}, kind = {ABSENT, NULL, 0}, name = {ABSENT, NULL, 0}, ns = {ABSENT, NULL, 0};
    int meta = ABSENT;
    for (uint64_t i = 0; i < entries; i++) {
        const uint8_t *k;
        Py_ssize_t kn;
        if (!entry_key(r, &k, &kn)) return 0;
        if (is_key(k, kn, "apiVersion")) { if (!read_field(r, &api, 1)) return 0; }
        else if (is_key(k, kn, "kind")) { if (!read_field(r, &kind, 1)) return 0; }
        else if (is_key(k, kn, "metadata")) {
            uint64_t meta_entries;
            name.state = ns.state = ABSENT; /* a later metadata replaces an earlier one whole */
            if (!read_map(r, &meta_entries)) {
                meta = OTHER;
                if (!skip(r, 1)) return 0;
                continue;
            }
            meta = STRING; /* here: "a map" */
            for (uint64_t j = 0; j < meta_entries; j++) {
                const uint8_t *mk;
                Py_ssize_t mkn;
                if (!entry_key(r, &mk, &mkn)) return 0;
                if (is_key(mk, mkn, "name")) { if (!read_field(r, &name, 2)) return 0; }
                else if (is_key(mk, mkn, "namespace")) { if (!read_field(r, &ns, 2)) return 0; }
                else if (!skip(r, 2)) return 0;
            }
        } else if (!skip(r, 1)) return 0;
    }
    if (api.state != STRING || api.n == 0 || kind.state != STRING || meta != STRING) return 0;
    if (name.state != STRING || ns.state == OTHER) return 0;
    /* apiVersion is decoded by the probe (strict UTF-8); kind, namespace and name are parts of the key,
     * whose UTF-8 is checked when its str is built */
    if (!utf8_ok(api.s, api.n)) return 0;
    const uint8_t *group = (const uint8_t *)"core";
    Py_ssize_t group_n = 4;
    for (Py_ssize_t i = api.n - 1; i >= 0; i--) {
        if (api.s[i] == '/') {
            if (i > 0) { group = api.s; group_n = i; }
            break;
        }
    }
    const uint8_t *space = (const uint8_t *)"_";
    Py_ssize_t space_n = 1;
    if (ns.state == STRING && ns.n > 0) { space = ns.s; space_n = ns.n; }
    const uint8_t *parts[4] = {group, kind.s, space, name.s};
    Py_ssize_t lens[4] = {group_n, kind.n, space_n, name.n};
    const uint8_t *p = key, *end = key + key_n;
    for (int i = 0; i < 4; i++) {
        if (end - p < lens[i] || memcmp(p, parts[i], lens[i]) != 0) return 0;
        p += lens[i];
        if (i < 3) {
            if (p == end || *p != '/') return 0;
            p++;
        }
    }
    return p == end;
}

/* A Python str from UTF-8, or NULL with no exception set when the bytes are not valid UTF-8. */
static PyObject *text(const uint8_t *s, Py_ssize_t n) {
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (o == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return o;
}

/* The version of the ingest rules this file implements: pipeline.formats.wire.native refuses to use a
 * build of another version (a stale build would silently admit what the Python definition refuses). */
#define INGEST_RULES 2

/* pipeline.model.events.TS_MAX_MS: the last millisecond of year 9999, the latest time an event may
 * carry (the module exports it; tests/unit/test_wire_native.py checks it equals the Python one). */
#define TS_MAX_MS 253402300799999ULL

/* The head of one message, a new reference; Py_None (new ref) when the Python probe must decide;
 * NULL only on a Python error (out of memory). */
static PyObject *scan_one(PyObject *value) {
    if (!PyBytes_CheckExact(value)) Py_RETURN_NONE;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(value);
    reader r = {data, data + PyBytes_GET_SIZE(value)};
    if (!need(&r, 1)) Py_RETURN_NONE;
    uint8_t b = *r.p;
    Py_ssize_t fields;
    if ((b & 0xf0) == 0x90) { fields = b & 0x0f; r.p += 1; }
    else Py_RETURN_NONE; /* an event has at most 12 fields: always a fixarray as msgpack writes it */
    uint64_t version, code, ts, spec_hash, pod_hash = 0, start = 0, end_ms = 0;
    int neg, has_end = 0;
    const uint8_t *key, *uid, *rv, *owner = NULL, *from = NULL, *to = NULL, *reason = NULL;
    Py_ssize_t key_n, uid_n, rv_n, owner_n = 0, from_n = 0, to_n = 0, reason_n = 0;
    if (!read_int(&r, &version, &neg) || neg || version != 1) Py_RETURN_NONE;
    if (!read_int(&r, &code, &neg) || neg || code < 1 || code > 4) Py_RETURN_NONE;
    static const Py_ssize_t length_of[5] = {0, 8, 8, 12, 11};
    if (fields != length_of[code]) Py_RETURN_NONE;
    if (!read_int(&r, &ts, &neg) || neg || ts > TS_MAX_MS) Py_RETURN_NONE;
    if (!read_str(&r, &key, &key_n) || !object_key_ok(key, key_n)) Py_RETURN_NONE;
    if (!read_str(&r, &uid, &uid_n) || !read_str(&r, &rv, &rv_n) || !rv_ok(rv, rv_n)) Py_RETURN_NONE;
    if (code <= 2) {
        if (!need(&r, 1)) Py_RETURN_NONE;
        b = *r.p;
        /* the body is a map, the object the key names */
        if (!object_of_key(&r, key, key_n)) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
    } else {
        if (!is_nil(&r)) Py_RETURN_NONE; /* lifecycles and gaps carry no body */
        r.p += 1;
    }
    if (!read_int(&r, &spec_hash, &neg) || neg) Py_RETURN_NONE;
    if (code == 3) {
        if (!read_str(&r, &owner, &owner_n) || !object_key_ok(owner, owner_n)) Py_RETURN_NONE;
        if (!read_int(&r, &pod_hash, &neg) || neg) Py_RETURN_NONE;
        if (!read_int(&r, &start, &neg) || neg || start > TS_MAX_MS) Py_RETURN_NONE;
        if (is_nil(&r)) r.p += 1;
        else if (!read_int(&r, &end_ms, &neg) || neg || end_ms < start || end_ms > TS_MAX_MS) Py_RETURN_NONE;
        else has_end = 1;
    } else if (code == 4) {
        if (is_nil(&r)) r.p += 1;
        else if (!read_str(&r, &from, &from_n) || !rv_ok(from, from_n)) Py_RETURN_NONE;
        if (is_nil(&r)) r.p += 1;
        else if (!read_str(&r, &to, &to_n) || !rv_ok(to, to_n)) Py_RETURN_NONE;
        if (!read_str(&r, &reason, &reason_n)) Py_RETURN_NONE;
    }
    if (r.p != r.end) Py_RETURN_NONE; /* bytes after the event */

    PyObject *items[14] = {NULL};
    int ok = 1;
    items[0] = Py_NewRef(event_types[code]);
    ok = ok && (items[1] = PyLong_FromUnsignedLongLong(ts)) != NULL;
    ok = ok && (items[2] = text(key, key_n)) != NULL;
    ok = ok && (items[3] = text(uid, uid_n)) != NULL;
    ok = ok && (items[4] = text(rv, rv_n)) != NULL;
    ok = ok && (items[5] = PyLong_FromUnsignedLongLong(spec_hash)) != NULL;
    if (ok && code == 3) {
        ok = (items[6] = text(owner, owner_n)) != NULL;
        ok = ok && (items[7] = PyLong_FromUnsignedLongLong(pod_hash)) != NULL;
        ok = ok && (items[8] = PyLong_FromUnsignedLongLong(start)) != NULL;
        ok = ok && (items[9] = has_end ? PyLong_FromUnsignedLongLong(end_ms) : Py_NewRef(Py_None)) != NULL;
    } else if (ok) {
        items[6] = Py_NewRef(Py_None);
        items[7] = Py_NewRef(zero);
        items[8] = Py_NewRef(Py_None);
        items[9] = Py_NewRef(Py_None);
    }
    if (ok && code == 4) {
        ok = (items[10] = from ? text(from, from_n) : Py_NewRef(Py_None)) != NULL;
        ok = ok && (items[11] = to ? text(to, to_n) : Py_NewRef(Py_None)) != NULL;
        ok = ok && (items[12] = text(reason, reason_n)) != NULL;
    } else if (ok) {
        items[10] = Py_NewRef(Py_None);
        items[11] = Py_NewRef(Py_None);
        items[12] = Py_NewRef(Py_None);
    }
    if (ok) items[13] = Py_NewRef(value);
    if (ok) {
        /* An EventHead is a named tuple: allocated as its type and filled as tuple.__new__ would. */
        PyObject *head = ((PyTypeObject *)head_type)->tp_alloc((PyTypeObject *)head_type, 14);
        if (head != NULL) {
            for (int i = 0; i < 14; i++) PyTuple_SET_ITEM(head, i, items[i]);
            return head;
        }
    }
    for (int i = 0; i < 14; i++) Py_XDECREF(items[i]);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE; /* invalid UTF-8: the probe reports it */
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *applied, *deleted, *lifecycle, *gap;
    if (!PyArg_ParseTuple(args, "OOOOO", &type, &applied, &deleted, &lifecycle, &gap)) return NULL;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure: the head type must be a tuple subclass");
        return NULL;
    }
    Py_XSETREF(head_type, Py_NewRef(type));
    PyObject *members[4] = {applied, deleted, lifecycle, gap};
    for (int i = 0; i < 4; i++) Py_XSETREF(event_types[i + 1], Py_NewRef(members[i]));
    Py_RETURN_NONE;
}

static int configured(void) {
    if (head_type != NULL) return 1;
    PyErr_SetString(PyExc_RuntimeError, "_wirescan.configure() was not called");
    return 0;
}

/* scan(values) -> (heads, undecided): each value's EventHead, or None where the Python probe must
 * decide; ``undecided`` lists the indexes of those Nones (usually empty). */
static PyObject *scan(PyObject *self, PyObject *values) {
    if (!configured()) return NULL;
    PyObject *seq = PySequence_Fast(values, "scan() takes a sequence of bytes");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *heads = PyList_New(n), *undecided = PyList_New(0);
    if (heads == NULL || undecided == NULL) goto fail;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *head = scan_one(items[i]);
        if (head == NULL) goto fail;
        PyList_SET_ITEM(heads, i, head);
        if (head == Py_None) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL) goto fail;
            int failed = PyList_Append(undecided, index) < 0;
            Py_DECREF(index);
            if (failed) goto fail;
        }
    }
    Py_DECREF(seq);
    return Py_BuildValue("(NN)", heads, undecided);
fail:
    Py_XDECREF(heads);
    Py_XDECREF(undecided);
    Py_DECREF(seq);
    return NULL;
}

/* ---- folding into the state (pipeline.store.state.ObjectState's rules) ------------------------ */
enum { TYPE = 0, TS = 1, KEY = 2, UID = 3, RV = 4, SPEC_HASH = 5, OWNER = 6, POD_HASH = 7, START = 8,
       END = 9, GAP_FROM = 10, GAP_TO = 11, GAP_REASON = 12 };
#define F(h, i) PyTuple_GET_ITEM((h), (i))

/* 1 equal, 0 not, -1 error */
static inline int eq(PyObject *a, PyObject *b) { return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ); }

/* A resourceVersion as ASCII digits without leading zeros: 1 digits, 0 not all digits (or empty),
 * -1 non-ASCII (str.isdigit knows digits beyond ASCII: the Python rules decide). */
static int digits(PyObject *rv, const char **s, Py_ssize_t *n) {
    if (!PyUnicode_IS_ASCII(rv)) return -1;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(rv);
    Py_ssize_t len = PyUnicode_GET_LENGTH(rv);
    if (len == 0) return 0;
    for (Py_ssize_t i = 0; i < len; i++)
        if (p[i] < '0' || p[i] > '9') return 0;
    while (len > 1 && *p == '0') { p++; len--; }
    *s = p;
    *n = len;
    return 1;
}

/* _older(e, than): 1 / 0, -1 error, -2 undecidable here. */
static int older(PyObject *e, PyObject *than) {
    int same_uid = eq(F(e, UID), F(than, UID));
    if (same_uid <= 0) return same_uid;
    const char *a, *b;
    Py_ssize_t an, bn;
    int da = digits(F(e, RV), &a, &an), db = digits(F(than, RV), &b, &bn);
    if (da < 0 || db < 0) return -2;
    if (!da || !db) return 0;
    if (an != bn) return an < bn;
    return memcmp(a, b, an) < 0;
}

/* _same_version(prev, e): 1 / 0, -1 error, -2 undecidable (needs the bodies compared). */
static int same_version(PyObject *prev, PyObject *e) {
    int same_uid = eq(F(prev, UID), F(e, UID));
    if (same_uid <= 0) return same_uid;
    if (PyUnicode_GET_LENGTH(F(e, RV)) > 0) return eq(F(prev, RV), F(e, RV));
    return -2;
}

/* Whether e repeats, in each of the n fields, the head stored under e's key in seen (*prev): 1 / 0 (also
 * when nothing is stored), -1 error, -2 undecidable (what is stored is not a head). */
static int same_as_stored(PyObject *seen, PyObject *e, const int *fields, int n, PyObject **prev) {
    *prev = PyDict_GetItemWithError(seen, F(e, KEY));
    if (*prev == NULL) return PyErr_Occurred() ? -1 : 0;
    if (Py_TYPE(*prev) != (PyTypeObject *)head_type) return -2;
    for (int i = 0; i < n; i++) {
        int same = eq(F(*prev, fields[i]), F(e, fields[i]));
        if (same <= 0) return same;
    }
    return 1;
}

/* is_duplicate(e): 1 / 0, -1 error, -2 undecidable. Values in the state that are not heads (decoded
 * events restored from a keyframe) are undecidable here. */
static int duplicate(PyObject *e, PyObject *objects, PyObject *tombstones, PyObject *lifecycles, PyObject *gaps) {
    PyObject *type = F(e, TYPE), *key = F(e, KEY);
    if (type == event_types[1] || type == event_types[2]) {
        PyObject *live = PyDict_GetItemWithError(objects, key);
        if (live == NULL && PyErr_Occurred()) return -1;
        PyObject *gone = PyDict_GetItemWithError(tombstones, key);
        if (gone == NULL && PyErr_Occurred()) return -1;
        if ((live && Py_TYPE(live) != (PyTypeObject *)head_type) ||
            (gone && Py_TYPE(gone) != (PyTypeObject *)head_type))
            return -2;
        if (type == event_types[1]) {
            if (live) {
                int same = same_version(live, e);
                return same != 0 ? same : older(e, live);
            }
            return gone ? older(e, gone) : 0;
        }
        if (live) return older(e, live);
        if (!gone) return 0;
        int same = same_version(gone, e);
        return same != 0 ? same : older(e, gone);
    }
    PyObject *prev;
    if (type == event_types[3]) {
        static const int same_fields[4] = {OWNER, POD_HASH, START, UID};
        int same = same_as_stored(lifecycles, e, same_fields, 4, &prev);
        if (same <= 0) return same;
        if (F(e, END) == Py_None) return 1;
        return eq(F(e, END), F(prev, END));
    }
    if (type == event_types[4]) {
        static const int same_fields[4] = {TS, GAP_FROM, GAP_TO, GAP_REASON};
        return same_as_stored(gaps, e, same_fields, 4, &prev);
    }
    return -2;
}

/* dict.pop(key, None): 0, or -1 on error */
static int pop(PyObject *dict, PyObject *key) {
    int has = PyDict_Contains(dict, key);
    if (has <= 0) return has;
    return PyDict_DelItem(dict, key);
}

static int apply(PyObject *e, PyObject *objects, PyObject *tombstones, PyObject *lifecycles, PyObject *gaps) {
    PyObject *type = F(e, TYPE), *key = F(e, KEY);
    if (type == event_types[1]) {
        if (PyDict_SetItem(objects, key, e) < 0) return -1;
        return pop(tombstones, key);
    }
    if (type == event_types[2]) {
        if (pop(objects, key) < 0) return -1;
        return PyDict_SetItem(tombstones, key, e);
    }
    return PyDict_SetItem(type == event_types[3] ? lifecycles : gaps, key, e);
}

/* fold(heads, start, objects, tombstones, lifecycles, gaps, window_end, room, kept, last_ts)
 *   -> (stop, duplicates, min_ts, last_ts, ordered, why)
 * Folds heads[start:] into the state dicts while they belong to the open segment: each head is
 * dropped as a duplicate or applied and appended to ``kept``. None entries (messages already sent to
 * the dead-letter topic) are passed over. Stops before the first head that is at or after
 * ``window_end`` or would exceed ``room`` (why=1), or whose duplicate test needs the Python rules
 * (why=2); why=0 at the end of the list. ``min_ts`` is the smallest ts_ms kept (-1 if none);
 * ``last_ts`` the ts_ms of the last head kept (the one passed in if none); ``ordered`` whether the
 * kept heads continue ``last_ts`` in time order (then the segment needs no sort). */
static PyObject *fold(PyObject *self, PyObject *args) {
    PyObject *heads, *objects, *tombstones, *lifecycles, *gaps, *kept;
    Py_ssize_t start, room;
    long long window_end, last_ts;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!O!LnO!L", &PyList_Type, &heads, &start, &PyDict_Type, &objects,
                          &PyDict_Type, &tombstones, &PyDict_Type, &lifecycles, &PyDict_Type, &gaps,
                          &window_end, &room, &PyList_Type, &kept, &last_ts))
        return NULL;
    if (!configured()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(heads), i = start, duplicates = 0, added = 0;
    long long min_ts = -1;
    int why = 0, ordered = 1;
    for (; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(heads, i);
        if (e == Py_None) continue;
        if (Py_TYPE(e) != (PyTypeObject *)head_type) { why = 2; break; }
        int dup = duplicate(e, objects, tombstones, lifecycles, gaps);
        if (dup == -1) return NULL;
        if (dup == -2) { why = 2; break; }
        if (dup) { duplicates++; continue; }
        long long ts = PyLong_AsLongLong(F(e, TS));
        if (ts == -1 && PyErr_Occurred()) return NULL;
        if (ts >= window_end || added >= room) { why = 1; break; }
        if (apply(e, objects, tombstones, lifecycles, gaps) < 0) return NULL;
        if (PyList_Append(kept, e) < 0) return NULL;
        added++;
        if (min_ts < 0 || ts < min_ts) min_ts = ts;
        if (ts < last_ts) ordered = 0;
        last_ts = ts;
    }
    return Py_BuildValue("nnLLii", i, duplicates, min_ts, last_ts, ordered, why);
}

/* ---- the export's decoding without object bodies (pipeline.formats.segment.decode) ------------ */
/* An export writes most events as the segments stored them and reads only a few fields of a body: the
 * owners, the namespace, the labels. light() splits a segment's event list into each event's bytes and,
 * for the events it can vouch for, builds the Event with a BodySkeleton (those few fields) instead of
 * the body. It vouches only for bytes in the one form msgpack packs their decoded value in (checked by
 * canonical() below), so the stored bytes are exactly what re-encoding the decoded event would give,
 * and an event moved to another time is its bytes with the time spliced in. Everything else is None:
 * the Python decoder decodes those events whole, as before. */
static PyObject *event_class = NULL;     /* pipeline.model.events.Event (a slotted dataclass) */
static Py_ssize_t event_offsets[14];     /* its slots' offsets, in the order of the EventHead fields + obj */
static PyObject *skeleton_class = NULL;  /* pipeline.formats.wire.skeleton.BodySkeleton (a dict) */
static PyObject *empty_tuple = NULL;
static PyObject *s_metadata = NULL, *s_namespace = NULL, *s_owner_refs = NULL, *s_labels = NULL, *s_wire = NULL;

#define MAP_KEYS_MAX 64 /* a bigger map is left to the Python decoder (its duplicate keys are not checked here) */

static inline int64_t sbe(const uint8_t *p, int n) {
    uint64_t v = be(p, n);
    int shift = 64 - 8 * n;
    return shift ? ((int64_t)(v << shift)) >> shift : (int64_t)v;
}

/* Whether the next value is in msgpack's own form (msgpack.packb(value, use_bin_type=True) of what
 * msgpack.unpackb(raw=False) makes of it): the shortest int, str, bin, array and map headers, strs of
 * valid UTF-8, floats of 64 bits and not NaN, map keys strs without repeats; no ext, no float32. */
static int canonical(reader *r, int depth) {
    if (depth > MAX_DEPTH || !need(r, 1)) return 0;
    uint8_t b = *r->p;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) { r->p += 1; return 1; }
    if ((b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb) {
        const uint8_t *s;
        Py_ssize_t n;
        if (!read_str(r, &s, &n)) return 0;
        if ((b == 0xd9 && n < 32) || (b == 0xda && n < 256) || (b == 0xdb && n < 65536)) return 0;
        return utf8_ok(s, n);
    }
    uint64_t items = 0;
    int map = 0;
    if ((b & 0xf0) == 0x80) { items = b & 0x0f; map = 1; r->p += 1; }
    else if ((b & 0xf0) == 0x90) { items = b & 0x0f; r->p += 1; }
    else {
        Py_ssize_t h, n = 0;
        switch (b) {
            case 0xc4: h = 2; break;
            case 0xc5: h = 3; break;
            case 0xc6: h = 5; break;
            case 0xcc: case 0xd0: h = 2; break;
            case 0xcd: case 0xd1: h = 3; break;
            case 0xce: case 0xd2: h = 5; break;
            case 0xcf: case 0xd3: case 0xcb: h = 9; break;
            case 0xdc: case 0xde: h = 3; break;
            case 0xdd: case 0xdf: h = 5; break;
            default: return 0; /* float32, ext, 0xc1 */
        }
        if (!need(r, h)) return 0;
        const uint8_t *p = r->p + 1;
        switch (b) {
            case 0xc4: n = p[0]; break;
            case 0xc5: n = (Py_ssize_t)be(p, 2); if (n < 256) return 0; break;
            case 0xc6: n = (Py_ssize_t)be(p, 4); if (n < 65536) return 0; break;
            case 0xcc: if (p[0] < 0x80) return 0; break;
            case 0xcd: if (be(p, 2) < 0x100) return 0; break;
            case 0xce: if (be(p, 4) < 0x10000) return 0; break;
            case 0xcf: if (be(p, 8) < 0x100000000ULL) return 0; break;
            case 0xd0: if (sbe(p, 1) >= -32) return 0; break;
            case 0xd1: if (sbe(p, 2) >= -128) return 0; break;
            case 0xd2: if (sbe(p, 4) >= -32768) return 0; break;
            case 0xd3: if (sbe(p, 8) >= -2147483648LL) return 0; break;
            case 0xcb: if ((be(p, 8) & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL &&
                           (be(p, 8) & 0x000fffffffffffffULL) != 0) return 0; /* NaN */
                       break;
            case 0xdc: items = be(p, 2); if (items < 16) return 0; break;
            case 0xdd: items = be(p, 4); if (items < 65536) return 0; break;
            case 0xde: items = be(p, 2); map = 1; if (items < 16) return 0; break;
            case 0xdf: items = be(p, 4); map = 1; if (items < 65536) return 0; break;
            default: break;
        }
        if (!need(r, h + n)) return 0;
        r->p += h + n;
    }
    if (items > (uint64_t)(r->end - r->p)) return 0; /* every entry takes at least one byte */
    if (!map) {
        for (uint64_t i = 0; i < items; i++)
            if (!canonical(r, depth + 1)) return 0;
        return 1;
    }
    if (items > MAP_KEYS_MAX) return 0;
    const uint8_t *keys[MAP_KEYS_MAX];
    Py_ssize_t lens[MAP_KEYS_MAX];
    for (uint64_t i = 0; i < items; i++) {
        uint8_t kb = need(r, 1) ? *r->p : 0;
        if (!read_str(r, &keys[i], &lens[i])) return 0;
        if ((kb == 0xd9 && lens[i] < 32) || (kb == 0xda && lens[i] < 256) || (kb == 0xdb && lens[i] < 65536)) return 0;
        if (!utf8_ok(keys[i], lens[i])) return 0;
        for (uint64_t j = 0; j < i; j++)
            if (lens[j] == lens[i] && memcmp(keys[j], keys[i], lens[i]) == 0) return 0; /* a dict keeps one */
        if (!canonical(r, depth + 1)) return 0;
    }
    return 1;
}

/* The Python value of a value canonical() accepted, as msgpack.unpackb(raw=False) builds it; NULL on
 * a Python error. */
static PyObject *build(reader *r) {
    uint8_t b = *r->p;
    if (b <= 0x7f) { r->p += 1; return PyLong_FromLong(b); }
    if (b >= 0xe0) { r->p += 1; return PyLong_FromLong((int8_t)b); }
    if (b == 0xc0) { r->p += 1; Py_RETURN_NONE; }
    if (b == 0xc2) { r->p += 1; Py_RETURN_FALSE; }
    if (b == 0xc3) { r->p += 1; Py_RETURN_TRUE; }
    if ((b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb) {
        const uint8_t *s;
        Py_ssize_t n;
        read_str(r, &s, &n);
        return PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    }
    const uint8_t *p = r->p + 1;
    uint64_t items;
    switch (b) {
        case 0xc4: r->p += 2 + p[0]; return PyBytes_FromStringAndSize((const char *)p + 1, p[0]);
        case 0xc5: { Py_ssize_t n = (Py_ssize_t)be(p, 2); r->p += 3 + n; return PyBytes_FromStringAndSize((const char *)p + 2, n); }
        case 0xc6: { Py_ssize_t n = (Py_ssize_t)be(p, 4); r->p += 5 + n; return PyBytes_FromStringAndSize((const char *)p + 4, n); }
        case 0xcc: r->p += 2; return PyLong_FromUnsignedLongLong(be(p, 1));
        case 0xcd: r->p += 3; return PyLong_FromUnsignedLongLong(be(p, 2));
        case 0xce: r->p += 5; return PyLong_FromUnsignedLongLong(be(p, 4));
        case 0xcf: r->p += 9; return PyLong_FromUnsignedLongLong(be(p, 8));
        case 0xd0: r->p += 2; return PyLong_FromLongLong(sbe(p, 1));
        case 0xd1: r->p += 3; return PyLong_FromLongLong(sbe(p, 2));
        case 0xd2: r->p += 5; return PyLong_FromLongLong(sbe(p, 4));
        case 0xd3: r->p += 9; return PyLong_FromLongLong(sbe(p, 8));
        case 0xcb: {
            uint64_t bits = be(p, 8);
            double d;
            memcpy(&d, &bits, 8);
            r->p += 9;
            return PyFloat_FromDouble(d);
        }
        default: break;
    }
    int map;
    if ((b & 0xf0) == 0x80) { items = b & 0x0f; map = 1; r->p += 1; }
    else if ((b & 0xf0) == 0x90) { items = b & 0x0f; map = 0; r->p += 1; }
    else if (b == 0xdc || b == 0xde) { items = be(p, 2); map = b == 0xde; r->p += 3; }
    else { items = be(p, 4); map = b == 0xdf; r->p += 5; }
    if (!map) {
        PyObject *list = PyList_New((Py_ssize_t)items);
        if (list == NULL) return NULL;
        for (uint64_t i = 0; i < items; i++) {
            PyObject *item = build(r);
            if (item == NULL) { Py_DECREF(list); return NULL; }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    }
    PyObject *dict = PyDict_New();
    if (dict == NULL) return NULL;
    for (uint64_t i = 0; i < items; i++) {
        PyObject *k = build(r);
        PyObject *v = k == NULL ? NULL : build(r);
        int failed = v == NULL || PyDict_SetItem(dict, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (failed) { Py_DECREF(dict); return NULL; }
    }
    return dict;
}

/* The BodySkeleton of the body at ``r`` (a canonical map whose metadata is a map, as scan_one has
 * checked): {"metadata": {namespace, ownerReferences, and labels if asked, those present}}, the last of
 * repeated keys winning as in a dict. NULL on a Python error. */
static PyObject *skeleton(reader *r, PyObject *wire, int labels) {
    uint64_t entries, meta_entries;
    PyObject *meta = NULL;
    read_map(r, &entries);
    for (uint64_t i = 0; i < entries; i++) {
        const uint8_t *k;
        Py_ssize_t kn;
        read_str(r, &k, &kn);
        if (!is_key(k, kn, "metadata") || !read_map(r, &meta_entries)) {
            skip(r, 1);
            continue;
        }
        Py_XSETREF(meta, PyDict_New());
        if (meta == NULL) return NULL;
        for (uint64_t j = 0; j < meta_entries; j++) {
            const uint8_t *mk;
            Py_ssize_t mkn;
            read_str(r, &mk, &mkn);
            PyObject *name = is_key(mk, mkn, "namespace") ? s_namespace
                : is_key(mk, mkn, "ownerReferences") ? s_owner_refs
                : labels && is_key(mk, mkn, "labels") ? s_labels : NULL;
            if (name == NULL) { skip(r, 2); continue; }
            PyObject *value = build(r);
            int failed = value == NULL || PyDict_SetItem(meta, name, value) < 0;
            Py_XDECREF(value);
            if (failed) { Py_DECREF(meta); return NULL; }
        }
    }
    if (meta == NULL) meta = PyDict_New(); /* not reached: scan_one requires a metadata map */
    PyObject *sk = meta == NULL ? NULL : ((PyTypeObject *)skeleton_class)->tp_new((PyTypeObject *)skeleton_class, empty_tuple, NULL);
    int failed = sk == NULL || PyDict_SetItem(sk, s_metadata, meta) < 0 || PyObject_SetAttr(sk, s_wire, wire) < 0;
    Py_XDECREF(meta);
    if (failed) { Py_XDECREF(sk); return NULL; }
    return sk;
}

/* The Event of an accepted head and its body (a new reference to obj is taken), built as
 * pipeline.model.events.prechecked_event builds it. */
static PyObject *make_event(PyObject *head, PyObject *obj) {
    PyObject *e = ((PyTypeObject *)event_class)->tp_alloc((PyTypeObject *)event_class, 0);
    if (e == NULL) return NULL;
    for (int i = 0; i < 14; i++) {
        /* slots in Event's order: type ts key uid rv obj spec_hash owner pod_hash start end from to reason */
        PyObject *v = i < 5 ? F(head, i) : i == 5 ? obj : F(head, i - 1);
        *(PyObject **)((char *)e + event_offsets[i]) = Py_NewRef(v);
    }
    return e;
}

/* One event's bytes: its Event, or Py_None (new ref) when the Python decoder must decode it. */
static PyObject *light_one(PyObject *piece, int labels) {
    PyObject *head = scan_one(piece);
    if (head == NULL || head == Py_None) return head;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(piece);
    reader r = {data, data + PyBytes_GET_SIZE(piece)};
    reader all = r;
    if (!canonical(&all, 0) || all.p != all.end) { Py_DECREF(head); Py_RETURN_NONE; }
    PyObject *obj = Py_NewRef(Py_None);
    if (F(head, TYPE) == event_types[1] || F(head, TYPE) == event_types[2]) {
        r.p += 1; /* the fixarray header, then version, code, ts, key, uid, rv: the body follows */
        for (int i = 0; i < 6; i++) skip(&r, 1);
        Py_SETREF(obj, skeleton(&r, piece, labels));
    }
    PyObject *e = obj == NULL ? NULL : make_event(head, obj);
    Py_XDECREF(obj);
    Py_DECREF(head);
    return e;
}

/* light(blob, count, labels) -> (events, pieces, undecided) or None.
 * ``pieces``: the bytes of each of the ``count`` msgpack values of ``blob``; ``events``: for each, its
 * Event with a BodySkeleton (labels in it if ``labels``), or None for the Python decoder; ``undecided``
 * the indexes of those Nones. None overall
 * when ``blob`` is not exactly ``count`` well-formed values: the Python decoder reports what is wrong. */
static PyObject *light(PyObject *self, PyObject *args) {
    PyObject *blob;
    Py_ssize_t count;
    int labels;
    if (!PyArg_ParseTuple(args, "O!np", &PyBytes_Type, &blob, &count, &labels)) return NULL;
    if (!configured()) return NULL;
    if (count < 0) Py_RETURN_NONE;
    if (event_class == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_wirescan.configure_light() was not called");
        return NULL;
    }
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(blob);
    reader r = {data, data + PyBytes_GET_SIZE(blob)};
    /* the count comes from a header: a list is built only as far as values are really there */
    PyObject *pieces = PyList_New(0), *events = PyList_New(0), *undecided = NULL;
    if (pieces == NULL || events == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *start = r.p;
        if (r.p == r.end || !skip(&r, 0)) {
            Py_DECREF(pieces);
            Py_DECREF(events);
            Py_RETURN_NONE;
        }
        PyObject *piece = PyBytes_FromStringAndSize((const char *)start, r.p - start);
        int failed = piece == NULL || PyList_Append(pieces, piece) < 0;
        Py_XDECREF(piece);
        if (failed) goto fail;
    }
    if (r.p != r.end) {
        Py_DECREF(pieces);
        Py_DECREF(events);
        Py_RETURN_NONE;
    }
    undecided = PyList_New(0);
    if (undecided == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *e = light_one(PyList_GET_ITEM(pieces, i), labels);
        int failed = e == NULL || PyList_Append(events, e) < 0;
        if (!failed && e == Py_None) {
            PyObject *index = PyLong_FromSsize_t(i);
            failed = index == NULL || PyList_Append(undecided, index) < 0;
            Py_XDECREF(index);
        }
        Py_XDECREF(e);
        if (failed) goto fail;
    }
    return Py_BuildValue("(NNN)", events, pieces, undecided);
fail:
    Py_XDECREF(pieces);
    Py_XDECREF(events);
    Py_XDECREF(undecided);
    return NULL;
}

/* configure_light(Event, field_names, BodySkeleton): the Event class, its slot names in the order
 * type ts key uid rv obj spec_hash owner pod_hash start end from to reason, and the skeleton class. */
static PyObject *configure_light(PyObject *self, PyObject *args) {
    PyObject *cls, *names, *sk;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &cls, &PyTuple_Type, &names, &PyType_Type, &sk))
        return NULL;
    if (PyTuple_GET_SIZE(names) != 14 || !PyType_IsSubtype((PyTypeObject *)sk, &PyDict_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure_light: 14 field names and a dict subclass expected");
        return NULL;
    }
    for (int i = 0; i < 14; i++) {
        PyObject *d = PyObject_GetAttr(cls, PyTuple_GET_ITEM(names, i));
        if (d == NULL) return NULL;
        int slot = Py_TYPE(d) == &PyMemberDescr_Type &&
                   ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (slot) event_offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!slot) {
            PyErr_Format(PyExc_TypeError, "configure_light: %R is not a slot of %R", PyTuple_GET_ITEM(names, i), cls);
            return NULL;
        }
    }
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL) return NULL;
    const char *texts[5] = {"metadata", "namespace", "ownerReferences", "labels", "wire"};
    PyObject **slots[5] = {&s_metadata, &s_namespace, &s_owner_refs, &s_labels, &s_wire};
    for (int i = 0; i < 5; i++)
        if (*slots[i] == NULL && (*slots[i] = PyUnicode_InternFromString(texts[i])) == NULL) return NULL;
    Py_XSETREF(event_class, Py_NewRef(cls));
    Py_XSETREF(skeleton_class, Py_NewRef(sk));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(EventHead, APPLIED, DELETED, POD_LIFECYCLE, GAP)"},
    {"scan", scan, METH_O, "scan(values) -> (heads, undecided indexes): EventHead or None (the Python probe decides)"},
    {"light", light, METH_VARARGS, "light(blob, count, labels) -> (events, pieces, undecided) or None: decoding without bodies"},
    {"configure_light", configure_light, METH_VARARGS, "configure_light(Event, field_names, BodySkeleton)"},
    {"fold", fold, METH_VARARGS, "fold(heads, start, objects, tombstones, lifecycles, gaps, window_end, room, kept, last_ts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wirescan",
                                    "The sink's ingest hot path (see pipeline.formats.wire.native).", -1, methods};

PyMODINIT_FUNC PyInit__wirescan(void) {
    zero = PyLong_FromLong(0);
    if (zero == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* the limits compiled in, for the Python side to check against its own (formats/wire/native.py) */
    PyObject *ts_max = PyLong_FromUnsignedLongLong(TS_MAX_MS);
    int failed = ts_max == NULL || PyModule_AddObjectRef(m, "TS_MAX_MS", ts_max) < 0 ||
                 PyModule_AddIntConstant(m, "RV_MAX_DIGITS", RV_MAX_DIGITS) < 0 ||
                 PyModule_AddIntConstant(m, "INGEST_RULES", INGEST_RULES) < 0;
    Py_XDECREF(ts_max);
    if (failed) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
