"""The registration rules every resources server must meet, checked without loading the plugin system.

The registry applies them when a plugin registers a server; ``ngym run`` applies them again to the class it
is about to serve (a served class may have been edited since it was registered, and the start-up should not
pay for pluggy to find that out).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from ngym.domain import Domain
from ngym.errors import PluginError

if TYPE_CHECKING:
    from ngym.server.resources import BaseResourcesServerConfig


def validate_server_class(
    server_class: Any,
    *,
    name: str,
    domain: Domain | str | None = None,
    config_fields: dict[str, Any] | None = None,
) -> tuple[Domain, type[BaseResourcesServerConfig]]:
    """Check the registration rules for one server class; return its domain and config class.

    Raises ``PluginError`` with a message saying what to change.
    """
    from pydantic import ValidationError

    from ngym.server.resources import BaseResourcesServerConfig, SimpleResourcesServer

    if not (isinstance(server_class, type) and issubclass(server_class, SimpleResourcesServer)):
        raise PluginError(f"{name}: {server_class!r} is not a SimpleResourcesServer subclass")
    cls_name = server_class.__name__
    declared = [d for d in (domain, server_class.domain, (config_fields or {}).get("domain")) if d is not None]
    if not declared:
        valid = ", ".join(d.value for d in Domain)
        raise PluginError(f"{name}: {cls_name} declares no domain: set `domain = Domain.X` (one of {valid})")
    parsed: list[Domain] = []
    for value in declared:
        try:
            parsed.append(Domain.parse(value))
        except ValueError as exc:
            raise PluginError(f"{name}: {cls_name}: {exc}") from None
    if len(set(parsed)) > 1:
        shown = " vs ".join(sorted({d.value for d in parsed}))
        raise PluginError(f"{name}: {cls_name} declares conflicting domains ({shown})")
    resolved = parsed[0]
    try:
        config_class = server_class.config_class()
    except (TypeError, KeyError) as exc:
        raise PluginError(f"{name}: {cls_name}: {exc}") from None
    if not issubclass(config_class, BaseResourcesServerConfig):
        raise PluginError(f"{name}: {cls_name}.config must be a BaseResourcesServerConfig subclass")
    fields = {**(config_fields or {}), "name": name, "domain": resolved}
    try:
        config_class.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise PluginError(
            f"{name}: config class {config_class.__name__} does not validate with its defaults: {problems}"
        ) from None
    verify = getattr(server_class, "verify", None)
    if verify is None or verify is SimpleResourcesServer.verify:
        raise PluginError(f"{name}: {cls_name} does not implement verify() (it must score every rollout)")
    if not inspect.iscoroutinefunction(verify):
        raise PluginError(f"{name}: {cls_name}.verify must be `async def`")
    return resolved, config_class


__all__ = ["validate_server_class"]
