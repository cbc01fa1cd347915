"""NeMo Gym's shared vocabulary of failure kinds (``failure_kind`` on verify responses)."""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

TRANSPORT_UNREACHABLE = "transport_unreachable"
TRANSPORT_PEER_DROP = "transport_peer_drop"
TRANSPORT_TIMEOUT = "transport_timeout"
TRANSPORT_LOCAL_RESOURCE = "transport_local_resource"
AGENT_RUN_ERROR = "agent_run_error"
AGENT_REQUEST_FAILED = "agent_request_failed"
AGENT_TIMEOUT = "agent_timeout"
AGENT_COMMAND_NOT_ALLOWED = "agent_command_not_allowed"
JUDGE_FAILED = "judge_failed"
JUDGE_UNPARSEABLE = "judge_unparseable"
VERIFIER_ERROR = "verifier_error"
PROVIDER_UNAVAILABLE = "provider_unavailable"
PROVIDER_QUOTA_EXHAUSTED = "provider_quota_exhausted"
PROVIDER_OOM_KILLED = "provider_oom_killed"
SESSION_LOST = "session_lost"
SESSION_EXPIRED = "session_expired"
SESSION_RELEASE_FAILED = "session_release_failed"
CANCELLED = "cancelled"
KILL_SHAPED = "kill_shaped"
SHUTDOWN = "shutdown"
PERSISTENCE_FAILED = "persistence_failed"
COHORT_INCOMPLETE = "cohort_incomplete"

FAILURE_KINDS: frozenset[str] = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)

_NAMESPACED = re.compile(r"[a-z][a-z0-9_]*:[a-z][a-z0-9_]*")
_warned: set[str] = set()


def is_registered(name: str) -> bool:
    """Whether ``name`` is one of the shared kinds."""
    return name in FAILURE_KINDS


def is_namespaced(name: str) -> bool:
    """Whether ``name`` is an environment's own ``<server>:<kind>``."""
    return bool(_NAMESPACED.fullmatch(name))


def validate_failure_kind(name: str | None) -> str | None:
    """``name`` unchanged; an unknown, non-namespaced kind is logged once (a failure is never dropped over it)."""
    if name is not None and not is_registered(name) and not is_namespaced(name) and name not in _warned:
        _warned.add(name)
        log.warning("failure_kind %r is neither a shared kind nor '<server>:<kind>'", name)
    return name
