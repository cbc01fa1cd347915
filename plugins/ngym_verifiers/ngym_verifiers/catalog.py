"""``ngym list --available verifiers``: verifiers environments that can be installed from the package index.

The package index has no search (its XML-RPC search was switched off), and Prime Intellect's Environments
Hub is a registry of its own that is not reachable from everywhere. So the list is a small table of
distributions on the package index that are verifiers environments, kept here with their domain and what
``ngym install verifiers:NAME`` does with each (the release of verifiers it is served on, the module that serves
it, what else it needs), each checked against the index (``pip index versions``) when listed: what is reachable
shows its newest version, what is not says why (``none for this Python`` or ``unreachable``). ``NGYM_OFFLINE=1``
skips the check. Installed environments are marked. When no version could be checked, a line under the table
says so (the index is needed to install any of them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ngym.plugin_api import Listing
from ngym_verifiers import records


@dataclass(frozen=True)
class Known:
    """A verifiers environment on the package index, and how ``ngym install verifiers:NAME`` installs it."""

    domain: str
    what: str
    #: pip requirements added to the distribution's (the release of verifiers its code was written for, when its
    #: package does not pin one and pip would take a later release without that API)
    pins: tuple[str, ...] = ()
    #: the extra to install it with (``env``: staros-stardata[env]) and the module that serves it, when not its own
    extra: str = ""
    module: str = ""
    #: what else it needs to serve, said in the list (empty: it serves as installed)
    needs: str = ""


#: distribution → how it installs, for verifiers environments published on the package index.
KNOWN: dict[str, Known] = {
    "catapult-verifiers": Known(
        "games",
        "Stateful verifiers environment for Catapult games",
        needs="needs its game server running: -o base_url=URL",
    ),
    "hud-vf-gym": Known("agent", "HUD environments for reinforcement learning through verifiers"),
    "koan-verifiers": Known("agent", "verifiers v1 adapter for Koan EpisodeSession environments"),
    "sophistry-bench-sprint": Known(
        "safety", "Sophistry debate environment (verifiers 0.3 API)", pins=("verifiers==0.3.1",)
    ),
    "staros-stardata": Known(
        "instruction_following",
        "prosody/Oulipo verifiers and a constraint-gym environment (verifiers 0.3 API)",
        pins=("verifiers==0.3.1",),
        extra="env",
        module="stardata.envs.constraint_gym",
    ),
}

NOT_CHECKED = "not checked"
UNREACHABLE = "unreachable"
NO_RELEASE = "none for this Python"


def latest_version(distribution: str, timeout: float = 20.0) -> str:
    """The newest version the package index offers for this interpreter (``pip index versions``), or why none:
    ``none for this Python`` (the index answered, no release installs here) or ``unreachable``."""
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", distribution, "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNREACHABLE
    match = re.search(rf"^{re.escape(distribution)} \(([^)]+)\)", result.stdout, re.MULTILINE | re.IGNORECASE)
    if match:
        return match.group(1)
    return NO_RELEASE if "No matching distribution" in result.stderr + result.stdout else UNREACHABLE


def _description(known: Known, version: str) -> str:
    if version == NO_RELEASE:
        return f"{known.what}; not installable here: no release for Python {sys.version_info[0]}.{sys.version_info[1]}"
    served = f"served on {known.pins[0]} (pinned at install)" if known.pins else ""
    notes = "; ".join(n for n in (served, known.needs) if n)
    return f"{known.what}" + (f"; {notes}" if notes else "")


def available() -> Listing:
    """One row per known distribution (name, domain, version or why none, installed_as, description with what it
    needs), and a line under them when the package index could not be asked."""
    installed = {r.distribution: r.name for r in records.all_records() if r.distribution}
    offline = os.environ.get("NGYM_OFFLINE") == "1"
    names = sorted(KNOWN)
    with ThreadPoolExecutor(max_workers=4) as pool:
        versions = list(pool.map(lambda n: NOT_CHECKED if offline else latest_version(n), names))
    rows = [
        {
            "name": name,
            "domain": KNOWN[name].domain,
            "version": version,
            "installed_as": installed.get(name),
            "description": _description(KNOWN[name], version),
        }
        for name, version in zip(names, versions, strict=True)
    ]
    note = ""
    if offline:
        note = (
            "verifiers: NGYM_OFFLINE=1: the package index was not asked, so no version is checked; installing any of"
            " these needs the index"
        )
    elif all(v == UNREACHABLE for v in versions):
        note = (
            "verifiers: the package index cannot be reached from here (pip index versions failed for every one):"
            " nothing is checked, and installing any of these needs the index"
        )
    return Listing(rows, note=note)
