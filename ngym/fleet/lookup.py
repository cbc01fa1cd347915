"""Find a server of a running fleet by name, through its head server, as NeMo Gym's clients do.

``ngym rollout NAME --fleet FLEET`` and ``ngym profile NAME --fleet FLEET`` call :func:`server_url`. FLEET is
the head server's URL (``http://host:port``, what ``ngym up`` prints), the fleet file, or the fleet's state dir
(``.ngym-fleet/<name>``); a file or dir only says where the head server is (its ``state.json``). The name is
then looked up in the global config the head server serves on ``GET /global_config_dict_yaml``: the route and
shape NeMo Gym's ``ServerClient.load_from_global_config`` reads (a JSON string holding the YAML text), so a name
resolves to exactly the address NeMo Gym's collector would use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import yaml

from ngym.errors import ConfigError
from ngym.suggest import did_you_mean

if TYPE_CHECKING:
    from ngym.fleet.state import FleetState

#: Top-level keys of a global config that are settings, not servers.
_NOT_SERVERS = ("head_server", "dry_run")
#: Addresses that mean "every interface" when a server listens there; a client reaches them at the head's host.
_ANY_HOST = ("0.0.0.0", "::", "")


class FleetLookupError(ConfigError):
    """The fleet's head server cannot be found or reached, or it names no such server (exit code 2)."""


def head_url(fleet: str) -> str:
    """The head server's base URL from ``--fleet``: a URL as given, else read from the fleet's ``state.json``."""
    if fleet.startswith(("http://", "https://")):
        return fleet.rstrip("/")
    state = local_state(fleet)
    assert state is not None
    return f"http://{_reachable(state.head.host, '127.0.0.1')}:{state.head.port}"


def local_state(fleet: str) -> FleetState | None:
    """The saved state of the fleet ``--fleet`` names by its file or state dir (None for a head server's URL);
    a FleetLookupError when it names none or the fleet is not up."""
    if fleet.startswith(("http://", "https://")):
        return None
    # imported here: reading a fleet file pulls in the spec's models, which a URL never needs
    from ngym.fleet.engines import HandOff, engine
    from ngym.fleet.spec import load_fleet
    from ngym.fleet.state import FleetState

    path = Path(fleet)
    if path.is_dir():
        state_dir, what = path, f"state dir {path}"
    elif path.is_file():
        spec = load_fleet(path)
        runs = engine(spec.engine)
        if isinstance(runs, HandOff):  # another system runs it: no state here
            raise FleetLookupError(
                f"--fleet {fleet}: fleet {spec.name!r} runs in {runs.runner(spec)}; "
                "give its head server's URL instead (--fleet http://HOST:PORT)"
            )
        state_dir, what = spec.state_dir(), f"fleet {spec.name!r}"
    else:
        raise FleetLookupError(
            f"--fleet {fleet}: no such fleet file or state dir (give the fleet file, its .ngym-fleet/NAME dir, "
            "or the head server's URL http://HOST:PORT)"
        )
    state = FleetState.load(state_dir)
    if state is None:
        raise FleetLookupError(f"--fleet {fleet}: {what} is not up (no state.json in {state_dir}); `ngym up` it")
    return state


def global_config(head: str, timeout: float = 10.0) -> dict[str, Any]:
    """The global config the head server at ``head`` serves (NeMo Gym's route and encoding)."""
    try:
        response = httpx.get(f"{head}/global_config_dict_yaml", timeout=timeout)
    except httpx.HTTPError as exc:
        raise FleetLookupError(
            f"no fleet head server answers at {head} ({type(exc).__name__}): is the fleet up (`ngym status`)?"
        ) from None
    if response.status_code != 200:
        raise FleetLookupError(f"the head server at {head} answered {response.status_code}{_detail(response)}")
    try:
        text = json.loads(response.text)  # NeMo Gym's head server returns the YAML text as a JSON string
        config = yaml.safe_load(text) if isinstance(text, str) else None
    except (ValueError, yaml.YAMLError):
        config = None
    if not isinstance(config, dict):
        raise FleetLookupError(
            f"{head}/global_config_dict_yaml is not a global config (is it a NeMo/ngym head server?)"
        )
    return config


def server_url(fleet: str, name: str, server_type: str = "resources_servers") -> str:
    """The base URL of the server ``name`` of the fleet ``fleet`` (see the module docstring).

    Only servers of ``server_type`` qualify (an environment is a ``resources_servers`` entry); an unknown name
    is a :class:`FleetLookupError` listing the fleet's servers of that type, with a "did you mean".
    """
    head = head_url(fleet)
    config = global_config(head)
    servers = {n: _address(entry, server_type) for n, entry in config.items() if n not in _NOT_SERVERS}
    known = sorted(n for n, address in servers.items() if address is not None)
    address = servers.get(name)
    if address is None:
        if name in servers:
            raise FleetLookupError(
                f"{name!r} in the fleet at {head} is not an environment ({server_type}) with a host and port"
            )
        listing = ", ".join(known) if known else "none"
        raise FleetLookupError(
            f"the fleet at {head} has no environment {name!r}{did_you_mean(name, known)} (it has: {listing})"
        )
    host, port = address
    return f"http://{_reachable(host, urlsplit(head).hostname or '127.0.0.1')}:{port}"


def _detail(response: httpx.Response) -> str:
    """``": <detail>"`` of an error answer (FastAPI's ``{"detail": ...}``, else its first line), or ``""``."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = str(detail) if detail else (response.text.strip().splitlines() or [""])[0]
    return f": {text[:200]}" if text else ""


def _address(entry: Any, server_type: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``{server_type: {implementation: {host, port, ...}}}``, else None."""
    if not isinstance(entry, dict) or not isinstance(entry.get(server_type), dict):
        return None
    implementations = [i for i in entry[server_type].values() if isinstance(i, dict)]
    if len(implementations) != 1:
        return None
    host, port = implementations[0].get("host"), implementations[0].get("port")
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
        return None
    return host, port


def _reachable(host: str, instead: str) -> str:
    """``host`` as a client dials it: a wildcard listen address becomes ``instead``; IPv6 gets brackets."""
    if host in _ANY_HOST:
        host = instead
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def fleet_target(target: str, fleet: str | None) -> str:
    """``ngym rollout``/``ngym profile``'s TARGET: with ``--fleet``, the URL of the fleet's environment named so."""
    if fleet is None:
        return target
    if target.startswith(("http://", "https://")):
        raise FleetLookupError(
            f"with --fleet, TARGET is the name of one of the fleet's environments, not a URL ({target})"
        )
    return server_url(fleet, target)
