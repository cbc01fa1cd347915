"""The environment variables an OpenEnv environment cannot start without: found in its code, checked first."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngym_openenv import install as install_module
from ngym_openenv.errors import OpenEnvInstallError
from ngym_openenv.required_env import detect_required_env, package_folder

#: as DIPG's server/app.py reads its dataset path
DIPG_LIKE_APP = """
import os

# Get the dataset path from an environment variable.
DATASET_PATH = os.environ.get("E33_DATASET_PATH")
if not DATASET_PATH:
    raise ValueError("The E33_DATASET_PATH environment variable must be set.")

CONFLICT_REWARD = float(os.environ.get("E33_CONFLICT_REWARD", 10.0))
TOKEN = os.environ["E33_SERVICE_TOKEN"]
os.environ["E33_SET_HERE"] = "1"
"""


@pytest.fixture
def dipg_like(tmp_path: Path) -> Path:
    folder = tmp_path / "dipg_like_env"
    (folder / "server").mkdir(parents=True)
    (folder / "server" / "app.py").write_text(DIPG_LIKE_APP)
    (folder / "tests").mkdir()
    (folder / "tests" / "test_x.py").write_text('import os\nX = os.environ["E33_ONLY_IN_TESTS"]\n')
    (folder / "openenv.yaml").write_text("name: dipg_like_env\napp: server.app:app\n")
    return folder


def test_the_variables_a_server_refuses_to_start_without_are_found(dipg_like: Path) -> None:
    assert detect_required_env(dipg_like) == {
        "E33_DATASET_PATH": "The E33_DATASET_PATH environment variable must be set.",
        "E33_SERVICE_TOKEN": "read by server/app.py",
    }


def test_install_names_a_missing_variable_before_building_anything(
    dipg_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("E33_DATASET_PATH", raising=False)
    monkeypatch.setenv("E33_SERVICE_TOKEN", "t")

    def no_venv(*args: object, **kwargs: object) -> str:
        raise AssertionError("a virtualenv was built before the missing variable was named")

    monkeypatch.setattr(install_module, "environment_venv", no_venv)
    with pytest.raises(OpenEnvInstallError) as raised:
        install_module.prepare(str(dipg_like))
    assert str(raised.value).startswith(
        "dipg_like_env needs the environment variable E33_DATASET_PATH (The E33_DATASET_PATH environment variable "
        "must be set.), not set here: set it and install again"
    )


def test_an_installed_distributions_package_folder_is_found_in_its_interpreter() -> None:
    import sys

    import ngym_openenv

    assert package_folder(sys.executable, "ngym_openenv.server:app") == Path(ngym_openenv.__file__).parent
    assert package_folder(sys.executable, "no_such_package_e33.server:app") is None
