"""``ngym list --available openenv``: OpenEnv environment distributions on the package index, as it answers now.

The package index has no search, so the candidates are the OpenEnv environment distributions known when this
plugin was released (``KNOWN``; OpenEnv's own ``envs/`` are published as Spaces and images, not on the index)
plus any named in ``$NGYM_OPENENV_CATALOG`` (comma-separated). Each is looked up on the index
(``$NGYM_PYPI_JSON_URL``, default PyPI's JSON API): the row says whether it is reachable, its newest version,
its summary, and its domain where its keywords name one.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import httpx

from ngym.domain import Domain

#: OpenEnv environments published on the package index as distributions (``openenv-*`` with an OpenEnv app).
KNOWN = ("openenv-dipg-safety",)
CATALOG_ENV = "NGYM_OPENENV_CATALOG"
INDEX_ENV = "NGYM_PYPI_JSON_URL"


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
    return rows


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
