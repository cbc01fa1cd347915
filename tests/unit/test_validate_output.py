"""``ngym validate`` output a person reads (issue 16): a dead judge is named at once, warnings and routes are short."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ngym.validation import Check, ValidationReport, summarise_routes, validate

pytestmark = pytest.mark.usefixtures("lenient_registry")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_validate_says_no_judge_answered_instead_of_a_wrong_reward(tmp_path: Path) -> None:
    judge_app = pytest.importorskip("equivalence_llm_judge.app")
    config = tmp_path / "judge.yaml"
    config.write_text(
        "judge:\n  resources_servers:\n    equivalence_llm_judge:\n"
        f"      entrypoint: {Path(judge_app.__file__).resolve()}\n"
        "      domain: knowledge\n"
        f"      judge_base_url: http://127.0.0.1:{_closed_port()}/v1\n"
        "      judge_max_retries: 0\n"
    )
    stages: list[str] = []
    report = validate(str(config), progress=stages.append)
    checks = {c.name: c for c in report.checks}
    assert not report.ok
    assert "could not score" in checks["examples"].detail and "cannot reach the judge" in checks["examples"].detail
    assert "!= recorded" not in checks["examples"].detail  # not passed off as a wrong reward
    assert checks["soundness"].detail.startswith("not tried")
    assert stages == ["replaying example rollout 1/6"]  # stopped at the first row


def test_a_warning_shared_by_checks_is_printed_once() -> None:
    report = ValidationReport(target="x", name="x")
    for probe in ("empty response", "refusal only", "echo"):
        report.checks.append(Check(f"soundness: {probe}", True, "no crash", ["scored 1.0 on row(s) [8]"]))
    text = report.render()
    assert text.count("scored 1.0 on row(s) [8]") == 1
    assert "(same for: refusal only, echo)" in text


def test_a_long_route_list_is_summarised() -> None:
    protocol = ["/aggregate_metrics", "/close_session", "/seed_session", "/verify"]
    tools = [f"/tool_number_{i}" for i in range(27)]
    text = summarise_routes(sorted([*protocol, *tools]))
    assert text.startswith("31 POST routes: 27 tools (") and len(text) < 200 and "/verify" in text
    assert summarise_routes(["/get_weather", *protocol]) == f"5 POST routes: {', '.join(['/get_weather', *protocol])}"
