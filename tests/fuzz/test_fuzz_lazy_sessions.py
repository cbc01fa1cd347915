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

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.affinity_probes import affine_server, idle_sessions, new_client, seed, verified_unmasked

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


def test_a_cookie_less_flood_never_refuses_a_seed_nor_harms_a_seeded_session() -> None:
    overrides = ("domain=other", f"max_sessions={MAX_SESSIONS}", "session_ttl_seconds=3600")
    with affine_server(2, *overrides, target=str(APP)) as served:
        idle = idle_sessions(served.url, 6)
        statuses, early = cookie_less_flood(served.url, FLOOD)
        assert statuses == {200: FLOOD}, statuses
        # the store of each worker is full of lazy sessions now: seeds up to max_sessions on each are all accepted
        with new_client() as client:
            seeded = [seed(client, served.url, 1000 + i) for i in range(2 * MAX_SESSIONS - len(idle))]
            for rollout in seeded:
                assert rollout.increment(client).status_code == 200
            evicted, slots = 0, set()
            for slot in ("0", "1"):  # HAProxy sends a /health carrying this header to worker I
                health = client.get(f"{served.url}/health", headers={"x-ngym-health-slot": slot}).json()
                evicted += health["lazy_sessions"]["evicted"]
                slots.add(health["route_slot"])
            assert len(slots) == 2, slots
            # the flood's first sessions were closed to make room: lost, never restarted
            for cookie in early:
                gone = client.post(f"{served.url}/get_counter_value", json={}, headers={"cookie": cookie})
                assert gone.status_code == 410 and "set-cookie" not in gone.headers, gone.text
        assert evicted >= FLOOD - 2 * MAX_SESSIONS
        assert verified_unmasked(idle + seeded) == []
