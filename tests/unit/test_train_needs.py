"""A trainer binding imported where its trainer is not installed says so in one line: which binding, which Python,
what to install there (Python's own error named only the module: ``No module named 'verl'``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

ROW = (
    '{"responses_create_params": {"input": "hi", "tools": [{"type": "function", "name": "ping", '
    '"parameters": {"type": "object", "properties": {}}}]}}'
)


def _without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run in a Python where importing ``module`` fails, as where it is not installed."""
    hide = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run([sys.executable, "-c", hide + code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("module", "code", "binding", "install"),
    [
        ("verl", "import ngym.train.verl", "ngym.train.verl", "pip install 'verl>=0.9.1'"),
        ("skyrl_gym", "import ngym.train.skyrl", "ngym.train.skyrl", "pip install 'skyrl-gym>=0.4'"),
        (
            "datasets",
            "import json\nfrom ngym.train import trl\n"
            f"trl.environment('http://127.0.0.1:9', [json.loads({ROW!r})]).train_dataset",
            "ngym.train.trl's train_dataset",
            "pip install trl",
        ),
    ],
)
def test_a_missing_trainer_is_named_with_what_to_install(module: str, code: str, binding: str, install: str) -> None:
    done = _without(module, code)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: " + binding), done.stderr
    assert repr(module) in last and sys.executable in last and install in last, last
