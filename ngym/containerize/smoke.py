"""``ngym containerize --run``: start the image, wait until Docker reports it healthy, drive one example rollout.

The rollout is the plugin's first recorded example (``data/example_rollouts.jsonl``: the dataset row plus the
recorded ``response`` and expected ``reward``): ``/seed_session`` with the row, one ``POST /<tool>`` per recorded
``function_call`` (its JSON ``arguments`` as the body), then ``/verify`` with the row and the recorded response.
A Gymnasium-style server (``/reset`` + ``/step`` in its OpenAPI, no ``/seed_session``: NeMo Gym's
``GymnasiumServer``) is driven as NeMo Gym's ``gymnasium_agent`` drives it instead: ``/reset`` with the row, one
``/step`` per recorded model turn until the episode ends, ``/close`` when advertised; the reward is the sum of
the steps' rewards (``ngym.rollout.gymnasium``).
The session cookie is copied by hand from each response to the next request, as NeMo Gym agents do.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ngym import processes
from ngym.containerize.errors import ContainerRunError
from ngym.containerize.spec import CONTAINER_PORT, PluginSource, RunOptions
from ngym.examples import EXAMPLE_ROLLOUTS, dataset_row, read_example_rollouts, recorded_tool_calls
from ngym.rollout.gymnasium import Recording, describe_routes, drive, episode, is_gymnasium_style, server_post_routes
from ngym.server.sessions.cookies import SESSION_SECRET_ENV, SESSION_SECRET_FILE_ENV
from ngym.targets import installed

# The docker SDK is optional (``ngym[docker]``): imported where the engine is used (see ngym.containerize.build).
if TYPE_CHECKING:
    from docker.models.containers import Container

    import docker

Log = Callable[[str], None]


@dataclass(frozen=True)
class ExampleRollout:
    """One recorded rollout: the dataset row, the recorded response, the reward it should get."""

    row: dict[str, Any]
    response: dict[str, Any]
    expected_reward: float | None
    line: int = 1  #: its line in ``data/example_rollouts.jsonl``

    def tool_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """``(tool name, arguments)`` of every ``function_call`` in the recorded output, in order."""
        return [(call.name, call.arguments) for call in recorded_tool_calls(self.response)]


@dataclass
class RolloutResult:
    reward: float
    expected_reward: float | None
    calls: list[str] = field(default_factory=list)
    verify_response: dict[str, Any] = field(default_factory=dict)
    #: ``seed_session`` (seed → tools → verify) or ``gymnasium`` (reset → step… → close)
    protocol: str = "seed_session"
    #: every request of the rollout, in order (``seed_session → get_weather → verify``; ``reset → step ×2``)
    path: str = ""
    #: the line of ``data/example_rollouts.jsonl`` that was replayed
    example_line: int | None = None


@dataclass
class RunResult:
    """What ``--run`` did."""

    container_id: str
    container_name: str
    url: str
    health: str
    rollout: RolloutResult | None
    kept: bool


def example_data_dirs(plugin: PluginSource) -> list[Path]:
    """Where a plugin's ``data/`` may be: its source tree, else the installed package folder."""
    dirs = []
    if plugin.source_dir is not None:
        dirs.append(plugin.source_dir / "data")
    try:
        package_dir = installed(plugin.name).folder
    except Exception:  # not installed (a bare source directory): the source tree is all there is
        package_dir = None
    if package_dir is not None:
        dirs.append(package_dir / "data")
    return dirs


def load_example_rollout(plugin: PluginSource, index: int | None = None) -> ExampleRollout:
    """The ``index``-th line of the plugin's ``data/example_rollouts.jsonl``; by default the first recorded at
    reward 1.0 (else the first): a smoke rollout that ends "reward: 0.0 (expected 0.0)" passed, but reads as a
    failure, and a 1.0 shows the whole path (tools, verify) working."""
    for folder in example_data_dirs(plugin):
        path = folder / EXAMPLE_ROLLOUTS
        if path.is_file():
            records = read_example_rollouts(path)
            if index is None:
                full = [i for i, r in enumerate(records) if "response" in r and r.get("reward") == 1.0]
                index = full[0] if full else 0
            if index >= len(records):
                raise ContainerRunError(f"{path} has {len(records)} rollout(s), not {index + 1}")
            record = records[index]
            if "response" not in record:
                raise ContainerRunError(f"{path}: line {index + 1} has no recorded 'response'")
            reward = record.get("reward")
            expected = None if reward is None else float(reward)
            return ExampleRollout(dataset_row(record), record["response"], expected, line=index + 1)
    searched = ", ".join(str(d) for d in example_data_dirs(plugin)) or "no data folder found"
    raise ContainerRunError(f"environment {plugin.name!r} ships no data/example_rollouts.jsonl (searched {searched})")


def drive_rollout(base_url: str, example: ExampleRollout, *, timeout: float = 30.0) -> RolloutResult:
    """seed_session → recorded tool calls → verify against ``base_url`` (or, for a Gymnasium-style server,
    reset → recorded turns → close), copying the session cookie by hand."""
    cookies: dict[str, str] = {}
    calls: list[str] = []

    def post(client: httpx.Client, route: str, body: dict[str, Any]) -> dict[str, Any]:
        route = route.lstrip("/")
        headers = {"cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())} if cookies else {}
        response = client.post(f"{base_url}/{route}", json=body, headers=headers)
        for header in response.headers.get_list("set-cookie"):
            name, _, rest = header.partition("=")
            cookies[name.strip()] = rest.split(";", 1)[0]
        client.cookies.clear()  # no cookie jar: only the copied cookie travels, exactly as with an agent
        if response.status_code >= 400:
            raise ContainerRunError(f"POST /{route} → HTTP {response.status_code}: {response.text[:500]}")
        answer: dict[str, Any] = response.json()
        return answer

    routes = server_post_routes(base_url, timeout)
    with httpx.Client(timeout=timeout) as client:
        if routes is not None and is_gymnasium_style(routes):
            replay = Recording(example.response, {**example.response, "output": []})
            result = drive(episode(example.row), lambda path, body: post(client, path, body), replay)
            return RolloutResult(
                result.reward,
                example.expected_reward,
                [route for route in result.routes if route not in ("reset", "close")],
                result.as_verify_response(example.row),
                protocol="gymnasium",
                path=describe_routes(result.routes),
            )
        post(client, "seed_session", example.row)
        for name, arguments in example.tool_calls():
            post(client, name, arguments)
            calls.append(name)
        verify = post(client, "verify", {**example.row, "response": example.response})
    if "reward" not in verify:
        raise ContainerRunError(f"/verify answered without a reward: {json.dumps(verify)[:300]}")
    path = " → ".join(["seed_session", *calls, "verify"])
    return RolloutResult(float(verify["reward"]), example.expected_reward, calls, verify, path=path)


def start_container(
    client: docker.DockerClient,
    image: str,
    *,
    host_port: int | None = None,
    environment: dict[str, str] | None = None,
    name: str | None = None,
    command: list[str] | None = None,
    run_options: RunOptions = RunOptions(),
    volumes: list[str] | None = None,
) -> Container:
    """Run ``image`` detached with its port published on 127.0.0.1 (a free port unless ``host_port``).

    ``command`` is appended to the image's entrypoint (``key=value`` config overrides). A random
    ``NGYM_SESSION_SECRET`` is passed unless ``environment`` sets one or names its file
    (``NGYM_SESSION_SECRET_FILE``, which it would override). ``run_options``: what the environment
    declares it needs (user, capabilities, security options); ``volumes``: mounts (``HOST:CONTAINER:MODE``).
    """
    given = environment or {}
    made = {} if SESSION_SECRET_FILE_ENV in given else {SESSION_SECRET_ENV: secrets.token_urlsafe(32)}
    env = {**made, **given}
    return client.containers.run(
        image,
        command or None,
        detach=True,
        name=name,
        environment=env,
        ports={f"{CONTAINER_PORT}/tcp": ("127.0.0.1", host_port)},
        labels={"dev.ngym.containerize.run": "1"},
        volumes=volumes or None,
        **run_options.settings(),
    )


def published_url(container: Container) -> str:
    container.reload()
    bindings = (container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{CONTAINER_PORT}/tcp") or []
    if not bindings:
        raise ContainerRunError(f"container {container.name} publishes no port for {CONTAINER_PORT}/tcp")
    return f"http://127.0.0.1:{bindings[0]['HostPort']}"


def wait_healthy(container: Container, timeout: float = 90.0, log: Log = lambda line: None) -> str:
    """Poll Docker's health status until ``healthy``; raise with the container's log if it exits or fails."""
    last: list[str | None] = [None]

    def healthy() -> str | None:
        container.reload()
        state = container.attrs["State"]
        health = (state.get("Health") or {}).get("Status")
        if health != last[0]:
            log(f"container {container.name}: {state['Status']}, health {health}")
            last[0] = health
        if health == "healthy":
            return "healthy"
        if state["Status"] in ("exited", "dead") or health == "unhealthy":
            raise ContainerRunError(
                f"container {container.name} is {health or state['Status']} (exit code {state.get('ExitCode')})\n"
                + _logs_tail(container)
            )
        return None

    found = processes.poll(healthy, timeout, interval=0.5)
    if found is None:
        raise ContainerRunError(
            f"container {container.name} not healthy after {timeout:.0f}s (health {last[0]})\n" + _logs_tail(container)
        )
    return found


def remove_container(container: Container) -> None:
    from docker.errors import NotFound

    with contextlib.suppress(NotFound):
        container.remove(force=True)


def run_image(
    client: docker.DockerClient,
    image: str,
    plugin: PluginSource,
    *,
    keep: bool = False,
    host_port: int | None = None,
    log: Log = lambda line: None,
    health_timeout: float = 90.0,
    environment: dict[str, str] | None = None,
    volumes: list[str] | None = None,
) -> RunResult:
    """Start ``image``, wait for healthy, drive the plugin's first example rollout; remove it unless ``keep``.
    ``environment`` and ``volumes``: what ``-e`` and ``-v`` gave the container."""
    example = load_example_rollout(plugin)
    container = start_container(
        client, image, host_port=host_port, run_options=plugin.run_options, environment=environment, volumes=volumes
    )
    try:
        url = published_url(container)
        log(f"container {container.name} ({container.short_id}) at {url}")
        health = wait_healthy(container, health_timeout, log)
        rollout = drive_rollout(url, example)
        rollout.example_line = example.line
        log(f"rollout: {rollout.path}: reward {rollout.reward}")
    except BaseException:
        if not keep:
            remove_container(container)
        raise
    if not keep:
        remove_container(container)
    return RunResult(container.id, container.name, url, health, rollout, keep)


def _logs_tail(container: Container, lines: int = 25) -> str:
    try:
        text = container.logs(tail=lines).decode(errors="replace")
    except Exception as exc:  # the container may be gone already
        return f"(no container log: {exc})"
    return "--- container log (tail) ---\n" + "\n".join(f"  | {ln}" for ln in text.splitlines())
