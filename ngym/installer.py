"""``ngym install`` / ``ngym uninstall``: pip, run by ngym's own interpreter.

Running ``sys.executable -m pip`` puts a plugin exactly where ``ngym list`` looks for it, whichever ``pip``
is first on PATH. Nothing here imports or loads a plugin, so both commands work when an installed
plugin is broken (and in strict mode: uninstalling is how a broken plugin is fixed).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ngym.child_python import python_module


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
    return subprocess.call(python_module("pip", *args))


#: pip's lines that say what it is doing now (shown as progress; the rest of its output is kept for errors).
_STEP_PREFIXES = (
    "Collecting ",
    "Obtaining ",
    "Processing ",
    "Building ",
    "Installing ",
    "Downloading ",
    "Uninstalling ",
)


@dataclass
class PipRun:
    """A finished pip run whose output was captured."""

    returncode: int
    lines: list[str] = field(default_factory=list)

    def installed(self) -> list[str]:
        """``name-version`` of each package pip installed (its "Successfully installed" line)."""
        for line in self.lines:
            if line.startswith("Successfully installed "):
                return line.removeprefix("Successfully installed ").split()
        return []

    def problems(self, tail: int = 15) -> list[str]:
        """What went wrong: pip's ERROR lines (with what follows them), else the tail of its output."""
        for i, line in enumerate(self.lines):
            if line.startswith("ERROR:"):
                return self.lines[i : i + tail]
        return self.lines[-tail:]


def run_pip_captured(args: Sequence[str], on_step: Callable[[str], None] = lambda step: None) -> PipRun:
    """Run ``python -m pip ARGS``, capturing its output; each step line (Collecting…, Building…) goes to ``on_step``."""
    proc = subprocess.Popen(python_module("pip", *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for raw in proc.stdout:
        line = raw.rstrip()
        lines.append(line)
        if line.startswith(_STEP_PREFIXES):
            on_step(line)
    return PipRun(proc.wait(), lines)
