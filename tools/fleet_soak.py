"""Soak a fleet: SESSIONS concurrent rollouts with churn for SECONDS; RSS, open files and live sessions stay flat.

``make soak`` (30 minutes, 1,000 sessions); shorter: ``python tools/fleet_soak.py --seconds 120 --sessions 200``.
It brings up a fleet of two built-ins with ``ngym up`` (the counter environment, whose state lives in the
session, and the weather example), then keeps SESSIONS rollouts open at once: each seeds, calls tools with
pauses, and either verifies (the reward must be the right one), closes without verifying, or is abandoned to the
idle TTL (churn). Every 10 s it samples each environment's process group (RSS, open files and open sockets, from
``/proc``) and its live sessions (``/health``). After warm-up (the first quarter) RSS may grow at most 20 %, open
files other than sockets at most 16, sockets stay under one per concurrent rollout (they follow the load), and live
sessions stay under SESSIONS plus those left open (abandoned, failed) within the TTL.
When every rollout has ended and the idle TTL has passed, the servers must hold no session and no more descriptors
than before the load. Any wrong reward fails, and so does a lost session scored as an unmasked 0.0. ``ngym down``
at the end.
Prints one JSON report; exit 1 when a bound is broken.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ngym.fleet.state import FleetState  # noqa: E402

TTL = 120  # seconds: abandoned sessions expire, so churn is bounded
THINK = (2.0, 10.0)  # seconds a rollout waits between calls (the model generating): ~100 calls/s at 1,000 sessions
WEATHER = json.loads(
    (REPO / "resources_servers/example_single_tool_call/data/example_rollouts.jsonl").read_text().splitlines()[0]
)
RESPONSE = {
    "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
}  # fmt: skip


def group_usage(pgid: int) -> tuple[int, int, int]:
    """(RSS bytes, open files other than sockets, open sockets) of every process in the group.

    Sockets are counted apart: they follow the load (one per client connection the server holds at that moment),
    so they may rise and fall with it; every other descriptor (files, pipes) must stay flat.
    """
    rss = files = sockets = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(stat[2]) != pgid:
                continue
            rss += int((entry / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):  # closed between the listing and the read
                    if os.readlink(fd).startswith("socket:"):
                        sockets += 1
                    else:
                        files += 1
        except (OSError, ValueError, IndexError):
            continue
    return rss, files, sockets


async def live_sessions(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """``GET /health`` on a connection of its own, retried: the sampler must not die of a keep-alive race.

    (A pooled connection the server closes as idle just as a request goes out is dropped without an answer; on a
    machine loaded to a load average of 20-30 that happened to one sample in a 30-minute run.)
    """
    for attempt in range(3):
        try:
            answer = await http.get(f"{url}/health", headers={"connection": "close"})
            return dict(answer.raise_for_status().json())
        except httpx.HTTPError:
            if attempt == 2:
                raise
            await asyncio.sleep(1)
    raise AssertionError("unreachable")


class Soak:
    def __init__(self, urls: dict[str, str], deadline: float) -> None:
        self.urls, self.deadline = urls, deadline
        self.counts = {
            "verified": 0, "closed": 0, "abandoned": 0, "masked": 0, "lost_409": 0, "lost_unmasked": 0, "wrong": 0,
            "errors": 0,
        }  # fmt: skip
        self.wrong: list[str] = []
        self.lost: list[str] = []

    async def user(self, http: httpx.AsyncClient) -> None:
        while time.monotonic() < self.deadline:
            try:
                await (self.counter(http) if random.random() < 0.7 else self.weather(http))
            except httpx.HTTPError as exc:
                self.counts["errors"] += 1
                if self.counts["errors"] < 5:
                    print(f"soak: {type(exc).__name__}: {exc}", file=sys.stderr)
                await asyncio.sleep(1)

    async def counter(self, http: httpx.AsyncClient) -> None:
        url = self.urls["counter"]
        start = random.randint(0, 5)
        seeded = await http.post(f"{url}/seed_session", json={"initial_count": start})
        seeded.raise_for_status()
        cookie = {"cookie": seeded.headers["set-cookie"].split(";")[0]}
        total = start
        last, gap = time.monotonic(), 0.0  # the longest the session sat idle between two answered calls
        for _ in range(random.randint(1, 4)):
            await asyncio.sleep(random.uniform(*THINK))  # the model generates: the session stays open meanwhile
            step = random.randint(1, 3)
            answer = await http.post(f"{url}/increment_counter", json={"count": step}, headers=cookie)
            # idle as the server may have seen it: from the previous answer to this answer (queueing included)
            idle = time.monotonic() - last
            if answer.status_code == 409:
                self.counts["lost_409" if idle >= TTL else "wrong"] += 1
                (self.lost if idle >= TTL else self.wrong).append(f"409 after idle {idle:.0f} s: {answer.text[:80]}")
                return
            answer.raise_for_status()
            gap, last = max(gap, idle), time.monotonic()
            total += step
        fate = random.random()
        if fate < 0.8:
            body = {"responses_create_params": {"input": "x"}, "response": RESPONSE, "expected_count": total}
            answer = await http.post(f"{url}/verify", json=body, headers=cookie)
            answer.raise_for_status()
            reward = answer.json()["reward"]
            if answer.json().get("mask_sample"):  # lost state reported as such: loud, not a wrong reward
                self.counts["masked"] += 1
            elif reward != 1.0:
                idle = max(gap, time.monotonic() - last)
                if idle >= TTL:  # the session expired while the (overloaded) client sat on it: lost, unmasked
                    self.counts["lost_unmasked"] += 1
                    self.lost.append(f"verify after idle {idle:.0f} s >= TTL: unmasked reward {reward}")
                else:
                    self.counts["wrong"] += 1
                    self.wrong.append(f"counter expected {total}: reward {reward} (longest idle {idle:.1f} s)")
            self.counts["verified"] += 1
        elif fate < 0.9:
            (await http.post(f"{url}/close_session", json={}, headers=cookie)).raise_for_status()
            self.counts["closed"] += 1
        else:
            self.counts["abandoned"] += 1  # left to the idle TTL

    async def weather(self, http: httpx.AsyncClient) -> None:
        url = self.urls["weather"]
        seeded = await http.post(f"{url}/seed_session", json={})
        seeded.raise_for_status()
        cookie = {"cookie": seeded.headers["set-cookie"].split(";")[0]}
        await asyncio.sleep(random.uniform(*THINK))
        body = {k: WEATHER[k] for k in ("responses_create_params", "response")}
        answer = await http.post(f"{url}/verify", json=body, headers=cookie)
        answer.raise_for_status()
        if answer.json()["reward"] != 1.0:
            self.counts["wrong"] += 1
            self.wrong.append(f"weather: reward {answer.json()['reward']}")
        self.counts["verified"] += 1


async def drive(state: FleetState, sessions: int, seconds: float) -> dict[str, Any]:
    urls = {n: f"http://{r.host}:{r.port}" for n, r in state.servers.items()}
    soak = Soak(urls, time.monotonic() + seconds)
    samples: list[dict[str, Any]] = []
    # keep-alive shorter than uvicorn's 5 s, so a pooled connection is never reused just as the server closes it
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions, keepalive_expiry=2.0)
    # No cookie jar: each rollout carries its own cookie by hand, as NeMo Gym's agents do. A shared jar would send
    # one rollout's session cookie with another's seed (the jar does not tell ports apart), which re-seeds that
    # session under the first rollout: found by the first runs of this soak as 409s and 0.0 rewards.
    no_jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    started = time.monotonic()

    async def sample(http: httpx.AsyncClient) -> dict[str, Any]:
        taken: dict[str, Any] = {"t": round(time.monotonic() - started, 1), **soak.counts}
        for name, record in state.servers.items():
            assert record.process is not None
            rss, files, sockets = group_usage(record.process.pid)
            health = await live_sessions(http, urls[name])
            taken[name] = {
                "rss_mb": round(rss / 2**20, 1), "files": files, "sockets": sockets, "live": health["live_sessions"],
            }  # fmt: skip
        print(json.dumps(taken), file=sys.stderr)
        return taken

    async with httpx.AsyncClient(timeout=60, limits=limits, cookies=no_jar) as http:
        idle = await sample(http)  # before any load: what the drained servers must come back to
        users = [asyncio.create_task(soak.user(http)) for _ in range(sessions)]
        while any(not u.done() for u in users):
            await asyncio.sleep(min(10, max(0.5, soak.deadline - time.monotonic())))
            samples.append(await sample(http))
        await asyncio.gather(*users)
    # Drained: every client connection closed and the idle TTL passed, so what the servers still hold is a leak.
    # (the sweeper runs every TTL/4, at most 30 s: a session expires at TTL and is closed by the next sweep)
    await asyncio.sleep(TTL + min(TTL / 4, 30) + 15)
    async with httpx.AsyncClient(timeout=60, cookies=no_jar) as http:
        drained = await sample(http)
    return {
        "counts": soak.counts, "wrong": soak.wrong[:10], "lost": soak.lost[:10], "samples": samples,
        "idle": idle, "drained": drained,
    }  # fmt: skip


def live_sessions_bounded(samples: list[dict[str, Any]], after: float, sessions: int) -> list[str]:
    """Live sessions are what is in flight plus what was left open within the TTL (and one sweep), no more.

    A rollout that is abandoned or fails leaves its session to the idle TTL (a verify closes it), so the servers
    rightly hold every such session of the last TTL + TTL/4 seconds: how many that is follows the throughput (it
    more than doubled in one run when the machine's other load went away), so a fixed bound would flag a faster
    machine. Counted from the run's own totals over that window, for both environments together.
    """
    window = TTL + min(TTL / 4, 30) + 10

    def left_open(sample: dict[str, Any]) -> int:
        # a verified session is closed by the verify (close_session_after_verify); these are left to the TTL
        return int(sample["abandoned"] + sample["errors"] + sample["lost_409"])

    broken = []
    for sample in samples:
        if sample["t"] < after:
            continue
        earlier = [s for s in samples if s["t"] <= sample["t"] - window]
        opened = left_open(sample) - (left_open(earlier[-1]) if earlier else 0)
        live = sum(sample[name]["live"] for name in ("counter", "weather"))
        if live > sessions + opened + 50:
            broken.append(f"{live} live sessions at {sample['t']:.0f} s: {sessions} in flight + {opened} left open")
            break
    return broken


def judge(report: dict[str, Any], sessions: int) -> list[str]:
    samples = report["samples"]
    warm = samples[max(1, len(samples) // 4) - 1 :]
    broken = []
    if report["counts"]["wrong"]:
        broken.append(f"{report['counts']['wrong']} wrong reward(s): {report['wrong']}")
    if report["counts"]["lost_unmasked"]:  # lost to the TTL, but scored 0.0 without mask_sample: a wrong reward too
        broken.append(f"{report['counts']['lost_unmasked']} expired session(s) verified as an unmasked 0.0")
    first, drained = report["idle"], report["drained"]
    broken += live_sessions_bounded(samples, warm[0]["t"], sessions)
    for name in ("counter", "weather"):
        base, peak = warm[0][name], {k: max(s[name][k] for s in warm) for k in ("rss_mb", "files", "sockets", "live")}
        if peak["rss_mb"] > base["rss_mb"] * 1.2 + 5:
            broken.append(f"{name}: RSS grew {base['rss_mb']} -> {peak['rss_mb']} MB after warm-up")
        if peak["files"] > base["files"] + 16:
            broken.append(f"{name}: open files (not sockets) grew {base['files']} -> {peak['files']} after warm-up")
        if peak["sockets"] > sessions + 64:  # at most one connection per concurrent rollout
            broken.append(f"{name}: {peak['sockets']} open sockets for {sessions} concurrent rollouts")
        # after the drain the servers hold what they held before any load: no session, no connection kept
        if drained[name]["live"]:
            broken.append(f"{name}: {drained[name]['live']} live session(s) after every rollout ended and the TTL")
        if drained[name]["sockets"] > first[name]["sockets"] + 4 or drained[name]["files"] > first[name]["files"] + 4:
            broken.append(f"{name}: descriptors after the drain {drained[name]} vs before the load {first[name]}")
    return broken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ngym-soak-"))
    fleet = {
        "name": "soak",
        "head_server": {"port": 0},
        "environments": {
            "counter": {"env": "example_session_state_mgmt", "config": {"session_ttl_seconds": TTL}},
            "weather": {"env": "example_single_tool_call", "config": {"session_ttl_seconds": TTL}},
        },
    }
    (folder / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    ngym = [sys.executable, "-m", "ngym.cli"]
    up = subprocess.run([*ngym, "up", "fleet.yaml"], cwd=folder)
    try:
        if up.returncode != 0:
            return 1
        state = FleetState.load(folder / ".ngym-fleet" / "soak")
        assert state is not None
        report = asyncio.run(drive(state, args.sessions, args.seconds))
    finally:
        subprocess.run([*ngym, "down", "fleet.yaml"], cwd=folder)
    report["broken"] = judge(report, args.sessions)
    report["sessions"], report["seconds"] = args.sessions, args.seconds
    print(json.dumps({k: v for k, v in report.items() if k != "samples"} | {"last": report["samples"][-1]}, indent=2))
    return 1 if report["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())
