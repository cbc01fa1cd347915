"""The wheelhouse of an environment's own venv (``ngym.containerize.venv_wheels``), on a real small venv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ngym.containerize.errors import WheelhouseError
from ngym.containerize.payload import EnvironmentVenv
from ngym.containerize.venv_wheels import build_venv_wheelhouse, installed_distributions


def _venv_with_a_gone_folder_install(tmp_path: Path) -> Path:
    """A venv (no pip) holding one distribution installed from a folder that no longer exists."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    info = Path(purelib) / "vf_gone-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vf-gone\nVersion: 0.1.0\n")
    gone = tmp_path / "removed-folder"
    (info / "direct_url.json").write_text(json.dumps({"url": gone.as_uri(), "dir_info": {}}))
    return python


def test_a_folder_install_whose_folder_is_gone_is_named_and_stops_the_build_when_required(tmp_path: Path) -> None:
    python = _venv_with_a_gone_folder_install(tmp_path)
    assert [d["name"] for d in installed_distributions(python)] == ["vf-gone"]

    built = build_venv_wheelhouse(EnvironmentVenv("k", python), tmp_path / "wheels")
    assert built.wheels == () and built.code_wheels == ()
    assert (
        len(built.notes) == 1 and "vf-gone 0.1.0 not packaged" in built.notes[0] and "which is gone" in built.notes[0]
    )

    with pytest.raises(WheelhouseError, match="vf-gone 0.1.0 not packaged.*the environment needs it"):
        build_venv_wheelhouse(EnvironmentVenv("k", python, required=("vf_gone",)), tmp_path / "wheels2")


def test_a_missing_interpreter_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WheelhouseError, match="interpreter .* is missing: reinstall the environment"):
        installed_distributions(tmp_path / "nowhere" / "bin" / "python")
