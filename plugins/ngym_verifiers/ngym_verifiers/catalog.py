"""``ngym list --available verifiers``: verifiers environments that can be installed from the package index.

The package index has no search (its XML-RPC search was switched off), and Prime Intellect's Environments
Hub is a registry of its own that is not reachable from everywhere. So the list is a small table of
distributions on the package index that are verifiers environments, kept here with their domain, each
checked against the index (``pip index versions``) when listed: what is reachable shows its newest
version, what is not says why (``none for this Python`` or ``unreachable``). ``NGYM_OFFLINE=1`` skips the
check. Installed environments are marked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ngym_verifiers import records

#: distribution → (domain, what it is), for verifiers environments published on the package index.
KNOWN: dict[str, tuple[str, str]] = {
    "catapult-verifiers": ("games", "Stateful verifiers environment for Catapult games"),
    "hud-vf-gym": ("agent", "HUD environments for reinforcement learning through verifiers"),
    "koan-verifiers": ("agent", "verifiers v1 adapter for Koan EpisodeSession environments"),
    "staros-stardata": ("instruction_following", "prosody/Oulipo verifiers and a constraint-gym environment"),
}


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
        return "unreachable"
    match = re.search(rf"^{re.escape(distribution)} \(([^)]+)\)", result.stdout, re.MULTILINE | re.IGNORECASE)
    if match:
        return match.group(1)
    return "none for this Python" if "No matching distribution" in result.stderr + result.stdout else "unreachable"


def available() -> list[dict[str, Any]]:
    """One row per known distribution (name, domain, version or None, installed_as, description)."""
    installed = {r.distribution: r.name for r in records.all_records() if r.distribution}
    offline = os.environ.get("NGYM_OFFLINE") == "1"
    names = sorted(KNOWN)
    with ThreadPoolExecutor(max_workers=4) as pool:
        versions = list(pool.map(lambda n: "not checked" if offline else latest_version(n), names))
    return [
        {
            "name": name,
            "domain": KNOWN[name][0],
            "version": version,
            "installed_as": installed.get(name),
            "description": KNOWN[name][1],
        }
        for name, version in zip(names, versions, strict=True)
    ]
