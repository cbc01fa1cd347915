"""``ngym up`` / ``ngym status`` / ``ngym down``: a fleet of environments from one file (see ``ngym.fleet``)."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from ngym.cli.progress import Ticker
from ngym.errors import ConfigError
from ngym.fleet.bringup import FleetAlreadyUp, Reporter
from ngym.fleet.engines import Engine, HandOff, running_engine
from ngym.fleet.engines import engine as fleet_engine
from ngym.fleet.lock import stop_running_up, up_lock
from ngym.fleet.spec import FleetSpec, load_fleet
from ngym.fleet.state import FleetState

FLEET_FILE = click.argument("fleet_file", type=click.Path(path_type=Path, dir_okay=False), default="fleet.yaml")


def _state(spec: FleetSpec) -> FleetState:
    running_engine(spec)  # a fleet another system runs: says which
    state = FleetState.load(spec.state_dir())
    if state is None:
        raise ConfigError(f"fleet {spec.name!r} is not up (no state in {spec.state_dir()}); `ngym up` it first")
    return state


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler) interrupts like Ctrl-C for the block."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_started(spec: FleetSpec, engine: Engine) -> list[str]:
    """Stop every process the saved state names (an interrupted or failed ``up``) and forget the state."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    state = FleetState.load(spec.state_dir())
    stopped: list[str] = engine.down(state) if state is not None else []
    (spec.state_dir() / "state.json").unlink(missing_ok=True)
    return stopped


@click.command("up", short_help="Bring up a fleet of environments from a file.")
@FLEET_FILE
@click.option(
    "--startup-seconds", type=float, default=180.0, show_default=True, help="How long each server has to answer."
)
def up(fleet_file: Path, startup_seconds: float) -> None:
    """Start every environment and server FLEET_FILE lists (default ./fleet.yaml) and serve their global config.

    Each environment is one `ngym run NAME --workers N` unit behind one URL, in its own virtualenv when it names
    requirements. The global config (NeMo Gym's shape, every server by name) is written to the fleet's state dir
    and served by a head server, as NeMo Gym's is: point NeMo Gym's clients at it with
    `+head_server.host=... +head_server.port=...`. A server that fails is named with its reason; the others
    come up (exit code 1 if any failed). `ngym down` stops them all.
    """
    spec = load_fleet(fleet_file)
    engine = fleet_engine(spec.engine)
    if isinstance(engine, HandOff):  # another system runs it: ngym writes what it needs
        for line in engine.hand_off(spec):
            click.echo(line)
        return
    with up_lock(spec.state_dir(), spec.name), _signals_interrupt():
        reporter = Reporter(lambda line: click.echo(f"  {line}", err=True))
        click.echo(
            f"ngym up: fleet {spec.name!r} ({spec.engine}): {len(spec.environments)} environment(s), "
            f"{len(spec.servers)} other server(s)",
            err=True,
        )
        try:
            with Ticker("ngym up", lambda: reporter.status):
                state = engine.up(spec, reporter, startup_seconds)
        except FleetAlreadyUp:  # refused before starting anything: what runs is another `up`'s
            raise
        except BaseException as exc:  # Ctrl-C, SIGTERM, an error: nothing it started is left running
            # a second Ctrl-C must not cut the cleanup short; restored after, so the process (a test, a notebook
            # calling `up` in-process) keeps its Ctrl-C, and the children it starts later do not inherit SIG_IGN
            previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                stopped = _stop_started(spec, engine)
            finally:
                signal.signal(signal.SIGINT, previous_int)
            if isinstance(exc, KeyboardInterrupt):
                click.echo(f"ngym up: interrupted; stopped the {len(stopped)} process(es) it had started", err=True)
                sys.exit(130)
            raise
        if state.servers and not any(r.ok and (r.process or r.replicas or r.service) for r in state.servers.values()):
            _stop_started(spec, engine)
            click.echo(
                f"ngym up: nothing came up ({len(state.servers)} failed, each named above); nothing is left running",
                err=True,
            )
            sys.exit(1)
    failed = {n: r for n, r in state.servers.items() if not r.ok}
    head = f"http://{state.head.host}:{state.head.port}"
    click.echo(f"global config: {spec.state_dir() / 'global_config.yaml'}")
    if state.head.ok:
        nemo = f"+head_server.host={state.head.host} +head_server.port={state.head.port}"
        click.echo(f"head server:   {head}  (NeMo Gym: {nemo})")
    else:  # NeMo Gym's clients find every server through it: the fleet is not usable without it
        click.echo(f"head server:   FAILED  {head}  {state.head.reason}")
    for name, record in state.servers.items():
        click.echo(f"  {name:<24} {'up' if record.ok else 'FAILED':<7} http://{record.host}:{record.port}")
    if failed or not state.head.ok:
        names = [*([] if state.head.ok else ["(head)"]), *failed]
        click.echo(
            f"ngym up: {len(names)} of {len(state.servers) + 1} failed: {', '.join(names)} "
            f"(the others are up; `ngym down {fleet_file}` stops them)",
            err=True,
        )
        sys.exit(1)


@click.command("status", short_help="Health, sessions, rollouts/s and errors of a fleet.")
@click.argument("fleet_file", default="fleet.yaml", metavar="FLEET_FILE|URL")
@click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between the two readings of a rate (0: one reading, no rate).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON list of rows.")
def status(fleet_file: str, interval: float, as_json: bool) -> None:
    """Per server of the fleet (or of the one `ngym run` at URL): health, live sessions and the tool-call bytes
    they hold, rollouts/s, verified rollouts and 5xx errors; an environment served by several workers or
    replicas gets a row per worker or replica under it.

    Exit code 1 when a server is not healthy (failed at `up`, or down since), so scripts can wait on it.
    """
    from ngym.fleet.status import fleet_status, render, url_status

    if fleet_file.startswith(("http://", "https://")):
        rows = url_status(fleet_file, interval)
    else:
        rows = fleet_status(_state(load_fleet(Path(fleet_file))), interval)
    if as_json:
        click.echo(json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        click.echo(render(rows))
    if any(r.health != "ok" for r in rows):
        sys.exit(1)


@click.command("down", short_help="Stop every server of a fleet.")
@FLEET_FILE
def down(fleet_file: Path) -> None:
    """Stop every process (or container) `ngym up` started for FLEET_FILE; nothing of it is left running."""
    spec = load_fleet(fleet_file)
    running_engine(spec)  # a fleet another system runs: says which
    interrupted = stop_running_up(spec.state_dir())  # a running `up` stops what it started first
    state = FleetState.load(spec.state_dir())
    if state is None:
        if interrupted is None:
            click.echo(f"ngym down: fleet {spec.name!r} is not up: nothing to stop")
        else:
            click.echo(f"ngym down: fleet {spec.name!r}: stopped the `ngym up` in progress (pid {interrupted})")
        return
    engine = running_engine(spec.model_copy(update={"engine": state.engine}))
    with Ticker("ngym down"):
        stopped = engine.down(state)
    from ngym.server.hosting.affinity import sweep_stale_folders  # heavy: only here

    sweep_stale_folders()  # HAProxy folders of this machine's units that were killed outright
    (spec.state_dir() / "state.json").unlink(missing_ok=True)
    click.echo(
        f"ngym down: fleet {spec.name!r}: stopped {len(stopped)} process(es)"
        + (f" ({', '.join(stopped)})" if stopped else "")
    )
