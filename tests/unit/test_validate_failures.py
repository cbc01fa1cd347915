"""``ngym validate`` on a broken environment: each distinct failure said once, tracebacks only with ``-v``."""

from __future__ import annotations

from pathlib import Path

BROKEN_APP = """
from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer


class BrokenServer(SimpleResourcesServer):
    domain = Domain.GAMES

    async def seed_session(self, request, body):
        raise FileNotFoundError("words.txt not found: run generate_data.py first")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
"""


def test_validate_says_each_distinct_failure_once_without_tracebacks(tmp_path: Path) -> None:
    """wordle without its generated data printed 25 identical tracebacks (1,263 lines) before the summary."""
    import json
    import subprocess
    import sys

    folder = tmp_path / "broken_env"
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "app.py").write_text(BROKEN_APP)
    config = folder / "configs" / "broken_env.yaml"
    config.write_text(
        "broken_env:\n  resources_servers:\n    broken_env:\n      entrypoint: app.py\n      domain: games\n"
    )
    row = {"responses_create_params": {"input": [{"role": "user", "content": "play"}]}}
    (folder / "data" / "example.jsonl").write_text((json.dumps(row) + "\n") * 5)
    recorded = {**row, "response": {"output": []}, "reward": 0.0}
    (folder / "data" / "example_rollouts.jsonl").write_text((json.dumps(recorded) + "\n") * 5)
    quiet = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "validate", str(config)], capture_output=True, text=True, timeout=120
    )
    assert quiet.returncode == 1
    assert "Traceback" not in quiet.stdout + quiet.stderr
    assert quiet.stdout.count("words.txt not found") == 2, quiet.stdout  # examples + the first soundness probe
    assert "5 rows (1, 2, 3, 4, 5)" in quiet.stdout and "the same failure as soundness: empty response" in quiet.stdout
    assert len(quiet.stdout.splitlines()) <= 10
    verbose = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "validate", "-v", str(config)], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" in verbose.stderr and "FileNotFoundError" in verbose.stderr
