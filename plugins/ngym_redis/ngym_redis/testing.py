"""A throwaway ``redis-server`` for tests and benchmarks: its own port, its own folder, no persistence.

    with RedisServer.start(tmp_path) as server:
        url = server.url          # redis://127.0.0.1:PORT/0
        server.stop(); server.restart()   # same port, empty data

Needs the ``redis-server`` binary (Debian: ``apt-get install redis-server``; plugins/ci-setup-redis.sh).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType

from redis import Redis

from ngym.plugin_api import free_port


def redis_server_binary() -> str | None:
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None
    )


class RedisServer:
    """One ``redis-server`` child process on 127.0.0.1."""

    def __init__(self, folder: Path, port: int, binary: str) -> None:
        self.folder = folder
        self.port = port
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, folder: Path, port: int | None = None) -> RedisServer:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server not found (apt-get install redis-server, or plugins/ci-setup-redis.sh)")
        folder.mkdir(parents=True, exist_ok=True)
        server = cls(folder, port or free_port(), binary)
        server.restart()
        return server

    def restart(self) -> None:
        """Start (again, on the same port) and wait until it answers PING."""
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(self.folder / "redis.log")]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with Redis(port=self.port, socket_connect_timeout=0.5) as client:
                    client.ping()
                return
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server did not start on port {self.port}: {log}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def client(self) -> Redis:
        return Redis(port=self.port)

    def commandstats(self) -> dict[str, int]:
        """Calls per command since start or the last ``CONFIG RESETSTAT`` (``INFO commandstats``)."""
        with self.client() as client:
            stats = client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
