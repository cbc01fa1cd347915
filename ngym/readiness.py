"""What an installed environment still needs before it can serve a rollout, and the steps ngym can run for it.

An environment can install and pass its own tests yet fail every ``/reset`` (NeMo Gym's wordle:
``guesses.txt not found. Run python resources_servers/wordle/generate_data.py first.``). ``ngym install``,
``ngym run``, ``ngym validate`` and ``ngym containerize --run`` say what is missing with these checks, read from
the environment's folder and config without starting it; ``ngym prepare NAME`` runs the one step ngym can run
(a data-preparation script). The kinds are those of the NeMo Gym environments table
(docs/nemo-gym-environments.md): prepared data, a config value, credentials, a GPU.

Prepared data: a script in the environment's folder (``generate_data.py``, ``prepare_data.py``, …) that its
server code names in the error it raises without the data (a line saying "not found", "missing", "… first")
is a step still to run until ``ngym prepare`` ran it successfully, which leaves ``PREPARED_MARKER`` in the
folder. A script only a docstring mentions ("build datasets with prepare_x.py") is a dataset-building tool,
not a need: of NeMo Gym 0.7.0's 145 environments, wordle is the one this finds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngym.errors import NgymError
from ngym.required_env import declared_env, missing_env
from ngym.targets import resolve

#: Left in an environment's folder by a successful ``ngym prepare`` (its content: the script that ran).
PREPARED_MARKER = ".ngym-prepared"
#: Scripts that make an environment's data, as environments name them.
_PREP_SCRIPT = re.compile(r"\b((?:generate|prepare|download|build)_?\w*\.py)\b")
#: Words of the error an environment raises without its data, on the line that names the script.
_SAYS_MISSING = re.compile(r"not found|does not exist|missing|\bfirst\b", re.I)
#: Config keys that hold a secret.
_CREDENTIAL_KEY = re.compile(r"(api_key|apikey|token|secret|password)$", re.I)
#: Requirements that need a CUDA GPU.
_GPU_REQUIREMENT = re.compile(r"^\s*(vllm|nvidia-[\w-]+|flash[-_]attn|xformers)\b", re.I | re.M)


@dataclass(frozen=True)
class Need:
    """One thing the environment still needs: its kind (the table's words), what exactly, and the command
    that provides it when ngym can run it."""

    kind: str
    detail: str
    command: str | None = None

    def sentence(self, name: str) -> str:
        how = f": run `{self.command}`" if self.command else ""
        return f"{name} still needs {self.kind} ({self.detail}){how}"


def prep_script(folder: Path | None) -> Path | None:
    """The data-preparation script the environment's server code names, when it has not run yet."""
    if folder is None or not folder.is_dir() or (folder / PREPARED_MARKER).is_file():
        return None
    for source in sorted(folder.glob("*.py")):
        if _PREP_SCRIPT.fullmatch(source.name):
            continue
        try:
            text = source.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if not _SAYS_MISSING.search(line):
                continue  # a docstring's "build datasets with prepare_x.py" is a tool, not a need
            for match in _PREP_SCRIPT.finditer(line):
                script = folder / match.group(1)
                if script.is_file() and script != source:
                    return script
    return None


def needs(name: str, folder: Path | None, fields: dict[str, Any]) -> list[Need]:
    """What ``name`` (its folder and config fields) still needs before it serves a rollout; empty when ready."""
    found: list[Need] = []
    script = prep_script(folder)
    if script is not None:
        found.append(Need("prepared data", f"its data comes from {script.name}", f"ngym prepare {name}"))
    for key, value in sorted(fields.items()):
        if _CREDENTIAL_KEY.search(key) and value in (None, "", "???"):
            found.append(Need("credentials", f"{key} is unset: give it as {key}=VALUE"))
        elif value == "???":
            found.append(Need("a config value", f"{key} is '???': give it as {key}=VALUE"))
    requirements = folder / "requirements.txt" if folder is not None else None
    if requirements is not None and requirements.is_file():
        gpu = _GPU_REQUIREMENT.search(requirements.read_text(errors="replace"))
        if gpu:
            found.append(Need("a GPU", f"requires {gpu.group(1)}"))
    return found


def needs_of(target: str, *, variables: bool = True) -> list[str]:
    """What the environment ``target`` names still needs, as sentences; none when it does not resolve (the
    command reports that itself, better). ``variables``: with the declared environment variables this shell
    lacks (``ngym.required_env``; not for a container, which gets its own with ``-e``)."""
    try:
        environment = resolve(target)
    except NgymError:
        return []
    found = needs(environment.name, environment.folder, environment.fields)
    if variables:
        unset = missing_env(declared_env(environment))
        found += [Need(f"the environment variable {var}", what or "unset", None) for var, what in unset.items()]
    return [need.sentence(environment.name) for need in found]


class PrepareError(Exception):
    """``ngym prepare`` had nothing to run, or the step failed."""


def prepare(name: str, folder: Path | None) -> Path:
    """Run ``name``'s data-preparation script with this interpreter, from its folder; the script that ran.

    Raises PrepareError (with the last line the script printed) when there is none or it fails; on success the
    folder gets ``PREPARED_MARKER`` so nothing asks for the step again.
    """
    script = prep_script(folder)
    if script is None or folder is None:
        marker = folder / PREPARED_MARKER if folder is not None else None
        done = marker is not None and marker.is_file()
        raise PrepareError(
            f"{name}: already prepared ({marker.read_text().strip()} ran)"
            if done and marker is not None
            else f"{name} has no data-preparation step ngym can run"
        )
    result = subprocess.run([sys.executable, script.name], cwd=folder, capture_output=True, text=True)
    if result.returncode:
        lines = (result.stderr or result.stdout).strip().splitlines() or [f"exit code {result.returncode}"]
        raise PrepareError(f"{name}: {script.name} failed (exit {result.returncode}): {lines[-1][:300]}")
    (folder / PREPARED_MARKER).write_text(script.name + "\n")
    return script


__all__ = ["PREPARED_MARKER", "Need", "PrepareError", "needs", "needs_of", "prep_script", "prepare"]
