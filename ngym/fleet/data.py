"""The example data of a fleet's environment, for ``ngym rollout NAME --fleet F`` and ``ngym profile NAME --fleet F``
without ``--data``: NAME is the fleet's name for it (``cart``), which may differ from the environment's own
(``shopping_cart``), and its folder may be in the fleet's own virtualenv (a ``nemo-gym:`` entry).

With the fleet file or its state dir, the environment's folder is asked of the interpreter that serves it (its
``state.json`` records which); with the head server's URL, the environment's own name comes from its
``/health`` and its folder is looked up among the environments installed here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ngym.child_server import fetch_health
from ngym.errors import ConfigError
from ngym.fleet.lookup import local_state

#: ``data/`` files in the order each command prefers them
ROLLOUT_ORDER = ("example.jsonl", "example_rollouts.jsonl")
PROFILE_ORDER = ("example_rollouts.jsonl", "example.jsonl")

_FOLDER_OF = "import sys; from ngym.targets import resolve; print(resolve(sys.argv[1]).folder or '')"


def environment_folder(fleet: str, name: str) -> Path | None:
    """The folder of the fleet's environment ``name``, when the fleet is given by its file or state dir."""
    state = local_state(fleet)
    record = state.servers.get(name) if state is not None else None
    if record is None or not record.target:
        return None
    python = record.python or sys.executable
    try:
        done = subprocess.run(
            [python, "-P", "-c", _FOLDER_OF, record.target], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    folder = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    return Path(folder[0]) if folder and folder[0] else None


def fleet_data(fleet: str, name: str, url: str, order: tuple[str, ...]) -> Path:
    """The example data of the fleet's environment ``name`` (served at ``url``): the first of ``order`` in
    its folder's ``data/``; a ConfigError asking for ``--data`` when it has none."""
    folder = environment_folder(fleet, name)
    shown = f"{name!r} of the fleet"
    if folder is None:
        from ngym.targets import resolve

        health = fetch_health(url, timeout=5.0) or {}
        own = health.get("name")
        if isinstance(own, str):
            try:
                folder = resolve(own).folder
            except ConfigError:
                folder = None
            shown = f"{name!r} of the fleet (environment {own!r})"
    for candidate in order:
        path = folder / "data" / candidate if folder is not None else None
        if path is not None and path.is_file():
            return path
    where = f"its folder {folder} has" if folder is not None else "no folder of it is known here, so it has"
    raise ConfigError(f"no example data for {shown}: {where} no data/{' or data/'.join(order)}; give --data ROWS.jsonl")
