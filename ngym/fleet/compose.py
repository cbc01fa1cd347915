"""The Compose engine: each environment as its own image and Compose project, built by ``ngym containerize``.

For each environment the existing pipeline (``ngym.containerize``) builds its image (its requirements inside:
the image is its isolation) and writes its Compose project (``replicas`` copies, Redis for shareable state,
nginx with session affinity for in-process state); ``docker compose up -d`` runs it with its load balancer
published on the environment's one URL. The head server and any NeMo Gym servers run as local processes
(``ngym.fleet.bringup.finish``). ``down`` runs ``docker compose down`` for each project and stops the processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ngym.child_python import python_module
from ngym.child_server import free_port
from ngym.errors import NgymError
from ngym.fleet.bringup import Reporter, answers, finish, new_state, stop_processes
from ngym.fleet.isolation import ensure_venv
from ngym.fleet.launch import environment_target
from ngym.fleet.spec import FleetSpec
from ngym.fleet.state import FleetState, ServerRecord

__all__ = ["Reporter", "compose_command", "down", "project_name", "up"]

#: the base image every environment's image builds on (``bash docker/ci-setup.sh`` builds it)
BASE_IMAGE_ENV = "NGYM_FLEET_BASE_IMAGE"


def compose_command() -> list[str]:
    """``docker compose`` (the plugin) if it answers, else the standalone ``docker-compose``."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise NgymError("the compose engine needs Docker Compose (`docker compose` or `docker-compose`); none found")


def project_name(fleet: str, env: str) -> str:
    """The Compose project of one environment of a fleet (lower case, as Compose requires)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in f"{fleet}-{env}".lower()).strip("-")


def up(spec: FleetSpec, reporter: Reporter | None = None, startup_seconds: float = 300.0) -> FleetState:
    """Build each environment's image, start its Compose project, then the head server and other servers."""
    from ngym.containerize.pipeline import ContainerizeOptions, containerize

    report = reporter or Reporter()
    state = new_state(spec, "compose")
    state_dir = spec.state_dir()
    compose = compose_command()
    base_image = os.environ.get(BASE_IMAGE_ENV, "ngym-base:bookworm")
    state.project = project_name(spec.name, "")  # the prefix of every project of the fleet
    state.compose_file = str(state_dir / "compose")
    for name, env in spec.environments.items():
        port = env.port or free_port(spec.host)
        record = state.servers[name] = ServerRecord(
            kind="environment", host=spec.host, port=port, service=project_name(spec.name, name)
        )
        directory = state_dir / "compose" / name
        state.save(state_dir)
        try:
            report.status = f"{name}: building its image"
            lines = env.isolation_key(spec.base_dir, name)
            if lines:  # a nemo-gym: entry (or requirements): installed in its venv, packaged from there
                python = ensure_venv(lines, state_dir / "logs" / f"{name}.venv.log", _progress(report, name))
                _containerize_in_venv(
                    python,
                    environment_target(spec, env, name),
                    f"{record.service}:fleet",
                    base_image,
                    env.replicas,
                    directory,
                    state_dir / "logs" / f"{name}.containerize.log",
                    _progress(report, name),
                )
            else:
                containerize(
                    ContainerizeOptions(
                        target=environment_target(spec, env),
                        tag=f"{record.service}:fleet",  # one image per environment of this fleet
                        base_image=base_image,
                        compose=True,
                        replicas=env.replicas,
                        manifests_dir=directory,
                    ),
                    log=_progress(report, name),
                )
            report.status = f"{name}: docker compose up"
            _compose(
                compose, record.service, directory, ["up", "-d"], spec.host, port, state_dir / "logs" / f"{name}.log"
            )
        except NgymError as exc:
            record.reason = str(exc)
            report.line(f"{name}: FAILED: {exc}")
    state.save(state_dir)
    _wait_compose(state, spec, report, startup_seconds)
    return finish(spec, state, report, startup_seconds)


def down(state: FleetState, timeout: float = 10.0) -> list[str]:
    """``docker compose down`` every environment's project, then stop the local processes."""
    stopped = []
    compose = compose_command()
    for name, record in state.servers.items():
        if record.kind == "environment" and record.service:
            directory = Path(state.compose_file or ".") / name
            log = directory / "down.log"
            try:
                _compose(
                    compose,
                    record.service,
                    directory,
                    ["down", "--remove-orphans", "-v"],
                    record.host,
                    record.port,
                    log,
                )
                stopped.append(name)
            except NgymError:
                pass
    return sorted([*stopped, *stop_processes(state, timeout)])


def _compose(
    compose: list[str], project: str, directory: Path, args: list[str], host: str, port: int, log: Path
) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NGYM_PORT": str(port), "NGYM_BIND": host}
    cmd = [*compose, "-p", project, "-f", str(directory / "compose.yaml"), *args]
    with log.open("ab") as out:
        done = subprocess.run(
            cmd, cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise NgymError(
            f"`{' '.join(cmd[:2])} {' '.join(args)}` failed (exit {done.returncode}): {tail[0]} (log: {log})"
        )


def _wait_compose(state: FleetState, spec: FleetSpec, report: Reporter, seconds: float) -> None:
    """Each environment is up when its load balancer answers ``/health`` (no local process to watch: Compose
    restarts a container that exits)."""

    pending = {n for n, r in state.servers.items() if r.kind == "environment" and not r.reason}
    deadline = time.monotonic() + seconds
    while pending:
        report.status = f"waiting for {', '.join(sorted(pending))}"
        for name in sorted(pending):
            record = state.servers[name]
            if answers(record, "/health"):
                record.ok = True
                pending.discard(name)
                report.line(f"{name}: up at http://{record.host}:{record.port}")
        if pending and time.monotonic() > deadline:
            for name in pending:
                state.servers[name].reason = f"no answer at /health within {seconds:.0f} s"
                report.line(f"{name}: FAILED: {state.servers[name].reason}")
            pending.clear()
        time.sleep(0.5)
    state.save(spec.state_dir())


def _containerize_in_venv(
    python: Path,
    target: str,
    tag: str,
    base_image: str,
    replicas: int,
    directory: Path,
    log: Path,
    progress: Callable[[str], None],
) -> None:
    """``ngym containerize`` run by the environment's own venv, where it is installed (a ``nemo-gym:NAME``
    entry exists only there): the image installs from the wheelhouse built from that venv's packages, so
    containers need no package index. Its lines go to ``log``; the latest one is the progress line."""
    cmd = python_module(
        "ngym.cli", "containerize", target, "--tag", tag, "--base-image", base_image, python=str(python)
    )
    cmd += ["--compose", "--replicas", str(replicas), "--deploy-dir", str(directory)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=log.parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},  # its progress lines as they come, not at its exit
        )
        assert child.stdout is not None
        for raw in child.stdout:
            out.write(raw)
            line = raw.decode(errors="replace").strip()
            if line:
                progress(line)
        code = child.wait()
    if code != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()] or lines or ["(no output)"]
        raise NgymError(f"ngym containerize {target} failed (exit {code}): {errors[-1].strip()[:300]} (log: {log})")


def _progress(report: Reporter, name: str) -> Callable[[str], None]:
    def show(line: str) -> None:
        report.status = f"{name}: {line[:100]}"

    return show
