"""``ngym list``: every installed environment (and broken plugin), importing only what its cache does not know."""

from __future__ import annotations

import json
import shutil
import textwrap
from typing import Any

import click

from ngym.listing import ServerInfo, check_strict, hook_plugins, list_servers
from ngym.plugins.manager import get_plugin_manager
from ngym.plugins.registry import get_registry
from ngym.plugins.sources import install_sources


@click.command(name="list", short_help="List installed environments.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: a JSON list of rows.")
@click.option("--hooks", is_flag=True, help="List hook plugins and the hooks they implement instead.")
@click.option("--refresh", is_flag=True, help="Ignore the inspection cache: import and check every environment.")
@click.option(
    "--available",
    metavar="PREFIX",
    help="List what an install source can install instead (nemo-gym, openenv, verifiers, ...: the installed"
    " plugins' sources; `--available ?` lists the sources).",
)
def list_command(as_json: bool, hooks: bool, refresh: bool, available: str | None) -> None:
    """List installed environments: name, domain, distribution, version, status, description.

    A broken plugin is listed with the reason; NGYM_STRICT_PLUGINS=1 makes it an error (exit 1).
    `--available nemo-gym` lists NeMo Gym's environments instead (install one: ngym install nemo-gym:NAME).
    """
    if available:
        click.echo(render_available(available, as_json))
        return
    if hooks:
        click.echo(render_hooks(as_json))
        return
    rows = list_servers(get_registry(), use_cache=not refresh)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        click.echo(_render(rows))
    check_strict(rows)


def _render(rows: list[ServerInfo], width: int | None = None) -> str:
    """A table that fits ``width`` columns (default: the terminal's).

    Descriptions wrap under their column (two lines at most); on a narrow terminal the DISTRIBUTION and VERSION
    columns go (``--json`` has everything)."""
    if not rows:
        return "no environments installed (ngym init NAME scaffolds one; ngym install PKG installs one)"
    width = width or shutil.get_terminal_size((100, 24)).columns
    header = ("NAME", "DOMAIN", "DISTRIBUTION", "VERSION", "STATUS", "DESCRIPTION")
    table = [
        (r.name, r.domain or "?", r.distribution or "-", r.version or "-", r.status, r.description or "") for r in rows
    ]
    columns = [0, 1, 2, 3, 4]
    widths = {i: max(len(str(row[i])) for row in [header, *table]) for i in columns}
    if sum(widths[i] + 2 for i in columns) + _MIN_DESCRIPTION > width:
        columns = [0, 1, 4]  # the distribution and version are in --json
    left = sum(widths[i] + 2 for i in columns)
    room = max(width - left, _MIN_DESCRIPTION)
    lines = []
    for row, info in zip([header, *table], [None, *rows], strict=True):
        cells = "  ".join(str(row[i]).ljust(widths[i]) for i in columns)
        wrapped = textwrap.wrap(row[5], room, max_lines=2, placeholder=" …") or [""]
        lines.append(f"{cells}  {wrapped[0]}")
        lines.extend(" " * left + more for more in wrapped[1:])
        if info is not None and info.reason:
            lines.append(f"  ↳ {info.reason}")  # not wrapped: the reason is read (and grepped) whole
    return "\n".join(line.rstrip() for line in lines)


#: below this many columns for the description, the table drops columns rather than wrap word by word.
_MIN_DESCRIPTION = 30


def render_hooks(as_json: bool) -> str:
    """Every hook plugin (all installed ones are loaded) with the hooks it implements."""
    rows = hook_plugins(get_plugin_manager())
    if as_json:
        return json.dumps(rows, indent=2)
    lines = []
    for row in rows:
        dist = f"{row['distribution']} {row['version'] or ''}".strip() if row["distribution"] else "inline"
        if row["status"] == "ok":
            lines.append(f"{row['name']} ({dist}): {', '.join(row['hooks']) or 'no hooks'}")
        else:
            lines.append(f"{row['name']} ({dist}): BROKEN: {row['reason']}")
    return "\n".join(lines)


def render_sources() -> str:
    """The install sources the installed plugins registered, one line each."""
    lines = [f"{s.prefix}:  {s.description}" + (f" (-o {s.options})" if s.options else "") for s in install_sources()]
    return "\n".join(lines) or "no install sources (ecosystem plugins such as ngym-nemo-gym register them)"


def render_available(prefix: str, as_json: bool) -> str:
    """What an install source says can be installed from its ecosystem (name, domain, version, description)."""
    if prefix == "?":
        return render_sources()
    source = install_sources().named(prefix)
    if source.available is None:
        return f"{prefix}: this source does not list what it can install (ngym install {prefix}:WHAT)"
    rows: list[dict[str, Any]] = source.available()
    if as_json:
        return json.dumps(rows, indent=2)
    header = ("NAME", "DOMAIN", "VERSION", "INSTALLED", "DESCRIPTION")
    table = [
        (
            str(r["name"]),
            str(r.get("domain") or "?"),
            str(r.get("version") or "-"),
            str(r.get("installed_as") or "-"),
            str(r.get("description") or ""),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(4)]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in [header, *table]
    ]
    lines.append(f"{len(rows)} known {prefix} environments; install one: ngym install {prefix}:NAME")
    note = getattr(rows, "note", "")
    if note:
        lines.append(note)
    return "\n".join(line.rstrip() for line in lines)
