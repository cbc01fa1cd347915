"""Sandbox providers by name: registered in process, built in (``local``, ``docker``), or published by another
distribution under the ``nemo_gym.sandbox_providers`` entry-point group (NeMo Gym's group name)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from nemo_gym.sandbox.providers.base import (
    ConnectableProvider,
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxPtyError,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPauseResume,
)

__all__ = [
    "ConnectableProvider",
    "ExecResult",
    "SandboxCreateError",
    "SandboxCreateVerificationError",
    "SandboxEndpoint",
    "SandboxExecResult",
    "SandboxHandle",
    "SandboxProvider",
    "SandboxPtyError",
    "SandboxResources",
    "SandboxSpec",
    "SandboxStatus",
    "SupportsSandboxEndpoint",
    "SupportsSandboxPauseResume",
    "create_provider",
    "get_provider_class",
    "list_providers",
    "register_provider",
]

ENTRY_POINT_GROUP = "nemo_gym.sandbox_providers"
_registered: dict[str, type[SandboxProvider]] = {}


def _local() -> type[SandboxProvider]:
    from nemo_gym.sandbox.providers.local import LocalProvider

    return LocalProvider


def _docker() -> type[SandboxProvider]:
    from nemo_gym.sandbox.providers.docker import DockerProvider

    return DockerProvider


_BUILT_IN: dict[str, Callable[[], type[SandboxProvider]]] = {"local": _local, "docker": _docker}


def _published() -> dict[str, Callable[[], type[SandboxProvider]]]:
    found: dict[str, Callable[[], type[SandboxProvider]]] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in found:
            raise ValueError(f"Two distributions publish sandbox provider {entry.name!r}: rename one of them")
        found[entry.name] = entry.load
    return found


def register_provider(name: str, provider_class: type[SandboxProvider], *, override: bool = False) -> None:
    if not name:
        raise ValueError("Provider name must be non-empty")
    if not override and (name in _registered or name in _BUILT_IN):
        raise ValueError(f"Sandbox provider {name!r} is already registered")
    _registered[name] = provider_class


def get_provider_class(name: str) -> type[SandboxProvider]:
    """The provider class of ``name``: registered first, then built in, then published."""
    if name in _registered:
        return _registered[name]
    loader = _BUILT_IN.get(name) or _published().get(name)
    if loader is None:
        raise ValueError(f"Unknown sandbox provider {name!r}. Available providers: {', '.join(list_providers())}")
    return loader()


def list_providers() -> list[str]:
    return sorted({*_registered, *_BUILT_IN, *_published()})


def create_provider(config: Mapping[str, Any]) -> SandboxProvider:
    """A provider from ``{name: keyword arguments}``."""
    if len(config) != 1:
        raise ValueError("Sandbox provider config must contain exactly one provider name")
    name, options = next(iter(config.items()))
    if not isinstance(name, str) or not name:
        raise ValueError("Sandbox provider name must be a non-empty string")
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"Sandbox provider {name!r} config must be a mapping")
    return get_provider_class(name)(**dict(options or {}))
