"""``ngym install`` / ``ngym uninstall``: pip, run by ngym's own interpreter.

Running ``sys.executable -m pip`` puts a plugin exactly where ``ngym list`` looks for it, whichever ``pip``
is first on PATH. Nothing here imports or loads a plugin, so both commands work when an installed
plugin is broken (and in strict mode: uninstalling is how a broken plugin is fixed).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ngym.errors import NgymError


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
    proc = subprocess.Popen(
        [sys.executable, "-m", "pip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for raw in proc.stdout:
        line = raw.rstrip()
        lines.append(line)
        if line.startswith(_STEP_PREFIXES):
            on_step(line)
    return PipRun(proc.wait(), lines)


#: ``ngym install <prefix>:<source>`` for sources a plugin knows how to install: prefix → (module, distribution).
#: The module is imported only when its prefix is used; it provides ``install_source(source, *, as_name, domain,
#: options, verbose, echo)`` and ``available() -> list[dict]`` (``ngym list --available <prefix>``).
SOURCE_PLUGINS: dict[str, tuple[str, str]] = {
    "openenv": ("ngym_openenv.install", "ngym-openenv"),
}


def source_plugin_prefix(text: str) -> str | None:
    """The ``SOURCE_PLUGINS`` prefix ``text`` starts with (``openenv:...`` → ``openenv``), else None."""
    prefix, colon, _ = text.partition(":")
    return prefix if colon and prefix in SOURCE_PLUGINS else None


def source_plugin(prefix: str) -> Any:
    """The module installing ``prefix:`` sources; ``NgymError`` saying which plugin to install when it is absent."""
    module_name, distribution = SOURCE_PLUGINS[prefix]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise
        raise NgymError(
            f"{prefix}: sources are installed by the {distribution} plugin, which is not installed "
            f"(pip install {distribution}, or pip install -e plugins/{distribution.replace('-', '_')} in a checkout)"
        ) from None
