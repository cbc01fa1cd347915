"""An installed OpenEnv environment driven side by side: OpenEnv's own client against OpenEnv's own server, and
ngym's routes against the installed plugin, with the same actions; are observations, rewards and done equal?

OpenEnv's side runs in the environment's own interpreter (``own_client.py``): its own ``EnvClient`` subclass
when it has one that works, else OpenEnv's generic client (the reason is reported); its server is the
environment's app under uvicorn (``launch.start``), or the URL it was installed from. ngym's side is the
installed plugin's app in this process (``/seed_session`` with the same seed, the tool route, ``/verify``); its
answers are parsed by the same OpenEnv client code, so both sides are read one way. The actions are the one
``ngym install`` recorded its example from (``examples.example_action`` of the tool's schema), repeated.

OpenEnv's side is driven twice: an environment whose two OpenEnv episodes differ (a ``reset`` that ignores the
seed) cannot be compared step by step, and is reported so rather than as a mismatch.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ngym_openenv import examples, launch
from ngym_openenv.manifest import Manifest
from ngym_openenv.reward import NoReward, episode_reward

DRIVER = Path(__file__).with_name("own_client.py")


@dataclass
class SideBySide:
    """What one side-by-side run found."""

    name: str
    client: str = ""  #: OpenEnv's client class used on its side
    fallback: str | None = None  #: why the environment's own client was not used
    steps: list[dict[str, Any]] = field(default_factory=list)  #: the actions, as sent through ngym
    openenv: list[dict[str, Any]] = field(default_factory=list)  #: OpenEnv's records (reset, then each step)
    ngym: list[dict[str, Any]] = field(default_factory=list)  #: ngym's answers, parsed by the same client
    #: (each record: the parsed observation, reward and done, and ``wire_reward``, the reward as sent)
    equal: int = 0  #: records equal in observation, reward and done
    deterministic: bool = True  #: OpenEnv's two episodes gave the same records
    verify_reward: float | None = None
    expected_reward: float | None = None  #: the reward rule over OpenEnv's own step rewards (as its server sent them)
    problem: str | None = None

    @property
    def same(self) -> bool:
        return (
            self.problem is None
            and self.deterministic
            and bool(self.openenv)
            and self.equal == len(self.openenv) == len(self.ngym)
            and self.verify_reward == self.expected_reward
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "same": self.same}


def _own_client(manifest: Manifest, request: dict[str, Any]) -> dict[str, Any]:
    """Run ``own_client.py`` in the environment's interpreter; its JSON answer."""
    python = manifest.python
    if python is None:  # installed by URL: no interpreter of the environment's here
        raise RuntimeError("installed by URL: OpenEnv's client needs the environment's interpreter (-o python=...)")
    package, path = _package_of(manifest)
    request = {"package": package, "path": path, "mcp": manifest.tool_mode == "mcp", **request}
    result = subprocess.run(  # on stdin: observations (atari's pixels) outgrow an argument list
        [python, str(DRIVER), "-"], input=json.dumps(request), capture_output=True, text=True, timeout=600, check=False
    )
    line = next((x for x in reversed(result.stdout.splitlines()) if x.startswith("OWN-CLIENT ")), None)
    if result.returncode or line is None:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"OpenEnv's client could not run: {' / '.join(tail)}")
    answer: dict[str, Any] = json.loads(line.removeprefix("OWN-CLIENT "))
    return answer


def _package_of(manifest: Manifest) -> tuple[str | None, list[str]]:
    """The environment's package (whose ``client`` module holds its EnvClient) and what to put on sys.path."""
    app = manifest.app or ""
    if manifest.app_dir:
        folder = Path(manifest.app_dir)
        if app.startswith("server."):  # the folder itself is the package (copied under its own name)
            return folder.name, [str(folder.parent), str(folder)]
        return app.split(".", 1)[0], [str(folder)]
    return (app.split(".", 1)[0] or None), []


def _steps(manifest: Manifest, count: int) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(ngym route, ngym bodies, OpenEnv steps) for ``count`` repeats of install's example action."""
    tool, schema, _ = examples.tool_name_and_schema(manifest)
    arguments = examples.example_action(schema)
    if not isinstance(arguments, dict):
        raise RuntimeError(f"{tool}'s schema is not an object")
    if manifest.tool_mode == "mcp":
        return tool, [arguments] * count, [{"tool_name": tool, "arguments": arguments}] * count
    return "step", [arguments] * count, [arguments] * count


async def _through_ngym(
    server_class: Any, name: str, route: str, bodies: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], Any]:
    from ngym.plugin_api import RolloutClient, app_for_class, make_response, serve_in_process

    app = app_for_class(server_class, name=name)
    async with serve_in_process(app) as http:
        rollout = RolloutClient(http)
        seed = await rollout.call("/seed_session", {"seed": examples.EXAMPLE_SEED})
        answers = [{"observation": seed["observation"], "reward": seed["reward"], "done": seed["done"]}]
        for body in bodies:
            answers.append(await rollout.call(f"/{route}", body))
        verify = await rollout.call(
            "/verify", {"responses_create_params": {"input": "x"}, "response": make_response("done")}
        )
    return answers, verify


def _expected(rule: str, records: list[dict[str, Any]], verify: dict[str, Any]) -> float | None:
    """The reward verify must give: the rule over OpenEnv's own step rewards; no reward is a masked 0.0."""
    if rule.startswith("state:"):  # the environment's state at verify time: not seen from OpenEnv's side here
        return float(verify["reward"]) if isinstance(verify.get("reward"), int | float) else None
    try:
        return episode_reward(rule, [r.get("wire_reward", r["reward"]) for r in records[1:]])
    except NoReward:
        return 0.0 if verify.get("mask_sample") else None


def compare(server_class: Any, *, steps: int = 3) -> SideBySide:
    """Drive the installed environment whose server class is ``server_class`` both ways; see the module."""
    manifest: Manifest = server_class.manifest
    found = SideBySide(manifest.name)
    try:
        route, bodies, openenv_steps = _steps(manifest, steps)
        running = None
        if not manifest.url:
            python, app = manifest.python or "", manifest.app or ""
            running = launch.start(python, app, app_dir=manifest.app_dir, env=manifest.env)
        url = manifest.url or (running.url if running else "")
        try:
            request = {"mode": "drive", "url": url, "seed": examples.EXAMPLE_SEED, "steps": openenv_steps}
            first = _own_client(manifest, request)
            if first.get("error") and first.get("fallback") is None:  # its own client fails: OpenEnv's generic one
                request["generic"] = f"its own client {first['client']} failed: {first['error']}"
                first = _own_client(manifest, request)
            if first.get("error"):
                raise RuntimeError(f"OpenEnv's own client failed on OpenEnv's own server: {first['error']}")
            second = _own_client(manifest, request)
        finally:
            if running is not None:
                running.stop()
        found.client, found.fallback = first["client"], first.get("fallback")
        found.openenv = first["records"]
        found.deterministic = second.get("records") == found.openenv
        found.steps = bodies
        answers, verify = asyncio.run(_through_ngym(server_class, manifest.name, route, bodies))
        parsed = _own_client(manifest, {"mode": "parse", "answers": answers, "generic": request.get("generic")})
        if parsed.get("error"):
            raise RuntimeError(f"OpenEnv's client could not parse ngym's answers: {parsed['error']}")
        found.ngym = [{**r, "wire_reward": a.get("reward")} for r, a in zip(parsed["records"], answers, strict=True)]
        found.equal = sum(a == b for a, b in zip(found.openenv, found.ngym, strict=False))
        found.verify_reward = verify.get("reward")
        found.expected_reward = _expected(manifest.reward_rule, found.openenv, verify)
    except (RuntimeError, launch.LaunchError, subprocess.TimeoutExpired) as exc:
        found.problem = str(exc)
    return found
