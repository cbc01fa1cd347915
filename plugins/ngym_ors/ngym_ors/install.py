"""``ngym install ors:<folder | distribution>``: an Open Reward Standard environment as an ngym one.

- **A folder** laid out as ``orwd init`` makes one: ``server.py`` defining an ``openreward.environments.Environment``
  subclass, and optionally ``requirements.txt`` (its dependencies). The folder is copied beside the environment's
  record (the installed environment does not depend on the folder staying where it was).
- **A distribution** on the package index (a pip requirement) whose top-level module defines the environment.

Options (``-o KEY=VALUE``): ``module=NAME`` (the module defining it: default ``server`` for a folder, the
distribution's own module otherwise), ``environment=CLASS`` (when the module defines several), ``max_tasks=N``
(rows written per split, default 1000), ``max_rollouts=N`` (example rollouts recorded, default 5: ``examples``).

The environment runs in a virtualenv of its own under ``$NGYM_CACHE_DIR/ors/venvs`` (default
``~/.cache/ngym/ors/venvs``), keyed on what pip installs into it from the package index (``openreward`` at the
version ngym is tested with, unless the environment pins one, plus its requirements) and the interpreter: the
same environment reinstalled, or two environments with the same requirements, reuse one venv (seconds, not
minutes). ngym's own interpreter never imports ``openreward``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngym import Domain, NgymError
from ngym.plugin_api import cache_dir
from ngym_ors import records
from ngym_ors.examples import record_rollouts
from ngym_ors.inner_server import InnerError, InnerServer

PREFIX = "ors:"
#: the openreward release ngym's ORS front and this plugin are tested with (tools/trainer-requirements.txt)
OPENREWARD = "openreward==0.1.167"
COMPLETE = ".ngym-complete"
OPTIONS = ("module", "environment", "max_tasks", "max_rollouts")
Echo = Callable[[str], None]


class OrsInstallError(NgymError):
    """The environment could not be installed (the message says why and what to do)."""

    exit_code = 2


@dataclass(frozen=True)
class Source:
    kind: str  # "folder" | "distribution"
    folder: Path | None
    requirements: tuple[str, ...]  # what pip installs from the package index
    module: str
    distribution: str | None


def parse_source(text: str, options: dict[str, str]) -> Source:
    """Read ``ors:<folder | distribution>`` (bad input: one readable error, before any venv or pip work)."""
    spec = text.removeprefix(PREFIX).strip()
    if not spec:
        raise OrsInstallError("give what to install: ors:<folder with server.py> or ors:<distribution>")
    path = Path(spec).expanduser()
    if path.is_dir():
        module = options.get("module", "server")
        if not (path / f"{module}.py").is_file() and not (path / module / "__init__.py").is_file():
            raise OrsInstallError(
                f"{path}: an ORS environment folder has {module}.py defining an openreward Environment (none here;"
                " -o module=NAME names another module)"
            )
        requirements: list[str] = []
        listed = path / "requirements.txt"
        if listed.is_file():
            requirements = [
                line.split("#", 1)[0].strip()
                for line in listed.read_text(encoding="utf-8").splitlines()
                if line.split("#", 1)[0].strip()
            ]
            if any(line.startswith("-") for line in requirements):
                raise OrsInstallError(f"{listed}: only requirement lines are read (no pip options such as -r, -e)")
        return Source("folder", path.resolve(), _with_openreward(requirements), module, None)
    if spec.startswith((".", "/", "~")) or "/" in spec:
        raise OrsInstallError(f"{spec}: no such folder")
    match = re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*", spec)
    if not match:
        raise OrsInstallError(f"{spec!r} is neither a folder nor a distribution name")
    distribution = match.group(0)
    module = options.get("module") or re.sub(r"[^A-Za-z0-9_]", "_", distribution).lower()
    return Source("distribution", None, _with_openreward([spec]), module, distribution)


def _requirement_name(requirement: str) -> str:
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def _with_openreward(requirements: list[str]) -> tuple[str, ...]:
    named = any(_requirement_name(r) == "openreward" for r in requirements)
    return tuple(requirements if named else [*requirements, OPENREWARD])


def venvs_dir() -> Path:
    return cache_dir() / "ors" / "venvs"


def venv_for(requirements: tuple[str, ...]) -> Path:
    """One venv per requirement set and interpreter, whoever asks for it."""
    key = "|".join([*sorted(requirements), str(sys.version_info[:2]), sys.base_prefix])
    slug = re.sub(r"[^A-Za-z0-9]+", "_", sorted(requirements)[0])[:40].strip("_") or "env"
    return venvs_dir() / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


@contextlib.contextmanager
def _locked(venv: Path, echo: Echo) -> Iterator[None]:
    """One install into a venv at a time (two test runs, or two users, installing the same requirements)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f".{venv.name}.lock").open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            echo(f"ngym: waiting for another install into {venv}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _run(command: list[str], what: str, *, verbose: bool = False, timeout: float | None = None) -> str:
    try:
        done = subprocess.run(command, capture_output=not verbose, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise OrsInstallError(f"{what} did not finish in {timeout:g} s") from None
    if done.returncode:
        lines = [line for line in ((done.stdout or "") + (done.stderr or "")).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-6:]
        raise OrsInstallError(f"{what} failed (exit {done.returncode}): " + " | ".join(errors[-6:]))
    return done.stdout or ""


def ensure_venv(source: Source, *, verbose: bool, echo: Echo) -> Path:
    """The venv's interpreter, made and pip-installed the first time (a finished venv is reused as it is)."""
    venv = venv_for(source.requirements)
    python = venv / "bin" / "python"
    with _locked(venv, echo):
        if (venv / COMPLETE).is_file() and python.exists():
            return python
        echo(f"ngym: making the environment's own virtualenv {venv} (the first time takes a minute or two)")
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], "making the virtualenv")
        echo(f"ngym: installing {' '.join(source.requirements)} into it")
        _run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *source.requirements],
            "pip install",
            verbose=verbose,
        )
        (venv / COMPLETE).write_text("\n".join(source.requirements) + "\n")
    return python


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def example_rows(described: dict[str, Any]) -> list[dict[str, Any]]:
    """One dataset row per task: what ``/seed_session`` seeds from (``ors``), the prompt and the tools as NeMo
    Gym's Responses input, so ``ngym validate``, ``rollout`` and ``profile`` (and the ``/ors`` front) read them."""
    tools = [
        {
            "type": "function",
            "name": tool["name"],
            "description": tool.get("description") or "",
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
            "strict": False,
        }
        for tool in described["tools"]["tools"]
    ]
    rows = []
    for split in described["splits"]:
        for task in described["tasks"].get(split["name"], []):
            rows.append(
                {
                    "ors": {"split": split["name"], "index": task["index"]},
                    "responses_create_params": {
                        "input": [{"role": "user", "content": task["prompt"]}],
                        **({"tools": tools} if tools else {}),
                    },
                }
            )
    return rows


def write_rows(data: Path, rows: list[dict[str, Any]]) -> None:
    """``data/example.jsonl`` (every row: what ``ngym validate``, ``rollout`` and ``profile`` read) and one file per
    ORS split under ``data/splits/`` (what ngym's ``/ors`` front serves as that split, in the environment's order)."""
    (data / "splits").mkdir(parents=True, exist_ok=True)
    with (data / "example.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    for split in dict.fromkeys(row["ors"]["split"] for row in rows):
        with (data / "splits" / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows if row["ors"]["split"] == split)


@dataclass(frozen=True)
class _Made:
    """What an install knows before the environment describes itself."""

    source: Source
    python: Path
    text: str
    as_name: str | None
    domain: Domain


async def _describe_and_record(
    made: _Made, spec: dict[str, Any], max_rollouts: int
) -> tuple[records.Record, list[dict[str, Any]], list[dict[str, Any]]]:
    """One start of the environment's own server: what it is (its record and rows, written), then its example
    rollouts played on it."""
    server = await InnerServer.launch(str(made.python), spec, "the environment", describe=True)
    try:
        record, rows = _record(made, server.described())
        server.env_name = record.env_name
        return record, rows, await record_rollouts(server, record, rows, max_rollouts)
    finally:
        await server.stop()


def _record(made: _Made, described: dict[str, Any]) -> tuple[records.Record, list[dict[str, Any]]]:
    """The record of a described environment; its folder (a copy of a folder's code, its rows) written."""
    name = made.as_name or snake(str(described["class"]))
    if not records.NAME.match(name):
        raise InnerError(f"{name!r} is not a usable environment name: give one with --as NAME")
    folder = records.folder_of(name)
    shutil.rmtree(folder, ignore_errors=True)
    path = None
    if made.source.folder is not None:
        copy = folder / "source"
        ignored = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc")
        shutil.copytree(made.source.folder, copy, ignore=ignored)
        path = str(copy)
    rows = example_rows(described)
    write_rows(folder / "data", rows)
    tools = described["tools"]
    record = records.Record(
        name=name,
        python=str(made.python),
        source=made.text,
        module=made.source.module,
        environment=str(described["class"]),
        env_name=str(described["env_name"]),
        domain=made.domain.value,
        path=path,
        distribution=made.source.distribution,
        tools=list(tools["tools"]),
        terminal_tool=tools.get("terminal_tool"),
        splits=list(described["splits"]),
        num_tasks=dict(described["num_tasks"]),
        description=(str(described["doc"]).splitlines() or [f"ORS environment {described['class']}"])[0],
        openreward=str(described.get("openreward", "")),
    )
    return record, rows


def install_source(
    text: str,
    *,
    as_name: str | None = None,
    domain: str | None = None,
    options: dict[str, str] | None = None,
    verbose: bool = False,
    echo: Echo = print,
) -> records.Record:
    """Install one ORS environment and record it for ngym's registry; the record."""
    options = dict(options or {})
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise OrsInstallError(f"unknown option(s) {', '.join(sorted(unknown))}: ors: reads {', '.join(OPTIONS)}")
    try:
        max_rollouts = int(options.get("max_rollouts", "5"))
        int(options.get("max_tasks", "1000"))
    except ValueError:
        raise OrsInstallError("-o max_tasks=N and -o max_rollouts=N take a whole number") from None
    try:
        resolved = Domain.parse(domain or "agent")
    except ValueError as exc:
        raise OrsInstallError(str(exc)) from None
    if as_name is not None and not records.NAME.match(as_name):
        raise OrsInstallError(f"{as_name!r} is not a usable environment name (letters, digits, _)")
    source = parse_source(text, options)
    python = ensure_venv(source, verbose=verbose, echo=echo)
    spec: dict[str, Any] = {
        "path": str(source.folder) if source.folder else None,
        "module": source.module,
        "environment": options.get("environment"),
        "max_tasks": options.get("max_tasks"),
    }
    echo(f"ngym: asking {source.module} what it serves (its tools, splits, tasks and prompts), on its own server")
    made = _Made(source, python, text, as_name, resolved)
    try:
        record, rows, rollouts = asyncio.run(_describe_and_record(made, spec, max_rollouts))
    except InnerError as exc:
        raise OrsInstallError(str(exc)) from None
    name, folder = record.name, records.folder_of(record.name)
    rollouts_file = folder / "data" / "example_rollouts.jsonl"
    rollouts_file.write_text("".join(json.dumps(r) + "\n" for r in rollouts), encoding="utf-8")
    if not rollouts:
        rollouts_file.unlink()
    records.write(record)
    names = ", ".join(t["name"] for t in record.tools) or "none"
    terminal = f"; terminal tool: {record.terminal_tool['name']}" if record.terminal_tool else ""
    splits = ", ".join(f"{s['name']} ({record.num_tasks.get(s['name'], 0)})" for s in record.splits)
    echo(f"ngym: installed {name} (ORS environment {record.environment}; tools: {names}{terminal}; splits: {splits})")
    echo(
        f"ngym: {len(rows)} dataset rows, {len(rollouts)} recorded rollouts (the shortest episode that ends, with the"
        f" reward the environment gave it) in {folder / 'data'}"
    )
    echo(f"      try: ngym run {name} | ngym validate {name} | ngym rollout {name} ...")
    return record


def uninstall(name: str, *, echo: Echo = print) -> bool:
    """Remove installed environment ``name`` (its record, data, copy and venv); False when it is not one of ours."""
    try:
        record = records.read(name)
    except KeyError:
        return False
    records.remove(name)
    venv = Path(record.python).parent.parent
    if any(other.python == record.python for other in records.all_records()):
        kept = "kept: other environments use it"
    elif venv.parent != venvs_dir():
        kept = "kept: not in ngym's cache"
    else:
        shutil.rmtree(venv, ignore_errors=True)
        kept = "removed"
    echo(f"ngym: uninstalled {name} (ORS environment; its virtualenv {venv} {kept})")
    return True
