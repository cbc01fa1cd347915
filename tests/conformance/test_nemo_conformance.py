"""NeMo Gym 0.7.0 drives every built-in environment, served by ``ngym run`` as real processes, over HTTP.

The NeMo side (``nemo_driver.py``) runs in NeMo Gym's own venv (``tools/nemo_venv.sh``): its session-conformance
checker, its verifier fixtures (its own weather cases, and the cases an environment ships in
``tests/verifier_cases.jsonl``), and every recorded example rollout through its ``ServerClient`` and Simple
Agent cookie handling, both seed flows, plain and ``/ng-rollout/<id>/`` paths, each reward reproduced.
``make conformance`` runs this; under CI=true nothing here skips.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ngym.child_server import LOOPBACK, free_port, serve_environment, stop_process, wait_healthy
from ngym.targets import resolve

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("nemo_driver.py")
BUILT_INS = sorted(p.name for p in (REPO / "resources_servers").iterdir() if (p / "pyproject.toml").is_file())
JUDGE_ENV = "equivalence_llm_judge"


@contextlib.contextmanager
def replay_judge() -> Iterator[str]:
    """``ngym replay-model`` as a process: the judge of the LLM-judge environment (it answers judge prompts)."""
    port = free_port()
    command = [sys.executable, "-m", "ngym.cli", "replay-model", "--env", JUDGE_ENV, "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{LOOPBACK}:{port}"
    try:
        wait_healthy(url, process, timeout=60, path="/v1/models")
        yield f"{url}/v1"
    finally:
        stop_process(process)


@contextlib.contextmanager
def hle_judge_environment() -> Iterator[dict[str, Any]]:
    """The judge environment with NeMo Gym's HLE-Verified labels, its judge a port the NeMo side serves a scripted
    judge on (NeMo's HLE verifier cases script the judge's reply per case)."""
    judge_port = free_port()
    overrides = [
        f"judge_base_url=http://{LOOPBACK}:{judge_port}/v1",
        'judge_equal_label="Judgement: yes"',
        'judge_not_equal_label="Judgement: no"',
        "judge_max_retries=0",
    ]
    with serve_environment(JUDGE_ENV, overrides=overrides, timeout=90) as url:
        yield {"url": url, "port": judge_port}


@pytest.fixture(scope="module")
def report(nemo_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    plan: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        judge_url = stack.enter_context(replay_judge())
        for name in BUILT_INS:
            overrides = [f"judge_base_url={judge_url}"] if name == JUDGE_ENV else []
            url = stack.enter_context(serve_environment(name, overrides=overrides, timeout=90))
            folder = resolve(name).folder
            assert folder is not None, name
            own_cases = folder / "tests" / "verifier_cases.jsonl"
            plan.append(
                {
                    "name": name,
                    "url": url,
                    "rollouts": str(folder / "data" / "example_rollouts.jsonl"),
                    "verifier_cases": [str(own_cases)] if own_cases.is_file() else [],
                }
            )
            if name == JUDGE_ENV:
                plan[-1]["scripted_judge"] = stack.enter_context(hle_judge_environment())
        run = subprocess.run(
            [str(nemo_python), str(DRIVER)],
            input=json.dumps({"environments": plan}),
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path_factory.mktemp("nemo-driver"),  # NeMo Gym writes Hydra's outputs/ into its cwd
        )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_built_in_environment_is_covered(report: dict[str, Any]) -> None:
    assert sorted(report) == BUILT_INS == sorted(
        ["equivalence_llm_judge", "example_session_state_mgmt", "example_single_tool_call", "math_with_code",
         "workplace_assistant"]
    )  # fmt: skip


@pytest.mark.parametrize("name", BUILT_INS)
def test_nemo_gym_drives_the_environment(report: dict[str, Any], name: str) -> None:
    checks = report[name]
    failed = [f"{c['check']}: {c['detail']}" for c in checks if not c["ok"]]
    assert not failed, "\n".join(failed)
    names = [c["check"] for c in checks]
    recorded = (REPO / "resources_servers" / name / "data" / "example_rollouts.jsonl").read_text().splitlines()
    rollouts = [n for n in names if n.startswith("rollout ")]
    # Each recorded rollout: two seed flows x plain and prefixed paths.
    assert len(rollouts) == 4 * len([line for line in recorded if line.strip()])
    assert "session" in names and "aggregate_metrics" in names


#: Environments whose verify reads the rollout's session: a verify after close is masked session_lost. The others
#: score from the request alone (workplace_assistant replays the calls, math_with_code checks the answer).
VERIFY_READS_SESSION = {"example_session_state_mgmt"}


@pytest.mark.parametrize("name", BUILT_INS)
def test_a_verify_after_close_is_masked_where_it_needs_the_lost_state(report: dict[str, Any], name: str) -> None:
    check = next(c for c in report[name] if c["check"] == "verify after close")
    assert check["ok"], check["detail"]
    expected = "masked session_lost" if name in VERIFY_READS_SESSION else "scored as recorded"
    assert check["detail"] == expected


def test_llm_judge_passes_nemo_gyms_own_hle_verifier_cases(report: dict[str, Any]) -> None:
    verifiers = {c["check"]: c for c in report[JUDGE_ENV] if c["check"].startswith("verifier ")}
    hle = [check for check in verifiers if check.endswith("hle_verified_verifier_cases.jsonl")]
    assert hle and all(verifiers[check]["ok"] for check in hle), verifiers


def test_weather_passes_nemo_gyms_own_verifier_fixture(report: dict[str, Any]) -> None:
    verifiers = {c["check"]: c for c in report["example_single_tool_call"] if c["check"].startswith("verifier ")}
    nemo_own = [check for check in verifiers if "site-packages" in check]
    assert nemo_own, f"NeMo Gym's own weather cases were not run: {sorted(verifiers)}"
    assert all(c["ok"] for c in verifiers.values())
    assert "zero_reward" in verifiers[nemo_own[0]]["detail"]
