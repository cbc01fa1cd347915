"""HAProxy's threads in front of ``--workers N``: one per four workers, at most one per CPU (HAProxy's default, a
thread per CPU, costs more HAProxy CPU per rollout when the workers want those CPUs; ``bench/bench_workers.py``)."""

from __future__ import annotations

import os

from ngym.server.hosting.haproxy import Backend, haproxy_config, proxy_threads


def test_two_workers_get_one_proxy_thread() -> None:
    backends = [Backend(f"w{i}", "127.0.0.1", 1000 + i) for i in range(2)]
    config = haproxy_config(listen_fd=3, backends=backends, cookie_name="ngym_session")
    assert "\n    nbthread 1\n" in config


def test_threads_grow_with_workers_up_to_the_cpus() -> None:
    assert [proxy_threads(n, cpus=16) for n in (1, 4, 5, 8, 16, 64, 256)] == [1, 1, 2, 2, 4, 16, 16]
    assert proxy_threads(64, cpus=2) == 2 and proxy_threads(3, cpus=None) <= (os.cpu_count() or 1)
