"""pip, run on the host by ngym's interpreter for the wheelhouse: the one place its failures become errors.

``_pip`` runs it quietly (the lines worth seeing go to ``log``) and turns a failure into a ``WheelhouseError``
quoting what pip said went wrong (``_pip_error``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from ngym.config import cache_dir
from ngym.containerize.errors import WheelhouseError

#: Timestamps inside wheels built from source: a fixed date makes an unchanged tree give a byte-identical wheel,
#: so Docker's layer cache can reuse the code layer too.
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest date a zip file can hold

Log = Callable[[str], None]


def default_cache_dir() -> Path:
    """The wheelhouse cache: ``wheelhouse/`` in ngym's cache folder (``ngym.config.cache_dir``)."""
    return cache_dir() / "wheelhouse"


def _pip(python: str, args: list[str], *, env: Mapping[str, str], what: str, log: Log | None = None) -> str:
    cmd = [python, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(env), check=False)
    if log is not None:
        for line in proc.stdout.splitlines():
            if line.startswith(("Saved ", "Collecting ", "Building wheel", "Successfully")):
                log(f"  {line.strip()}")
    if proc.returncode != 0:
        error = WheelhouseError(f"could not {what}:\n{_pip_error(proc.stdout, proc.stderr)}")
        error.pip_output = proc.stdout + "\n" + proc.stderr  # type: ignore[attr-defined]
        raise error
    return proc.stdout


def _may_be_the_pins(output: str) -> bool:
    """Could pinning to the host's versions have caused this failure? (Not for a missing package or a conflict
    between the plugin's own requirements: those fail the same way unpinned, so retrying only costs time.)"""
    if "(constraint)" in output:
        return True
    listed = re.findall(r"\(from versions: ([^)]*)\)", output)
    return any(versions.strip() != "none" for versions in listed)


def _pip_error(stdout: str, stderr: str) -> str:
    """What pip said went wrong: its ERROR lines, the resolver's "conflict is caused by" block, else its tail."""
    picked = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    out = stdout.splitlines()
    starts = [i for i, ln in enumerate(out) if "conflict is caused by" in ln]
    if starts:
        block: list[str] = []
        for ln in out[starts[0] :]:
            if ln.startswith("To fix") or (block and not ln.strip()):
                break
            block.append(ln)
        picked += block
    if not picked:
        picked = [ln for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()][-15:]
    return "\n".join(f"  {ln.strip()}" for ln in picked[-20:])


def host_python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
