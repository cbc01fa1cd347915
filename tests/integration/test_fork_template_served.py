"""`ngym run` makes each serving process a warm fork template: an environment
that forks a verify child per call, as NeMo Gym's math_with_judge does, gets children that inherit math-verify's
built parser, run lower than the event loop, and score as before."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ngym.child_server import free_port
from tests.integration.conftest import VENV_BIN, HandCookieClient, Served, start

pytest.importorskip("math_verify")

APP = """
import multiprocessing as mp
import os

import math_verify  # imported by the environment, as math_with_judge does: the runtime warms what is imported

from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer


class Verify(BaseVerifyRequest):
    expected_answer: str


class Out(BaseVerifyResponse):
    child_nice: int
    server_nice: int
    inherited_dfa_states: int


def child(gold: str, pred: str, conn) -> None:
    from latex2sympy2_extended.antlr_parser import PSParser

    states = sum(len(d._states) for d in PSParser.decisionsToDFA)  # before this child parses anything
    ok = math_verify.verify(math_verify.parse(gold), math_verify.parse(pred))
    conn.send((float(ok), os.nice(0), states))


class ForkingServer(SimpleResourcesServer):
    config: BaseResourcesServerConfig

    async def verify(self, body: Verify) -> Out:
        text = body.response.output_text
        ctx = mp.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=child, args=("\\\\boxed{" + body.expected_answer + "}", text, send))
        process.start()
        reward, nice, states = recv.recv()
        process.join()
        return Out(**body.model_dump(), reward=reward, child_nice=nice, server_nice=os.nice(0),
                   inherited_dfa_states=states)
"""


@pytest.fixture
def serve_slow_start() -> Iterator[Callable[[list[str], int, dict[str, str]], Served]]:
    """Started with room for its imports and the warm-up (about 3 s of CPU) on a loaded 2-core machine; killed
    afterwards whatever the test did."""
    started: list[Served] = []

    def _start(cmd: list[str], port: int, env: dict[str, str]) -> Served:
        started.append(start(cmd, port, env, timeout=180))
        return started[-1]

    yield _start
    for served in started:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait()


def write_env(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    config = tmp_path / "forking.yaml"
    config.write_text(
        f"forking:\n  resources_servers:\n    forking:\n      entrypoint: {tmp_path / 'app.py'}\n      domain: math\n"
    )
    return config


def verify(url: str, answer: str, text: str) -> dict:
    from ngym.testing import make_response

    client = HandCookieClient(url)
    row = {"responses_create_params": {"input": [{"role": "user", "content": "1/2?"}]}, "expected_answer": answer}
    assert client.post("/seed_session", row).status_code == 200
    verified = client.post("/verify", {**row, "response": make_response(text=text)})
    assert verified.status_code == 200, verified.text
    return verified.json()


def test_served_environment_forks_warm_lowered_children(serve_slow_start, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = write_env(tmp_path)
    port = free_port()
    cmd = [str(VENV_BIN / "ngym"), "run", str(config), "--port", str(port)]
    served = serve_slow_start(cmd, port, {"NGYM_FORK_CHILD_NICE": "2"})
    right = verify(served.url, "\\\\frac{1}{2}", "so \\\\boxed{0.5}")
    wrong = verify(served.url, "\\\\frac{1}{2}", "so \\\\boxed{0.25}")
    assert (right["reward"], wrong["reward"]) == (1.0, 0.0)
    for answer in (right, wrong):
        assert answer["inherited_dfa_states"] > 0
        assert answer["child_nice"] == answer["server_nice"] + 2
    assert served.stop(signal.SIGTERM)[0] == 0


def test_the_switch_serves_as_before(serve_slow_start, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = write_env(tmp_path)
    port = free_port()
    cmd = [str(VENV_BIN / "ngym"), "run", str(config), "--port", str(port)]
    served = serve_slow_start(cmd, port, {"NGYM_FORK_WARMUP": "0"})
    answer = verify(served.url, "\\\\frac{1}{2}", "so \\\\boxed{0.5}")
    assert answer["reward"] == 1.0
    assert answer["inherited_dfa_states"] == 0 and answer["child_nice"] == answer["server_nice"]
    assert served.stop(signal.SIGTERM)[0] == 0


def test_each_worker_process_is_a_template_too(tmp_path: Path) -> None:
    """``--workers N`` builds each worker's app with ``app_from_env`` (a shared store is needed to serve them,
    so the factory is called directly, in a fresh interpreter as a worker is)."""
    import json
    import subprocess
    import sys

    from ngym.server.pipeline.app import SPEC_ENV, ServeSpec

    write_env(tmp_path)
    spec = ServeSpec(target=str(tmp_path / "app.py"), name="forking", fields={"domain": "math"})
    code = (
        "import gc, json, os; from ngym.server.hosting.worker import app_from_env; app_from_env(); pid = os.fork()\n"
        "if pid == 0: os._exit(os.nice(0))\n"
        "print(json.dumps([gc.get_freeze_count() > 0, os.nice(0), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, SPEC_ENV: spec.to_json(), "NGYM_FORK_CHILD_NICE": "3"},
    )
    assert done.returncode == 0, done.stderr
    frozen, own, child = json.loads(done.stdout.strip().splitlines()[-1])
    assert frozen and child == own + 3
