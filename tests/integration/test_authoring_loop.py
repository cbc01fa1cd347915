"""The authoring loop end to end, as a plugin author runs it, in a throwaway virtualenv:

``ngym init my_tool --domain agent`` → ``pip install -e ./my_tool`` → its own ``pytest`` → ``ngym validate
my_tool`` → ``ngym list --json`` shows it (domain agent) → ``ngym run my_tool`` serves its tool and /verify;
then ``/health`` of a built-in names its plugin and version. The venv sees .venv's packages (ngym, pytest)
through a ``.pth`` file, so nothing is installed into (or left in) the shared .venv.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from ngym.child_server import free_port, stop_process, wait_healthy
from tests.integration.conftest import child_venv


@pytest.fixture(scope="module")
def author(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(work dir holding my_tool/, the venv's python, env) after init + pip install -e."""
    work = tmp_path_factory.mktemp("authoring")
    python, env = child_venv(work)

    init = subprocess.run(
        [str(python), "-m", "ngym.cli", "init", "my_tool", "--domain", "agent"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert init.returncode == 0, init.stderr
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-e", "./my_tool"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return work, python, env


def ngym(author: tuple[Path, Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    work, python, env = author
    return subprocess.run([str(python), "-m", "ngym.cli", *args], cwd=work, env=env, capture_output=True, text=True)


def _run(author: tuple[Path, Path, dict[str, str]], name: str, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """``ngym run NAME`` with the venv's python in the work dir; (process, its log file)."""
    work, python, env = author
    log = work / f"run-{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(python), "-m", "ngym.cli", "run", name, "--port", str(port)],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, log


def test_generated_tests_pass(author: tuple[Path, Path, dict[str, str]]) -> None:
    work, python, env = author
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "my_tool"], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_validate_list_and_strict_list(author: tuple[Path, Path, dict[str, str]]) -> None:
    validated = ngym(author, "validate", "my_tool")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert validated.stdout.rstrip().endswith("valid")
    rows = {r["name"]: r for r in json.loads(ngym(author, "list", "--json").stdout)}
    assert rows["my_tool"]["domain"] == "agent" and rows["my_tool"]["status"] == "ok"
    assert rows["my_tool"]["distribution"] == "my-tool"


def test_run_serves_the_tool_and_verify(author: tuple[Path, Path, dict[str, str]]) -> None:
    work = author[0]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, log = _run(author, "my_tool", port)
    try:
        wait_healthy(url, proc, 30, log, path="/")
        rollout = json.loads((work / "my_tool" / "data" / "example_rollouts.jsonl").read_text().splitlines()[0])
        row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
        seeded = httpx.post(f"{url}/seed_session", json=row)
        cookie = {"cookie": seeded.headers["set-cookie"].split(";", 1)[0]}
        tool = httpx.post(f"{url}/get_capital", json={"country": "France"}, headers=cookie)
        assert tool.json() == {"country": "France", "capital": "Paris"}
        verified = httpx.post(f"{url}/verify", json={**row, "response": rollout["response"]}, headers=cookie)
        assert verified.status_code == 200 and verified.json()["reward"] == 1.0
        assert verified.json()["lookups"] == 1
        health = httpx.get(f"{url}/health").json()
        assert (health["plugin"], health["version"], health["domain"]) == ("my-tool", "0.1.0", "agent")
    finally:
        stop_process(proc, grace=20)


def test_health_of_a_builtin_names_its_plugin(author: tuple[Path, Path, dict[str, str]]) -> None:
    """Editable flat-layout installs: the plugin name comes from entry-point metadata."""
    port = free_port()
    proc, log = _run(author, "example_single_tool_call", port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, 30, log, path="/")
        health = httpx.get(f"http://127.0.0.1:{port}/health").json()
        assert health["plugin"] == "ngym-example-single-tool-call" and health["version"]
    finally:
        stop_process(proc, grace=20)
