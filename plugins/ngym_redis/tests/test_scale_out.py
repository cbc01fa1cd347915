"""Scale-out with real parts: real ``ngym run`` processes on loopback ports sharing one real redis-server.

Round-robin rollouts across three replicas, a replica SIGKILLed mid-rollout, Redis restarted under live
replicas, ``--workers 2`` on Redis, and the startup refusals (affinity-required env on Redis; memory store +
workers without HAProxy).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ngym_redis.testing import RedisServer

from ngym.child_server import free_port, start_environment, stop_process, wait_healthy
from ngym.fleet.status import url_status

NGYM = str(Path(sys.executable).parent / "ngym")
COUNTER = "example_session_state_mgmt"
SECRET = "scale-out-test-secret"


def example_rollouts() -> list[dict[str, Any]]:
    from ngym.targets import resolve

    folder = resolve(COUNTER).folder
    assert folder is not None
    path = folder / "data" / "example_rollouts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Replica:
    """One ``ngym run`` process; its output goes to a log file (its tail is quoted on failure)."""

    def __init__(self, port: int, env: dict[str, str], log: Path, workers: int = 1) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc = start_environment(COUNTER, port=port, workers=workers, env=env, log=log)

    def wait_ready(self, timeout: float = 30) -> None:
        wait_healthy(self.url, self.proc, timeout, self.log, path="/livez")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if sig != signal.SIGTERM and self.proc.poll() is None:
            self.proc.send_signal(sig)  # e.g. SIGKILL: the replica dies without any shutdown
        stop_process(self.proc)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator:
    started: list[Replica] = []

    def _launch(redis_url: str | None, count: int = 1, workers: int = 1, env: dict[str, str] | None = None) -> list:
        replicas = []
        for _ in range(count):
            base = {"NGYM_SESSION_SECRET": SECRET}
            if redis_url:
                base["NGYM_SESSION_STORE"] = redis_url
            port = free_port()
            replica = Replica(port, {**base, **(env or {})}, tmp_path / f"ngym-{port}.log", workers)
            started.append(replica)
            replicas.append(replica)
        for replica in replicas:
            replica.wait_ready()
        return replicas

    yield _launch
    for replica in started:
        replica.stop()


class Rollout:
    """One rollout whose calls go to the given URLs in turn, the session cookie copied by hand."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.turn = 0
        self.cookie: str | None = None
        self.served_by: list[str] = []

    def post(self, path: str, body: Any = None, url: str | None = None) -> httpx.Response:
        if url is None:
            url = self.urls[self.turn % len(self.urls)]
            self.turn += 1
        headers = {"cookie": self.cookie} if self.cookie else {}
        response = httpx.post(f"{url}{path}", json=body or {}, headers=headers, timeout=10)
        if "set-cookie" in response.headers:
            self.cookie = response.headers["set-cookie"].split(";", 1)[0]
        self.served_by.append(url)
        return response

    def call(self, path: str, body: Any = None, url: str | None = None) -> Any:
        response = self.post(path, body, url)
        assert response.status_code == 200, f"POST {path} → {response.status_code}: {response.text}"
        return response.json()


def verify_body(expected_count: int) -> dict[str, Any]:
    example = example_rollouts()[0]
    return {"expected_count": expected_count, "responses_create_params": {"input": []}, "response": example["response"]}


def row_of(rollout: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rollout.items() if k not in ("response", "reward")}


def tool_calls(rollout: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (item["name"], json.loads(item["arguments"]))
        for item in rollout["response"]["output"]
        if item.get("type") == "function_call"
    ]


def test_rollouts_spread_round_robin_over_three_replicas_get_correct_rewards(redis_url: str, launch) -> None:  # type: ignore[no-untyped-def]
    replicas = launch(redis_url, count=3)
    urls = [r.url for r in replicas]
    examples = example_rollouts()
    rewards = []
    for index, example in enumerate(examples * 2):
        rollout = Rollout(urls[index % 3 :] + urls[: index % 3])  # each rollout starts on a different replica
        rollout.call("/seed_session", row_of(example))
        for name, args in tool_calls(example):
            rollout.call(f"/{name}", args)
        verified = rollout.call("/verify", {**row_of(example), "response": example["response"]})
        rewards.append((verified["reward"], example["reward"]))
        assert len(set(rollout.served_by)) == min(3, len(rollout.served_by))
    assert rewards == [(expected, expected) for _, expected in rewards]
    # a rollout that ends at the wrong count scores 0.0, whichever replica verifies it
    wrong = Rollout(urls)
    wrong.call("/seed_session", {"initial_count": 1})
    wrong.call("/increment_counter", {"count": 1})
    wrong.call("/increment_counter", {"count": 1})
    verified = wrong.call("/verify", verify_body(2))
    assert verified["reward"] == 0.0 and verified["final_count"] == 3
    # verify closed every session, for the whole deployment
    assert httpx.get(f"{urls[1]}/health").json()["live_sessions"] == 0


def test_a_replica_killed_mid_rollout_and_the_rollout_finishes_on_another(redis_url: str, launch) -> None:  # type: ignore[no-untyped-def]
    a, b, c = launch(redis_url, count=3)
    rollout = Rollout([a.url])
    rollout.call("/seed_session", {"initial_count": 10})
    rollout.call("/increment_counter", {"count": 5})
    doomed = Rollout([b.url])
    doomed.cookie = rollout.cookie
    doomed.call("/increment_counter", {"count": 7})  # served by b ...
    b.stop(signal.SIGKILL)  # ... which dies without any shutdown
    assert b.proc.returncode == -signal.SIGKILL
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{b.url}/get_counter_value", timeout=2)
    rollout.urls = [c.url, a.url]
    assert rollout.call("/get_counter_value") == {"count": 22}
    rollout.call("/increment_counter", {"count": 1})
    verified = rollout.call("/verify", verify_body(23))
    assert verified["reward"] == 1.0 and verified["final_count"] == 23


def test_redis_restarted_clear_errors_while_down_and_recovery_after(own_redis: RedisServer, launch) -> None:  # type: ignore[no-untyped-def]
    redis = own_redis
    one, two = launch(redis.url, count=2)
    rollout = Rollout([one.url, two.url])
    rollout.call("/seed_session", {"initial_count": 1})
    redis.stop()
    for path, body in (("/increment_counter", {"count": 1}), ("/seed_session", {"initial_count": 0})):
        down = rollout.post(path, body)
        assert down.status_code == 503, down.text
        assert down.headers.get("retry-after") == "1"
        detail = down.json()["detail"]
        assert detail.startswith(f"session store unavailable: Redis at {redis.url} failed to ")
    assert httpx.get(f"{one.url}/health").status_code == 503  # not ready
    assert httpx.get(f"{one.url}/livez").status_code == 200  # but alive
    redis.restart()  # same port, empty: the old rollout is gone, new ones work on both replicas
    fresh = Rollout([two.url, one.url])
    fresh.call("/seed_session", {"initial_count": 2})
    fresh.call("/increment_counter", {"count": 3})
    assert fresh.call("/get_counter_value") == {"count": 5}
    assert httpx.get(f"{one.url}/health").status_code == 200
    assert one.proc.poll() is None and two.proc.poll() is None


def test_two_workers_on_redis_serve_full_rollouts(redis_url: str, launch) -> None:  # type: ignore[no-untyped-def]
    (served,) = launch(redis_url, workers=2, env={"NGYM_SESSION_SECRET": ""})  # secret made up and shared
    examples = example_rollouts()
    for example in examples * 2:
        rollout = Rollout([served.url])  # a new connection per call: the kernel spreads them over the workers
        rollout.call("/seed_session", row_of(example))
        for name, args in tool_calls(example):
            rollout.call(f"/{name}", args)
        verified = rollout.call("/verify", {**row_of(example), "response": example["response"]})
        assert verified["reward"] == example["reward"]
    # `ngym status` counts every worker's verified rollouts
    (row,) = url_status(served.url, interval=0)
    assert row.verified == len(examples) * 2, row
    children = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(served.proc.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert len(children) >= 2, "expected two uvicorn worker processes"


def _ors_and_openenv_rollouts(url: str, count: int) -> dict[tuple[str, int], int]:
    """``count`` ORS sessions and ``count`` OpenEnv HTTP episodes, each request on a connection of its own (as the
    ``openreward`` SDK and a plain HTTP client send them): statuses by step."""
    seen: dict[tuple[str, int], int] = {}

    def post(step: str, path: str, **options: Any) -> httpx.Response:
        answer = httpx.post(f"{url}{path}", timeout=30, **options)
        seen[(step, answer.status_code)] = seen.get((step, answer.status_code), 0) + 1
        return answer

    for _ in range(count):
        opened = post("create_session", "/ors/create_session")
        sid = next(line[6:].strip() for line in opened.text.splitlines() if line.startswith("data: "))
        header = {"x-session-id": sid}
        post("ors", "/ors/create", headers=header, json={"split": "example", "index": 0})
        for _ in range(2):
            post("ors", "/ors/call", headers=header, json={"name": "increment_counter", "input": {"count": 1}})
        post("ors", "/ors/call", headers=header, json={"name": "submit_answer", "input": {"answer": "2"}})
        cookies = dict(post("openenv", "/openenv/reset", json={}).cookies)
        for _ in range(2):
            action = {"tool_name": "increment_counter", "arguments": {"count": 1}}
            post("openenv", "/openenv/step", json={"action": action}, cookies=cookies)
    return seen


def test_two_workers_on_redis_keep_ors_sessions_and_openenv_episodes_on_their_worker(redis_url: str, launch) -> None:  # type: ignore[no-untyped-def]
    """An ORS session or an OpenEnv episode held over HTTP lives in the worker that opened it, whatever the store:
    with Redis, ``--workers 2`` is HAProxy in front of the workers too (on uvicorn's own workers 10 of 20 ORS calls
    were 404 and 13 of 30 OpenEnv steps 409)."""
    (served,) = launch(redis_url, workers=2, env={"NGYM_SESSION_SECRET": ""})
    assert _ors_and_openenv_rollouts(served.url, 8) == {
        ("create_session", 200): 8,
        ("ors", 200): 32,
        ("openenv", 200): 24,
    }


def test_two_workers_on_redis_without_haproxy_serve_and_warn(tmp_path: Path, redis_url: str, launch) -> None:  # type: ignore[no-untyped-def]
    """Without HAProxy, uvicorn's workers serve NeMo Gym's wire from Redis; the log says ORS and OpenEnv's HTTP
    episodes need HAProxy."""
    (served,) = launch(redis_url, workers=2, env={"NGYM_SESSION_SECRET": "", "NGYM_HAPROXY": str(tmp_path / "none")})
    rollout = Rollout([served.url])
    example = example_rollouts()[0]
    rollout.call("/seed_session", row_of(example))
    assert rollout.call("/verify", {**row_of(example), "response": example["response"]})["reward"] is not None
    assert "an ORS session (/ors) or an OpenEnv episode held over HTTP" in served.log.read_text()


def test_uvicorn_workers_on_redis_report_every_workers_counts(tmp_path: Path, redis_url: str, launch) -> None:  # type: ignore[no-untyped-def]
    """Without HAProxy, uvicorn's workers share one socket and a GET /health reaches any of them: each reports the
    counts of all (a shared file), not its own share (readings {2, 8} for 10 rollouts at 2 workers, and a rate
    between two readings compared two workers)."""
    env = {"NGYM_SESSION_SECRET": "", "NGYM_HAPROXY": str(tmp_path / "none")}
    (served,) = launch(redis_url, workers=2, env=env)
    examples = example_rollouts()
    for example in examples * 2:
        rollout = Rollout([served.url])  # a new connection per call: the kernel spreads them over the workers
        rollout.call("/seed_session", row_of(example))
        for name, args in tool_calls(example):
            rollout.call(f"/{name}", args)
        rollout.call("/verify", {**row_of(example), "response": example["response"]})
    readings = [httpx.get(f"{served.url}/health", timeout=10).json()["traffic"]["verified"] for _ in range(20)]
    assert set(readings) == {len(examples) * 2}, readings
    (row,) = url_status(served.url, interval=0)
    assert row.verified == len(examples) * 2, row


def _run_refused(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NGYM, "run", *args, "--port", "0"], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def test_an_env_that_needs_affinity_is_refused_at_startup_naming_it(tmp_path: Path, redis_url: str) -> None:
    app = tmp_path / "live_env.py"
    app.write_text(
        textwrap.dedent(
            """
            from ngym import BaseResourcesServerConfig, BaseVerifyResponse, Domain, SimpleResourcesServer

            class LiveProcessServer(SimpleResourcesServer):
                config: BaseResourcesServerConfig
                domain = Domain.OTHER
                session_affinity_required = True

                async def verify(self, body):
                    return BaseVerifyResponse(**body.model_dump(), reward=1.0)
            """
        )
    )
    config = tmp_path / "live_env.yaml"
    config.write_text("live_env:\n  resources_servers:\n    live_env:\n      entrypoint: live_env.py\n")
    done = _run_refused([str(config)], {"NGYM_SESSION_STORE": redis_url})
    assert done.returncode == 2
    assert "live_env: LiveProcessServer keeps live per-session state" in done.stderr + done.stdout
    assert "session affinity is required" in done.stderr + done.stdout
    # the way out it names is the one that works: --workers N on the memory store (behind HAProxy)
    assert "unset NGYM_SESSION_STORE" in done.stderr and "--workers N" in done.stderr, done.stderr


def test_memory_store_with_workers_needs_haproxy_not_redis(tmp_path: Path) -> None:
    """The memory store with --workers 2 is served by session-affine workers behind HAProxy (tested in
    tests/integration/test_affine_workers.py); without HAProxy, the one line names it and Redis as the two ways."""
    env = {"NGYM_SESSION_STORE": "memory", "NGYM_HAPROXY": str(tmp_path / "none")}
    done = _run_refused([COUNTER, "--workers", "2"], env)
    assert done.returncode == 2 and "HAProxy, which is not installed" in done.stderr + done.stdout
    assert "NGYM_SESSION_STORE=redis://" in done.stderr + done.stdout
