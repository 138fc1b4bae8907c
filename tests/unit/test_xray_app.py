"""``kubetape xray`` driven as a keyboard user would, through Textual's own test pilot."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static, TextArea

from pipeline.formats.trace import read_trace
from pipeline.formats.xray import browse
from services.xray_app import EventsScreen, PodsScreen, VersionsScreen, XrayApp
from tests.unit.test_xray import write_kubetape_trace


def _app(path: Path) -> XrayApp:
    return XrayApp(browse(read_trace(path)), str(path))


def _cells(table: DataTable[object]) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def _text(widget: Static) -> str:
    return str(widget.content)


async def test_a_deployment_change_and_its_diff_in_a_few_keys(tmp_path: Path) -> None:
    app = _app(write_kubetape_trace(tmp_path / "shop.ktrace"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, EventsScreen)
        events = app.screen.query_one("#events", DataTable)
        assert events.row_count == 10

        await pilot.press("slash", *"deploy changed", "enter")
        assert [row[2:5] for row in _cells(events)] == [["changed", "Deployment", "shop/web"]]
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
