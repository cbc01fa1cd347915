"""`ngym run` serves with this interpreter's bin folder and uv first on PATH, as NeMo Gym's activated venvs do."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ngym.cli.run import put_tools_on_path


def test_interpreter_and_uv_come_first_once() -> None:
    bin_folder = str(Path(sys.executable).parent)
    environ = {"PATH": os.pathsep.join(["/usr/bin", bin_folder, "/bin"])}
    put_tools_on_path(environ)
    folders = environ["PATH"].split(os.pathsep)
    assert folders[0] == bin_folder and folders.count(bin_folder) == 1
    assert folders[-2:] == ["/usr/bin", "/bin"]
    # uv (a dependency of ngym-nemo-gym) is then found by name, as environments call it
    assert shutil.which("uv", path=environ["PATH"]) is not None
