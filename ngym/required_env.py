"""The environment variables an environment cannot start without: declared, and checked before any slow work.

A server class declares them with what each is (``required_env = {"DIPG_DATASET_PATH": "a JSONL file of dataset
rows"}``), and a config may add its own (``required_env:`` under the instance, a mapping or a list of names);
``ngym install openenv:`` finds them in the environment's code. ``ngym run``, ``validate``, ``prepare`` and
``containerize --run`` check them first and stop with one line naming each missing variable and what it is,
instead of a server that fails minutes later with a timeout that names nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ngym.errors import NgymError

if TYPE_CHECKING:
    from ngym.targets import Environment

#: the config key (of a ``resources_servers`` instance) that adds required variables
CONFIG_KEY = "required_env"


class MissingEnvironmentVariable(NgymError):
    """A variable the environment declares it needs is not set (exit code 2: give it and run again)."""

    exit_code = 2


def _as_mapping(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v or "") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return {str(k): "" for k in value}
    return {}


def declared_env(environment: Environment) -> dict[str, str]:
    """Variable → what it is, for every variable ``environment`` declares (its class's, then its config's).

    The class is imported to read its declaration; one that cannot be imported declares nothing here (the
    command reports the import error itself, better)."""
    declared: dict[str, str] = {}
    with contextlib.suppress(Exception):  # a broken class is reported by the command that loads it
        declared.update(_as_mapping(getattr(environment.server_class, CONFIG_KEY, None)))
    declared.update(_as_mapping(environment.fields.get(CONFIG_KEY)))
    return declared


def missing_env(declared: Mapping[str, str], given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The declared variables ``given`` (default: this process's environment) lacks or leaves empty."""
    source = os.environ if given is None else given
    return {name: what for name, what in declared.items() if not source.get(name)}


def missing_line(name: str, missing: Mapping[str, str], how: str | None = None) -> str:
    """One line naming each missing variable and what it is, and how to give them."""
    named = "; ".join(f"{var} ({what})" if what else var for var, what in missing.items())
    noun = "variable" if len(missing) == 1 else "variables"
    first = next(iter(missing))
    how = how or f"set {'it' if len(missing) == 1 else 'them'} (export {first}=...) and run again"
    return f"{name} needs the environment {noun} {named}, not set here: {how}"


def check_env(environment: Environment, given: Mapping[str, str] | None = None, how: str | None = None) -> None:
    """``MissingEnvironmentVariable`` naming what ``environment`` needs and ``given`` (default: here) lacks."""
    missing = missing_env(declared_env(environment), given)
    if missing:
        raise MissingEnvironmentVariable(missing_line(environment.name, missing, how))


__all__ = ["CONFIG_KEY", "MissingEnvironmentVariable", "check_env", "declared_env", "missing_env", "missing_line"]
