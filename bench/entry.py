"""What a benchmark script does before it runs: ``--help`` prints its docstring (the scripts without an argument
parser started a run of minutes instead), and SIGTERM (``timeout``, a CI stage's end) ends it as Ctrl-C does, so
its ``finally`` blocks stop the servers it started instead of leaving them running."""

from __future__ import annotations

import signal
import sys
from types import FrameType


def prepare(doc: str | None) -> None:
    """Call first in ``if __name__ == "__main__":``, with the script's ``__doc__``."""
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print((doc or "").strip())
        raise SystemExit(0)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
