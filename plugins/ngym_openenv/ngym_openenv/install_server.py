"""What ``ngym install openenv:`` learns from the running OpenEnv server: its tools and schema (asked over
``/ws`` and HTTP), and one example row with a recorded example rollout made on it (or read from
``-o examples=FILE.jsonl``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ngym import ConfigError
from ngym.plugin_api import dataset_row, read_jsonl
from ngym_openenv import examples, launch
from ngym_openenv.errors import OpenEnvInstallError
from ngym_openenv.manifest import Manifest
from ngym_openenv.reward import NoReward, episode_reward
from ngym_openenv.wire import Episode, OpenEnvError

Echo = Callable[[str], None]
#: Seconds the OpenEnv server has to answer ``/schema`` and ``/metadata`` at install.
ASK_TIMEOUT = 30.0


def read_given_examples(path: str | None) -> list[dict[str, Any]] | None:
    """``-o examples=FILE.jsonl``: recorded rollouts (row + ``response`` + ``reward``) to ship instead."""
    if path is None:
        return None
    try:
        lines = read_jsonl(Path(path))
    except ConfigError as exc:
        raise OpenEnvInstallError(f"examples={path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not isinstance(line.get("responses_create_params"), dict) or not isinstance(line.get("response"), dict):
            raise OpenEnvInstallError(
                f"examples={path}:{number}: a line is a dataset row (responses_create_params) plus its recorded "
                "response (and reward)"
            )
    return lines


def add_examples(manifest: Manifest, url: str, given: list[dict[str, Any]] | None, echo: Echo) -> None:
    """Fill the manifest's example rows and rollouts: the given ones, else one recorded here."""
    if given is not None:
        manifest.example_rollouts = given
        manifest.example_rows = [dataset_row(line) for line in given]
        manifest.examples_note = f"{len(given)} example rollouts given at install (-o examples=...)"
    else:
        try:
            asyncio.run(_record_example(manifest, url))
        except OpenEnvError as exc:
            manifest.examples_note = f"no example: the example episode failed: {exc.message}"
    echo(f"ngym: {manifest.examples_note}")


async def _record_example(manifest: Manifest, url: str) -> None:
    """One row from reset's observation and one action from the schema, stepped twice to see it repeats."""
    tool, schema, _ = examples.tool_name_and_schema(manifest)
    arguments = examples.example_action(schema)
    first = await _example_episode(manifest, url, tool, arguments)
    row = examples.example_row(manifest, first.observation)
    manifest.example_rows = [row]
    if first.problem is not None:
        manifest.examples_note = (
            f"no example rollout: {first.problem}; validate/profile/rollout need recorded rollouts: give them with "
            "-o examples=FILE.jsonl"
        )
        return
    second = await _example_episode(manifest, url, tool, arguments)
    repeats = second.problem is None and (second.observation, second.reward) == (first.observation, first.reward)
    reward = first.reward if repeats else None
    manifest.example_rollouts = [examples.recorded_rollout(row, tool, arguments, first.answer, reward)]
    if first.reward is None:
        why = f"no reward recorded: rule {manifest.reward_rule!r} found none"
    elif not repeats:
        why = "no reward recorded: a second episode did not repeat the first (does reset ignore the seed?)"
    else:
        why = f"reward {first.reward:g} under rule {manifest.reward_rule!r}, repeated by a second episode"
    manifest.examples_note = f"example rollout recorded: {tool}({json.dumps(arguments)}); {why}"


@dataclass
class _ExampleEpisode:
    observation: dict[str, Any]
    answer: dict[str, Any] = field(default_factory=dict)
    reward: float | None = None
    problem: str | None = None  #: why the example action could not be stepped


async def _example_episode(manifest: Manifest, url: str, tool: str, arguments: Any) -> _ExampleEpisode:
    """reset (seed 0) → the one call → the episode's reward under the environment's rule."""
    episode = await Episode.open(url)
    try:
        reset = await episode.reset(seed=examples.EXAMPLE_SEED)
        result = _ExampleEpisode(reset.get("observation") or {})
        if not isinstance(arguments, dict):
            result.problem = f"{tool}'s schema is not an object"
            return result
        action = {"type": "call_tool", "tool_name": tool, "arguments": arguments} if tool != "step" else arguments
        try:
            result.answer = await episode.step(action)
        except OpenEnvError as exc:
            result.problem = (
                f"the action made from {tool}'s schema, {json.dumps(arguments)}, was refused ({exc.message})"
            )
            return result
        reward = result.answer.get("reward")
        state = await episode.state() if manifest.reward_rule.startswith("state:") else None
        try:
            result.reward = episode_reward(
                manifest.reward_rule, [float(reward) if isinstance(reward, int | float) else None], state
            )
        except NoReward:
            result.reward = None
        return result
    finally:
        await episode.close()


def ask_launched(
    python: str, app: str, app_dir: str | None, echo: Echo, then: Callable[[str, dict[str, Any]], Manifest]
) -> Manifest:
    """Start the environment's OpenEnv server once, ask it (``ask_server``), and ``then(url, facts)``."""
    echo(f"ngym: starting {app} once to read its schema and tools and record an example")
    try:
        running = launch.start(python, app, app_dir=app_dir, progress=echo)
    except launch.LaunchError as exc:
        raise OpenEnvInstallError(str(exc)) from None
    try:
        try:
            facts = ask_server(running.url)
        except OpenEnvInstallError as exc:
            raise OpenEnvInstallError(f"{exc} ({running.where()})") from None
        return then(running.url, facts)
    finally:
        running.stop()


def ask_server(url: str) -> dict[str, Any]:
    """``/schema`` and ``/metadata``, then one throwaway episode: ``reset`` and ``list_tools``."""
    http = url.replace("ws://", "http://").replace("wss://", "https://").rstrip("/").removesuffix("/ws")
    facts: dict[str, Any] = {}
    for route, key in (("/schema", "schema"), ("/metadata", "metadata")):
        try:
            answer = httpx.get(http + route, timeout=ASK_TIMEOUT)
        except httpx.TimeoutException:
            raise OpenEnvInstallError(
                f"the OpenEnv server at {http} did not answer {route} within {ASK_TIMEOUT:g} s (is it waiting for a "
                "service it needs, one it cannot reach from here?)"
            ) from None
        except httpx.HTTPError as exc:
            raise OpenEnvInstallError(f"cannot reach the OpenEnv server at {http}: {exc}") from None
        if answer.status_code == 200:
            facts[key] = answer.json()
    facts["tools"] = asyncio.run(_list_tools(url))
    return facts


async def _list_tools(url: str) -> list[dict[str, Any]] | None:
    """The MCP tools, or None for an environment that is not an MCP one (``list_tools`` is not its action)."""
    try:
        episode = await Episode.open(url)
    except OpenEnvError as exc:
        if re.search(r"HTTP (403|404)\b", exc.message):  # Starlette refuses a WebSocket to a route it lacks with 403
            raise OpenEnvInstallError(
                f"the app at {url} has no OpenEnv /ws route ({exc.message.rsplit(': ', 1)[-1]}): ngym drives "
                "OpenEnv servers over OpenEnv's /ws protocol, and this app serves only its own routes"
            ) from None
        raise OpenEnvInstallError(exc.message) from None
    try:
        try:
            await episode.reset()
        except OpenEnvError as exc:
            raise OpenEnvInstallError(
                f"the environment's reset failed at install ({exc.message}); give it what it needs (its environment "
                "variables, data) and install again"
            ) from None
        try:
            answer = await episode.step({"type": "list_tools"})
        except OpenEnvError:
            return None
        tools = (answer.get("observation") or {}).get("tools")
        if not isinstance(tools, list):
            return None
        return [
            {
                "name": t.get("name", ""),
                "description": t.get("description") or "",
                "input_schema": t.get("input_schema") or t.get("inputSchema") or {},
            }
            for t in tools
        ]
    finally:
        await episode.close()
