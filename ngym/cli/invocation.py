"""How to call this very ``ngym`` again: the command printed in "next:" hints, so that it runs as typed."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def ngym_command(argv0: str | None = None, path: str | None = None) -> str:
    """``ngym`` when that name on PATH is the executable in use, else that executable's path.

    A user who ran ``.venv/bin/ngym init x`` without activating the venv gets ``.venv/bin/ngym install …`` back,
    which works as typed; ``python -m ngym.cli`` gets that form back. ``path`` stands in for ``$PATH`` (tests).
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    script = Path(argv0)
    if not script.name.startswith(("ngym", "ng_")):  # python -m ngym.cli, or embedded
        return f"{shlex.quote(sys.executable)} -m ngym.cli"
    if os.sep not in argv0:  # found on PATH by the shell: the same name works again
        located = shutil.which(argv0, path=path)
        script = Path(located) if located else script
    ngym = script.parent / "ngym"  # the aliases (ng_run, ng_init_resources_server) sit beside it
    on_path = shutil.which("ngym", path=path)
    if on_path and _same_file(Path(on_path), ngym):
        return "ngym"
    full = ngym.absolute()
    relative = os.path.relpath(full)
    shown = str(full) if relative.startswith("..") else relative
    if os.sep not in shown:
        shown = f".{os.sep}{shown}"
    return shlex.quote(shown)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False
