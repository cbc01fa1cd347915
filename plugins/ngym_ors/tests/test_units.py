"""The ORS plugin's pieces that need no environment venv: reading the source, the SSE stream, the rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngym_ors.inner_server import blocks_text, parse_sse
from ngym_ors.install import OPENREWARD, OrsInstallError, example_rows, parse_source, snake, venv_for

FOLDER = Path(__file__).parent / "envs" / "tally_ors"


def test_a_folder_source_reads_its_requirements_and_adds_openreward() -> None:
    source = parse_source(f"ors:{FOLDER}", {})
    assert source.kind == "folder" and source.module == "server" and source.folder == FOLDER.resolve()
    assert source.requirements == ("pydantic>=2", OPENREWARD)


def test_a_distribution_source_names_its_module() -> None:
    source = parse_source("ors:my-ors-env==1.2", {})
    assert (source.kind, source.module, source.distribution) == ("distribution", "my_ors_env", "my-ors-env")
    assert source.requirements == ("my-ors-env==1.2", OPENREWARD)
    assert parse_source("ors:x", {"module": "x.envs"}).module == "x.envs"
    pinned = parse_source("ors:openreward-env-x", {})
    assert OPENREWARD in pinned.requirements  # only a requirement named openreward itself replaces the pin


@pytest.mark.parametrize(
    ("text", "expected"),
    [("ors:", "give what to install"), ("ors:./nowhere", "no such folder"), ("ors:a/b", "no such folder"),
     ("ors:!bad", "neither a folder nor a distribution")],
)  # fmt: skip
def test_bad_sources_are_one_readable_error(text: str, expected: str) -> None:
    with pytest.raises(OrsInstallError, match=expected):
        parse_source(text, {})


def test_the_venv_is_keyed_on_the_requirements_not_the_folder(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("server.py", "requirements.txt"):
        (copy / name).write_bytes((FOLDER / name).read_bytes())
    here, there = parse_source(f"ors:{FOLDER}", {}), parse_source(f"ors:{copy}", {})
    assert venv_for(here.requirements) == venv_for(there.requirements)
    (copy / "requirements.txt").write_text("pydantic>=2\nrich\n")
    assert venv_for(parse_source(f"ors:{copy}", {}).requirements) != venv_for(here.requirements)


def test_sse_streams_are_joined_or_their_error_read() -> None:
    body = (
        "event: task_id\r\ndata: t1\r\n\r\n: ping\r\n\r\n"
        'event: chunk\r\ndata: {"ok": \r\n\r\nevent: end\r\ndata: true}\r\n\r\n'
    )
    assert parse_sse(body) == ('{"ok": true}', None)
    assert parse_sse("event: task_id\ndata: t\n\nevent: error\ndata: boom\n\n") == (None, "boom")


def test_blocks_text_keeps_the_text_blocks() -> None:
    blocks = [{"type": "text", "text": "a"}, {"type": "image", "data": "..", "mimeType": "image/png"}, {"text": "b"}]
    assert blocks_text(blocks) == "a\nb"
    assert blocks_text(None) == ""


def test_rows_carry_the_task_the_prompt_and_the_ors_tools() -> None:
    described = {
        "tools": {"tools": [{"name": "add", "description": "Add.", "input_schema": {"type": "object"}}]},
        "splits": [{"name": "train", "type": "train"}],
        "tasks": {"train": [{"index": 0, "task_spec": {"t": 1}, "prompt": "Go."}]},
    }
    (row,) = example_rows(described)
    assert row["ors"] == {"split": "train", "index": 0}
    assert row["responses_create_params"]["input"] == [{"role": "user", "content": "Go."}]
    assert row["responses_create_params"]["tools"][0]["parameters"] == {"type": "object"}
    assert snake("TallyEnvironment") == "tally_environment" and snake("QAEnv2") == "qaenv2"


def test_data_folder_is_the_folder_ngym_install_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenEnv front's reset() without a row reads the environment's rows there, not beside the generated class."""
    from ngym_ors import records
    from ngym_ors.records import Record
    from ngym_ors.server import OrsServer

    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    record = Record(name="shelf", python="/x/python", source="ors:./shelf", module="server", environment="Shelf",
                    env_name="shelf", domain="agent")  # fmt: skip
    assert OrsServer.for_record(record).data_folder() == records.folder_of("shelf") == tmp_path / "shelf"
