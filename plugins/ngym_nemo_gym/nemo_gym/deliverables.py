"""Which files in an agent's output folder are its deliverables (NeMo Gym's ``nemo_gym.deliverables``).

An agent that works in a folder (GDPval's) leaves its products there beside the harness's own bookkeeping;
a grader looks only at the products.
"""

from __future__ import annotations

from pathlib import Path

#: Files the harness writes into the output folder, never the agent's work.
IGNORE_FILES: frozenset[str] = frozenset(
    {
        "finish_params.json",
        "history.json",
        "history.pkl",
        "inprogress_history.json",
        "metadata.json",
        "log.txt",
        "reference_files",
    }
)


def is_deliverable(path: Path) -> bool:
    """A regular file the agent produced (not one of ``IGNORE_FILES``)."""
    return path.is_file() and path.name not in IGNORE_FILES
