"""docs/protocol.md's hand-driven rollout, run as written against a real ``ngym run`` server (issue 16)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import httpx

from ngym.child_server import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
SECTION = "## A whole rollout by hand"


def _section() -> str:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _curl_requests(script: str) -> list[tuple[str, str]]:
    """(path, -d payload) of each curl line of the doc's bash block."""
    requests = []
    for line in script.splitlines():
        if not line.startswith("curl "):
            continue
        words = shlex.split(line)
        url = next(w for w in words if w.startswith("http://"))
        requests.append((url.split("8000", 1)[1], words[words.index("-d") + 1]))
    return requests


def test_the_documented_rollout_runs_against_a_real_server(serve, tmp_path: Path) -> None:
    section = _section()
    (bash,) = _blocks(section, "bash")
    (verify_body,) = _blocks(section, "json")
    assert "ngym run example_session_state_mgmt --port 8000" in bash
    port = free_port()
    serve([sys.executable, "-m", "ngym.cli", "run", "example_session_state_mgmt", "--port", str(port)], port)
    answers = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:  # keeps cookies, like the jar
        for path, payload in _curl_requests(bash):
            body = verify_body if payload == "@verify.json" else payload
            answer = http.post(path, content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 200, (path, answer.text)
            answers.append(answer.json())
    assert [path for path, _ in _curl_requests(bash)] == ["/seed_session", "/increment_counter", "/verify"]
    assert answers[-1]["reward"] == 1.0 and answers[-1]["expected_count"] == 6

    # the doc's claim about a missing field holds too
    incomplete = json.loads(verify_body)
    del incomplete["response"]["tools"]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        http.post("/seed_session", json={"initial_count": 3})
        refused = http.post("/verify", json=incomplete)
    assert refused.status_code == 422 and "tools" in refused.text
