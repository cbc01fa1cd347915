"""What ``ngym containerize --run`` gives the smoke container: ``-e KEY=VALUE`` / ``-e KEY`` and
``-v HOST:CONTAINER[:ro]``, as ``docker run`` takes them (an environment that needs a dataset file and a variable
naming it gets both)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ngym.errors import ConfigError


def parse_env(items: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``KEY=VALUE`` as given, ``KEY`` from this shell (``ConfigError`` when it is not set here)."""
    source = os.environ if environ is None else environ
    parsed: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not key or not key.replace("_", "a").isalnum():
            raise ConfigError(f"-e {item!r}: give KEY=VALUE, or KEY to pass this shell's value")
        if not eq:
            if key not in source:
                raise ConfigError(f"-e {key}: {key} is not set in this shell; give -e {key}=VALUE")
            value = source[key]
        parsed[key] = value
    return parsed


def parse_volumes(items: Iterable[str]) -> list[str]:
    """``HOST:CONTAINER[:ro|rw]`` → ``HOST:CONTAINER:MODE`` with HOST made absolute (the docker SDK's list form;
    ``ConfigError`` when HOST does not exist or CONTAINER is not absolute)."""
    volumes: list[str] = []
    for item in items:
        parts = item.split(":")
        mode = "rw"
        if len(parts) == 3 and parts[2] in ("ro", "rw"):
            mode = parts.pop()
        if len(parts) != 2 or not parts[0] or not parts[1].startswith("/"):
            raise ConfigError(
                f"-v {item!r}: give HOST:CONTAINER[:ro] (CONTAINER an absolute path), e.g. -v ./data:/data:ro "
                "(--verbose shows pip's and docker's output)"
            )
        host = Path(parts[0]).expanduser().resolve()
        if not host.exists():
            raise ConfigError(f"-v {item}: {host} does not exist")
        volumes.append(f"{host}:{parts[1]}:{mode}")
    return volumes


__all__ = ["parse_env", "parse_volumes"]
