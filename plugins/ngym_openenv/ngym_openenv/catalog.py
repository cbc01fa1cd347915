"""``ngym list --available openenv``: OpenEnv environment distributions on the package index, as it answers now.

The package index has no search, so the candidates are the OpenEnv environment distributions known when this
plugin was released (``KNOWN``; OpenEnv's own ``envs/`` are published as Spaces and images, not on the index)
plus any named in ``$NGYM_OPENENV_CATALOG`` (comma-separated). Each is looked up on the index
(``$NGYM_PYPI_JSON_URL``, default PyPI's JSON API): the row says whether it is reachable, its newest version,
its summary, and its domain where its keywords name one.

OpenEnv's own environments are folders of its repository (``envs/``), installed by folder: with
``$NGYM_OPENENV_ENVS`` naming such a folder (a checkout's ``envs/``; several joined by ``:``), each of its
environment folders (those with an ``openenv.yaml``) is listed too, by path, with the domain its ``openenv.yaml``
or ``pyproject.toml`` keywords name; else the row says ``--domain`` is needed and, for OpenEnv's own
environments, which one fits (``FOLDER_DOMAINS``).
"""

from __future__ import annotations

import os
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import yaml

from ngym import Domain

#: OpenEnv environments published on the package index as distributions (``openenv-*`` with an OpenEnv app).
KNOWN = ("openenv-dipg-safety",)
CATALOG_ENV = "NGYM_OPENENV_CATALOG"
INDEX_ENV = "NGYM_PYPI_JSON_URL"
FOLDERS_ENV = "NGYM_OPENENV_ENVS"
#: The ngym domain that fits each of OpenEnv's own environments (their openenv.yaml names none), by folder name
#: (OpenEnv's repository, June 2026): suggested by ``--available`` and used by ``make openenv-sweep``.
FOLDER_DOMAINS = {
    "agent_world_model_env": "agent",
    "atari_env": "games",
    "browsergym_env": "agent",
    "calendar_env": "agent",
    "chess_env": "games",
    "coding_env": "coding",
    "coding_tools_env": "coding",
    "connect4_env": "games",
    "dipg_safety_env": "safety",
    "finqa_env": "knowledge",
    "git_env": "agent",
    "grid_world_env": "games",
    "julia_env": "coding",
    "jupyter_env": "coding",
    "kernrl": "coding",
    "maze_env": "games",
    "openapp_env": "agent",
    "opencode_env": "coding",
    "openspiel_env": "games",
    "reasoning_gym_env": "math",
    "repl_env": "coding",
    "snake_env": "games",
    "tbench2_env": "coding",
    "terminus_env": "coding",
    "textarena_env": "games",
    "unity_env": "games",
    "websearch_env": "knowledge",
    "wildfire_env": "games",
}


def candidates() -> list[str]:
    extra = [n.strip() for n in os.environ.get(CATALOG_ENV, "").split(",") if n.strip()]
    return list(dict.fromkeys([*KNOWN, *extra]))


def available() -> list[dict[str, Any]]:
    """One row per candidate: name, domain, version, installed_as, reachable, description."""
    index = os.environ.get(INDEX_ENV, "https://pypi.org/pypi").rstrip("/")
    installed = _installed()
    rows = []
    with httpx.Client(timeout=15.0, follow_redirects=True) as client:
        for distribution in candidates():
            row: dict[str, Any] = {
                "name": distribution,
                "domain": None,
                "version": None,
                "installed_as": installed.get(distribution),
                "reachable": False,
                "description": "",
            }
            try:
                answer = client.get(f"{index}/{distribution}/json")
            except httpx.HTTPError as exc:
                row["description"] = f"unreachable: {exc}"
                rows.append(row)
                continue
            if answer.status_code != 200:
                row["description"] = f"not on the index (HTTP {answer.status_code})"
                rows.append(row)
                continue
            info = answer.json().get("info") or {}
            keywords = {k.strip().lower() for k in str(info.get("keywords") or "").replace(";", ",").split(",")}
            domains = sorted(keywords & {d.value for d in Domain})
            row.update(
                reachable=True,
                version=info.get("version"),
                domain=domains[0] if len(domains) == 1 else None,
                description=str(info.get("summary") or ""),
            )
            rows.append(row)
    return rows + folder_rows(installed)


def folder_rows(installed: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per OpenEnv environment folder under ``$NGYM_OPENENV_ENVS`` (see the module docstring)."""
    installed = _installed() if installed is None else installed
    rows = []
    for root in [Path(p) for p in os.environ.get(FOLDERS_ENV, "").split(os.pathsep) if p.strip()]:
        if not root.is_dir():
            rows.append({"name": str(root), "reachable": False, "description": f"{FOLDERS_ENV}: no such folder"})
            continue
        for folder in sorted(p for p in root.iterdir() if (p / "openenv.yaml").is_file()):
            rows.append(_folder_row(folder.resolve(), installed))
    return rows


def _folder_row(folder: Path, installed: dict[str, str]) -> dict[str, Any]:
    try:
        spec = yaml.safe_load((folder / "openenv.yaml").read_text(encoding="utf-8")) or {}
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except FileNotFoundError:
        project = {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return {"name": str(folder), "reachable": False, "description": f"unreadable: {exc}"}
    spec = spec if isinstance(spec, dict) else {}
    valid = {d.value for d in Domain}
    named = {str(k).lower().replace("-", "_") for k in project.get("keywords") or []} & valid
    declared = str(spec.get("domain") or "").lower()
    domain = declared if declared in valid else (named.pop() if len(named) == 1 else None)
    description = str(spec.get("description") or project.get("description") or "")
    if domain is None:
        hint = FOLDER_DOMAINS.get(folder.name)
        description = f"needs --domain{f' (e.g. {hint})' if hint else ''}; {description}".rstrip("; ")
    return {
        "name": str(folder),
        "domain": domain,
        "version": spec.get("version") or project.get("version"),
        "installed_as": installed.get(str(folder)),
        "reachable": True,
        "description": description,
    }


def _installed() -> dict[str, str]:
    """Source distribution → ngym name, for OpenEnv environments installed by ``ngym install openenv:``."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if not name.startswith("ngym-openenv-"):
            continue
        for ep in dist.entry_points:
            if ep.group == "ngym.resources_servers":
                found[_source_of(dist) or name] = ep.name
    return found


def _source_of(dist: metadata.Distribution) -> str | None:
    for file in dist.files or []:
        if file.name == "manifest.json":
            import json

            try:
                return str(json.loads(file.read_text()).get("source"))
            except (OSError, ValueError):
                return None
    return None
