"""Changes to ngym's HAProxy configuration that ``bench_haproxy_floor.py --variant NAME`` measures beside it.

Each variant is one change to the text ``haproxy_config(...)`` writes (or to how HAProxy is started), so what it
saves per request is measured against the same configuration without it, in the same rounds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field


def _global(line: str) -> Callable[[str], str]:
    """Add ``line`` to the ``global`` section."""
    return lambda config: re.sub(r"(\n    nbthread \d+\n)", rf"\1    {line}\n", config, count=1)


def _defaults(line: str) -> Callable[[str], str]:
    """Add ``line`` to the ``defaults`` section."""
    return lambda config: config.replace("\ndefaults\n    mode http\n", f"\ndefaults\n    mode http\n    {line}\n", 1)


def _drop(pattern: str) -> Callable[[str], str]:
    """Remove every line matching ``pattern``."""

    def change(config: str) -> str:
        changed = re.sub(rf"(?m)^.*{pattern}.*\n", "", config)
        if changed == config:
            raise ValueError(f"no line matches {pattern!r}")
        return changed

    return change


def _replace(old: str, new: str) -> Callable[[str], str]:
    def change(config: str) -> str:
        if old not in config:
            raise ValueError(f"{old!r} is not in the configuration")
        return config.replace(old, new)

    return change


def _matched(changed: str, config: str) -> str:
    if changed == config:
        raise ValueError("the change matched nothing in the configuration")
    return changed


def _bufsize(config: str, size: int) -> str:
    """``tune.bufsize`` set to ``size`` (replacing the configuration's own, if any)."""
    if re.search(r"\n    tune\.bufsize \d+\n", config):
        return re.sub(r"\n    tune\.bufsize \d+\n", f"\n    tune.bufsize {size}\n", config)
    return _global(f"tune.bufsize {size}")(config)


def _same(config: str) -> str:
    return config


#: the body is read only where a rule reads it: the typed seed/close and OpenEnv's MCP calls
BODY_ON_TYPED = r"\1 if { path_end /seed_session /close_session } || { path /openenv/mcp }\n"


@dataclass(frozen=True)
class Variant:
    what: str
    change: Callable[[str], str] = _same
    #: the backends listen on abstract unix sockets (``abns@``) instead of paths
    abstract: bool = False
    #: a command HAProxy is started under (``chrt``)
    prefix: list[str] = field(default_factory=list)
    #: nice levels below the bench (None: as ``ngym run --workers N`` starts it, ``haproxy_nice()``)
    nice: int | None = None
    #: more arguments on HAProxy's command line (``-dM...``)
    args: list[str] = field(default_factory=list)
    #: in the batch scheduling class (None: as ``ngym run --workers N`` starts it, ``haproxy_batch()``)
    batch: bool | None = None


VARIANTS: dict[str, Variant] = {
    "same": Variant("ngym's configuration again: the spread between two identical setups"),
    "no-log": Variant("no 'log global' in defaults (no per-request log line built)", _drop(r"^    log global$")),
    "frontend-no-log": Variant(
        "'no log' in the frontend (the backend keeps 'log global' for its servers' state changes)",
        _replace("    bind fd@", "    no log\n    bind fd@"),
    ),
    "dontlog-normal": Variant("option dontlog-normal in defaults", _defaults("option dontlog-normal")),
    "no-worker-header": Variant("no X-Ngym-Worker response header", _drop("X-Ngym-Worker|which worker answered")),
    "body-on-typed": Variant(
        "the body waited for only on the typed paths instead of every request's",
        lambda c: _matched(re.sub(r"(?m)^(    http-request wait-for-body time \S+)\n", BODY_ON_TYPED, c), c),
    ),
    "no-buffer": Variant("no body read before routing at all", _drop("http-request wait-for-body")),
    "no-checks": Variant("no health checks", lambda c: re.sub(r" check inter 1s.*", "", c)),
    "abns": Variant("backends on abstract unix sockets (abns@)", abstract=True),
    "low-latency": Variant("tune.sched.low-latency on", _global("tune.sched.low-latency on")),
    "maxpollevents": Variant("tune.maxpollevents 16", _global("tune.maxpollevents 16")),
    "recv-enough": Variant("tune.recv_enough 65536", _global("tune.recv_enough 65536")),
    "edge-triggered": Variant(
        "tune.fd.edge-triggered on (experimental in HAProxy 2.6)",
        _global("expose-experimental-directives\n    tune.fd.edge-triggered on"),
    ),
    "bufsize16k": Variant("tune.bufsize 16384 (HAProxy's default)", lambda c: _bufsize(c, 16384)),
    "bufsize8k": Variant("tune.bufsize 8192", lambda c: _bufsize(c, 8192)),
    "profiling-off": Variant("profiling.tasks off", _global("profiling.tasks off")),
    "cpu-map": Variant("its thread pinned to CPU 0 (cpu-map 1/1 0)", _global("cpu-map 1/1 0")),
    "reuse-always": Variant("http-reuse always", _defaults("http-reuse always")),
    "nice0": Variant("HAProxy at the backends' priority (NGYM_HAPROXY_NICE=0)", nice=0),
    "nice5": Variant("HAProxy 5 nice levels below the backends", nice=5),
    "nice10": Variant("HAProxy 10 nice levels below the backends", nice=10),
    "nice19": Variant("HAProxy 19 nice levels below the backends", nice=19),
    "batch": Variant("HAProxy in SCHED_BATCH", prefix=["chrt", "-b", "0"]),
    "idle": Variant("HAProxy in SCHED_IDLE", prefix=["chrt", "-i", "0"]),
    "normal-class": Variant("HAProxy in the normal scheduling class (NGYM_HAPROXY_BATCH=0)", batch=False),
    "dm-no-global": Variant("HAProxy's process-wide pool cache off (-dMno-global)", args=["-dMno-global"]),
    "malloc-keep": Variant(
        "glibc keeps freed heap memory (GLIBC_TUNABLES trim_threshold 64 MiB)",
        prefix=["env", "GLIBC_TUNABLES=glibc.malloc.trim_threshold=67108864"],
    ),
}


def variant(names: str) -> Variant:
    """The variant ``names`` names: one of ``VARIANTS``, or several joined by ``+`` (applied in order)."""
    parts = [VARIANTS[name] for name in names.split("+")]
    if len(parts) == 1:
        return parts[0]

    def change(config: str) -> str:
        for part in parts:
            config = part.change(config)
        return config

    return Variant(
        " + ".join(p.what for p in parts),
        change,
        abstract=any(p.abstract for p in parts),
        prefix=[word for p in parts for word in p.prefix],
        nice=next((p.nice for p in reversed(parts) if p.nice is not None), None),
        args=[word for p in parts for word in p.args],
        batch=next((p.batch for p in reversed(parts) if p.batch is not None), None),
    )
