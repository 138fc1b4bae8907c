"""``kubetape xray`` driven as a keyboard user would, through Textual's own test pilot."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static, TextArea

from pipeline.formats.trace import read_trace
from pipeline.formats.xray import ERROR_MARKER, browse
from services.commands.xray import validation_marks
from services.xray_app import EventsScreen, PodsScreen, VersionsScreen, XrayApp
from tests.unit.test_xray import write_kubetape_trace


def _app(path: Path) -> XrayApp:
    return XrayApp(browse(read_trace(path)), str(path))


def _validated_app(path: Path) -> XrayApp:
    """The app as ``kubetape xray`` starts it: with the trace's validation findings."""
    trace = read_trace(path)
    return XrayApp(browse(trace, validation_marks(trace)), str(path))


def _cells(table: DataTable[object]) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def _text(widget: Static) -> str:
    return str(widget.content)


def _shown(widget: Static) -> bool:
    return bool(widget.display)


async def test_a_deployment_change_and_its_diff_in_a_few_keys(tmp_path: Path) -> None:
    app = _app(write_kubetape_trace(tmp_path / "shop.ktrace"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, EventsScreen)
        events = app.screen.query_one("#events", DataTable)
        assert events.row_count == 10

        await pilot.press("slash", *"deploy changed", "enter")
        assert [row[3:6] for row in _cells(events)] == [["changed", "Deployment", "shop/web"]]
        assert _text(app.screen.query_one("#status", Static)) == "1 of 10 events matching 'deploy changed'"

        await pilot.press("enter")  # the versions, on the version that row recorded
        screen = app.screen
        assert isinstance(screen, VersionsScreen)
        assert [row[3] for row in _cells(screen.query_one("#versions", DataTable))] == [
            "created",
            "changed",
            "deleted",
        ]
        assert _text(screen.query_one("#pane", Static)).startswith("version 2 of 3: changed at")
        assert "replicas: 5" in screen.query_one("#text", TextArea).text

        await pilot.press("d")
        assert _text(screen.query_one("#pane", Static)) == "diff of version 2 with version 1"
        diff = screen.query_one("#text", TextArea).text
        assert "-  replicas: 2\n+  replicas: 5" in diff
        assert "+      - image: web:2" in diff

        await pilot.press("up", "d")  # the first version has nothing before it
        assert _text(screen.query_one("#pane", Static)) == "version 1 has no previous"

        await pilot.press("escape")
        assert isinstance(app.screen, EventsScreen)


async def test_an_owners_pods_over_time(tmp_path: Path) -> None:
    app = _app(write_kubetape_trace(tmp_path / "shop.ktrace"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"web", "escape", "p")  # the first row: the Deployment's creation
        screen = app.screen
        assert isinstance(screen, PodsScreen)
        counts = [(row[1], row[2]) for row in _cells(screen.query_one("#counts", DataTable))]
        assert counts == [("+1.5s", "2"), ("+5.5s", "5"), ("+7.5s", "4")]
        await pilot.press("escape")
        assert isinstance(app.screen, EventsScreen)


async def test_pods_of_an_object_without_pods_is_a_notice_not_a_screen(simkube_traces: Path) -> None:
    app = _app(simkube_traces / "simkube-trace.json")
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p")
        assert isinstance(app.screen, EventsScreen)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, VersionsScreen)
        assert "name: nginx-deployment" in screen.query_one("#text", TextArea).text
        await pilot.press("q")
    assert app.return_code == 0


async def test_j_and_k_move_through_the_events_as_in_skctl(tmp_path: Path) -> None:
    app = _app(write_kubetape_trace(tmp_path / "shop.ktrace"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        events = app.screen.query_one("#events", DataTable)
        assert events.cursor_row == 0
        await pilot.press("j", "j", "j")
        assert events.cursor_row == 3
        await pilot.press("k")
        assert events.cursor_row == 2
        await pilot.press("k", "k", "k")  # not past the first row
        assert events.cursor_row == 0


async def test_j_and_k_move_through_an_objects_versions(tmp_path: Path) -> None:
    app = _app(write_kubetape_trace(tmp_path / "shop.ktrace"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("enter")  # the Deployment's creation: its versions
        screen = app.screen
        assert isinstance(screen, VersionsScreen)
        await pilot.press("j")
        assert _text(screen.query_one("#pane", Static)).startswith("version 2 of 3: changed at")
        await pilot.press("j", "k")
        assert _text(screen.query_one("#pane", Static)).startswith("version 2 of 3: changed at")


async def test_events_with_validation_findings_are_marked_and_space_shows_their_codes(
    tmp_path: Path,
) -> None:
    # the shop Deployment has no spec.selector: KE0010 on its creation and its change
    app = _validated_app(write_kubetape_trace(tmp_path / "shop.ktrace"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        events = app.screen.query_one("#events", DataTable)
        marked = [(row[0], row[3], row[4]) for row in _cells(events) if row[3] != "pod"]
        assert marked == [
            (ERROR_MARKER, "created", "Deployment"),
            ("", "created", "ConfigMap"),
            (ERROR_MARKER, "changed", "Deployment"),
            ("", "deleted", "Deployment"),
        ]
        expanded = app.screen.query_one("#expanded", Static)
        assert not _shown(expanded)

        await pilot.press("space")  # expand the selected event: the Deployment's creation
        assert _shown(expanded)
        text = _text(expanded)
        assert text.startswith("created Deployment shop/web at 1970-01-01 00:00:01.000 (+0.5s)")
        assert f"{ERROR_MARKER} KE0010 error: spec.selector is missing" in text

        await pilot.press("j")  # the expanded view follows the selection: the ConfigMap
        assert _text(expanded).splitlines() == [
            "created ConfigMap shop/settings at 1970-01-01 00:00:01.500 (+1.0s)",
            "  no validation findings",
        ]

        await pilot.press("space")  # collapses again
        assert not _shown(expanded)
        await pilot.press("space", "escape")  # and Escape collapses, as skctl's deselect
        assert not _shown(expanded)
        assert isinstance(app.screen, EventsScreen)

        await pilot.press("slash", *"ke0010", "enter")  # the filter finds rows by finding code
        assert [row[3] for row in _cells(events)] == ["created", "changed"]
