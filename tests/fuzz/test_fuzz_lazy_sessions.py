"""A flood of cookie-less tool calls against a NeMo Gym environment that keys state by the request's session id
(each call starts a session lazily, NeMo Gym's way), at ``ngym run --workers 2`` behind its real HAProxy
(``make fuzz``).

Every call of the flood is answered (the lazy share closes its least recently used sessions, counted in each
worker's ``/health``), the trainer's seeds are all accepted up to ``max_sessions`` per worker, the seeded sessions
that were idle through the flood verify unmasked with the right reward, and a lazily started session that was
closed to make room answers 410 (its verify masked), never a fresh counter under its old id. The flood's size is
``NGYM_FUZZ_LAZY`` (default 2,000 calls).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ngym.fleet.state import FleetState
from tests.support.affinity_probes import affine_server, new_client, seed, verified_unmasked

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)"),
]

FLOOD = int(os.environ.get("NGYM_FUZZ_LAZY", "2000"))
APP = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_lazy_counter"
MAX_SESSIONS = 20  # per worker


def cookie_less_flood(url: str, calls: int, threads: int = 4) -> tuple[dict[int, int], list[str]]:
    """``calls`` tool calls without a session; status -> count and the first cookies handed out."""
    per_thread = -(-calls // threads)

    def run(t: int) -> tuple[dict[int, int], list[str]]:
        counts: dict[int, int] = {}
        cookies: list[str] = []
        with new_client() as client:
            for _ in range(t * per_thread, min(calls, (t + 1) * per_thread)):
                answer = client.post(f"{url}/increment_counter", json={})
                counts[answer.status_code] = counts.get(answer.status_code, 0) + 1
                if len(cookies) < 4 and "set-cookie" in answer.headers:
                    cookies.append(answer.headers["set-cookie"].split(";", 1)[0])
        return counts, cookies

    total: dict[int, int] = {}
    first: list[str] = []
    with ThreadPoolExecutor(threads) as pool:
        for counts, cookies in pool.map(run, range(threads)):
            first += cookies
            for status, n in counts.items():
                total[status] = total.get(status, 0) + n
    return total, first


def probe(url: str) -> None:
    """The flood beside 6 idle seeded sessions, then seeds up to ``max_sessions`` on each of the 2 workers."""
    with new_client() as client:
        idle = [seed(client, url, 100 + i) for i in range(6)]
        assert all(rollout.increment(client).status_code == 200 for rollout in idle)
    statuses, early = cookie_less_flood(url, FLOOD)
    assert statuses == {200: FLOOD}, statuses
    # each worker's store is full of lazy sessions now: seeds up to max_sessions on each are all accepted
    with new_client() as client:
        seeded = [seed(client, url, 1000 + i) for i in range(2 * MAX_SESSIONS - len(idle))]
        for rollout in seeded:
            assert rollout.increment(client).status_code == 200
        evicted, slots = 0, set()
        for slot in ("0", "1"):  # HAProxy sends a /health carrying this header to worker I
            health = client.get(f"{url}/health", headers={"x-ngym-health-slot": slot}).json()
            evicted += health["lazy_sessions"]["evicted"]
            slots.add(health["route_slot"])
        assert len(slots) == 2, slots
        # the flood's first sessions were closed to make room: lost, never restarted
        for cookie in early:
            gone = client.post(f"{url}/get_counter_value", json={}, headers={"cookie": cookie})
            assert gone.status_code == 410 and "set-cookie" not in gone.headers, gone.text
    assert evicted >= FLOOD - 2 * MAX_SESSIONS
    assert verified_unmasked(idle + seeded) == []


def test_a_cookie_less_flood_never_refuses_a_seed_nor_harms_a_seeded_session() -> None:
    overrides = ("domain=other", f"max_sessions={MAX_SESSIONS}", "session_ttl_seconds=3600")
    with affine_server(2, *overrides, target=str(APP)) as served:
        probe(served.url)


def test_the_same_flood_in_a_local_fleet(tmp_path: Path) -> None:
    """The environment as a fleet unit (``ngym up``, ``workers: 2``): same answers through the fleet's URL."""
    config = {"domain": "other", "max_sessions": MAX_SESSIONS, "session_ttl_seconds": 3600}
    fleet = {
        "name": "lazyflood",
        "head_server": {"port": 0},
        "environments": {"counter": {"env": str(APP), "workers": 2, "config": config}},
    }
    (tmp_path / "fleet.yaml").write_text(json.dumps(fleet))
    env = {**os.environ, "NGYM_FLEET_VENVS": str(tmp_path / "venvs")}
    cli = [sys.executable, "-m", "ngym.cli"]
    up = subprocess.run([*cli, "up", "fleet.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = FleetState.load(tmp_path / ".ngym-fleet" / "lazyflood")
        assert state is not None
        probe(f"http://127.0.0.1:{state.servers['counter'].port}")
    finally:
        down = subprocess.run(
            [*cli, "down", "fleet.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
        )
    assert down.returncode == 0, down.stdout + down.stderr
