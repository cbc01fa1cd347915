"""Typed errors, and the edge where they become one readable line and an exit code (``run_guarded``).

Library code raises these; the CLI, ``run_webserver()`` and the serving children run under ``run_guarded``,
which prints ``ngym: error: ...`` and exits; tracebacks only with ``NGYM_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

DEBUG_ENV = "NGYM_DEBUG"


class NgymError(Exception):
    """Base of every error ngym raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1


class ConfigError(NgymError):
    """A config file, override or option is wrong (exit code 2, like click's usage errors)."""

    exit_code = 2


class PluginError(NgymError):
    """A plugin is missing, broken or breaks a registration rule."""


class EnvironmentNotFound(PluginError):
    """No installed environment has the requested name."""

    exit_code = 2


class SessionStoreError(NgymError):
    """The session store failed (e.g. Redis unreachable)."""


class JudgeError(NgymError):
    """Raise inside ``verify`` when a judge or model call fails.

    The server answers HTTP 200 with ``reward: 0.0``, ``mask_sample: true``, ``failure_kind: "judge_failed"``,
    ``failure_reason: <message>`` (and NeMo Gym's older ``_ng_failure_class`` / ``_ng_failure_judge_error``),
    so one bad judge call does not kill a training step, and ``/aggregate_metrics`` leaves the sample out.
    """

    failure_class = "judge_failed"

    def __init__(self, message: str, *, fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        #: Fields the failure body carries besides the echoed request: what the environment's declared verify
        #: response requires (e.g. the answer it extracted), so the body still matches its own schema.
        self.fields: dict[str, Any] = dict(fields or {})


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false")


def run_guarded(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; exit with one line on an ``NgymError`` (or any error, unless debugging)."""
    try:
        return fn()
    except KeyboardInterrupt:
        sys.exit(130)
    except NgymError as exc:
        if debug_enabled():
            raise
        print(f"ngym: error: {str(exc) or type(exc).__name__}", file=sys.stderr)  # never an empty line
        sys.exit(exc.exit_code)
    except Exception as exc:  # an unexpected failure: still one line, the traceback on request
        if debug_enabled():
            raise
        print(f"ngym: error: {exc!r} (set NGYM_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(1)
