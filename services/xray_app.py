"""The terminal browser behind ``kubetape xray``: a thin Textual layout over :mod:`pipeline.formats.xray`.

Imported only when ``xray`` runs, so the rest of the CLI starts without loading Textual.

Keys, SimKube's ``skctl xray``'s where it has them: ``j``/``k`` (or the arrows) move down/up in every list,
Ctrl+F/Ctrl+B (or Page Down/Up) a page, Space expands the selected event (its object, time and
validation findings) and collapses it again, Escape collapses it. ``/`` filters the events (kind,
namespace/name, type, finding code; Enter or Escape returns to the list), Enter opens the selected
object's versions (or a pod's owner's pods), ``p`` the owner's pods over time, ``d`` (in the versions) the
diff of the selected version with the one before, Escape goes back, ``q`` quits. An event whose object
has validation findings carries a marker in the first column (✗ an error, ! warnings only)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static, TextArea

from pipeline.formats.xray import (
    Browse,
    Row,
    expanded_text,
    format_offset,
    format_time,
    render_object,
    version_diff,
)
from pipeline.model.keys import ObjectKey

_BAR_WIDTH = 40

_MOVES: list[BindingType] = [
    Binding("j", "move('down')", "down", show=False),
    Binding("k", "move('up')", "up", show=False),
    Binding("ctrl+f", "move('page_down')", "page down", show=False),
    Binding("ctrl+b", "move('page_up')", "page up", show=False),
]
"""skctl xray's moves, in every list (the arrows and Page Up/Down work as well: the tables' own keys)."""


class _ListScreen(Screen[None]):
    """A screen around one table, moved through with skctl's keys."""

    TABLE = ""
    """The id of the screen's table."""

    def action_move(self, where: str) -> None:
        table = self.query_one(f"#{self.TABLE}", DataTable)
        moves = {
            "down": table.action_cursor_down,
            "up": table.action_cursor_up,
            "page_down": table.action_page_down,
            "page_up": table.action_page_up,
        }
        moves[where]()


class EventsScreen(_ListScreen):
    """Every event of the trace over time, filterable; the selected one expanded on Space."""

    TABLE = "events"
    BINDINGS: ClassVar[list[BindingType]] = [
        *_MOVES,
        Binding("space", "expand", "expand/collapse"),
        Binding("slash", "filter", "filter"),
        Binding("p", "pods", "owner's pods"),
        Binding("escape", "back", "back to the list", show=False),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, data: Browse) -> None:
        super().__init__()
        self.data = data
        self.shown: list[Row] = list(data.rows)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: words of kind, namespace/name, type or finding code", id="filter")
        yield DataTable(id="events", cursor_type="row", zebra_stripes=True)
        yield Static(id="expanded")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one("#expanded", Static).display = False
        table = self.query_one("#events", DataTable)
        table.add_columns("", "time (UTC)", "offset", "type", "kind", "namespace/name", "detail")
        self._show("")
        table.focus()

    @property
    def expanded(self) -> bool:
        return bool(self.query_one("#expanded", Static).display)

    def action_expand(self) -> None:
        """Space: show the selected event's object, time and findings under the list, or hide them."""
        pane = self.query_one("#expanded", Static)
        pane.display = not pane.display
        self._show_expanded()

    def _show_expanded(self) -> None:
        if self.expanded:
            row = self.selected()
            self.query_one("#expanded", Static).update(
                expanded_text(row, self.data.start_ms) if row is not None else "no event selected"
            )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_expanded()

    def _show(self, query: str) -> None:
        self.shown = self.data.filtered(query)
        table = self.query_one("#events", DataTable)
        table.clear()
        for row in self.shown:
            table.add_row(
                row.marker,
                format_time(row.ts_ms),
                format_offset(row.ts_ms, self.data.start_ms),
                row.type,
                row.kind,
                row.namespaced_name,
                row.detail,
            )
        matched = f" matching {query!r}" if query.strip() else ""
        self.query_one("#status", Static).update(
            f"{len(self.shown)} of {len(self.data.rows)} events{matched}"
        )
        self._show_expanded()

    def selected(self) -> Row | None:
        table = self.query_one("#events", DataTable)
        return self.shown[table.cursor_row] if 0 <= table.cursor_row < len(self.shown) else None

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def action_back(self) -> None:
        """Escape: from the filter back to the list; in the list, collapse the expanded event."""
        table = self.query_one("#events", DataTable)
        if not table.has_focus:
            table.focus()
        elif self.expanded:
            self.action_expand()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._show(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#events", DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        row = self.selected()
        if row is None:
            return
        if row.version is not None:
            self.app.push_screen(VersionsScreen(self.data, row.key, row.version))
        else:
            self.action_pods()

    def action_pods(self) -> None:
        row = self.selected()
        if row is None:
            return
        owner = row.owner or row.key
        if owner not in self.data.pods:
            self.notify(f"no pods recorded for {row.kind} {row.namespaced_name}", severity="warning")
            return
        self.app.push_screen(PodsScreen(self.data, owner))


class VersionsScreen(_ListScreen):
    """One object's recorded versions; the selected one's YAML, or its diff with the previous."""

    TABLE = "versions"
    BINDINGS: ClassVar[list[BindingType]] = [
        *_MOVES,
        Binding("d", "diff", "diff with previous"),
        Binding("escape", "app.pop_screen", "back"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, data: Browse, key: ObjectKey, selected: int) -> None:
        super().__init__()
        self.data = data
        self.key = key
        self.versions = data.versions[key]
        self.initial = selected

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"versions of {self.key}", id="title")
        yield DataTable(id="versions", cursor_type="row")
        yield Static(id="pane")
        yield TextArea(id="text", read_only=True, soft_wrap=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#versions", DataTable)
        table.add_columns("#", "time (UTC)", "offset", "type")
        for index, version in enumerate(self.versions):
            table.add_row(
                str(index + 1),
                format_time(version.ts_ms),
                format_offset(version.ts_ms, self.data.start_ms),
                version.type,
            )
        table.move_cursor(row=self.initial)
        self._show_version(self.initial)
        table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_version(event.cursor_row)

    def _show_version(self, index: int) -> None:
        version = self.versions[index]
        self.query_one("#pane", Static).update(
            f"version {index + 1} of {len(self.versions)}: {version.type} at {format_time(version.ts_ms)}"
        )
        self.query_one("#text", TextArea).load_text(render_object(version.obj))

    def action_diff(self) -> None:
        index = self.query_one("#versions", DataTable).cursor_row
        self.query_one("#pane", Static).update(
            f"diff of version {index + 1} with version {index}" if index else "version 1 has no previous"
        )
        self.query_one("#text", TextArea).load_text(version_diff(self.versions, index))


class PodsScreen(_ListScreen):
    """How many pods of one owner ran over time."""

    TABLE = "counts"
    BINDINGS: ClassVar[list[BindingType]] = [
        *_MOVES,
        Binding("escape", "app.pop_screen", "back"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, data: Browse, owner: ObjectKey) -> None:
        super().__init__()
        self.data = data
        self.owner = owner

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"pods of {self.owner} over time", id="title")
        yield DataTable(id="counts", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        counts = self.data.pod_counts(self.owner)
        peak = max((count for _, count in counts), default=0) or 1
        table = self.query_one("#counts", DataTable)
        table.add_columns("time (UTC)", "offset", "pods", "")
        for ts_ms, count in counts:
            bar = "█" * round(count * _BAR_WIDTH / peak)
            table.add_row(format_time(ts_ms), format_offset(ts_ms, self.data.start_ms), str(count), bar)
        table.focus()


class XrayApp(App[None]):
    """``kubetape xray``: starts on the events view of one trace."""

    TITLE = "kubetape xray"

    def __init__(self, data: Browse, source: str) -> None:
        super().__init__()
        self.data = data
        self.sub_title = source

    def on_mount(self) -> None:
        self.push_screen(EventsScreen(self.data))
