"""The image's entrypoint: ``ngym ARGS...`` plus config overrides taken from the environment at ``docker run``.

``ENTRYPOINT ["python", "-m", "ngym.containerize.entrypoint", "run", NAME, "--host", "0.0.0.0", "--port", "8000"]``
runs ``ngym run NAME <overrides> --host 0.0.0.0 --port 8000 <docker run arguments>`` where ``<overrides>`` are the
``key=value`` words of ``NGYM_OVERRIDES`` (shell-quoted, e.g. ``NGYM_OVERRIDES="data_dir=/data 'name=a b'"``);
arguments given to ``docker run IMAGE ...`` come last, so they win over the environment.
The session secret comes from ``NGYM_SESSION_SECRET`` and the store from ``NGYM_SESSION_STORE``, which ngym reads
itself; nothing secret is baked into the image.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence

from ngym.cli import main as ngym_main

OVERRIDES_ENV = "NGYM_OVERRIDES"


def command_line(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The ngym argument list: ``argv`` with the overrides from ``environ`` right after ``run NAME``."""
    overrides = shlex.split(environ.get(OVERRIDES_ENV, ""))
    bad = [word for word in overrides if "=" not in word]
    if bad:
        raise SystemExit(f"ngym: {OVERRIDES_ENV} takes key=value words; not: {' '.join(bad)}")
    argv = list(argv)
    at = 2 if argv[:1] == ["run"] else len(argv)
    return [*argv[:at], *overrides, *argv[at:]]


def main(argv: Sequence[str] | None = None) -> None:

    ngym_main(command_line(sys.argv[1:] if argv is None else argv, os.environ))


if __name__ == "__main__":
    main()
