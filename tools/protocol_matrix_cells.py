"""The protocol matrix's cells: one environment's recorded rollouts replayed over each protocol, rewards compared.

NeMo's wire is the reference (``ngym.train.wire``, the client every trainer binding uses; a Gymnasium-style
server is replayed with ``ngym.rollout.gymnasium`` as NeMo's gymnasium agent runs it). MCP runs in this
interpreter (the ``mcp`` SDK); ORS and OpenEnv run their own clients in their own virtualenvs
(``tools/protocol_clients/``), fed the same rollouts as JSON.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import venv as venv_module
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ngym.config import cache_root
from ngym.examples import dataset_row, recorded_tool_calls
from ngym.rollout.gymnasium import Recording, drive, episode, split_turns
from ngym.train.wire import Rollout, SyncWire, reward_of

REPO = Path(__file__).resolve().parent.parent
CLIENTS = REPO / "tools" / "protocol_clients"
PROTOCOLS = ("nemo", "mcp", "ors", "openenv")
OPENENV = "openenv==0.10.0"
CLIENT_TIMEOUT = 600
GYMNASIUM = "Gymnasium /reset + /step"
CATCH_ALL_MCP = (
    "its tools are behind one catch-all route (POST /{path}): none is exposed over MCP, as in NeMo Gym 0.7.0 "
    "(the environment's mcp_tools() may add them)"
)
ROW_TOOLS_MCP = (
    "its tools are declared by its rows only, no route runs them (verify reads the calls): nothing to expose over "
    "MCP, as in NeMo Gym 0.7.0"
)


@dataclass
class Cell:
    status: str  #: pass | fail | n/a
    rewards: list[Any] = field(default_factory=list)
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "rewards": self.rewards, "reason": self.reason}


def client_pythons(ors: str | None, openenv: str | None, work: Path) -> dict[str, str]:
    """The interpreters of ORS's and OpenEnv's clients: given, else made once and cached."""
    if ors is None:  # openreward's SDK lives in the one trainer venv
        made = subprocess.run(["bash", str(REPO / "tools" / "trainer_venv.sh")], capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"protocol_matrix: tools/trainer_venv.sh failed: {made.stderr.strip()[-500:]}")
        ors = str(Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python")
    return {"ors": ors, "openenv": openenv or openenv_python()}


def openenv_python() -> str:
    """OpenEnv's interpreter: the cached venv OpenEnv's own tests use (``~/.cache/ngym/openenv-0.10.0-py311``)."""
    where = Path(os.environ.get("NGYM_OPENENV_TEST_VENVS") or cache_root()) / "openenv-0.10.0-py311"
    python = where / "bin" / "python"
    check = [str(python), "-c", "import openenv.core, uvicorn"]
    if (where / ".ngym-ready").is_file() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python)
    print(f"protocol_matrix: making {where} with {OPENENV} (once; a few minutes)", file=sys.stderr)
    venv_module.EnvBuilder(with_pip=True, clear=True).create(where)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", OPENENV]
    done = subprocess.run(pip, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"protocol_matrix: pip install {OPENENV} failed: {done.stderr.strip()[-500:]}")
    (where / ".ngym-ready").write_text(json.dumps([OPENENV]) + "\n")
    return str(python)


def final_text(response: dict[str, Any]) -> str:
    """The recorded response's last assistant message text (what a final-answer tool is given)."""
    messages = [i for i in response.get("output") or [] if isinstance(i, dict) and i.get("type") == "message"]
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _calls(rollout: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for c in recorded_tool_calls(rollout.get("response"))]


def nemo_rewards(url: str, rollouts: list[dict[str, Any]], gymnasium: bool) -> list[float | None]:
    """NeMo's wire: seed, the recorded calls, ``/verify`` with the recorded response (or a Gymnasium episode)."""
    if gymnasium:
        return [_gymnasium_reward(url, r) for r in rollouts]
    wire = SyncWire(url)
    rewards: list[float | None] = []
    try:
        for recorded in rollouts:
            rollout = Rollout(dataset_row(recorded))
            wire.seed(rollout)
            for name, arguments in _calls(recorded):
                wire.call(rollout, name, arguments)
            rewards.append(reward_of(wire.verify(rollout, recorded.get("response"))))
            wire.close(rollout)
    finally:
        wire.http.close()
    return rewards


def _gymnasium_reward(url: str, recorded: dict[str, Any]) -> float | None:
    with httpx.Client(base_url=url, timeout=120) as http:  # its own cookie jar: one episode

        def env(path: str, body: dict[str, Any]) -> Any:
            answer = http.post(path, json=body)
            answer.raise_for_status()
            return answer.json()

        result = drive(episode(dataset_row(recorded)), env, Recording(recorded.get("response"), {}))
    return result.reward


def mcp_rewards(url: str, rollouts: list[dict[str, Any]]) -> list[float | None]:
    """The calls over MCP inside a NeMo-wire session, then ``/verify`` over the wire."""
    sys.path.insert(0, str(CLIENTS))
    from mcp_client import run_calls

    wire = SyncWire(url)
    rewards: list[float | None] = []
    try:
        for recorded in rollouts:
            rollout = Rollout(dataset_row(recorded))
            seeded = wire.seed(rollout)
            run_calls(url, seeded, _calls(recorded))
            rewards.append(reward_of(wire.verify(rollout, recorded.get("response"))))
            wire.close(rollout)
    finally:
        wire.http.close()
    return rewards


def _mcp_lists(url: str, rollouts: list[dict[str, Any]]) -> bool:
    """Whether the server lists over MCP every tool the recordings call."""
    sys.path.insert(0, str(CLIENTS))
    from mcp_client import NoMCP, run_calls

    wire = SyncWire(url)
    rollout = Rollout(dataset_row(rollouts[0]))
    try:
        seeded = wire.seed(rollout)
        names = {name for r in rollouts for name, _ in _calls(r)}
        run_calls(url, seeded, [], require=names)
        return True
    except NoMCP:
        return False
    finally:
        wire.close(rollout)
        wire.http.close()


def _client(python: str, script: str, plan: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [python, str(CLIENTS / script)], input=json.dumps(plan), capture_output=True, text=True, timeout=CLIENT_TIMEOUT
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise RuntimeError(f"{script}: {tail[0][:300]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def actions(rollout: dict[str, Any], gymnasium: bool) -> list[list[Any]]:
    """What a client does to replay ``rollout``: its tool calls, then its final text as the answer. A
    Gymnasium-style recording is replayed turn by turn: each call, and each assistant message as an answer."""
    if not gymnasium:
        return [["call", name, arguments] for name, arguments in _calls(rollout)] + [
            ["answer", final_text(rollout.get("response") or {})]
        ]
    done: list[list[Any]] = []
    for turn in split_turns((rollout.get("response") or {}).get("output") or []):
        for item in turn:
            if item.get("type") == "function_call":
                raw = item.get("arguments") or "{}"
                done.append(["call", item["name"], json.loads(raw) if isinstance(raw, str) else raw])
            elif item.get("type") == "message" and item.get("role", "assistant") == "assistant":
                done.append(["answer", final_text({"output": [item]})])
    return done


def ors_episodes(
    url: str, name: str, rollouts: list[dict[str, Any]], python: str, gymnasium: bool = False
) -> list[dict[str, Any]]:
    """``openreward``'s client: a session on each row, its calls, the final-answer tool with the final text."""
    listed = httpx.get(f"{url}/ors/list_environments", timeout=30).json()
    names = [e.get("name") if isinstance(e, dict) else e for e in (listed if isinstance(listed, list) else [])]
    env_name = name if name in names or not names else str(names[0])
    episodes = [{"task_spec": dataset_row(r), "actions": actions(r, gymnasium)} for r in rollouts]
    seen = _client(python, "ors_client.py", {"url": f"{url}/ors/", "env_name": env_name, "episodes": episodes})
    return list(seen["episodes"])


def openenv_episodes(
    url: str, rollouts: list[dict[str, Any]], python: str, gymnasium: bool = False
) -> list[dict[str, Any]]:
    """OpenEnv's generic client: reset with each row, a step per call, a final message step."""
    episodes = [{"row": dataset_row(r), "actions": actions(r, gymnasium)} for r in rollouts]
    return list(_client(python, "openenv_client.py", {"url": f"{url}/openenv", "episodes": episodes})["episodes"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a is None and b is None


def compare(got: list[Any], reference: list[Any], expected: list[set[Any]], errors: list[str | None]) -> Cell:
    """pass when every reward equals NeMo's wire's and agrees with the recording (``expected``: the recorded reward
    and NeMo Gym 0.7.0's re-verify of it; empty when nothing was recorded)."""
    for index, (value, ref, allowed) in enumerate(zip(got, reference, expected, strict=True)):
        if not _same(value, ref) or (allowed and not any(_same(value, a) for a in allowed)):
            error = f": {errors[index]}" if errors[index] else ""
            wanted = " or ".join(str(a) for a in sorted(allowed)) or "none"
            reason = f"rollout {index + 1}: reward {value} ≠ NeMo's wire {ref} (recorded {wanted}){error}"
            return Cell("fail", list(got), reason)
    return Cell("pass", list(got))


def run_cells(server: Any, target: Any, clients: dict[str, str]) -> dict[str, Cell]:
    """Every protocol's cell for one served environment (``server``: ``protocol_matrix_subjects.Server``).

    ORS's and OpenEnv's clients (processes of their own, seconds to import) run while NeMo's wire and MCP replay:
    each rollout is a session of its own, so they do not meet."""
    rollouts = target.rollouts
    recorded = target.expected
    none: list[str | None] = [None] * len(rollouts)
    cells: dict[str, Cell] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        seen = {
            "ors": pool.submit(
                ors_episodes, server.url, target.subject.name, rollouts, clients["ors"], server.gymnasium
            ),
            "openenv": pool.submit(openenv_episodes, server.url, rollouts, clients["openenv"], server.gymnasium),
        }
        try:
            reference = nemo_rewards(server.url, rollouts, server.gymnasium)
            cells["nemo"] = compare(reference, reference, recorded, none)
        except Exception as exc:  # noqa: BLE001 - the reason is the cell
            reference = [None] * len(rollouts)
            cells["nemo"] = Cell("fail", reason=f"{type(exc).__name__}: {exc}"[:300])
        calls = any(_calls(r) for r in rollouts)
        if server.gymnasium:
            cells["mcp"] = Cell("n/a", reason=f"{GYMNASIUM}: no tool routes to expose over MCP")
        elif not server.mcp:
            cells["mcp"] = Cell("n/a", reason="its server does not take expose_tools_over_mcp")
        elif not calls:
            cells["mcp"] = Cell("n/a", reason="no tools: its recordings call none (verify is NeMo's wire)")
        elif not _mcp_lists(server.url, rollouts):
            cells["mcp"] = Cell("n/a", reason=CATCH_ALL_MCP if server.catch_all else ROW_TOOLS_MCP)
        else:
            cells["mcp"] = _guarded(lambda: compare(mcp_rewards(server.url, rollouts), reference, recorded, none))
        for protocol, future in seen.items():

            def judged(future: Any = future) -> Cell:
                episodes = future.result()
                rewards = [e["reward"] for e in episodes]
                return compare(rewards, reference, recorded, [e.get("error") for e in episodes])

            cells[protocol] = _guarded(judged)
    return {p: cells[p] for p in PROTOCOLS}


def _guarded(run: Any) -> Cell:
    try:
        cell: Cell = run()
    except Exception as exc:  # noqa: BLE001 - the reason is the cell
        return Cell("fail", reason=f"{type(exc).__name__}: {exc}"[:300])
    return cell
