"""``ngym profile`` end to end: real ``ngym run`` servers, real Locust, real sockets on 127.0.0.1.

Each run is bounded (a few seconds, at most 20 users): the machine's two cores are shared.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ngym.child_server import serve_environment

ROOT = Path(__file__).parents[2]
FLAKY_CONFIG = Path(__file__).parent / "profile_envs/flaky_verify/configs/flaky_verify.yaml"
WEATHER_ROLLOUTS = ROOT / "resources_servers/example_single_tool_call/data/example_rollouts.jsonl"


def ngym_profile(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", "profile", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "NGYM_DEBUG": ""},
    )


@pytest.fixture(scope="module")
def weather_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A weather server (``ngym run``) for the URL form and the locustfile: one for the module, as neither test
    changes it (its sessions end with each rollout)."""
    with serve_environment("example_single_tool_call", log=tmp_path_factory.mktemp("weather") / "server.log") as url:
        yield url


def test_profile_weather_writes_csv_and_html_with_no_failures(tmp_path: Path) -> None:
    report = tmp_path / "out"
    done = ngym_profile(
        "example_single_tool_call", "--users", "20", "--duration", "5s", "--report", str(report), "--json"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["rollouts_finished"] > 0 and result["rollouts_failed"] == 0
    assert result["total"]["failures"] == 0 and result["passed"] is True
    assert 0 <= result["sessions_left_live"] <= 20 and result["leaked_sessions"] == 0  # verify closed each session
    # The examples hold five get_weather rollouts (1.0) and one that never calls it (0.0): every reward reproduced.
    assert 0.0 < result["mean_reward"] < 1.0 and result["reward_mismatches"] == 0
    endpoints = {e["name"]: e for e in result["endpoints"]}
    assert list(endpoints) == ["/seed_session", "/get_weather", "/verify", "/close_session"]
    # One seed, one tool call, one verify, one close per rollout (give or take the rollouts in flight).
    assert abs(endpoints["/seed_session"]["requests"] - endpoints["/close_session"]["requests"]) <= 20
    assert endpoints["/verify"]["p99_ms"] >= endpoints["/verify"]["p50_ms"] > 0

    stats_csv = (report / "profile_stats.csv").read_text().splitlines()
    assert stats_csv[0].startswith("Type,Name,Request Count,Failure Count")
    assert any(line.startswith("POST,/verify,") for line in stats_csv)
    assert (report / "profile_stats_history.csv").is_file() and (report / "profile_failures.csv").is_file()
    html = (report / "profile.html").read_text()
    assert "<html" in html and "echarts" in html  # Locust's report: its chart library and
    assert "Total Requests per Second" in html  # the throughput chart, drawn from the run's history
    assert html.count('"current_rps"') >= 3  # one chart point per second of the run
    # ngym's rollout section, at the top of Locust's page and on its own page
    assert html.index('<section id="rollouts">') < html.rindex('<div id="root">')
    rollouts = (report / "profile_rollouts.html").read_text()
    assert rollouts.count("<svg") == 3 and "Failure classes" in rollouts and 'href="profile.html"' in rollouts
    assert result["reports"]["rollouts"] == str(report / "profile_rollouts.html")


def test_failing_verify_exits_non_zero_naming_the_failure(tmp_path: Path) -> None:
    done = ngym_profile(str(FLAKY_CONFIG), "--users", "5", "--duration", "3s", "--report", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    error_line = done.stderr.strip().splitlines()[-1]
    assert error_line.startswith("ngym: error: failure ratio")
    assert "POST /verify: HTTP 500" in error_line and "flaky verify: injected failure" in error_line
    assert "most common errors" in done.stdout  # the summary still printed, and the reports written
    assert (tmp_path / "profile.html").is_file()
    assert "failed: POST /verify → HTTP 500" in (tmp_path / "profile_rollouts.html").read_text()
    assert f"rollouts {tmp_path / 'profile_rollouts.html'}" in done.stdout  # linked from the summary


def test_a_looser_fail_ratio_passes_the_same_environment() -> None:
    done = ngym_profile(str(FLAKY_CONFIG), "--users", "2", "--duration", "2s", "--max-fail-ratio", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert 0.05 < result["failure_ratio"] < 0.15  # every tenth verify fails


def test_profile_a_running_server_by_url(weather_url: str) -> None:
    done = ngym_profile(weather_url, "--users", "4", "--duration", "2s", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["target"] == weather_url and result["rollouts_finished"] > 0
    assert "starting" not in done.stderr  # ngym did not start a server of its own


def test_sweep_reports_capacity_and_writes_the_plot(tmp_path: Path) -> None:
    done = ngym_profile(
        "example_single_tool_call",
        "--sweep",
        "--sweep-users",
        "1,4,8",
        "--duration",
        "1s",
        "--p99-ms",
        "2000",
        "--report",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert "capacity:" in done.stdout and "rollouts/s at" in done.stdout
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert [s["users"] for s in sweep["steps"]] == [1, 4, 8]
    assert sweep["capacity_rollouts_per_s"] > 0 and sweep["capacity_users"] in (1, 4, 8)
    assert (tmp_path / "step_0004_users" / "profile.html").is_file()


def test_unknown_environment_is_one_error_line() -> None:
    done = ngym_profile("no_such_environment", "--duration", "1s")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("ngym: error: no environment named 'no_such_environment'")


def test_locustfile_runs_the_same_scenario_under_locusts_cli(weather_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests/locustfile.py"), "--host", weather_url,
         "--headless", "-u", "4", "-r", "4", "-t", "120s", "--stop-timeout", "5", "--only-summary"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
        # measured in rollouts, not seconds: a run-time limit is the machine's clock, which this test does not control
        env={**os.environ, "NGYM_PROFILE_DATA": str(WEATHER_ROLLOUTS), "NGYM_PROFILE_ROLLOUTS": "12"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    finished = re.search(r"ngym: (\d+) rollouts finished \([^)]*\), (\d+) failed", done.stdout)
    assert finished and int(finished.group(1)) >= 12 and finished.group(2) == "0", done.stdout
    for route in ("/seed_session", "/get_weather", "/verify", "/close_session"):  # Locust's own summary table
        assert re.search(rf"POST\s+{route}\s+[1-9]\d*\s", done.stderr), done.stderr[-2000:]
