"""The registration rules every resources server must meet.

The registry applies them when a plugin registers a server; ``ngym run`` (``ngym.server.pipeline.app.build_server``)
applies them again to the class it is about to serve: a served class may have been edited since it was
registered, and a broken one should be refused with the reason, not served as 500s.
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import ValidationError

from ngym.domain import Domain, resolve_domain
from ngym.errors import NgymError, PluginError
from ngym.server.pipeline.resources import BaseResourcesServerConfig, SimpleResourcesServer


def validate_server_class(
    server_class: Any,
    *,
    name: str,
    domain: Domain | str | None = None,
    config_fields: dict[str, Any] | None = None,
    config_error: type[NgymError] = PluginError,
) -> tuple[Domain, type[BaseResourcesServerConfig]]:
    """Check the registration rules for one server class; return its domain and config class.

    The domain is the one ``resolve_domain`` decides from ``domain`` (the registration's), the class's and
    the config's. Raises ``PluginError`` saying what to change; a wrong domain or config field raises
    ``config_error`` instead (``ngym run`` passes ``ConfigError``: the user's config is what to fix).
    """
    if not (isinstance(server_class, type) and issubclass(server_class, SimpleResourcesServer)):
        raise PluginError(f"{name}: {server_class!r} is not a SimpleResourcesServer subclass")
    cls_name = server_class.__name__
    try:
        resolved = resolve_domain(domain, server_class.domain, (config_fields or {}).get("domain"))
    except ValueError as exc:
        raise config_error(f"{name}: {cls_name}: {exc}") from None
    if resolved is None:
        valid = ", ".join(d.value for d in Domain)
        raise config_error(
            f"{name}: {cls_name} declares no domain: set `domain = Domain.X` on the class or `domain:` in its "
            f"config (one of {valid})"
        )
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
        given = "its config" if config_fields else "its defaults"
        config_name = config_class.__name__
        raise config_error(f"{name}: config class {config_name} does not validate with {given}: {problems}") from None
    verify = getattr(server_class, "verify", None)
    if verify is None or verify is SimpleResourcesServer.verify:
        raise PluginError(f"{name}: {cls_name} does not implement verify() (it must score every rollout)")
    if not inspect.iscoroutinefunction(verify):
        raise PluginError(f"{name}: {cls_name}.verify must be `async def`")
    return resolved, config_class


__all__ = ["validate_server_class"]
