"""``ngym containerize``: the CLI edge of ``ngym.containerize.containerize``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from ngym.cli.progress import Ticker
from ngym.containerize.pipeline import ContainerizeOptions
from ngym.containerize.pipeline import containerize as run_containerize
from ngym.containerize.run_inputs import parse_env, parse_volumes
from ngym.containerize.spec import DEFAULT_BASE_IMAGE, LOCAL_BASE_IMAGE
from ngym.errors import NgymError
from ngym.readiness import needs_of
from ngym.required_env import check_env
from ngym.targets import Environment, resolve


@click.command(short_help="Build a Docker image of an environment.")
@click.argument("target", metavar="NAME")
@click.option("--tag", "-t", default=None, help="Image tag (default: ngym-NAME:VERSION).")
@click.option(
    "--base-image",
    default=DEFAULT_BASE_IMAGE,
    show_default=True,
    help=f"Base image with python3 and venv. Offline: `make docker-base` then --base-image {LOCAL_BASE_IMAGE}.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the build context (Dockerfile, requirements.txt, wheelhouse/) here and keep it.",
)
@click.option("--no-build", is_flag=True, help="Only write the build context (needs --output).")
@click.option("--run", "run_", is_flag=True, help="Start the image, wait for healthy, drive one example rollout.")
@click.option("--keep", is_flag=True, help="With --run: leave the container running.")
@click.option("--no-cache", is_flag=True, help="Build without Docker's layer cache.")
@click.option("--python-version", default=None, help="The image's Python (major.minor); default: detected.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout (progress on stderr).")
@click.option("--verbose", is_flag=True, help="Show pip's and docker build's own output too.")
@click.option(
    "-e",
    "--env",
    "env_items",
    multiple=True,
    metavar="KEY[=VALUE]",
    help="With --run: an environment variable of the smoke container (KEY alone: this shell's value), as docker run.",
)
@click.option(
    "-v",
    "--volume",
    "volume_items",
    multiple=True,
    metavar="HOST:CONTAINER[:ro]",
    help="With --run: a mount of the smoke container (e.g. -v ./data:/data:ro), as docker run.",
)
@click.option("--compose", is_flag=True, help="Also write a Compose project: N replicas, Redis, a load balancer.")
@click.option("--k8s", is_flag=True, help="Also write Kubernetes manifests: Deployment, Service, HPA, Redis.")
@click.option("--replicas", type=click.IntRange(min=1), default=3, show_default=True, help="With --compose/--k8s.")
@click.option(
    "--deploy-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where --compose/--k8s write (default: ./ngym-NAME-deploy).",
)
@click.option(
    "--allow-baked-secrets",
    is_flag=True,
    help="Package a config that holds a literal secret (api_key, token, password...) anyway; default: refuse.",
)
def containerize(
    target: str,
    tag: str | None,
    base_image: str,
    output: Path | None,
    no_build: bool,
    run_: bool,
    keep: bool,
    no_cache: bool,
    python_version: str | None,
    as_json: bool,
    verbose: bool,
    env_items: tuple[str, ...],
    volume_items: tuple[str, ...],
    compose: bool,
    k8s: bool,
    replicas: int,
    deploy_dir: Path | None,
    allow_baked_secrets: bool,
) -> None:
    """Build a Docker image of the environment NAME (an installed name or a plugin source directory).

    The image installs offline from a wheelhouse built here (ngym, the plugin and every dependency), runs
    `ngym run NAME --host 0.0.0.0 --port 8000` as a non-root user and has a HEALTHCHECK. Pass the session
    secret and config overrides at run time:

    \b
      docker run -p 8000:8000 -e NGYM_SESSION_SECRET=... IMAGE [key=value ...]

    (or mount it as a file and pass NGYM_SESSION_SECRET_FILE=PATH, so `docker inspect` does not show it)

    \b
    Examples:
      ngym containerize example_single_tool_call --base-image ngym-base:bookworm --run
      ngym containerize ./my_env --output build/my_env --no-build
      ngym containerize dipg_safety --run -e DIPG_DATASET_PATH=/data/rows.jsonl -v ./data:/data:ro
      ngym containerize example_session_state_mgmt --base-image ngym-base:bookworm --compose --k8s

    --compose / --k8s write deploy manifests (docs/scale-out.md): replicas sharing sessions through Redis, or,
    for environments whose state cannot be shared, session affinity.
    """
    if no_build and output is None:
        raise click.UsageError("--no-build writes the build context only: give --output DIR")
    if keep and not run_:
        raise click.UsageError("--keep applies to --run")
    if run_ and no_build:
        raise click.UsageError("--run needs a build: drop --no-build")
    if (env_items or volume_items) and not run_:
        raise click.UsageError("-e and -v apply to --run's smoke container (the image takes them at docker run)")
    run_environment = parse_env(env_items)
    run_volumes = parse_volumes(volume_items)
    environment = _environment(target) if run_ else None
    if environment is not None:  # what the environment declares it needs, given to the container: before any build
        check_env(
            environment,
            given=run_environment,
            how="give it to the smoke container with -e KEY=VALUE (-e KEY passes this shell's value), and a file it "
            "names with -v HOST:CONTAINER[:ro]",
        )

    unmet = needs_of(target, variables=False) if run_ else []  # its variables: checked against -e above
    for sentence in unmet:
        click.echo(f"ngym: {sentence}; the image is built, its smoke rollout is not run", err=True)
    run_ = run_ and not unmet
    keep = keep and run_

    now = ["starting"]
    ticker = Ticker(f"containerize {target}", lambda: now[0])

    def log(line: str) -> None:
        detail = line.startswith("  ")  # pip's and docker's own lines: the status line shows them, --verbose prints
        now[0] = _status(line.strip()) if detail else _status(line)
        if verbose or not detail:
            ticker.echo(line)

    options = ContainerizeOptions(
        target=target,
        tag=tag,
        base_image=base_image,
        output=output,
        build=not no_build,
        run=run_,
        keep=keep,
        python_version=python_version,
        nocache=no_cache,
        compose=compose,
        k8s=k8s,
        replicas=replicas,
        manifests_dir=deploy_dir,
        run_environment=run_environment,
        run_volumes=run_volumes,
        allow_baked_secrets=allow_baked_secrets,
    )
    with ticker:
        result = run_containerize(options, log=log)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    if result.manifests:
        folder = os.path.commonpath([str(Path(path).parent) for path in result.manifests])
        click.echo(f"deploy manifests written to {folder} (docs/scale-out.md)")
    if result.image_id is None:
        click.echo(f"build context written to {result.context_dir}")
        click.echo(f"build it: docker build -t {result.tag} {result.context_dir}")
        return
    click.echo(f"image: {result.tag} ({(result.image_size or 0) / 1e6:.1f} MB, built in {result.build_seconds}s)")
    if result.run:
        rollout = result.run.get("rollout") or {}
        click.echo(_smoke_summary(rollout))
        if result.run["kept"]:
            click.echo(f"running at {result.run['url']} (container {result.run['container_name']});")
            click.echo(f"stop it: docker rm -f {result.run['container_name']}")
        else:
            click.echo(f"served at {result.run['url']} (container removed)")
    else:
        flags = "".join(f"{arg} " for arg in result.docker_run_args)
        click.echo(f"run it: docker run --rm -p 8000:8000 {flags}-e NGYM_SESSION_SECRET=... {result.tag}")
    if unmet:
        raise SystemExit(1)  # --run was asked and not done: a script must not read this as a passed smoke test


def _environment(target: str) -> Environment | None:
    """The environment ``target`` names (None when only the packaging step can tell: it reports that itself)."""
    try:
        return resolve(target)
    except NgymError:
        return None


def _smoke_summary(rollout: dict[str, Any]) -> str:
    """What the smoke rollout checked, in one line: which recorded example, its path, and whether the reward
    the container gave is the recorded one."""
    reward, expected = rollout.get("reward"), rollout.get("expected_reward")
    line = rollout.get("example_line")
    what = f"example_rollouts.jsonl line {line}" if line else "a recorded example"
    if expected is None:
        verdict = f"reward {reward} (nothing recorded to compare)"
    elif reward == expected:
        verdict = f"reward {reward}, as recorded"
    else:
        verdict = f"reward {reward}, but {expected} was recorded: MISMATCH"
    return f"smoke rollout: {what} replayed in the container ({rollout.get('path')}): {verdict}"


def _status(line: str, width: int = 70) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"
