"""The worker's reading of an environment's failure: "it needs the network" is a refusal naming what it needs
(one line at install), not a traceback (the worker module itself imports only the standard library)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ngym_verifiers.process import WORKER
from ngym_verifiers.worker import unreachable


class LocalEntryNotFoundError(Exception):  # huggingface_hub's, by name: the worker never imports it
    pass


def raised_by_datasets() -> BaseException:
    """The chain ``datasets.load_dataset`` raises without network: ConnectionError from a hub error."""
    try:
        try:
            raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub")
        except LocalEntryNotFoundError as inner:
            raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)") from inner
    except ConnectionError as outer:
        try:
            raise FileNotFoundError("Dataset openai/gsm8k is not cached in None") from outer
        except FileNotFoundError as last:
            return last


def test_a_dataset_on_the_hub_is_named() -> None:
    reason = unreachable(raised_by_datasets())
    assert reason is not None
    assert reason.startswith("it needs the dataset openai/gsm8k from the Hugging Face Hub, which this machine")
    assert "FileNotFoundError: Dataset openai/gsm8k is not cached" in reason


def test_an_unreachable_model_api_is_a_network_service() -> None:
    class APIConnectionError(Exception):
        pass

    reason = unreachable(APIConnectionError("Connection error."))
    assert reason is not None and "a network service" in reason


@pytest.mark.parametrize("exc", [ValueError("bad answer"), KeyError("x"), FileNotFoundError("data.json")])
def test_other_failures_stay_failures(exc: BaseException) -> None:
    assert unreachable(exc) is None


@pytest.mark.parametrize("safe_path", [False, True])
def test_the_worker_runs_as_a_script_beside_its_modules_without_ngym(safe_path: bool, tmp_path: Path) -> None:
    """``python worker.py`` (how the server starts it in the environment's venv) imports its modules from its own
    folder as the package, with or without ``-P`` (its folder then not on ``sys.path``), and nothing else of
    ngym: a module it cannot load is its answer on the pipe, not an import error of the worker itself."""
    flags = ["-I"] if safe_path else ["-E", "-s"]  # -I: isolated, -P included
    done = subprocess.run(
        [sys.executable, *flags, str(WORKER), "no_such_module", "{}"],
        input="", capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["ok"] is False and "loading no_such_module: ModuleNotFoundError" in answer["error"], done.stderr
    assert "ngym.server" not in done.stderr
