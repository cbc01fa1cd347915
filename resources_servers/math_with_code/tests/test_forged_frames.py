"""User code that forges the sandbox's reply frames, over HTTP with real worker processes.

Outside probes wrote their own reply frames to the worker's channel: a 60 MB stdout came back as a 60 MB answer
past the output cap, deep nesting, NaN or wrong types gave HTTP 500, and a queued frame made every later call of
the session answer with the previous call's output; `unshare(CLONE_NEWUSER)` succeeded. Each probe below writes
its frame to every socket and pipe the code holds (isolation_probes.py; the container test runs the same).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from pathlib import Path

import pytest

from ngym.testing import RolloutClient, app_for, serve_in_process

_spec = importlib.util.spec_from_file_location("isolation_probes", Path(__file__).with_name("isolation_probes.py"))
probes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probes)

ROW = {"responses_create_params": {"input": "x"}, "expected_result": "1"}
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")


def make_app():
    return app_for("math_with_code", max_workers=2, max_execution_time=20, preload_modules=["math"])


@root_only
@pytest.mark.parametrize("kind", ["huge", "nested", "nan", "types"])
async def test_a_malformed_forged_frame_ends_its_call_with_a_clear_error_and_shifts_nothing(kind: str) -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        session, neighbour = RolloutClient(http), RolloutClient(http)
        await session.call("/seed_session", ROW)
        await neighbour.call("/seed_session", ROW)
        await session.call("/execute_python", {"code": "x = 1"})
        response = await session.post("/execute_python", {"code": probes.forge_code(kind)})
        assert response.status_code == 200, response.text[:500]
        assert len(response.content) < 8192
        reply = response.json()
        assert reply["success"] is False and reply["result"] is None, reply
        assert "the sandbox refused this call's reply" in reply["error_message"]
        assert "variables are lost" in reply["error_message"]
        after = await session.call("/execute_python", {"code": "print('after')\n'own'"})
        assert (after["stdout"], after["result"]) == ("after\n", "own")
        assert (await neighbour.call("/execute_python", {"code": "6 * 7"}))["result"] == "42"


@root_only
async def test_a_well_formed_forged_frame_never_answers_a_later_call() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        session = RolloutClient(http)
        await session.call("/seed_session", ROW)
        await session.call("/execute_python", {"code": probes.forge_code("queued")})  # its own call: its own words
        for n in range(3):
            reply = await session.call("/execute_python", {"code": f"print({n})\n{n} * 10"})
            assert (reply["stdout"], reply["result"]) == (f"{n}\n", str(n * 10))


@root_only
async def test_user_namespaces_are_refused() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        session = RolloutClient(http)
        await session.call("/seed_session", ROW)
        reply = await session.call("/execute_python", {"code": probes.USERNS})
        assert reply["success"], reply
        report = json.loads(reply["result"])
        assert set(report.values()) == {"Operation not permitted"}, report
        assert (await session.call("/execute_python", {"code": "1 + 1"}))["result"] == "2"


@root_only
async def test_user_code_cannot_reach_its_supervisor() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        session = RolloutClient(http)
        await session.call("/seed_session", ROW)
        reply = await session.call("/execute_python", {"code": probes.SUPERVISOR})
        assert reply["success"], reply
        report = json.loads(reply["result"])
        assert report == {"fd": "PermissionError", "mem": "PermissionError", "getfd": "refused", "ptrace": "refused"}
        assert (await session.call("/execute_python", {"code": "1 + 1"}))["result"] == "2"


@root_only
async def test_a_user_process_that_dies_between_calls_ends_the_next_call_and_only_that_one() -> None:
    app = make_app()
    async with serve_in_process(app) as http:
        session = RolloutClient(http)
        await session.call("/seed_session", ROW)
        code = (
            "import os, signal, threading\nx = 1\nthreading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()"
        )
        assert (await session.call("/execute_python", {"code": code}))["success"] is True
        (sandbox,) = app.state.math_with_code.pool.sessions
        for _ in range(200):  # until the timer's thread has killed its own process (seen from here)
            kids = Path(f"/proc/{sandbox.pid}/task/{sandbox.pid}/children").read_text().split()
            if all(Path(f"/proc/{kid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z" for kid in kids):
                break
            await asyncio.sleep(0.05)
        reply = await session.call("/execute_python", {"code": "x"})
        assert reply["success"] is False and "the Python process died (killed by SIGKILL)" in reply["error_message"]
        assert (await session.call("/execute_python", {"code": "'fresh'"}))["result"] == "fresh"


#: Code that ends its own process mid-call: plainly, and after closing the pipe its reply goes to (a process that
#: exits closes its descriptors before its exit status can be read).
EXITS = {
    "exit": "import os\nos._exit(3)",
    "close_then_exit": (
        "import os\nfor fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n        link = os.readlink(f'/proc/self/fd/{fd}')\n    except OSError:\n        continue\n"
        "    if link.startswith('pipe:'):\n        os.close(int(fd))\nos._exit(3)"
    ),
}


@root_only
@pytest.mark.parametrize("kind", sorted(EXITS))
async def test_code_that_exits_its_process_is_told_it_exited(kind: str) -> None:
    """Before, the closed reply pipe was often read first and the call was answered as a forged frame ("the code
    wrote to the sandbox's internal channel"), or put down to a resource limit."""
    app = make_app()
    async with serve_in_process(app) as http:
        session = RolloutClient(http)
        await session.call("/seed_session", ROW)
        for _ in range(3):
            reply = await session.call("/execute_python", {"code": EXITS[kind]})
            assert reply["success"] is False, reply
            assert reply["error_message"].startswith("the Python process exited (exit code 3)"), reply
            assert "every variable" in reply["error_message"] and "resource limit" not in reply["error_message"]
            assert (await session.call("/execute_python", {"code": "'fresh'"}))["result"] == "fresh"
