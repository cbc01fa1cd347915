"""``ngym scripted-judge``: a judge model that answers every request with its verdict, on both OpenAI routes."""

from __future__ import annotations

from pathlib import Path


def test_scripted_judge_command_answers_every_request_with_its_verdict(tmp_path: Path) -> None:
    """`ngym scripted-judge` as a process on a free port, on both OpenAI routes a judge environment calls."""
    import subprocess
    import sys
    import time

    import httpx

    judge = subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "scripted-judge", "[[A=B]]", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert judge.stderr is not None
        line = judge.stderr.readline()
        assert "base URL http://127.0.0.1:" in line, line
        base = line.rsplit(" ", 1)[1].strip()
        for _ in range(100):
            try:
                answer = httpx.post(f"{base}/chat/completions", json={"messages": []}, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer.json()["choices"][0]["message"]["content"] == "[[A=B]]"
        responses = httpx.post(f"{base}/responses", json={"input": "judge this"}, timeout=5).json()
        assert responses["output"][0]["content"][0]["text"] == "[[A=B]]"
        assert httpx.get(f"{base.removesuffix('/v1')}/calls", timeout=5).json() == {"calls": 2}
    finally:
        judge.terminate()
        judge.wait(timeout=10)
