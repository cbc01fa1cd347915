"""verifiers' ``load_environment`` API across its releases: 0.1.14, 0.2.0, 0.2.1 and 0.3.0 (0.3.1: the fidelity test).

The same module (the fidelity test's ``vf_ledger``: a ``StatefulToolEnv`` with a weighted ``Rubric``) is pinned
to each release by its PEP 723 block and installed with ``ngym install verifiers:<module.py>`` into that
release's own venv. For each: the scripted rollouts played by verifiers itself (``Environment.evaluate``) and
through ngym's tool routes and ``/verify`` give the same tool outputs and the same scores, function by function;
and ``ngym validate`` passes on the example data the install made. Each release is a venv of its own (minutes
the first time, cached after), so this runs as ``make verifiers-versions``, not in CI.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ngym.plugins.registry import reset_registry
from ngym.testing.scripted_model import ScriptedModel
from tests.conformance.test_verifiers_fidelity import (
    DRIVER,
    FIXTURES,
    LEDGER_SCRIPTS,
    by_script,
    compare,
    play_through_ngym,
    run_in_venv,
)

pytestmark = pytest.mark.verifiers_versions
VERSIONS = ["0.1.14", "0.2.0", "0.2.1", "0.3.0"]


def pinned_ledger(folder: Path, version: str) -> Path:
    """``vf_ledger.py`` with its PEP 723 pin set to ``version`` (same module name: each release has its venv)."""
    source = (FIXTURES / "vf_ledger.py").read_text()
    assert '"verifiers==0.3.1"' in source
    target = folder / version / "vf_ledger.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source.replace('"verifiers==0.3.1"', f'"verifiers=={version}"'))
    return target


@pytest.mark.parametrize("version", VERSIONS)
def test_load_environment_of_each_release_matches_evaluate(records_dir: Path, tmp_path: Path, version: str) -> None:
    from ngym_verifiers.install import install_source

    name = "vf_ledger_" + version.replace(".", "_")
    module = pinned_ledger(tmp_path, version)
    record = install_source(f"verifiers:{module}", as_name=name, domain="math", echo=lambda line: None)
    reset_registry()
    installed = subprocess.run(
        [record.python, "-c", "from importlib.metadata import version; print(version('verifiers'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert installed.stdout.strip() == version
    assert [r["name"] for r in record.rewards][:2] == ["correct_answer", "ledger_matches"]

    with ScriptedModel(LEDGER_SCRIPTS) as model:
        rows = run_in_venv(record.python, str(DRIVER), "legacy", record.module, model.base_url, "3")
    theirs = by_script(rows, LEDGER_SCRIPTS)
    assert [theirs[k]["reward"] for k in LEDGER_SCRIPTS] == pytest.approx([1.0, 0.4, 0.6])
    compare(theirs, asyncio.run(play_through_ngym(name, LEDGER_SCRIPTS)))  # install_source runs its own loop

    done = subprocess.run([sys.executable, "-m", "ngym.cli", "validate", name, "--json"], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"], done.stdout + done.stderr
