"""Fixtures shared by the conformance modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ngym.plugins.registry import reset_registry


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Installed records in a scratch folder (the venvs stay cached under ~/.cache/ngym/verifiers)."""
    folder = tmp_path_factory.mktemp("verifiers-records")
    old = os.environ.get("NGYM_VERIFIERS_RECORDS")
    os.environ["NGYM_VERIFIERS_RECORDS"] = str(folder)
    reset_registry()
    yield folder
    if old is None:
        os.environ.pop("NGYM_VERIFIERS_RECORDS", None)
    else:
        os.environ["NGYM_VERIFIERS_RECORDS"] = old
    reset_registry()
