"""Which server a row goes to, read from the run's global config (NeMo Gym's shape:
``instance name → server type → implementation → fields``).

An agent is reached through the environment server that fronts it: an ``environment_servers`` instance whose
fields name the agent (its ``agent_server``, or any field with ``type: responses_api_agents``). NeMo Gym generates
a ``legacy_agent`` relay for an agent no environment server names; that relay forwards ``/run`` and
``/aggregate_metrics`` to the agent unchanged, so ngym sends such an agent's rows to the agent itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from nemo_gym._collection.records import NG_ENVIRONMENT_SERVER_KEY
from nemo_gym.global_config import (
    AGENT_REF_KEY_NAME,
    AGENT_SERVER_TYPE_KEY_NAME,
    RESOURCES_SERVER_TYPE_KEY_NAME,
    TASK_SOURCE_KEY_NAME,
)

ENVIRONMENT_SERVER_TYPE_KEY_NAME = "environment_servers"
AGENT_SERVER_REF_KEY_NAME = "agent_server"


class AgentWithoutEnvironmentServerError(ValueError):
    """An agent no environment server of the run fronts."""


class AmbiguousEnvironmentServerError(ValueError):
    """An agent several environment servers front, reached by a row that names none of them."""


def _instances(global_config: Mapping[str, Any], server_type: str) -> dict[str, Mapping[str, Any]]:
    """Instance name → its one implementation's fields, for the instances of ``server_type``."""
    found = {}
    for name, block in global_config.items():
        group = block.get(server_type) if isinstance(block, Mapping) else None
        if isinstance(group, Mapping):
            fields = next(iter(group.values()), None)
            found[str(name)] = fields if isinstance(fields, Mapping) else {}
    return found


def agents_of_environment_server(fields: Mapping[str, Any]) -> list[str]:
    """The agents one environment server's fields reference: ``agent_server`` (its ``type`` may be left out)
    and every field whose value has ``type: responses_api_agents``."""
    names = []
    for field, ref in fields.items():
        if not isinstance(ref, Mapping) or ref.get("name") is None:
            continue
        if ref.get("type") == AGENT_SERVER_TYPE_KEY_NAME or (
            field == AGENT_SERVER_REF_KEY_NAME and ref.get("type") is None
        ):
            names.append(str(ref["name"]))
    return names


def attributed_agent(fields: Mapping[str, Any]) -> str | None:
    """The agent an environment server's results are attributed to: its ``agent_server``, else its only agent."""
    ref = fields.get(AGENT_SERVER_REF_KEY_NAME)
    if isinstance(ref, Mapping):
        return ref.get("name")
    agents = agents_of_environment_server(fields)
    return agents[0] if len(agents) == 1 else None


def environment_servers_by_agent(global_config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Agent name → the environment servers that front it."""
    by_agent: dict[str, list[str]] = {}
    for server, fields in _instances(global_config, ENVIRONMENT_SERVER_TYPE_KEY_NAME).items():
        for agent in agents_of_environment_server(fields):
            by_agent.setdefault(agent, []).append(server)
    return by_agent


def environment_server_types(global_config: Mapping[str, Any]) -> dict[str, str]:
    """Environment server instance → its implementation's name (``legacy_agent``, ...)."""
    types = {}
    for name, block in global_config.items():
        group = block.get(ENVIRONMENT_SERVER_TYPE_KEY_NAME) if isinstance(block, Mapping) else None
        if isinstance(group, Mapping) and group:
            types[str(name)] = str(next(iter(group)))
    return types


def environment_server_for_agent(agent: str, servers_by_agent: Mapping[str, list[str]]) -> str:
    """The one environment server in front of ``agent``; none or several is an error (NeMo's rule)."""
    servers = servers_by_agent.get(agent, [])
    if len(servers) == 1:
        return servers[0]
    if not servers:
        raise AgentWithoutEnvironmentServerError(
            f"Agent '{agent}' has no environment server, so collection cannot reach it."
        )
    raise AmbiguousEnvironmentServerError(
        f"Agent '{agent}' is fronted by several environment servers: {sorted(servers)}. Rows that route by agent "
        "cannot choose between them. Set environment_routing_mode=legacy with environment_server_name, or route "
        "these rows by taskset."
    )


def dispatch_server_for_agent(agent: str, servers_by_agent: Mapping[str, list[str]]) -> str:
    """Where an agent-routed row's ``/run`` goes: its environment server, or the agent itself when none fronts it."""
    if not servers_by_agent.get(agent):
        return agent
    return environment_server_for_agent(agent, servers_by_agent)


def agent_of_row(row: Mapping[str, Any], global_config: Mapping[str, Any]) -> str | None:
    """The agent a row runs on: the one its environment server is attributed to, else its ``agent_ref``."""
    server = row.get(NG_ENVIRONMENT_SERVER_KEY)
    if isinstance(server, str):
        return attributed_agent(_instances(global_config, ENVIRONMENT_SERVER_TYPE_KEY_NAME).get(server, {}))
    return (row.get(AGENT_REF_KEY_NAME) or {}).get("name")


def assign_agents(rows: list[dict[str, Any]], global_config: Mapping[str, Any]) -> None:
    """Give rows that name no agent one: an environment-server row the agent its server is attributed to (a
    materialized task keeps none, by design), a ``task_source``-only row the agent that runs that source."""
    environment_servers = _instances(global_config, ENVIRONMENT_SERVER_TYPE_KEY_NAME)
    for row in rows:
        if (row.get(AGENT_REF_KEY_NAME) or {}).get("name") is not None:
            continue
        server = row.get(NG_ENVIRONMENT_SERVER_KEY)
        if isinstance(server, str):
            agent = attributed_agent(environment_servers.get(server, {})) if "task_input" not in row else None
        elif row.get(TASK_SOURCE_KEY_NAME) is not None:
            agent = agent_for_task_source(row[TASK_SOURCE_KEY_NAME], global_config)
        else:
            agent = None
        if agent is not None:
            row[AGENT_REF_KEY_NAME] = {"name": agent}


def check_rows_routable(rows: list[dict[str, Any]], global_config: Mapping[str, Any]) -> None:
    """Before anything is sent: :func:`assign_agents`, then fail on an agent or environment server the run's
    config does not declare."""
    environment_servers = _instances(global_config, ENVIRONMENT_SERVER_TYPE_KEY_NAME)
    unknown_servers = sorted(
        {s for row in rows if isinstance(s := row.get(NG_ENVIRONMENT_SERVER_KEY), str)} - set(environment_servers)
    )
    if unknown_servers:
        raise ValueError(f"Environment servers are not present in the running config: {unknown_servers}")
    assign_agents(rows, global_config)
    _check_agents_declared([row for row in rows if NG_ENVIRONMENT_SERVER_KEY not in row], global_config)


def agent_for_task_source(source: str, global_config: Mapping[str, Any]) -> str:
    """The agent that runs rows declared by instance ``source``: the instance itself when it is an agent, else the
    one agent whose ``resources_server`` it is (a dataset's ``agent:`` pin chooses among several)."""
    block = global_config.get(source)
    if not isinstance(block, Mapping):
        close = get_close_matches(source, [str(k) for k in global_config], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"Cannot resolve task_source {source!r} to an agent: not in the running config{hint}")
    if AGENT_SERVER_TYPE_KEY_NAME in block:
        return source
    agents = sorted(
        name
        for name, fields in _instances(global_config, AGENT_SERVER_TYPE_KEY_NAME).items()
        if isinstance(fields.get("resources_server"), Mapping) and fields["resources_server"].get("name") == source
    )
    datasets = _instances(global_config, RESOURCES_SERVER_TYPE_KEY_NAME).get(source, {}).get("datasets")
    pins = sorted({str(d["agent"]) for d in datasets or [] if isinstance(d, Mapping) and d.get("agent")})
    if len(pins) == 1 and (not agents or pins[0] in agents):
        return pins[0]
    if len(agents) == 1:
        return agents[0]
    raise ValueError(
        f"Cannot resolve task_source {source!r} to an agent: {len(agents)} agents reference it "
        f"({agents}); pass agent_map={{{source}: <agent>}} to pick one"
    )


def _check_agents_declared(rows: list[dict[str, Any]], global_config: Mapping[str, Any]) -> None:
    """Fail before dispatch when a row names an agent absent from the run's config (not mid-collection)."""
    if not global_config:
        return  # no config given: names resolve through ngym's own server table at dispatch
    agents = set(_instances(global_config, AGENT_SERVER_TYPE_KEY_NAME))
    requested = {n for row in rows if (n := (row.get(AGENT_REF_KEY_NAME) or {}).get("name")) is not None}
    unknown = sorted(requested - agents)
    if not unknown:
        return
    hints = []
    for name in unknown:
        if name in global_config:
            hints.append(f"{name!r} (exists but is not an agent instance)")
        else:
            close = get_close_matches(name, sorted(agents), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ValueError(
        f"Rows reference agents not present in the running config: {', '.join(hints)}. "
        "Include the agent's config in the run, or re-route with agent_map/agent_name."
    )
