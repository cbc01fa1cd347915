"""``ngym run NAME --workers N``'s workers listen on unix sockets in the supervisor's own folder, and HAProxy's
configuration names them there; a path HAProxy cannot take (too long for ``sun_path``, or holding a quote) falls
back to a loopback TCP port. ``ngym.processes.probe`` reaches a server through a unix socket (the supervisor
waits on each worker's ``/livez`` so)."""

from __future__ import annotations

import http.server
import socket
import socketserver
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ngym import processes
from ngym.server.hosting.affinity import _Worker
from ngym.server.hosting.haproxy import Backend, haproxy_config
from ngym.server.hosting.host import reached_only_through_proxy


def server_lines(backends: list[Backend]) -> list[str]:
    text = haproxy_config(listen_fd=3, backends=backends, cookie_name="ngym_session")
    return [line.strip() for line in text.splitlines() if line.strip().startswith("server ")]


def test_a_unix_backend_is_named_in_single_quotes_which_haproxy_reads_literally() -> None:
    lines = server_lines([Backend("w0", unix_socket="/tmp/a b#$c/w0.sock"), Backend("w1", "10.0.0.2", 8001)])
    assert lines[0].startswith("server w0 'unix@/tmp/a b#$c/w0.sock' check ")
    assert lines[1].startswith("server w1 10.0.0.2:8001 check ")
    with pytest.raises(ValueError, match="cannot quote"):
        server_lines([Backend("w0", unix_socket="/tmp/it's/w0.sock"), Backend("w1", unix_socket="/tmp/w1.sock")])


def test_workers_listen_on_unix_sockets_in_the_folder_given(tmp_path: Path) -> None:
    worker = _Worker.listening(tmp_path, 1)
    try:
        assert worker.unix_socket == str(tmp_path / "w1.sock") and worker.port == 0
        assert worker.sock.family == socket.AF_UNIX and worker.sock.get_inheritable()
        assert worker.backend() == Backend("w1", unix_socket=str(tmp_path / "w1.sock"))
        assert worker.livez() == ("http://localhost/livez", str(tmp_path / "w1.sock"))
        # only this user, by its path (the folder is the supervisor's own, 0700): the worker serves as proxied
        assert stat.S_IMODE((tmp_path / "w1.sock").stat().st_mode) == 0o600
        assert reached_only_through_proxy(worker.sock)
    finally:
        worker.sock.close()


@pytest.mark.parametrize("name", ["x" * 120, "it's"])
def test_a_folder_haproxy_cannot_name_falls_back_to_a_loopback_port(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    worker = _Worker.listening(folder, 0)
    try:
        assert worker.unix_socket is None and worker.sock.family == socket.AF_INET and worker.port > 0
        assert worker.backend() == Backend("w0", "127.0.0.1", worker.port)
        assert worker.livez() == (f"http://127.0.0.1:{worker.port}/livez", None)
        assert not list(folder.iterdir())
        assert not reached_only_through_proxy(worker.sock)  # anyone on the machine reaches a loopback port
    finally:
        worker.sock.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status = 200 if self.path.startswith("/livez") else 404
        body = f'{{"path": "{self.path}", "slot": "{self.headers.get("x-slot", "")}"}}'.encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = self.socket.accept()
        return conn, ("local", 0)  # http.server logs the client address as a pair


@contextmanager
def unix_server(path: Path) -> Iterator[None]:
    server = _UnixServer(str(path), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_probe_reaches_a_server_through_its_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    assert processes.probe("http://localhost/livez", unix_socket=str(path)) == (None, None)  # nothing there yet
    with unix_server(path):
        status, body = processes.probe("http://localhost/livez?x=1", headers={"x-slot": "3"}, unix_socket=str(path))
        assert status == 200 and body == {"path": "/livez?x=1", "slot": "3"}
        assert processes.probe("http://localhost/other", unix_socket=str(path)) == (404, None)
        assert processes.wait_healthy("http://localhost/livez", None, 5, unix_socket=str(path))
