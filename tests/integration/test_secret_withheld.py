"""What an environment runs never inherits the session secret: ``ngym run`` (one process, and ``--workers 2``
behind HAProxy) given ``NGYM_SESSION_SECRET`` and ``NGYM_SESSION_SECRET_FILE``, an environment whose tool starts a
subprocess with the server's environment (as NeMo Gym's scicode runs model code): the child sees neither
variable, while the server still signs its cookies with the given secret."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from ngym.child_server import free_port, wait_healthy
from ngym.server.sessions.cookies import CookieSigner
from tests.integration.conftest import VENV_BIN

APP = Path(__file__).resolve().parents[1] / "fixtures" / "child_env_probe"
SECRET = "planted-session-secret-4c1d9e"


@pytest.mark.parametrize("workers", [1, 2])
def test_an_environments_subprocess_never_sees_the_session_secret(workers: int, tmp_path: Path) -> None:
    if workers > 1 and not any(Path(d, "haproxy").exists() for d in ("/usr/sbin", "/usr/bin")):
        pytest.skip("haproxy is not installed")
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    port = free_port()
    env = {**os.environ, "NGYM_SESSION_SECRET": SECRET, "NGYM_SESSION_SECRET_FILE": str(secret_file)}
    command = [str(VENV_BIN / "ngym"), "run", str(APP), "domain=other", "--port", str(port)]
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(
        [*command, "--workers", str(workers)], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120, path="/")
        with httpx.Client(base_url=url, timeout=60) as http:
            for _ in range(2 * workers):  # each worker answers one at least (HAProxy spreads new rollouts)
                seeded = http.post("/seed_session", json={"responses_create_params": {"input": "x"}})
                assert seeded.status_code == 200, seeded.text
                cookie = seeded.headers["set-cookie"].split(";", 1)[0]
                session_id, _, _ = cookie.split("=", 1)[1].rpartition(".")
                # signed with the given secret
                assert cookie.split("=", 1)[1] == CookieSigner(SECRET, "ngym_session").sign(session_id)
                seen = http.post("/run_child", json={}, headers={"cookie": cookie})
                assert seen.status_code == 200, seen.text
                assert seen.json() == {}, seen.json()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
