"""The HTTP floor of a server written in C, for bench_fronts.py: HAProxy (one thread) answering every request with
the same ready-made bytes as ``bench/bare_http.py`` (``http-request return``, the whole request read first so
the connection stays open), driven exactly like the bare uvicorn app.

    with haproxy_bare(log_path) as (url, pid):  # url: http://127.0.0.1:PORT, pid: HAProxy's
        ...
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.haproxy_judge import run_haproxy
from ngym.child_server import free_port

CONFIG = """\
global
    nbthread 1
defaults
    mode http
    timeout client 120s
    timeout connect 5s
    timeout server 120s
    timeout http-keep-alive 120s
    option http-buffer-request
frontend bare
    bind 127.0.0.1:{port}
    http-request return status 200 content-type application/json string '{{"status":"ok"}}'
"""


@contextlib.contextmanager
def haproxy_bare(log: Path) -> Iterator[tuple[str, int]]:
    """HAProxy answering every request with ``{"status":"ok"}`` on a free port: ``(base URL, pid)``."""
    with tempfile.TemporaryDirectory(prefix="ngym-haproxy-bare-") as scratch:
        port = free_port()
        config = Path(scratch) / "haproxy.cfg"
        config.write_text(CONFIG.format(port=port))
        url = f"http://127.0.0.1:{port}"
        with run_haproxy(config, url, "/", log) as pid:
            yield url, pid
