"""``ngym.plugin_api.RecordShelf``: a plugin's installed-environment records, one JSON file each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ngym.plugin_api import RecordShelf


@dataclass
class Rec:
    name: str
    python: str = "py"


def test_records_are_written_read_listed_and_removed_in_the_folder_the_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NGYM_TEST_RECORDS", str(tmp_path / "records"))
    shelf = RecordShelf(Rec, "NGYM_TEST_RECORDS", "test")
    assert shelf.write(Rec("a", "/venv/bin/python")) == tmp_path / "records" / "a.json"
    shelf.write(Rec("b"))
    (tmp_path / "records" / "broken.json").write_text("{not json")
    assert shelf.read("a") == Rec("a", "/venv/bin/python")
    assert [r.name for r in shelf.all()] == ["a", "b"]  # the unreadable one skipped
    with pytest.raises(KeyError):
        shelf.read("missing")
    assert shelf.remove("a") is True and shelf.remove("a") is False
    assert [r.name for r in shelf.all()] == ["b"]
