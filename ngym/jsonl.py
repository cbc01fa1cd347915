"""Reading a JSON-lines file of rows, the one way every part of ngym reads one (standard library and errors only).

Used by the tooling (``ngym rollout``'s input, the rollout ledger: ``ngym.rollout.ledger.read_jsonl``) and by the
server runtime (the ORS front's split files), so a bad file says the same thing wherever it is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ngym.errors import ConfigError

#: Parses one line (``json.loads``; the NeMo collector passes ``orjson.loads``)
Loads = Callable[[bytes], Any]


def read_jsonl(path: Path | str, *, loads: Loads = json.loads, what: str = "data file") -> list[dict[str, Any]]:
    """Every row of a JSONL file (blank lines skipped).

    A missing file (``what`` names it: ``data file not found: PATH``), a line that is not JSON, or a line that is
    not an object is a ``ConfigError`` saying which file and line (``path:line: ...``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    rows: list[dict[str, Any]] = []
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = loads(line)
            except ValueError as exc:  # json.JSONDecodeError and orjson.JSONDecodeError are both ValueErrors
                raise ConfigError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(row, dict):
                raise ConfigError(f"{path}:{number}: a row must be a JSON object")
            rows.append(row)
    return rows
