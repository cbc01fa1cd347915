"""``ngym install openenv:<URL>`` → ``ngym list`` → ``ngym run`` → ``ngym uninstall``, as a user types them, in a
throwaway virtualenv (tests.integration.conftest.child_venv) so nothing lands in the shared .venv. The source is
an OpenEnv server already running (the cheapest source: no virtualenv to make); folders and distributions share
everything after the probe, which test_sessions and test_fidelity drive.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
from ngym_openenv import launch

from tests.integration.conftest import child_venv

TALLY = Path(__file__).with_name("envs") / "tally_env"


def test_install_list_run_uninstall_by_url(openenv_python: str, tmp_path: Path) -> None:
    python, env = child_venv(tmp_path)
    running = launch.start(openenv_python, "server.app:app", app_dir=str(TALLY))
    try:

        def ngym(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(python), "-m", "ngym.cli", *args], env=env, capture_output=True, text=True, timeout=300
            )

        missing_domain = ngym("install", f"openenv:{running.url}", "--as", "tally_url")
        assert missing_domain.returncode == 2 and "give --domain" in missing_domain.stderr
        assert "Traceback" not in missing_domain.stderr

        installed = ngym("install", f"openenv:{running.url}", "--as", "tally_url", "--domain", "games")
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert "installed tally_url (games" in installed.stdout and "tools: add" in installed.stdout
        # the example recorded against the remote server: add(n=0) scores tally/10 = 0, repeated by a 2nd episode
        assert 'example rollout recorded: add({"n": 0}); reward 0 under rule' in installed.stdout

        validated = ngym("validate", "tally_url", "--json")
        checks = {c["name"]: c for c in json.loads(validated.stdout)["checks"]}
        assert validated.returncode == 0 and all(c["ok"] for c in checks.values()), checks
        assert "1 rollouts replayed, rewards [0.0]" in checks["examples"]["detail"]

        listed = ngym("list", "--json")
        rows = {row["name"]: row for row in json.loads(listed.stdout)}
        assert rows["tally_url"]["domain"] == "games" and rows["tally_url"]["status"] == "ok"
        assert rows["tally_url"]["distribution"] == "ngym-openenv-tally-url"

        served = subprocess.Popen(
            [str(python), "-m", "ngym.cli", "run", "tally_url", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert served.stdout is not None
            url = ""
            deadline = time.monotonic() + 120
            while not url and time.monotonic() < deadline:
                line = served.stdout.readline()
                if "serving tally_url" in line:
                    url = line.split(" at ")[1].split()[0]
            assert url, "ngym run did not say where it serves"
            with httpx.Client(base_url=url, timeout=60) as http:
                seed = http.post("/seed_session", json={"episode_id": "cli"})
                cookie = {"cookie": seed.headers["set-cookie"].split(";")[0]}
                assert seed.json()["episode_id"] == "cli"
                step = http.post("/add", json={"n": 5}, headers=cookie).json()
                assert step["reward"] == 0.5 and step["observation"]["tool_name"] == "add"
        finally:
            served.terminate()
            served.wait(30)

        removed = ngym("uninstall", "tally_url", "-y")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert "tally_url" not in {row["name"] for row in json.loads(ngym("list", "--json").stdout)}
    finally:
        running.stop()
