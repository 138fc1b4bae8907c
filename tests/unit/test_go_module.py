"""The stack's Go module takes patched modules' sources from module zips; a zip entry outside the
module's own directory stops the build and writes nothing outside the destination."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from pipeline.model.errors import StackError
from pipeline.stack.go_module import extract_module


def _zip(path: Path, entries: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return path


def test_a_module_zip_unpacks_under_the_destination_without_its_module_prefix(tmp_path: Path) -> None:
    module = _zip(
        tmp_path / "m.zip",
        {
            "example.com/m@v1.0.0/go.mod": "module example.com/m\n",
            "example.com/m@v1.0.0/pkg/a.go": "package pkg\n",
        },
    )
    extract_module(module, "example.com/m@v1.0.0", tmp_path / "src")
    assert (tmp_path / "src" / "go.mod").read_text() == "module example.com/m\n"
    assert (tmp_path / "src" / "pkg" / "a.go").read_text() == "package pkg\n"
    (tmp_path / "src" / "pkg" / "a.go").write_text("patched")  # the copy is writable, unlike the cache


@pytest.mark.parametrize(
    "entry", ["example.com/other@v1.0.0/go.mod", "example.com/m@v1.0.0/../../escaped.go", "/etc/escaped"]
)
def test_an_entry_outside_the_module_stops_the_build_naming_the_zip(tmp_path: Path, entry: str) -> None:
    module = _zip(tmp_path / "m.zip", {"example.com/m@v1.0.0/go.mod": "module m\n", entry: "x"})
    with pytest.raises(StackError, match=r"m\.zip holds .*outside example\.com/m@v1\.0\.0/; delete the file"):
        extract_module(module, "example.com/m@v1.0.0", tmp_path / "a" / "src")
    assert not list(tmp_path.rglob("escaped.go"))
    assert not (tmp_path / "a" / "escaped.go").exists()
