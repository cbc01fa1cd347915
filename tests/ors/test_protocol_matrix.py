"""The environment × protocol table of docs/training.md, re-measured on two of its environments.

``tools/protocol_matrix.py`` serves each with ``ngym run`` and replays its recorded rollouts over NeMo's wire, MCP,
ORS (openreward's own client) and OpenEnv (OpenEnv's own client). Every cell of these two must pass, and the
table's rows for them must say what was just measured, so the published table cannot drift from the code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ngym.config import cache_root  # noqa: E402
from tools.protocol_matrix import DOCS, PROTOCOLS, markdown  # noqa: E402

CHECKED = ["example_single_tool_call", "example_session_state_mgmt"]
OPENENV_VENV = Path(os.environ.get("NGYM_OPENENV_TEST_VENVS") or cache_root()) / "openenv-0.10.0-py311"


def test_the_table_rows_of_two_environments_are_measured_again(ors_python: Path, tmp_path: Path) -> None:
    if os.environ.get("CI", "").lower() != "true" and not (OPENENV_VENV / ".ngym-ready").is_file():
        pytest.skip("no OpenEnv venv yet (make conformance makes it)")
    out = tmp_path / "matrix.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "protocol_matrix.py"), "--only", ",".join(CHECKED),
         "--json", str(out), "--ors-python", str(ors_python), "--jobs", "2"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "NGYM_MATRIX_DIR": str(tmp_path / "work")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["environments"]
    assert [r["name"] for r in rows] == CHECKED
    for row in rows:
        assert row["rollouts"] >= 5
        for protocol in PROTOCOLS:
            cell = row["cells"][protocol]
            assert cell["status"] == "pass", (row["name"], protocol, cell)
            assert cell["rewards"] == row["recorded"], (row["name"], protocol)
    published = DOCS.read_text()
    for line in markdown(rows).splitlines()[2:]:
        assert line in published, f"docs/training.md's table differs from the measurement: {line}"
