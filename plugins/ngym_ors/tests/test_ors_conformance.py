"""ngym's ``/ors`` front against ``openreward.environments.Server`` (the SDK's reference server), answer by answer.

One ORS environment written for this test (``envs/conform_ors``: ``LedgerEnvironment``) is served both ways: by
the reference server (run with the environment's own venv, made by the install) and by ``ngym run`` after
``ngym install ors:``. The same requests go to both (``conformance_requests.py``: good ones and every bad one a
client can send: unknown environment, split, session, tool; out-of-range index; wrong, missing and extra arguments;
double delete; calls after delete, after ``finished`` and after a tool raised; missing headers; bodies that are not
JSON), and ``openreward``'s own client methods run against both (``sdk_driver.py``). Status codes are equal
everywhere; bodies are equal but for the differences docs/protocols.md lists ("Differences from openreward's
server"), each checked here for what it is.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from ngym.child_server import free_port, stop_process, wait_healthy

HERE = Path(__file__).parent


def _sibling(name: str) -> ModuleType:
    """A module beside this one (the tests import in importlib mode: no sibling is on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(f"ngym_ors_tests_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _sibling("conformance_requests").probe
_install = _sibling("test_ors_install")
ngym, ngym_run, records = _install.ngym, _install.ngym_run, _install.records
LEDGER = HERE / "envs" / "conform_ors"
NAME = "ledger_environment"
#: the environment's tasks: the reference lists its task specs, ngym its dataset rows (each names its task)
ROWS_AS_TASKS = {"tasks", "task", "task negative index", "task_range", "task_range open"}
#: tool listings: ngym adds its final-answer tool and shows an argument-free tool's schema as an empty object
LISTINGS = {"tools bare", "tools named", "task_tools"}
#: a route under another environment's name: the reference redirects it into a route it lacks (Not Found)
UNKNOWN_ENVIRONMENT = {"tools unknown environment", "tasks unknown environment"}
#: a tool output's step reward: ngym scores an episode once, at its end, through /verify
STEP_REWARDS = {"call step reward", "call after raise"}


@pytest.fixture(scope="module")
def ledger(records: Path) -> Path:
    """The ledger environment installed; the interpreter of its venv (openreward from the package index)."""
    done = ngym("install", f"ors:{LEDGER}")
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(json.loads((records / f"{NAME}.json").read_text())["python"])


@contextlib.contextmanager
def reference_server(python: Path) -> Iterator[str]:
    port = free_port()
    cmd = [str(python), str(HERE / "reference_server.py"), str(LEDGER), "server", "LedgerEnvironment", str(port)]
    with tempfile.TemporaryDirectory(prefix="ors-reference-") as folder:
        log = Path(folder) / "server.log"
        with log.open("wb") as sink:
            served = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sink)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, served, 120, log)  # raises with the log's tail if it exits or never answers
            yield url
        finally:
            stop_process(served)


@pytest.fixture(scope="module")
def both(ledger: Path) -> Iterator[tuple[Path, str, str]]:
    """(the environment's interpreter, the reference server's URL, ngym's /ors URL)."""
    with reference_server(ledger) as reference, ngym_run(NAME) as served:
        yield ledger, reference, f"{served}/ors"


def _end(events: list[list[str]]) -> tuple[str, Any]:
    """A /call stream's outcome: ("end", the parsed RunToolOutput) or ("error", the text)."""
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "task_id" and kinds[-1] in ("end", "error"), events
    kind, data = events[-1]
    return (kind, json.loads(data)) if kind == "end" else (kind, data)


def _same(label: str, ref: Any, ours: Any) -> None:
    if ours == ref:
        return
    if label in ROWS_AS_TASKS:  # each ngym row names the task it is (its split and index)
        rows = ours["tasks"] if "tasks" in ours else [ours["task"]]
        wanted = ref["tasks"] if "tasks" in ref else [ref["task"]]
        assert [r["ors"]["index"] for r in rows] == [int(t["id"].split("-")[1]) for t in wanted], (ref, ours)
        return
    if label == "list_environments":  # each server's name for it: the ORS name, the ngym name
        assert (ref, ours) == (["ledgerenvironment"], [NAME])
        return
    if label in UNKNOWN_ENVIRONMENT:  # the same 404; ngym says which environment it serves
        assert ref == {"detail": "Not Found"} and "unknown environment 'nosuchenv'" in ours["detail"]
        return
    if label in LISTINGS:
        extra = [t for t in ours["tools"] if t["name"] == "submit_answer"]
        assert len(extra) == 1 and ours["terminal_tool"]["name"] == "submit_answer"
        for mine, theirs in zip([t for t in ours["tools"] if t not in extra], ref["tools"], strict=True):
            assert mine["name"] == theirs["name"] and mine["description"] == theirs["description"]
            assert mine["input_schema"] == (theirs["input_schema"] or {"type": "object", "properties": {}})
        return
    if isinstance(ref, list) and ref and isinstance(ref[0], list):  # an event stream
        (kind, theirs), (mine_kind, mine) = _end(ref), _end(ours)
        assert kind == mine_kind, (ref, ours)
        if kind == "error" or not theirs["ok"]:
            assert mine == theirs if kind == "error" else mine["reason"] == theirs["reason"], (ref, ours)
            if kind != "error":  # ngym's message starts with the reference's, then says what to do
                assert mine["error"].startswith(theirs["error"]), (theirs, mine)
            return
        assert mine["ok"] and [b["text"] for b in mine["output"]["blocks"]] == [
            b["text"] for b in theirs["output"]["blocks"]
        ]
        assert mine["output"]["finished"] == theirs["output"]["finished"]
        step = label in STEP_REWARDS
        assert mine["output"]["reward"] == (None if step else theirs["output"]["reward"]), (ref, ours)
        return
    if isinstance(ref, dict) and isinstance(ref.get("detail"), str):  # ngym's detail starts with the reference's
        assert isinstance(ours.get("detail"), str) and ours["detail"].startswith(ref["detail"]), (ref, ours)
        return
    if isinstance(ref, dict) and "env_name" in ref:  # named after the request (the reference) or the server
        assert {**ours, "env_name": None} == {**ref, "env_name": None}, (ref, ours)
        return
    assert ours == ref


def test_the_front_answers_every_request_as_openreward_s_server_does(both: tuple[Path, str, str]) -> None:
    _, reference, ours = both
    expected, answered = probe(reference), probe(ours)
    assert [a["label"] for a in answered] == [e["label"] for e in expected]
    for theirs, mine in zip(expected, answered, strict=True):
        assert mine["status"] == theirs["status"], (theirs, mine)
        _same(theirs["label"], theirs["body"], mine["body"])
    health = httpx.get(ours.removesuffix("/ors") + "/health", timeout=30).json()
    assert health["live_sessions"] == 0, health  # every episode deleted, finished or raised: none left


def test_openreward_s_client_methods_get_what_the_reference_gives(both: tuple[Path, str, str]) -> None:
    python, reference, ours = both

    def run(url: str, env_name: str) -> dict[str, Any]:
        done = subprocess.run(
            [str(python), str(HERE / "sdk_driver.py"), url, env_name], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return answer

    theirs, mine = run(reference, "ledgerenvironment"), run(ours + "/", NAME)
    for key, expected in theirs.items():
        got = mine[key]
        if key in ("tools", "openai tools", "session tools"):
            assert got == [*expected, "submit_answer"], (key, got)
        elif key == "terminal tool":  # the final-answer tool ends a rollout given a plain assistant message
            assert expected is None and "submit_answer" in got
        elif key == "step reward":
            assert got == {**expected, "reward": None}
        elif isinstance(expected, dict) and "raised" in expected:  # the same exception, the same reason
            assert (got["raised"], got["reason"] is None) == (expected["raised"], expected["reason"] is None), got
            sid = "(environment session sid="
            if sid not in expected["text"]:
                prefix = expected["text"].split(", url=")[0].replace("message='", "message=").rstrip("'")
                assert got["text"].replace('message="', "message=").startswith(prefix), (expected, got)
        else:
            assert got == expected, (key, expected, got)
    assert mine["listed task close"] == {"text": "closed at 7", "reward": 1.0, "finished": True}


def test_over_openenv_the_environment_s_own_tools_end_its_episode(both: tuple[Path, str, str]) -> None:
    """The same installed environment over ngym's OpenEnv front: a tool's output is the observation's result, a
    refused call its error, and the tool that finishes the episode ends it there with the environment's reward."""
    _, _, ors = both
    with httpx.Client(base_url=ors.removesuffix("/ors") + "/openenv", timeout=60) as http:
        first = http.post("/reset", json={"task_index": 0}).json()  # train-0: the target is 2
        assert "balance is 2" in json.dumps(first["observation"]["prompt"])

        def step(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = http.post(
                "/step", json={"action": {"tool_name": name, "arguments": arguments}}
            ).json()
            return answer

        refused = step("deposit", {"amount": "two"})
        assert refused["observation"]["error"]["error_type"] == "invalid_args"
        assert "Tool input validation error" in refused["observation"]["error"]["message"]
        assert step("deposit", {"amount": 2})["observation"]["result"] == "balance: 2"
        closed = step("close", {})
        assert closed["done"] is True and closed["reward"] == 1.0, closed
        assert closed["observation"]["result"] == "closed at 2"
        assert http.post("/step", json={"action": {"tool_name": "balance", "arguments": {}}}).status_code == 409
    health = httpx.get(ors.removesuffix("/ors") + "/health", timeout=30).json()
    assert health["live_sessions"] == 0, health
