"""A sibling environment is installed as code only, as NeMo Gym has it, and uninstalling keeps pip's view true.

Two NeMo-shaped folders: ``user_env`` imports ``resources_servers.base_env.lib``; ``base_env`` has a server of
its own and requires a local project (``sibling_dep``) that only its full install brings. Everything runs through
``python -m ngym.cli`` and pip in a throwaway virtualenv (``child_venv``): install user_env (base_env comes as
code only: importable, not listed, its requirement not installed) → install base_env itself (replaces the code
with the full environment) → uninstall base_env (user_env still imports it: back to code only) → uninstalling
the code alone is refused → uninstall user_env (the orphaned code goes with it).
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import child_venv

APP = """
class {cls}:
    pass


if __name__ == "__main__":
    {cls}.run_webserver()
"""
CONFIG = """{name}:
  resources_servers:
    {name}:
      entrypoint: app.py
      domain: {domain}
"""


def nemo_folder(root: Path, name: str, *, cls: str, domain: str, requirements: str, code: str = "") -> Path:
    folder = root / "resources_servers" / name
    (folder / "configs").mkdir(parents=True)
    (folder / "app.py").write_text(code + APP.format(cls=cls))
    (folder / "configs" / f"{name}.yaml").write_text(CONFIG.format(name=name, domain=domain))
    (folder / "requirements.txt").write_text(requirements)
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(work dir holding resources_servers/, the venv's python, env)."""
    work = tmp_path_factory.mktemp("siblings")
    python, env = child_venv(work)
    dep = work / "resources_servers" / "base_env" / "sibling_dep"
    (dep / "sibling_dep").mkdir(parents=True)
    (dep / "sibling_dep" / "__init__.py").write_text("")
    (dep / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "ngym-test-sibling-dep"\nversion = "1.0"\n'
    )
    base = nemo_folder(
        work, "base_env", cls="BaseServer", domain="games", requirements="-e nemo-gym @ ../../\n-e ./sibling_dep\n"
    )
    (base / "lib.py").write_text("ANSWER = 42\n")
    nemo_folder(
        work,
        "user_env",
        cls="UserServer",
        domain="agent",
        requirements="-e nemo-gym[dev] @ ../../\n",
        code="from resources_servers.base_env.lib import ANSWER\n",
    )
    # a stand-in nemo-gym wheel: sibling names come from the folders next to the environment here
    wheels = work / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "nemo_gym-0.7.0-py3-none-any.whl", "w") as zf:
        zf.writestr("nemo_gym/__init__.py", "")
    env["NGYM_NEMO_WHEEL_DIR"] = str(wheels)
    return work, python, env


def run(world: tuple[Path, Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    work, python, env = world
    return subprocess.run([str(python), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)


def listed(world: tuple[Path, Path, dict[str, str]]) -> set[str]:
    shown = run(world, "-m", "ngym.cli", "list", "--json")
    assert shown.returncode == 0, shown.stderr
    return {row["name"] for row in json.loads(shown.stdout)}


def installed(world: tuple[Path, Path, dict[str, str]], distribution: str) -> str | None:
    """The distribution's ``Keywords`` ("" when none) when installed, else None."""
    probe = run(
        world,
        "-c",
        "import sys, importlib.metadata as m\n"
        "try:\n    print(m.distribution(sys.argv[1]).metadata.get('Keywords') or '')\n"
        "except m.PackageNotFoundError:\n    print('<absent>')",
        distribution,
    )
    out = probe.stdout.strip()
    return None if out == "<absent>" else out


def imports_sibling(world: tuple[Path, Path, dict[str, str]]) -> bool:
    return run(world, "-c", "from resources_servers.user_env.app import ANSWER; assert ANSWER == 42").returncode == 0


def test_sibling_code_only_install_replace_and_uninstall(world: tuple[Path, Path, dict[str, str]]) -> None:
    work = world[0]
    first = run(world, "-m", "ngym.cli", "install", str(work / "resources_servers" / "user_env"))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "(+ the code of base_env)" in first.stdout
    assert imports_sibling(world)
    assert installed(world, "ngym-nemo-base-env") == "ngym-nemo-code-only"
    assert installed(world, "ngym-test-sibling-dep") is None  # base_env's own requirement: not installed
    names = listed(world)
    assert "user_env" in names and "base_env" not in names
    assert run(world, "-m", "pip", "check").stdout.count("ngym-nemo-") == 0

    full = run(world, "-m", "ngym.cli", "install", str(work / "resources_servers" / "base_env"))
    assert full.returncode == 0, full.stdout + full.stderr
    assert installed(world, "ngym-nemo-base-env") == ""  # the full environment replaced the code
    assert installed(world, "ngym-test-sibling-dep") is not None
    assert {"user_env", "base_env"} <= listed(world)

    kept = run(world, "-m", "ngym.cli", "uninstall", "-y", "nemo-gym:base_env")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "keeping its code only" in kept.stdout
    assert installed(world, "ngym-nemo-base-env") == "ngym-nemo-code-only"
    assert "base_env" not in listed(world) and imports_sibling(world)

    refused = run(world, "-m", "ngym.cli", "uninstall", "-y", "nemo-gym:base_env")
    assert refused.returncode == 2
    assert "ngym-nemo-user-env" in refused.stderr and "Traceback" not in refused.stderr
    assert installed(world, "ngym-nemo-base-env") == "ngym-nemo-code-only"

    # what a run leaves that pip never recorded (generated data, pytest's .pyc): the folder would stay
    # importable from site-packages and shadow a source checkout of resources_servers/
    purelib = Path(run(world, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (purelib / "resources_servers" / "user_env" / "data").mkdir(exist_ok=True)
    (purelib / "resources_servers" / "user_env" / "data" / "generated.txt").write_text("made by a run\n")
    (purelib / "resources_servers" / "base_env" / "made_by_a_run.txt").write_text("")
    gone = run(world, "-m", "ngym.cli", "uninstall", "-y", "nemo-gym:user_env")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert installed(world, "ngym-nemo-user-env") is None and installed(world, "ngym-nemo-base-env") is None
    assert "removing ngym-nemo-base-env" in gone.stdout
    assert not (purelib / "resources_servers").exists(), sorted((purelib / "resources_servers").rglob("*"))
