"""What HAProxy itself costs per request on this machine, side by side in one run: the floor under
``ngym run --workers N``'s routing layer.

Each mode is its own set of processes, all started once and driven in alternating rounds by wrk (pinned to
CPU 1, bench/rollout.lua: the counter's rollouts as ``bench_workers.py`` sends them, the cookie copied by hand):

* **direct**: wrk straight to one backend over TCP (no proxy): what the backend costs on its own;
* **self**: HAProxy answering every request itself (``http-request return``): a proxy's client side alone;
* **relay**: HAProxy relaying to two backends on unix sockets with no rule at all (``balance leastconn``);
* **ngym**: the same two backends behind ngym's own configuration (``haproxy_config(...)``, every rule);
* any ``--variant`` (``bench/haproxy_variants.py``; by default ``nice0`` and ``relay:nice0``, HAProxy at the
  backends' priority): ngym's configuration (or with ``relay:``, the bare relay's) or HAProxy's start changed in
  one way, in front of two backends of its own.

Every HAProxy runs ``NGYM_HAPROXY_NICE`` (default 0) nice levels below the backends in the batch scheduling class
(``NGYM_HAPROXY_BATCH``), with its pool cache, as ``ngym run --workers N`` starts it, unless its variant says
otherwise (``normal-class``, ``dm-no-global``, ``nice10``, ...).

The backends (``bench/ready_backend.py``) answer every request with the same ready-made bytes (a 200 carrying a
session cookie that routes back to them), after spending ``--burn-us`` of CPU, so HAProxy sees the pace of a
worker (the counter's takes about 110 us per request; ``--burn-us 0`` drives HAProxy as fast as it goes).
HAProxy's and the backends' CPU time come from ``/proc``; printed per request and per rollout. The last line
sets them against what 1.7x at ``--workers 2`` leaves HAProxy (``--one-worker-us``: what a counter rollout costs
one worker, ``bench_workers.py``; 1.7x needs the two workers' rollout at most 2/1.7 of it).

    .venv/bin/python bench/bench_haproxy_floor.py [--rounds 5] [--seconds 4] [--burn-us 100] [--variant NAME ...]
        [--modes direct,self,relay,ngym] [--one-worker-us 455]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_core import cpu_seconds, pinned, write_plan  # noqa: E402
from bench.bench_workers import ROLLOUTS  # noqa: E402
from bench.haproxy_variants import VARIANTS, Variant, variant  # noqa: E402
from bench.ready_backend import answer  # noqa: E402
from ngym.child_server import free_port, stop_process  # noqa: E402
from ngym.server.hosting.haproxy import (  # noqa: E402
    Backend,
    batch_scheduling,
    haproxy_batch,
    haproxy_binary,
    haproxy_command,
    haproxy_config,
    haproxy_nice,
    lower_priority,
)

COOKIE = "ngym_session"
TIMEOUTS = """defaults
    mode http
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout http-request 60s
    timeout http-keep-alive 5s
"""


def self_config(fd: int) -> str:
    """HAProxy answering every request itself, with the backends' answer (its cookie included)."""
    cookie = answer(0, 1).split(b"set-cookie: ", 1)[1].split(b"\r\n", 1)[0].decode()
    return (
        f"global\n    nbthread 1\n\n{TIMEOUTS}\nfrontend floor\n    bind fd@{fd}\n"
        f'    http-request return status 200 content-type application/json string \'{{"status":"ok"}}\' '
        f'hdr set-cookie "{cookie}"\n'
    )


def relay_config(fd: int, backends: list[Backend]) -> str:
    """HAProxy relaying to ``backends`` with no rule: the least a relay does."""
    servers = "\n".join(f"    server {b.name} {b.address}" for b in backends)
    return (
        f"global\n    nbthread 1\n\n{TIMEOUTS}\nfrontend floor\n    bind fd@{fd}\n    default_backend workers\n\n"
        f"backend workers\n    balance leastconn\n{servers}\n"
    )


def ngym_config(fd: int, backends: list[Backend]) -> str:
    """ngym's own configuration for ``ngym run --workers 2``, as the supervisor writes it."""
    return haproxy_config(listen_fd=fd, backends=backends, cookie_name=COOKIE)


@dataclass
class Mode:
    """One set of processes wrk drives: an optional HAProxy in front of its backends."""

    name: str
    url: str
    haproxy: subprocess.Popen[bytes] | None = None
    backends: list[subprocess.Popen[bytes]] = field(default_factory=list)
    rounds: list[dict[str, float]] = field(default_factory=list)

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in (self.haproxy, *self.backends) if p is not None]


def start_backend(where: list[str], slot: str, burn_us: float) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench/ready_backend.py"), *where, "--slot", slot, "--burn-us", str(burn_us)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        stop_process(proc)
        raise RuntimeError(f"the backend {where} did not start")
    return proc


def start_haproxy(
    config: str, sock: socket.socket, scratch: Path, name: str, variant: Variant | None = None
) -> subprocess.Popen[bytes]:
    """HAProxy with ``config``, listening on the inherited ``sock``, at the priority ``ngym run --workers N`` gives
    it (``haproxy_nice()`` levels below this process, in the batch scheduling class) unless ``variant`` says
    otherwise."""
    path = scratch / f"{name}.cfg"
    path.write_text(config)
    cmd = haproxy_command(haproxy_binary(), str(path))
    check = subprocess.run([*cmd[:1], "-c", "-f", str(path)], pass_fds=(sock.fileno(),), capture_output=True)
    if check.returncode != 0:
        alerts = [line for line in (check.stderr + check.stdout).decode().splitlines() if "ALERT" in line]
        raise RuntimeError(f"HAProxy refused {path}: {' '.join(alerts) or check.returncode}")
    log = (scratch / f"{name}.log").open("wb")
    levels = variant.nice if variant is not None and variant.nice is not None else haproxy_nice()
    prefix = variant.prefix if variant is not None else []
    args = variant.args if variant is not None else []
    batch = variant.batch if variant is not None and variant.batch is not None else haproxy_batch()

    def scheduling() -> None:  # as ngym run --workers N starts it: its nice level, the batch class
        lower_priority(levels)
        if batch:
            batch_scheduling()

    return subprocess.Popen(
        [*prefix, *cmd, *args], pass_fds=(sock.fileno(),), stdout=log, stderr=log, preexec_fn=scheduling
    )


def listening_socket() -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def proxied(
    modes: list[Mode],
    name: str,
    scratch: Path,
    burn_us: float,
    write: Callable[[int, list[Backend]], str],
    variant: Variant | None,
) -> None:
    """HAProxy (configured by ``write``, changed by ``variant``) in front of two backends of its own, added to
    ``modes`` before anything starts (so the caller stops whatever did start if a later step fails)."""
    mode = Mode(name, "")
    modes.append(mode)
    backends = []
    for i in range(2):
        if variant is not None and variant.abstract:
            label = f"ngym-floor-{os.getpid()}-{name}-{i}"
            mode.backends.append(start_backend(["--abns", label], f"{i}/2", burn_us))
            backends.append(Backend(f"w{i}", host=f"abns@{label}", port=0))  # its ":0" dropped below
        else:
            path = str(scratch / f"{name}-{i}.sock")
            mode.backends.append(start_backend(["--unix", path], f"{i}/2", burn_us))
            backends.append(Backend(f"w{i}", unix_socket=path))
    sock, mode.url = listening_socket()
    try:
        config = write(sock.fileno(), backends)
        if variant is not None and variant.abstract:
            config = config.replace(":0 check", " check").replace(":0\n", "\n")
        if variant is not None:
            config = variant.change(config)
        mode.haproxy = start_haproxy(config, sock, scratch, name, variant)
    finally:
        sock.close()


def latency_ms(out: str, percentile: str) -> float:
    """A percentile of wrk's latency distribution (``--latency``), in milliseconds."""
    match = re.search(rf"^\s+{percentile}\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
    if match is None:
        return float("nan")
    return float(match.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[match.group(2)]


def drive(mode: Mode, plan: Path, steps: int, seconds: float, connections: int) -> dict[str, float]:
    """One round of wrk against ``mode``: requests/s and every side's CPU per request."""
    cmd = pinned(1, ["wrk", "--latency", f"-t{connections}", f"-c{connections}", f"-d{seconds:.0f}s", "-s",
                     str(ROOT / "bench/rollout.lua"), mode.url, "--", str(plan)])  # fmt: skip

    def cpu(procs: list[subprocess.Popen[bytes]]) -> float:
        total = 0.0
        for proc in procs:
            with contextlib.suppress(OSError):
                total += cpu_seconds(proc.pid)
        return total

    proxy = [mode.haproxy] if mode.haproxy else []
    proxy_before, backend_before, usage_before = cpu(proxy), cpu(mode.backends), os.times()
    began = time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    elapsed, usage = time.monotonic() - began, os.times()
    requests = int(out.split(" requests in", 1)[0].rsplit(None, 1)[-1])
    bad = "Non-2xx" in out
    wrk_cpu = usage.children_user + usage.children_system - usage_before.children_user - usage_before.children_system
    return {
        "requests_per_s": requests / elapsed,
        "proxy_us": (cpu(proxy) - proxy_before) / requests * 1e6,
        "backend_us": (cpu(mode.backends) - backend_before) / requests * 1e6,
        "wrk_cores": wrk_cpu / elapsed,
        "errors": float(bad),
        "p50_ms": latency_ms(out, "50%"),
        "p99_ms": latency_ms(out, "99%"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--burn-us", type=float, default=100.0, help="backend CPU per request before answering")
    parser.add_argument(
        "--variant", action="append", help=f"one of {sorted(VARIANTS)}, or several joined by + (default: nice0)"
    )
    parser.add_argument("--one-worker-us", type=float, default=455.0, help="a counter rollout's cost at 1 worker")
    parser.add_argument("--modes", default="direct,self,relay,ngym")
    args = parser.parse_args()
    wanted = [m for m in args.modes.split(",") if m]
    if not set(wanted) <= {"direct", "self", "relay", "ngym"}:
        sys.exit("bench_haproxy_floor: --modes takes direct, self, relay, ngym")
    for name in args.variant or []:
        unknown = [part for part in name.removeprefix("relay:").split("+") if part not in VARIANTS]
        if unknown:
            sys.exit(f"bench_haproxy_floor: no variant {unknown[0]!r}; the variants: {', '.join(VARIANTS)}")
    modes: list[Mode] = []
    with tempfile.TemporaryDirectory(prefix="ngym-floor-") as folder:
        scratch = Path(folder)
        try:
            if "direct" in wanted:
                port = free_port()
                direct = start_backend(["--port", str(port)], "0/1", args.burn_us)
                modes.append(Mode("direct", f"http://127.0.0.1:{port}", backends=[direct]))
            if "self" in wanted:
                sock, url = listening_socket()
                modes.append(
                    Mode("self", url, haproxy=start_haproxy(self_config(sock.fileno()), sock, scratch, "self"))
                )
                sock.close()
            if "relay" in wanted:
                proxied(modes, "relay", scratch, args.burn_us, relay_config, None)
            if "ngym" in wanted:
                proxied(modes, "ngym", scratch, args.burn_us, ngym_config, None)
            for name in args.variant or ["nice0", "relay:nice0"]:
                base, _, changes = name.rpartition(":")  # "relay:NAME": the bare relay changed so
                write = relay_config if base == "relay" else ngym_config
                proxied(modes, name.replace(":", "-"), scratch, args.burn_us, write, variant(changes))
            time.sleep(1.5)  # HAProxy's first health checks
            plan = scratch / "plan.tsv"
            steps = write_plan(plan, ROLLOUTS)
            for mode in modes:
                drive(mode, plan, steps, 2, args.connections)  # warm-up
            for _ in range(args.rounds):
                for mode in modes:
                    mode.rounds.append(drive(mode, plan, steps, args.seconds, args.connections))
        except RuntimeError as error:  # HAProxy refused a configuration, a backend did not start
            sys.exit(f"bench_haproxy_floor: {error}")
        finally:
            for mode in modes:
                for proc in mode.processes():
                    stop_process(proc)
    print(report(modes, steps, args))


def report(modes: list[Mode], steps: int, args: argparse.Namespace) -> str:
    """The table (medians of the rounds) and the line that matters."""
    lines = [
        f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}); wrk pinned to CPU 1, {args.connections} "
        f"connections; {args.rounds} alternating rounds of {args.seconds:.0f}s; backends burn {args.burn_us:.0f} us "
        f"per request; a rollout is {steps} requests",
        "| mode | requests/s | p50 / p99 ms | HAProxy us/request | HAProxy us/rollout | backend us/request | "
        "wrk cores | rounds with non-2xx |",
        "|---|---|---|---|---|---|---|---|",
    ]
    med: dict[str, dict[str, float]] = {}
    for mode in modes:
        m = med[mode.name] = {k: statistics.median(r[k] for r in mode.rounds) for k in mode.rounds[0]}
        proxy = f"{m['proxy_us']:.1f} | {m['proxy_us'] * steps:.0f}" if mode.haproxy else "- | -"
        lines.append(
            f"| {mode.name} | {m['requests_per_s']:.0f} | {m['p50_ms']:.2f} / {m['p99_ms']:.1f} | {proxy} | "
            f"{m['backend_us']:.1f} | {m['wrk_cores']:.2f} | "
            f"{sum(int(r['errors']) for r in mode.rounds)} |"
        )
    by_name = {m.name: m for m in modes}
    base = by_name.get("ngym")
    for mode in modes:
        if mode.name in ("direct", "self", "relay", "ngym") or base is None:
            continue
        against = by_name["relay"] if mode.name.startswith("relay-") and "relay" in by_name else base
        pairs = sorted(v["proxy_us"] / n["proxy_us"] for v, n in zip(mode.rounds, against.rounds, strict=True))
        lines.append(
            f"{mode.name} ({variant(mode.name.removeprefix('relay-')).what}): HAProxy per request "
            f"{med[mode.name]['proxy_us']:.1f} us vs {against.name}'s {med[against.name]['proxy_us']:.1f}: "
            f"{statistics.median(pairs):.2f}x (pairs {pairs[0]:.2f}-{pairs[-1]:.2f})"
        )
    parts = [f"{name} {med[name]['proxy_us']:.1f}" for name in ("self", "relay", "ngym") if name in med]
    if parts:
        allowed = 2 * args.one_worker_us / 1.7 - args.one_worker_us  # HAProxy's room when workers cost what one does
        line = f"floor: HAProxy (at nice +{haproxy_nice()}) us per request: " + ", ".join(parts)
        pairs_at_workers = (("relay", "relay-nice0"), ("ngym", "nice0"))
        at_workers = [f"{name} {med[key]['proxy_us']:.1f}" for name, key in pairs_at_workers if key in med]
        if at_workers:
            line += " (at the backends' priority: " + ", ".join(at_workers) + ")"
        if "relay" in med and "ngym" in med:
            added = med["ngym"]["proxy_us"] - med["relay"]["proxy_us"]
            line += f"; ngym's rules add {added:.1f}"
        line += (
            f"; 1.7x at --workers 2 leaves HAProxy {allowed / steps:.0f} us per request ({allowed:.0f} per rollout of "
            f"{steps}) when a rollout costs a worker {args.one_worker_us:.0f} us"
        )
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
