"""How ngym starts Python child processes: never importing from the folder the user happens to be in.

``python -m ngym.cli`` puts the current folder first on ``sys.path``; started from the folder above a checkout
named ``ngym/`` (or any folder holding a ``ngym`` or environment package), a child would import that instead of
the installed package. Children ngym starts itself run with ``-P`` (Python 3.11's "safe path": no current folder
on ``sys.path``); the children a supervisor starts later (session-affine workers) get ``PYTHONSAFEPATH`` from
``children_use_safe_path``, which the child's entry takes back off (``forget_safe_path``) so the environment's own
subprocesses (``python generate_data.py`` importing its neighbours) behave as usual. An environment's own folder
stays importable: a file target's folder is put on ``sys.path`` explicitly (``ngym.server.pipeline.app``).
"""

from __future__ import annotations

import os
import sys

SAFE_PATH_ENV = "PYTHONSAFEPATH"
#: set beside ``PYTHONSAFEPATH`` when ngym set it, so a child takes back off only what ngym put there
_SET_BY_NGYM_ENV = "NGYM_SET_SAFE_PATH"


def python_module(module: str, *args: str, python: str | None = None) -> list[str]:
    """``[python, -P, -m, module, *args]``: this interpreter (or ``python``) running ``module`` without the current
    folder on ``sys.path``."""
    return [python or sys.executable, "-P", "-m", module, *args]


def children_use_safe_path() -> None:
    """Every child this process starts from now on runs without the current folder on ``sys.path``."""
    if os.environ.get(SAFE_PATH_ENV):
        return  # the user's own setting: leave it (and leave it to them)
    os.environ[SAFE_PATH_ENV] = "1"
    os.environ[_SET_BY_NGYM_ENV] = "1"


def forget_safe_path() -> None:
    """Take back off the ``PYTHONSAFEPATH`` ngym set for this process (its own children: as usual)."""
    if os.environ.pop(_SET_BY_NGYM_ENV, None):
        os.environ.pop(SAFE_PATH_ENV, None)


__all__ = ["SAFE_PATH_ENV", "children_use_safe_path", "forget_safe_path", "python_module"]
