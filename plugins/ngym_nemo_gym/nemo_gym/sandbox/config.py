"""Which sandbox provider to use: a name of a top-level config block, or an inline ``{provider: {...}}`` mapping.

A block holds exactly one provider key, plus optionally ``default_metadata`` (defaults for
``SandboxSpec.metadata``)::

    sandbox:
      docker: {}
      default_metadata: {team: rl}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

DEFAULT_METADATA_KEY = "default_metadata"


def _plain(value: Any) -> Any:
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return dict(value) if isinstance(value, Mapping) else value


def _block(sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None) -> tuple[Any, str]:
    if isinstance(sandbox_provider, str):
        if not sandbox_provider:
            raise ValueError("Sandbox provider reference must be a non-empty string")
        block = named_configs.get(sandbox_provider) if named_configs is not None else None
        if block is None:
            candidates = sorted(
                str(name)
                for name, value in (named_configs or {}).items()
                if isinstance(_plain(value), Mapping) and len(set(_plain(value)) - {DEFAULT_METADATA_KEY}) == 1
            )
            raise ValueError(
                f"Sandbox provider reference {sandbox_provider!r} is not defined in the merged config. Define a "
                f"top-level '{sandbox_provider}:' block and include it in your config_paths. Available sandbox "
                f"configs: {', '.join(repr(c) for c in candidates) or '(none)'}"
            )
        block, source = _plain(block), f"reference {sandbox_provider!r}"
    elif isinstance(sandbox_provider, Mapping):
        block, source = _plain(sandbox_provider), "inline sandbox_provider config"
    else:
        raise TypeError(
            "sandbox_provider must be a name reference (str) or a single-key provider mapping, "
            f"got {type(sandbox_provider).__name__}"
        )
    if not isinstance(block, Mapping):
        raise ValueError(f"Sandbox provider config from {source} must be a mapping, got: {block!r}")
    return block, source


def resolve_provider_config(
    sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``{provider_name: provider_kwargs}`` for ``create_provider`` (``default_metadata`` left out)."""
    block, source = _block(sandbox_provider, named_configs)
    keys = [key for key in block if key != DEFAULT_METADATA_KEY]
    if len(keys) != 1:
        raise ValueError(
            f"Sandbox provider config from {source} must have exactly one provider key {{provider_name: config}}, "
            f"got keys: {keys!r}"
        )
    return {keys[0]: block[keys[0]]}


def resolve_provider_metadata(
    sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The block's ``default_metadata`` (``{}`` when it has none)."""
    block, source = _block(sandbox_provider, named_configs)
    metadata = block.get(DEFAULT_METADATA_KEY) or {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"Sandbox '{DEFAULT_METADATA_KEY}' from {source} must be a mapping, got: {metadata!r}")
    return dict(metadata)
