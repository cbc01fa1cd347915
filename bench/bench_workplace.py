"""workplace_assistant: seed_session and verify latency (p50/p95), in-process.

Two levels: the engine alone (fresh databases; score a 5-call rollout), and the real ASGI app through httpx
(POST /seed_session; POST /verify of a 5-call rollout). Uses WorkBench's data when $NGYM_WORKBENCH_DIR or
../shared/workbench exists, else the bundled sample.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from workplace_assistant.app import WorkplaceAssistantResourcesServer
from workplace_assistant.importer import task_row
from workplace_assistant.scoring import score
from workplace_assistant.workspace import WorkBenchData

from ngym.testing import RolloutClient, app_for_class, serve_in_process

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.entry, when run as a script
from bench.entry import prepare  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "workbench"
DATA_DIR = os.environ.get("NGYM_WORKBENCH_DIR") or (str(SHARED) if (SHARED / "processed").is_dir() else None)
N = int(os.environ.get("BENCH_N", "2000"))

FIVE_CALLS = [  # a 5-call rollout touching four databases (valid on WorkBench's data and on the sample)
    'email.send_email.func(recipient="Someone@Example.com", subject="Status", body="All good")',
    'calendar.create_event.func(event_name="Sync", participant_email="a@b.io", event_start="2023-12-01 10:00:00", '
    'duration="30")',
    'analytics.create_plot.func(time_min="2023-11-01", time_max="2023-11-29", value_to_plot="total_visits", '
    'plot_type="bar")',
    'project_management.search_tasks.func(task_name="a")',
    'customer_relationship_manager.add_customer.func(customer_name="Zed", assigned_to_email="a@b.io", status="Lead")',
]


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1] if len(samples) > 1 else samples[0]


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def http_numbers(n: int) -> tuple[list[float], list[float]]:
    app = app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant", data_dir=DATA_DIR)
    row = task_row("bench", FIVE_CALLS, "multi_domain")
    calls = [{"type": "function_call", "call_id": f"c{i}", **c} for i, c in enumerate(row["ground_truth"])]
    response = {"id": "r", "created_at": 0, "model": "bench", "object": "response", "output": calls,
                "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}  # fmt: skip
    body = json.loads(json.dumps({**row, "response": response}))
    seeds, verifies = [], []
    async with serve_in_process(app) as http:
        for _ in range(n):
            client = RolloutClient(http)
            t = time.perf_counter()
            await client.call("/seed_session", row)
            seeds.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            out = await client.call("/verify", body)
            verifies.append((time.perf_counter() - t) * 1000)
            assert out["reward"] == 1.0, out
    return seeds, verifies


def main() -> int:
    data = WorkBenchData.resolve(DATA_DIR)
    engine_seed = timed(data.new_workspace, N * 10)
    assert score(data, FIVE_CALLS, FIVE_CALLS).reward == 1.0
    engine_verify = timed(lambda: score(data, FIVE_CALLS, FIVE_CALLS), N)
    http_seed, http_verify = asyncio.run(http_numbers(max(200, N // 4)))
    print(f"data: {data.source}")
    print(f"{'measure':<44}{'p50 ms':>10}{'p95 ms':>10}")
    for name, samples in (
        ("engine: fresh databases (seed)", engine_seed),
        ("engine: score a 5-call rollout (verify)", engine_verify),
        ("app: POST /seed_session (in-process ASGI)", http_seed),
        ("app: POST /verify, 5 calls (in-process ASGI)", http_verify),
    ):
        print(f"{name:<44}{pct(samples, 50):>10.4f}{pct(samples, 95):>10.4f}")
    return 0


if __name__ == "__main__":
    prepare(__doc__)
    sys.exit(main())
