"""A fleet's lifecycle is owned once, and its secrets stay with their owner (real ``ngym up`` processes).

- secrets planted in the fleet file and in the environment appear in no command line (``ps``), not in what the
  head server serves, not in any log; the files that hold them are 0600;
- one ``ngym up`` per fleet at a time; Ctrl-C or SIGTERM during ``up`` stops everything it started; after a
  ``kill -9`` of ``up``, ``ngym down`` stops everything it had started; ``ngym down`` with nothing up is a no-op;
- a fleet file with a misspelled environment or key fails in one line and leaves nothing running.

An ``up`` is held "in progress" by a server entry that never answers (a ``sleep``): the tests wait on the
condition they need (the state naming that process), never on a time.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ngym.fleet.state import FleetState, ProcessRecord

#: a NeMo Gym server entry started by the fleet that never answers: ``up`` waits for it (as long as we let it)
SLEEPER = {
    "responses_api_models": {"openai_model": {"model": "m"}},
    "launch": {"command": [sys.executable, "-c", "import time; time.sleep(600)"]},
}
PLANTED_SESSION_SECRET = "planted-session-secret-7c1e9a40b2"
PLANTED_API_KEY = "sk-planted-api-key-5d2f8e61c3"
PLANTED_ENV_TOKEN = "planted-environment-token-0b9d74"


def ngym(*args: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def start_up(cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`ngym up` as a terminal would start it: SIGINT at its default even when this test runs in the background,
    where the shell started everything with SIGINT ignored (a process inherits that, and rightly keeps it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "up", "fleet.yaml", "--startup-seconds", "600"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 - no threads need it
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "NGYM_FLEET_VENVS": str(tmp_path / "venvs"), "NGYM_PROGRESS_SECONDS": "2"}


def write_fleet(root: Path, name: str, **extra: Any) -> None:
    fleet = {"name": name, "head_server": {"port": 0}, "environments": {"weather": "example_single_tool_call"}}
    (root / "fleet.yaml").write_text(json.dumps({**fleet, **extra}))


def state_of(root: Path, name: str) -> FleetState | None:
    try:
        return FleetState.load(root / ".ngym-fleet" / name)
    except ValueError:  # read while being replaced
        return None


def started(state: FleetState) -> list[ProcessRecord]:
    return [r.process for r in [state.head, *state.servers.values()] if r.process is not None]


def command_line(pid: int) -> list[str]:
    """A process's arguments (empty once it has ended)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def wait_until_started(
    root: Path,
    name: str,
    up: subprocess.Popen[str],
    server: str = "sleeper",
    running: Callable[[list[str]], bool] = lambda args: True,
) -> FleetState:
    """Wait until the running ``up`` has recorded ``server``'s process (it has started everything before it), one
    whose arguments ``running`` accepts (a virtualenv's install records each of its commands in turn)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = state_of(root, name)
        record = state.servers[server].process if state is not None and server in state.servers else None
        if state is not None and record is not None and running(command_line(record.pid)):
            return state
        assert up.poll() is None, up.communicate()
        time.sleep(0.1)
    raise AssertionError(f"`ngym up` did not start {server} within 300 s")


def interrupted_up(
    root: Path, env: dict[str, str], name: str, interrupt: Callable[[subprocess.Popen[str]], object]
) -> tuple[FleetState, subprocess.Popen[str], str]:
    """Start an `up` that waits on a sleeper, ``interrupt`` it once it started it, wait for it to end: (the state
    it had saved, the process, its stderr)."""
    write_fleet(root, name, servers={"sleeper": SLEEPER})
    up = start_up(root, env)
    try:
        state = wait_until_started(root, name, up)
        interrupt(up)
        _, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
    return state, up, err


def assert_all_stopped(processes: list[ProcessRecord], within_s: float = 30.0) -> None:
    """Every process (and every member of its process group: workers, children) is gone, or a zombie waiting for
    its reaper. A group member that got SIGTERM may still be exiting when `up` or `down` returns: wait for that
    (a condition, bounded), then look."""
    assert processes
    pids = {str(p.pid) for p in processes}

    def left() -> list[str]:
        rows = subprocess.run(["ps", "-eo", "pgid=,pid=,stat=,args="], capture_output=True, text=True).stdout
        return [row for row in rows.splitlines() if row.split()[0] in pids and not row.split()[2].startswith("Z")]

    def running() -> list[int]:
        return [p.pid for p in processes if p.alive() and _state(p.pid) != "Z"]

    deadline = time.monotonic() + within_s
    while (left() or running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(), left()
    assert not left()


def _state(pid: int) -> str:
    """A process's state letter (``Z``: exited, waiting for its reaper), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.fixture
def cleanup(tmp_path: Path, env: dict[str, str]) -> Iterator[None]:
    """Whatever a test leaves, `ngym down` stops it."""
    yield
    if (tmp_path / "fleet.yaml").is_file():
        ngym("down", "fleet.yaml", cwd=tmp_path, env=env)


def test_planted_secrets_reach_no_command_line_no_served_config_and_no_log(
    tmp_path: Path, env: dict[str, str], cleanup: None
) -> None:
    environ = {**env, "MY_SERVICE_TOKEN": PLANTED_ENV_TOKEN}
    policy = {"responses_api_models": {"openai_model": {"openai_api_key": PLANTED_API_KEY, "host": "10.0.0.5"}}}
    judge = {"responses_api_models": {"vllm_model": {"extra_header": PLANTED_ENV_TOKEN, "port": 8000}}}
    counter = {"env": "example_session_state_mgmt", "config": {"session_secret": PLANTED_SESSION_SECRET}}
    write_fleet(
        tmp_path,
        "secrets",
        environments={"counter": counter, "weather": "example_single_tool_call"},
        servers={"policy_model": policy, "judge_model": judge},
    )
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env=environ)
    assert up.returncode == 0, up.stdout + up.stderr
    state = state_of(tmp_path, "secrets")
    assert state is not None
    planted = (PLANTED_SESSION_SECRET, PLANTED_API_KEY, PLANTED_ENV_TOKEN)

    # no command line of any process shows a secret (any local user can read them all)
    args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not [s for s in planted if s in args]

    # the head server serves the config with every secret masked, and the rest intact
    head = f"http://127.0.0.1:{state.head.port}/global_config_dict_yaml"
    with urllib.request.urlopen(head, timeout=10) as response:
        served = json.loads(response.read())
    assert not [s for s in planted if s in served], served
    assert "openai_api_key: '****'" in served and "port: 8000" in served and "host: 10.0.0.5" in served

    # the environment got its secret and serves (it refuses to start on a secret it cannot read)
    counter_url = f"http://127.0.0.1:{state.servers['counter'].port}"
    request = urllib.request.Request(
        f"{counter_url}/seed_session", data=b"{}", headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200

    # nothing printed, and no log, holds one; the files holding them are the owner's only
    state_dir = tmp_path / ".ngym-fleet" / "secrets"
    logs = "".join(p.read_text(errors="replace") for p in (state_dir / "logs").glob("*.log"))
    assert not [s for s in planted if s in logs + up.stdout + up.stderr]
    for path in (state_dir / "global_config.yaml", state_dir / "state.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700


def test_one_up_at_a_time_and_sigterm_stops_what_it_started(tmp_path: Path, env: dict[str, str], cleanup: None) -> None:
    write_fleet(tmp_path, "once", servers={"sleeper": SLEEPER})
    first = start_up(tmp_path, env)
    try:
        state = wait_until_started(tmp_path, "once", first)
        # a second `up` of the same file is refused at once, in one line naming the first one
        second = ngym("up", "fleet.yaml", cwd=tmp_path, env=env, timeout=60)
        assert second.returncode != 0, second.stdout + second.stderr
        assert f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        # SIGTERM: `up` stops everything it had started (environment unit, head server, the sleeper) and exits
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert len(started(state)) == 3
    assert_all_stopped(started(state))
    down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
    assert down.returncode == 0 and "not up" in down.stdout, down.stdout + down.stderr


def test_ctrl_c_during_up_leaves_nothing(tmp_path: Path, env: dict[str, str], cleanup: None) -> None:
    state, up, err = interrupted_up(tmp_path, env, "ctrlc", lambda up: up.send_signal(signal.SIGINT))
    assert up.returncode == 130 and "Traceback" not in err, err
    assert_all_stopped(started(state))


def test_down_after_up_was_killed_stops_everything_it_had_started(
    tmp_path: Path, env: dict[str, str], cleanup: None
) -> None:
    write_fleet(tmp_path, "crash", servers={"sleeper": SLEEPER})
    up = start_up(tmp_path, env)
    try:
        state = wait_until_started(tmp_path, "crash", up)
    finally:
        up.kill()  # kill -9: no handler runs
        up.communicate(timeout=60)
    assert [p for p in started(state) if p.alive()]  # its children outlived it
    down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_all_stopped(started(state))
    again = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
    assert again.returncode == 0 and "is not up: nothing to stop" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("kill", ["sigkill", "sigterm"])
def test_down_stops_a_virtualenv_install_an_up_left_running(
    tmp_path: Path, env: dict[str, str], cleanup: None, kill: str
) -> None:
    """``up`` killed (or stopped) while pip installs an environment's virtualenv: the install (pip and what it
    started) is stopped, by ``up`` itself on SIGTERM, by ``ngym down`` after a ``kill -9``. pip is held on a
    package index that accepts connections and never answers (a condition the test owns, not a time)."""
    import socket

    with socket.socket() as index:
        index.bind(("127.0.0.1", 0))
        index.listen(16)  # never accepted: pip's request waits for an answer that does not come
        url = f"http://127.0.0.1:{index.getsockname()[1]}/simple"
        weather = {"env": "example_single_tool_call", "requirements": [f"--index-url={url}", "--timeout=600", "six"]}
        write_fleet(tmp_path, f"venv-{kill}", environments={"weather": weather})
        up = start_up(tmp_path, env)
        try:
            # its venv's pip install, held on the index (the venv's creation before it ends on its own)
            state = wait_until_started(tmp_path, f"venv-{kill}", up, "weather", lambda args: "pip" in args)
            if kill == "sigterm":
                up.send_signal(signal.SIGTERM)
                assert up.wait(timeout=120) == 130
            else:
                up.kill()
                up.wait(timeout=60)
                assert [p for p in started(state) if p.alive()]  # the install outlived `up`
                down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
                assert down.returncode == 0, down.stdout + down.stderr
        finally:
            if up.poll() is None:
                up.kill()
            up.communicate(timeout=60)
        assert_all_stopped(started(state))


def test_down_during_up_stops_the_up_and_everything(tmp_path: Path, env: dict[str, str], cleanup: None) -> None:
    downs: list[subprocess.CompletedProcess[str]] = []
    state, up, _ = interrupted_up(
        tmp_path, env, "during", lambda up: downs.append(ngym("down", "fleet.yaml", cwd=tmp_path, env=env))
    )
    assert downs[0].returncode == 0, downs[0].stdout + downs[0].stderr
    assert up.returncode == 130
    assert_all_stopped(started(state))


def test_a_misspelled_environment_fails_once_and_leaves_nothing_running(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "fleet.yaml").write_text(
        json.dumps({"name": "typo", "head_server": {"port": 0}, "environments": {"cart": "shoping_cart"}})
    )
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
    assert up.returncode == 1, up.stdout + up.stderr
    out = up.stdout + up.stderr
    assert out.count("shoping_cart") == 1, out
    assert "the others are up" not in out and "Traceback" not in out
    assert state_of(tmp_path, "typo") is None
    args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / ".ngym-fleet" / "typo") not in args  # no head server left serving its config


@pytest.mark.parametrize(
    ("fleet", "line"),
    [
        ({"enviroments": {"w": "example_single_tool_call"}}, "unknown key 'enviroments'; did you mean 'environments'?"),
        ({"environments": {"w": {"env": "example_single_tool_call", "worker": 2}}}, "did you mean 'workers'?"),
    ],
)
def test_a_misspelled_fleet_key_says_what_was_meant(
    tmp_path: Path, env: dict[str, str], fleet: dict[str, Any], line: str
) -> None:
    (tmp_path / "fleet.yaml").write_text(json.dumps(fleet))
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
    assert up.returncode == 2 and line in up.stderr, up.stderr
    assert "Extra inputs are not permitted" not in up.stderr and len(up.stderr.strip().splitlines()) == 1


def test_a_dead_unit_of_the_local_engine_answers_503_at_once(
    tmp_path: Path, env: dict[str, str], cleanup: None
) -> None:
    """Behind its front, a unit that died is an HTTP 503, which ends a client's request (NeMo Gym's client retries
    a refused connection without end); the front goes with `down`."""
    write_fleet(tmp_path, "front")
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    state = state_of(tmp_path, "front")
    assert state is not None
    weather = state.servers["weather"]
    assert weather.process is not None and weather.front is not None
    url = f"http://127.0.0.1:{weather.port}/seed_session"
    seed = urllib.request.Request(url, data=b"{}", headers={"content-type": "application/json"})
    with urllib.request.urlopen(seed, timeout=30) as response:
        assert response.status == 200
    os.killpg(weather.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while weather.process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(urllib.error.HTTPError) as answered:  # an answer, not a refused connection
        urllib.request.urlopen(seed, timeout=30)
    assert answered.value.code == 503
    down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr
    assert_all_stopped([weather.front, *started(state)])


def test_without_haproxy_the_local_engine_says_so_and_serves_each_unit_directly(
    tmp_path: Path, env: dict[str, str], cleanup: None
) -> None:
    write_fleet(tmp_path, "nofront")
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env={**env, "NGYM_HAPROXY": str(tmp_path / "no-haproxy")})
    assert up.returncode == 0, up.stdout + up.stderr
    assert "no HAProxy here" in up.stderr and "apt-get install haproxy" in up.stderr
    state = state_of(tmp_path, "nofront")
    assert state is not None and state.servers["weather"].front is None
    health = f"http://127.0.0.1:{state.servers['weather'].port}/health"
    with urllib.request.urlopen(health, timeout=30) as response:
        assert response.status == 200
    # a second `up` of the running fleet is refused, and stops nothing of it
    again = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
    assert again.returncode != 0 and "already up" in again.stderr, again.stdout + again.stderr
    assert [p for p in started(state) if p.alive()] == started(state)
    with urllib.request.urlopen(health, timeout=30) as response:
        assert response.status == 200


def test_an_up_that_fails_in_process_leaves_the_callers_ctrl_c_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` ignores a second Ctrl-C while it cleans up, then gives the handler back: a caller running it in-process
    (a test, a notebook) keeps Ctrl-C, and the processes it starts later do not inherit an ignored SIGINT (which
    made a later `up` deaf to Ctrl-C)."""
    from click.testing import CliRunner

    from ngym.cli import cli

    class Failing:
        def up(self, *args: object) -> object:
            raise RuntimeError("the engine failed")

        def down(self, state: object) -> list[str]:
            return []

    monkeypatch.setattr("ngym.cli.fleet.fleet_engine", lambda name: Failing())
    (tmp_path / "fleet.yaml").write_text(
        json.dumps(
            {"name": "deaf", "head_server": {"port": 0}, "environments": {"weather": "example_single_tool_call"}}
        )
    )
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGINT)
    result = CliRunner().invoke(cli, ["up", "fleet.yaml"])
    assert isinstance(result.exception, RuntimeError)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_fleet_beside_a_folder_named_ngym_starts_the_installed_ngym(tmp_path: Path, env: dict[str, str]) -> None:
    """A fleet file kept beside a checkout named ``ngym/`` (here one that cannot be imported): the head server and
    the units start in the fleet file's folder, and import the installed ngym, never that folder."""
    work = tmp_path / "work"
    (work / "ngym").mkdir(parents=True)
    (work / "ngym" / "__init__.py").write_text("raise ImportError('the folder beside the fleet file was imported')\n")
    write_fleet(work, "beside")
    try:
        up = ngym("up", str(work / "fleet.yaml"), cwd=tmp_path, env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        state = state_of(work, "beside")
        assert state is not None
        for record in (state.head, state.servers["weather"]):
            with urllib.request.urlopen(f"http://127.0.0.1:{record.port}/health", timeout=30) as response:
                assert response.status == 200
    finally:
        down = ngym("down", str(work / "fleet.yaml"), cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr
