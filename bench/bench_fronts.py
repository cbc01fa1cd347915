"""The protocol fronts against NeMo Gym's wire: the same environments, the same recorded rollouts, one run.

Each environment (weather = example_single_tool_call, and workplace_assistant) is served once by ``ngym run``;
every protocol's driver replays the environment's recorded example rollouts against that same server, making the
requests its real client makes for one rollout, no more, no fewer:

- ``nemo``: NeMo Gym's agent: ``/seed_session`` with the row → each recorded tool call → ``/verify`` with the
  recorded response (aiohttp, the session cookie carried by hand);
- ``ors``: ``openreward``'s session as TRL's ``OpenRewardSpec`` drives it (``OPENREWARD_SESSION_URL`` =
  ``http://HOST:PORT/ors/``; the SDK's aiohttp client drops the URL's path, its ping thread keeps it):
  ``/create_session`` → ``/create`` → the session's first ``/ors//ping`` (sent at once, then every 10 s) →
  ``/prompt`` → one ``/call`` per tool call → ``/call submit_answer`` with the recorded final text → ``/delete`` →
  ``/delete_session``, each with the SDK's headers. ``tests/ors/test_bench_sequences.py`` checks this sequence
  against the SDK's own (TRL's ``OpenRewardSpec`` run against a recording server);
- ``openenv``: OpenEnv's ``GenericEnvClient``: one WebSocket to ``/openenv/ws`` per concurrent client, reused
  across episodes, offering permessage-deflate as the client does: ``reset`` with the row → a ``step`` per tool
  call → a ``step`` with the final message (which verifies);
- the floors: the requests ORS makes beyond NeMo Gym's (``/create_session``, ``/ping``, ``/prompt``, ``/delete``,
  ``/delete_session``, with their methods, headers and bodies) sent to a server answering ready-made bytes: what
  those round trips cost at the least. ``bare``: a bare ASGI app on uvicorn (``bench/bare_http.py``, configured
  as ``ngym run`` configures uvicorn); ``ready``: the same uvicorn answering from its HTTP parser's callbacks, as
  ngym answers those five ORS requests (``bare_http.py PORT ready``); ``haproxy``: HAProxy, one thread, a server
  written in C (``bench/haproxy_bare.py``).

Rounds alternate between the protocols; per round, ``--concurrency`` rollouts in flight for ``--seconds``, the
client in this process: rollouts/s and the server's CPU per rollout (its process tree's CPU time over the round,
from ``/proc``: the machine may be shared, so read CPU, not wall clock). A server's CPU per request falls as its
request rate rises (more requests per wake-up of its event loop), so protocols whose clients run at different rates
are not compared alike: ``--rate R`` paces every protocol (and the bare app) at R rollouts/s, the same load. Every
reward is checked against the recording (a mismatch stops the run), and the server must hold no live session at the
end.

Printed: per protocol the median of the rounds and its CPU per rollout ÷ NeMo Gym's wire in the same round (median
and range), then per environment what the extra round trips cost at the least: ``ors floor`` = NeMo Gym's rollout
plus a floor server's CPU for ORS's extra requests (one row per floor), against the 10 % a front may add.

    .venv/bin/python bench/bench_fronts.py [--seconds 3] [--rounds 5] [--concurrency 8] [--rate 0]
        [--protocols nemo,ors,openenv] [--environments weather,workplace_assistant] [--floors bare,ready,haproxy]
        [--low-load]

``--low-load`` adds the same rounds one rollout at a time and paced at 100 rollouts/s (rows named so): at a low
load every request is about one wake-up of the server's event loop, the case where a protocol's per-message cost
shows most.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import psutil
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.haproxy_bare import haproxy_bare  # noqa: E402
from ngym.child_server import LOOPBACK, free_port, stop_process, wait_healthy  # noqa: E402
from ngym.examples import dataset_row, read_example_rollouts, read_jsonl, recorded_tool_calls  # noqa: E402

ENVIRONMENTS = {"weather": "example_single_tool_call", "workplace_assistant": "workplace_assistant"}
#: What a front may add to NeMo Gym's wire's CPU per rollout.
TARGET = 1.10

#: The headers ``openreward`` 0.1.167 sends (recorded from it): every request, then per kind of request.
SDK_HEADERS = {"user-agent": "openreward-sdk/0.1.167", "accept": "*/*", "accept-encoding": "gzip, deflate"}
#: ``X-Secrets`` at session start: the SDK sends the API key secret it adds (empty here) with its allowed domains,
#: base64; this is the length it has for a server on 127.0.0.1.
SECRETS = {"x-secrets": "e" * 664}
STREAM = {"accept": "text/event-stream"}
NO_BODY = {"content-type": "application/octet-stream"}


class Client(Protocol):
    """One concurrent client of a protocol: replays recorded rollouts one after another."""

    async def rollout(self, index: int, recorded: dict[str, Any]) -> tuple[float | None, int]:
        """Replay one rollout: the reward it got and the requests (or messages) it made."""
        ...

    async def close(self) -> None: ...


class Driver(Protocol):
    name: str
    #: what ``rollout`` counts
    unit: str

    def client(self, http: aiohttp.ClientSession, url: str, environment: str) -> Client: ...


class Prepared:
    """One recorded rollout's requests, encoded once: the client's own JSON work is not what is measured, and a
    client that encoded 30 KB per verify would run NeMo Gym's wire slower than the fronts (the server's CPU per
    rollout grows as its rate falls)."""

    def __init__(self, index: int, recorded: dict[str, Any]) -> None:
        row = dataset_row(recorded)
        response = recorded["response"]
        calls = recorded_tool_calls(response)
        self.seed = json.dumps(row).encode()
        self.tools = [(call.name, json.dumps(call.arguments).encode()) for call in calls]
        self.verify = json.dumps({**row, "response": response}).encode()
        self.create = json.dumps({"split": "example", "index": index}).encode()
        self.calls = [json.dumps({"name": call.name, "input": call.arguments}).encode() for call in calls]
        answer = {"name": "submit_answer", "input": {"answer": final_text(response)}}
        self.submit = json.dumps(answer).encode()
        self.messages = [json.dumps({"type": "reset", "data": {"row": row}})]
        steps = [{"type": "step", "data": {"tool_name": c.name, "arguments": c.arguments}} for c in calls]
        self.messages += [json.dumps(step) for step in steps]
        self.messages.append(json.dumps({"type": "step", "data": {"message": final_text(response)}}))


#: id of a recorded rollout -> (that rollout, its requests). The rollout is kept with them: once a dict is freed
#: its id can be reused by another one (each load re-reads the recordings), which would then be replayed with the
#: requests of a different rollout and checked against its own reward.
_PREPARED: dict[int, tuple[dict[str, Any], Prepared]] = {}


def prepared(index: int, recorded: dict[str, Any]) -> Prepared:
    found = _PREPARED.get(id(recorded))
    if found is None or found[0] is not recorded:
        found = _PREPARED[id(recorded)] = (recorded, Prepared(index, recorded))
    return found[1]


JSON = {"content-type": "application/json"}


def final_text(response: dict[str, Any]) -> str:
    messages = [item for item in response["output"] if item.get("type") == "message"]
    return "".join(part.get("text", "") for part in messages[-1]["content"]) if messages else ""


def sse_answer(text: str) -> Any:
    """The JSON answer of an ORS event stream: its chunk and end events' data joined."""
    data = []
    for block in text.split("\r\n\r\n"):
        lines = block.split("\r\n")
        if lines and lines[0] in ("event: chunk", "event: end"):
            data.append("\n".join(line[6:] for line in lines[1:] if line.startswith("data: ")))
    return json.loads("".join(data)) if data else None


class _Closeless:
    async def close(self) -> None:
        pass


class NemoClient(_Closeless):
    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def rollout(self, index: int, recorded: dict[str, Any]) -> tuple[float | None, int]:
        ready = prepared(index, recorded)
        async with self.http.post(f"{self.url}/seed_session", data=ready.seed, headers=JSON) as seeded:
            await seeded.read()
            cookie = {"cookie": seeded.headers["set-cookie"].split(";", 1)[0], **JSON}
        for name, arguments in ready.tools:
            async with self.http.post(f"{self.url}/{name}", data=arguments, headers=cookie) as answer:
                await answer.read()
        async with self.http.post(f"{self.url}/verify", data=ready.verify, headers=cookie) as verified:
            reward: float | None = json.loads(await verified.read())["reward"]
        return reward, len(ready.tools) + 2


class NemoWire:
    name = "nemo"
    unit = "HTTP requests"

    def client(self, http: aiohttp.ClientSession, url: str, environment: str) -> Client:
        return NemoClient(http, url)


class ORSClient(_Closeless):
    """The ``openreward`` SDK's requests for one rollout (see the module docstring)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, environment: str) -> None:
        self.http, self.url = http, url
        self.base = {**SDK_HEADERS, "x-api-key": "", "x-deployment": environment}

    async def post(self, path: str, headers: dict[str, str], body: bytes | None = None) -> str:
        kind = NO_BODY if body is None else JSON
        async with self.http.post(f"{self.url}{path}", data=body, headers={**headers, **kind}) as answer:
            text = await answer.text()
            assert answer.status == 200, (path, answer.status, text)
            return text

    async def rollout(self, index: int, recorded: dict[str, Any]) -> tuple[float | None, int]:
        ready = prepared(index, recorded)
        opened = await self.post("/create_session", {**self.base, **STREAM, **SECRETS}, b"{}")
        own = {**self.base, "x-session-id": opened.split("\r\n")[1][6:]}
        await self.post("/create", {**own, **SECRETS}, ready.create)
        await self.post("/ors//ping", own)
        async with self.http.get(f"{self.url}/prompt", headers=own) as prompt:
            await prompt.read()
        calling = {**own, **STREAM}
        calling.pop("x-api-key")
        for call in ready.calls:
            await self.post("/call", calling, call)
        submitted = sse_answer(await self.post("/call", calling, ready.submit))
        closing = {k: v for k, v in own.items() if k != "x-deployment"}
        await self.post("/delete", closing)
        await self.post("/delete_session", closing)
        reward: float | None = submitted["output"]["reward"]
        return reward, len(ready.calls) + 7


class ORSWire:
    name = "ors"
    unit = "HTTP requests"

    def client(self, http: aiohttp.ClientSession, url: str, environment: str) -> Client:
        return ORSClient(http, url, environment)


class OpenEnvClient:
    """OpenEnv's ``GenericEnvClient`` (openenv 0.10): one WebSocket, ``reset``/``step`` messages."""

    def __init__(self, url: str) -> None:
        self.ws_url = url.replace("http://", "ws://") + "/openenv/ws"
        self.socket: Any = None

    async def send(self, message: str) -> dict[str, Any]:
        if self.socket is None:  # the client's own defaults: permessage-deflate offered
            self.socket = await websockets.connect(self.ws_url, max_size=None)
        await self.socket.send(message)
        answer: dict[str, Any] = json.loads(await self.socket.recv())
        assert answer["type"] != "error", answer
        return answer

    async def rollout(self, index: int, recorded: dict[str, Any]) -> tuple[float | None, int]:
        ready = prepared(index, recorded)
        for message in ready.messages[:-1]:
            await self.send(message)
        final = await self.send(ready.messages[-1])
        reward: float | None = final["data"]["reward"]
        return reward, len(ready.messages)

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()


class OpenEnvWire:
    name = "openenv"
    unit = "WebSocket messages"

    def client(self, http: aiohttp.ClientSession, url: str, environment: str) -> Client:
        return OpenEnvClient(url)


class BareClient(ORSClient):
    """ORS's requests beyond NeMo Gym's, against the bare app (which answers every one alike)."""

    async def rollout(self, index: int, recorded: dict[str, Any]) -> tuple[float | None, int]:
        own = {**self.base, "x-session-id": "0" * 32}
        await self.post("/create_session", {**self.base, **STREAM, **SECRETS}, b"{}")
        await self.post("/ors//ping", own)
        async with self.http.get(f"{self.url}/prompt", headers=own) as prompt:
            await prompt.read()
        closing = {k: v for k, v in own.items() if k != "x-deployment"}
        await self.post("/delete", closing)
        await self.post("/delete_session", closing)
        return recorded["reward"], EXTRA_ORS_REQUESTS


#: ORS's requests per rollout beyond NeMo Gym's (``/create`` seeds and the final ``/call`` verifies, as NeMo's do).
EXTRA_ORS_REQUESTS = 5


class BareHTTP:
    name = "bare"
    unit = "HTTP requests"

    def client(self, http: aiohttp.ClientSession, url: str, environment: str) -> Client:
        return BareClient(http, url, environment)


DRIVERS: dict[str, Callable[[], Driver]] = {"nemo": NemoWire, "ors": ORSWire, "openenv": OpenEnvWire}


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its live children (``/proc``, through psutil)."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def start(command: list[str], url: str, health: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_healthy(url, proc, 120, path=health)
    return proc


class Round:
    """One protocol's round: rollouts/s, server CPU ms per rollout, requests (or messages) per rollout."""

    def __init__(self, rate: float, cpu_ms: float, requests: float) -> None:
        self.rate, self.cpu_ms, self.requests = rate, cpu_ms, requests


async def one_round(
    url: str,
    pid: int,
    driver: Driver,
    environment: str,
    plan: list[tuple[int, dict[str, Any]]],
    seconds: float,
    concurrency: int,
    rate: float = 0.0,
) -> Round:
    """``concurrency`` clients replaying ``plan`` (row index, recorded rollout) for ``seconds``, each as fast as it
    can, or together ``rate`` rollouts/s (each client starts its next rollout on its own schedule)."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as http:
        clients = [driver.client(http, url, environment) for _ in range(concurrency)]
        for client in clients:  # warm: connections open, the front built
            await client.rollout(*plan[0])
        done = requests = 0
        cpu_before, began = cpu_seconds(pid), time.monotonic()
        deadline = began + seconds

        async def loop(client: Client, offset: int) -> None:
            nonlocal done, requests
            k = offset
            interval = concurrency / rate if rate else 0.0
            start = began + interval * offset / concurrency  # the clients' starts spread over one interval
            while time.monotonic() < deadline:
                if interval:
                    await asyncio.sleep(max(0.0, start - time.monotonic()))
                    start += interval
                    if time.monotonic() >= deadline:
                        break
                index, recorded = plan[k % len(plan)]
                reward, made = await client.rollout(index, recorded)
                if reward != recorded["reward"]:
                    expected = recorded["reward"]
                    raise SystemExit(f"{driver.name}: rollout {k % len(plan)} got {reward}, recorded {expected}")
                done, requests, k = done + 1, requests + made, k + 1

        await asyncio.gather(*(loop(client, i) for i, client in enumerate(clients)))
        elapsed, cpu = time.monotonic() - began, cpu_seconds(pid) - cpu_before
        for client in clients:
            await client.close()
    return Round(done / elapsed, 1000 * cpu / max(done, 1), requests / max(done, 1))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}–{max(values):.2f})"


#: The floors: the servers answering ORS's extra requests from ready-made bytes (name → what serves them).
FLOOR_NAMES = {
    "bare": "bare uvicorn (ASGI)",
    "ready": "uvicorn, answered in the HTTP parser",
    "haproxy": "HAProxy (C)",
}


#: ``--low-load``: the loads run after the free-running one: (label, rollouts in flight, rollouts/s or 0).
LOW_LOADS = [("one at a time", 1, 0.0), ("paced 100/s", 8, 100.0)]


def bench_environment(
    label: str,
    environment: str,
    drivers: list[Driver],
    floors: dict[str, tuple[str, int]],
    args: argparse.Namespace,
    load: tuple[int, float],
) -> None:
    folder = ROOT / "resources_servers" / environment / "data"
    rollouts = read_example_rollouts(folder / "example_rollouts.jsonl")
    rows = read_jsonl(folder / "example.jsonl")
    plan = [(rows.index(dataset_row(r)), r) for r in rollouts]
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    proc = start([sys.executable, "-m", "ngym.cli", "run", environment, "--port", str(port)], url, "/")
    floor_driver = BareHTTP()
    results: dict[str, list[Round]] = {name: [] for name in [*(d.name for d in drivers), *floors]}
    try:
        for _ in range(args.rounds):
            for driver in drivers:
                measure = one_round(url, proc.pid, driver, environment, plan, args.seconds, *load)
                results[driver.name].append(asyncio.run(measure))
            for name, (floor_url, floor_pid) in floors.items():
                floor = one_round(floor_url, floor_pid, floor_driver, environment, plan, args.seconds, *load)
                results[name].append(asyncio.run(floor))
        live = asyncio.run(_live_sessions(url))
    finally:
        stop_process(proc)
    if live:
        raise SystemExit(f"{label}: {live} sessions left live after the rounds")
    nemo = results["nemo"]
    for driver in drivers:
        rounds = results[driver.name]
        ratios = [r.cpu_ms / n.cpu_ms for r, n in zip(rounds, nemo, strict=True)]
        print(
            f"| {label} | {driver.name} | {rounds[0].requests:.0f} {driver.unit} |"
            f" {statistics.median(r.rate for r in rounds):.0f} | {statistics.median(r.cpu_ms for r in rounds):.3f} |"
            f" {spread(ratios) if driver.name != 'nemo' else '1.00x'} |"
        )
    extra = EXTRA_ORS_REQUESTS
    nemo_ms = statistics.median(n.cpu_ms for n in nemo)
    allowed = 1000 * (TARGET - 1) * nemo_ms
    FLOORS.append(f"{label}: 10 % of NeMo Gym's rollout = {allowed:.0f} µs; {extra} extra requests cost")
    for name, served_by in FLOOR_NAMES.items():
        if name not in floors:
            continue
        floor_ms = [b.cpu_ms for b in results[name]]
        floor_ratios = [(n.cpu_ms + b) / n.cpu_ms for n, b in zip(nemo, floor_ms, strict=True)]
        print(
            f"| {label} | ors floor: nemo + {extra} requests to {served_by} | {nemo[0].requests + extra:.0f} HTTP"
            f" requests | | {nemo_ms + statistics.median(floor_ms):.3f} | {spread(floor_ratios)} |"
        )
        per_request = 1000 * statistics.median(floor_ms) / extra
        FLOORS.append(f"  {served_by}: {per_request:.0f} µs a request, {per_request * extra:.0f} µs per rollout")


FLOORS: list[str] = []


async def _live_sessions(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as answer:
        return int((await answer.json())["live_sessions"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="rollouts/s of every protocol (0: as fast as each goes)"
    )
    parser.add_argument("--protocols", default="nemo,ors,openenv", help=f"from {sorted(DRIVERS)}, nemo first")
    parser.add_argument("--environments", default=",".join(ENVIRONMENTS), help=f"from {sorted(ENVIRONMENTS)}")
    parser.add_argument("--floors", default=",".join(FLOOR_NAMES), help=f"from {sorted(FLOOR_NAMES)}")
    parser.add_argument(
        "--low-load",
        action="store_true",
        help="then the same at low loads: one rollout at a time, and 8 clients paced at 100 rollouts/s together",
    )
    args = parser.parse_args()
    names = args.protocols.split(",")
    if names[0] != "nemo" or any(name not in DRIVERS for name in names):
        parser.error(f"--protocols: names from {sorted(DRIVERS)}, nemo first")
    drivers = [DRIVERS[name]() for name in names]
    print("| environment | protocol | per rollout | rollouts/s | server CPU ms/rollout | CPU ÷ nemo (median, range) |")
    print("|---|---|---|---:|---:|---|")
    with contextlib.ExitStack() as stack:
        floors: dict[str, tuple[str, int]] = {}
        for name, mode in (("bare", []), ("ready", ["ready"])):
            port = free_port()
            url = f"http://{LOOPBACK}:{port}"
            process = start([sys.executable, str(ROOT / "bench" / "bare_http.py"), str(port), *mode], url, "/")
            stack.callback(stop_process, process)
            floors[name] = (url, process.pid)
        if "haproxy" in args.floors:
            floors["haproxy"] = stack.enter_context(haproxy_bare(Path(tempfile.gettempdir()) / "ngym-haproxy-bare.log"))
        floors = {name: found for name, found in floors.items() if name in args.floors}
        loads = [("", args.concurrency, args.rate), *(LOW_LOADS if args.low_load else [])]
        for how, concurrency, rate in loads:
            for label in args.environments.split(","):
                named = f"{label}, {how}" if how else label
                bench_environment(named, ENVIRONMENTS[label], drivers, floors, args, (concurrency, rate))
    print()
    for line in FLOORS:
        print(line)


if __name__ == "__main__":
    main()
