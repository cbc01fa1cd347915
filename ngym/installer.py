"""``ngym install`` / ``ngym uninstall``: pip, run by ngym's own interpreter.

Running ``sys.executable -m pip`` puts a plugin exactly where ``ngym list`` looks for it, whichever ``pip``
is first on PATH. Nothing here imports or loads a plugin, so both commands work when an installed
plugin is broken (and in strict mode: uninstalling is how a broken plugin is fixed).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def pip_install_args(packages: Sequence[str], *, editable: bool = False, upgrade: bool = False) -> list[str]:
    """pip's arguments: with ``editable`` every package is passed as ``-e PKG``."""
    args = ["install"]
    if upgrade:
        args.append("--upgrade")
    for package in packages:
        args.extend(["-e", package] if editable else [package])
    return args


def pip_uninstall_args(packages: Sequence[str], *, yes: bool = False) -> list[str]:
    return ["uninstall", *(["--yes"] if yes else []), *packages]


def run_pip(args: Sequence[str]) -> int:
    """Run ``python -m pip ARGS`` with this interpreter, streaming its output; its exit code."""
    return subprocess.call([sys.executable, "-m", "pip", *args])
