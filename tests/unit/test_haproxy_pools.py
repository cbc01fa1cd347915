"""HAProxy is started with its process-wide pool cache (``-dMglobal``) where it has one (2.6 and later): its
buffers, sized from the workers' header limit, were freed to the C library and allocated again per request."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from ngym.server.hosting.haproxy import Backend, haproxy_command, haproxy_config, haproxy_version


def _fake_haproxy(folder: Path, version_line: str) -> str:
    path = folder / "haproxy"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("line", "version", "pools"),
    [
        ("HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/", (2, 6), True),
        ("HAProxy version 3.0.5 2024/09/19 - https://haproxy.org/", (3, 0), True),
        ("HA-Proxy version 2.4.22-0ubuntu0.22.04.3 2023/08/10 - https://haproxy.org/", (2, 4), False),
        ("something else", (0, 0), False),
    ],
)
def test_the_pool_cache_is_asked_for_where_haproxy_has_it(
    tmp_path: Path, line: str, version: tuple, pools: bool
) -> None:
    binary = _fake_haproxy(tmp_path, line)
    assert haproxy_version(binary) == version
    command = haproxy_command(binary, "/x/haproxy.cfg")
    assert command == [binary, "-db", *(["-dMglobal"] if pools else []), "-f", "/x/haproxy.cfg"]


def test_an_unreadable_binary_gets_the_plain_command(tmp_path: Path) -> None:
    missing = str(tmp_path / "none")
    assert haproxy_version(missing) == (0, 0)
    assert haproxy_command(missing, "c") == [missing, "-db", "-f", "c"]


@pytest.mark.skipif(shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists(), reason="no HAProxy")
def test_the_installed_haproxy_takes_the_command_and_the_configuration(tmp_path: Path) -> None:
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    config = tmp_path / "haproxy.cfg"
    backends = [Backend(f"w{i}", unix_socket=str(tmp_path / f"w{i}.sock")) for i in range(2)]
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        listening.set_inheritable(True)
        fd = listening.fileno()
        config.write_text(haproxy_config(listen_fd=fd, backends=backends, cookie_name="ngym_session"))
        command = haproxy_command(binary, str(config))
        check = subprocess.run(
            [command[0], "-c", *command[2:]], capture_output=True, text=True, timeout=30, pass_fds=(fd,)
        )
    assert check.returncode == 0, check.stderr + check.stdout
