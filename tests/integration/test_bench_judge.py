"""The benchmarks' HAProxy scripted judge answers as ``ngym scripted-judge`` does, and keeps connections open.

bench/bench_heavy.py scores LLM-judge environments against it on every server and compares their rewards, so a
judge that answered differently (another body shape, a dropped connection) would change what is measured.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ngym.rollout.fixed_judge import create_judge_app

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_workers import report  # noqa: E402
from bench.haproxy_judge import haproxy_judge  # noqa: E402

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")
VERDICT = '[[A=B]] it\'s "equal"'  # quotes of both kinds: the answer files must carry them unchanged


def comparable(body: dict[str, Any]) -> dict[str, Any]:
    """The answer without the fields that differ per call (ids, timestamps)."""
    drop = {"id", "created", "created_at"}
    cleaned = {k: v for k, v in body.items() if k not in drop}
    if "output" in cleaned:
        cleaned["output"] = [{k: v for k, v in item.items() if k != "id"} for item in cleaned["output"]]
    return cleaned


@needs_haproxy
def test_haproxy_judge_answers_as_the_python_judge(tmp_path: Path) -> None:
    python_judge = TestClient(create_judge_app(VERDICT))
    with haproxy_judge(VERDICT, tmp_path / "judge.log") as (url, pid), httpx.Client(base_url=url) as client:
        assert pid > 0
        for path, body in [
            ("/v1/responses", {"model": "scripted-judge", "input": "x" * 20_000}),
            ("/v1/chat/completions", {"model": "scripted-judge", "messages": [{"role": "user", "content": "q"}]}),
        ]:
            ours = client.post(path, json=body)
            theirs = python_judge.post(path, json=body)
            assert ours.status_code == theirs.status_code == 200
            assert ours.headers["content-type"].startswith("application/json")
            assert comparable(ours.json()) == comparable(theirs.json())
        assert client.get("/v1/models").json() == python_judge.get("/v1/models").json()
        assert client.post("/v1/embeddings", json={}).status_code == 404


@needs_haproxy
def test_haproxy_judge_keeps_the_connection_after_a_request_with_a_body(tmp_path: Path) -> None:
    """Two POSTs with bodies on one socket both answered: the judge read each body (http-buffer-request), so a
    pooled client's connection stays usable."""
    with haproxy_judge(VERDICT, tmp_path / "judge.log") as (url, _):
        port = int(url.rsplit(":", 1)[1])
        body = json.dumps({"input": "y" * 30_000}).encode()
        request = (
            b"POST /v1/responses HTTP/1.1\r\nHost: judge\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            answers = []
            for _ in range(2):
                conn.sendall(request)
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    assert chunk, "the judge closed the connection"
                    head += chunk
                header, rest = head.split(b"\r\n\r\n", 1)
                length = int(next(line for line in header.split(b"\r\n") if line.lower().startswith(b"content-length"))
                             .split(b":")[1])  # fmt: skip
                while len(rest) < length:
                    rest += conn.recv(65536)
                assert header.startswith(b"HTTP/1.1 200")
                answers.append(json.loads(rest[:length]))
        assert [a["output"][0]["content"][0]["text"] for a in answers] == [VERDICT, VERDICT]


def rounds(rate: float, cores: float, others: float = 0.0) -> dict[str, float]:
    return {
        "rollouts_per_s": rate,
        "server_cores": cores,
        "proxy_cores": 0.0,
        "rollouts_per_cpu_s": rate / cores,
        "redis_cores": 0.1,
        "wrk_cores": 0.2,
        "others_cores": others,
        "load_average": 3.0,
        "errors": 0,
        "p50_ms": 4.0,
        "p99_ms": 9.0,
    }


def test_workers_report_splits_the_ratio_into_cpu_efficiency_and_cores_and_says_what_stopped_it() -> None:
    # 2 workers got only 1.2 cores (others took 0.5) at 90 % of one worker's rollouts per CPU-second
    results = {1: [rounds(1000, 1.0)] * 3, 2: [rounds(1080, 1.2, others=0.5)] * 3}
    lines = report("redis", results)
    summary = next(line for line in lines if line.startswith("redis: 2 workers"))
    assert "**1.08x**" in summary
    assert "per-CPU efficiency 0.90" in summary and "cores ratio 1.20" in summary
    assert "2 workers had at most 1.70 cores" in summary
    why = next(line for line in lines if "below 1.7x because" in line)
    assert "the 2 workers got 1.20 of the 1.70 cores left to them (other tenants used 0.50)" in why
    assert "each rollout costs" not in why  # 0.90 x 2 cores would reach 1.7x: the CPU cost is not what stopped it


def test_workers_report_blames_the_per_rollout_cost_when_that_alone_caps_the_ratio() -> None:
    results = {1: [rounds(1000, 1.0)] * 3, 2: [rounds(1300, 1.7)] * 3}  # efficiency 0.76: 2 cores give 1.53x
    why = next(line for line in report("affinity", results) if "below 1.7x because" in line)
    assert "each rollout costs 1.31x the server CPU with 2 workers" in why


def test_workers_report_says_what_cpu_per_rollout_1_7x_allows_and_who_took_it() -> None:
    # 1 worker: 1000 us per rollout; 2 workers: 1400 us, of which HAProxy 280 us (0.34 of 1.7 cores)
    two = {**rounds(1214.3, 1.7), "proxy_cores": 0.34}
    why = next(line for line in report("affinity", {1: [rounds(1000, 1.0)] * 3, 2: [two] * 3}) if "because" in line)
    assert "(1400 us where 1.7x allows 1176: HAProxy 280 us, 20%; the workers and supervisor 1120 us" in why
    assert "against one worker's 1000)" in why
