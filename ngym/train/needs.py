"""The error a trainer binding raises when the trainer it runs beside is not installed in this Python.

``ngym.train.verl`` and ``ngym.train.skyrl`` import their trainer's classes at import time, and ``ngym.train.trl``'s
``train_dataset`` imports ``datasets``: each runs in the trainer's own virtualenv, not in ngym's. Imported where the
trainer is missing (ngym's venv, a fresh one), Python's own error names only the module; this one says which binding
needs it, in which interpreter, and what to install there.
"""

from __future__ import annotations

import sys


def trainer_missing(error: ModuleNotFoundError, binding: str, install: str) -> ModuleNotFoundError:
    """``error`` (a failed import of the trainer) told as one line: the binding, the interpreter, the install."""
    module = (error.name or "its trainer").split(".")[0]  # the distribution's package, not a submodule of it
    return ModuleNotFoundError(
        f"{binding} runs in the trainer's environment, beside it: {module!r} is not installed in this Python "
        f"({sys.executable}); install it there: pip install {install}",
        name=error.name,
    )
