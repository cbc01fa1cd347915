"""ngym's rollout collector writes what NeMo Gym 0.7.0's writes, file for file.

``collection_scenario.py`` runs two scenarios under NeMo Gym's own venv and under ngym's interpreter, each against
its own scripted agent: routing (``limit``, ``agent_map``, ``fan_out``, per-agent repeats, seeds, interleaving,
parameter overrides, two agents each behind an environment server) and failures (HTTP and judge failures routed to
the sidecar and counted as zeros, a resume that retries first-attempt failures, offline aggregation). Every file is
compared line for line, as is what each sent to ``/aggregate_metrics``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SCENARIO = Path(__file__).with_name("collection_scenario.py")
LINE_FILES = (
    "rollouts.jsonl",
    "rollouts_failures.jsonl",
    "rollouts_materialized_inputs.jsonl",
    "aggregate_requests.jsonl",
    "merged/merged.jsonl",
)
JSON_FILES = ("rollouts_aggregate_metrics.json", "merged/merged_aggregate_metrics.json")


def _run(python: Path | str, out: Path, variant: str) -> None:
    command = [str(python), str(SCENARIO), str(out), variant]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _lines(path: Path) -> list[str]:
    # Rows finish in any order; a failure message names the scripted agent's port, which differs per run.
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", path.read_text())
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in text.splitlines() if line.strip())


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def test_the_collector_writes_what_nemo_gym_writes(nemo_python: Path, tmp_path: Path) -> None:
    _run(nemo_python, tmp_path / "nemo", "failures")
    _run(sys.executable, tmp_path / "ngym", "failures")

    rollouts = _lines(tmp_path / "ngym" / "rollouts.jsonl")
    assert len(rollouts) == 6 and len(_lines(tmp_path / "ngym" / "rollouts_failures.jsonl")) == 10  # it did run
    for name in LINE_FILES:
        assert _lines(tmp_path / "ngym" / name) == _lines(tmp_path / "nemo" / name), name
    for name in JSON_FILES:
        assert _json(tmp_path / "ngym" / name) == _json(tmp_path / "nemo" / name), name


def test_rows_are_routed_and_repeated_as_nemo_gym_does(nemo_python: Path, tmp_path: Path) -> None:
    _run(nemo_python, tmp_path / "nemo", "routing")
    _run(sys.executable, tmp_path / "ngym", "routing")

    materialized = [json.loads(line) for line in _lines(tmp_path / "ngym" / "rollouts_materialized_inputs.jsonl")]
    assert len(materialized) == 12 and {r["agent_ref"]["name"] for r in materialized} == {"agent", "other"}
    for name in ("rollouts.jsonl", "rollouts_materialized_inputs.jsonl", "aggregate_requests.jsonl"):
        assert _lines(tmp_path / "ngym" / name) == _lines(tmp_path / "nemo" / name), name
    # the order rows are sent in (interleaved repeats) is part of the materialized file, not only its lines
    order = (tmp_path / "ngym" / "rollouts_materialized_inputs.jsonl").read_text().splitlines()
    assert order == (tmp_path / "nemo" / "rollouts_materialized_inputs.jsonl").read_text().splitlines()
    # one entry per environment server, in the order their /aggregate_metrics answered (on either side)
    metrics = [
        sorted(_json(tmp_path / side / "rollouts_aggregate_metrics.json"), key=lambda e: e["_ng_environment_server"])
        for side in ("ngym", "nemo")
    ]
    assert metrics[0] == metrics[1] and len(metrics[0]) == 2
