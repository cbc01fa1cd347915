"""The shared names of failure kinds a verify response may carry in ``failure_kind`` (NeMo Gym 0.7.0's vocabulary).

A kind says what went wrong and nothing else: whether the sample is masked is ``mask_sample``, the details are
``failure_reason``. Kinds are few and stable, so they are safe to group by in logs and metrics. An environment
that needs one the shared set lacks uses ``<server>:<kind>``. An unregistered name is kept and logged once:
dropping the response over a label would turn a visible wrong label into an invisible lost failure.
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger("ngym.server.protocol")

# transport: reaching another process at all
TRANSPORT_UNREACHABLE = "transport_unreachable"
TRANSPORT_PEER_DROP = "transport_peer_drop"
TRANSPORT_TIMEOUT = "transport_timeout"
TRANSPORT_LOCAL_RESOURCE = "transport_local_resource"
# agent: the /run call and the harness behind it
AGENT_RUN_ERROR = "agent_run_error"
AGENT_REQUEST_FAILED = "agent_request_failed"
AGENT_TIMEOUT = "agent_timeout"
AGENT_COMMAND_NOT_ALLOWED = "agent_command_not_allowed"
# verifier and judge
JUDGE_FAILED = "judge_failed"
JUDGE_UNPARSEABLE = "judge_unparseable"
VERIFIER_ERROR = "verifier_error"
# providers: sandboxes, browsers, containers
PROVIDER_UNAVAILABLE = "provider_unavailable"
PROVIDER_QUOTA_EXHAUSTED = "provider_quota_exhausted"
PROVIDER_OOM_KILLED = "provider_oom_killed"
# resources sessions
SESSION_LOST = "session_lost"
SESSION_EXPIRED = "session_expired"
SESSION_RELEASE_FAILED = "session_release_failed"
# cancellation and process lifecycle
CANCELLED = "cancelled"
KILL_SHAPED = "kill_shaped"
SHUTDOWN = "shutdown"
# persistence and cohorts
PERSISTENCE_FAILED = "persistence_failed"
COHORT_INCOMPLETE = "cohort_incomplete"

FAILURE_KINDS: frozenset[str] = frozenset(
    {
        TRANSPORT_UNREACHABLE,
        TRANSPORT_PEER_DROP,
        TRANSPORT_TIMEOUT,
        TRANSPORT_LOCAL_RESOURCE,
        AGENT_RUN_ERROR,
        AGENT_REQUEST_FAILED,
        AGENT_TIMEOUT,
        AGENT_COMMAND_NOT_ALLOWED,
        JUDGE_FAILED,
        JUDGE_UNPARSEABLE,
        VERIFIER_ERROR,
        PROVIDER_UNAVAILABLE,
        PROVIDER_QUOTA_EXHAUSTED,
        PROVIDER_OOM_KILLED,
        SESSION_LOST,
        SESSION_EXPIRED,
        SESSION_RELEASE_FAILED,
        CANCELLED,
        KILL_SHAPED,
        SHUTDOWN,
        PERSISTENCE_FAILED,
        COHORT_INCOMPLETE,
    }
)

# fullmatch, not match: "$" would also accept a trailing newline, a second label for one failure.
_NAMESPACED = re.compile(r"[a-z][a-z0-9_]*:[a-z][a-z0-9_]*")
_warned: set[str] = set()


def is_registered(name: str) -> bool:
    """Whether ``name`` is one of the shared kinds."""
    return name in FAILURE_KINDS


def is_namespaced(name: str) -> bool:
    """Whether ``name`` is an environment's own ``<server>:<kind>``."""
    return _NAMESPACED.fullmatch(name) is not None


def check_failure_kind(name: str | None) -> str | None:
    """``name`` unchanged; an unregistered, un-namespaced one is logged (once per name, not per rollout)."""
    if name is None or is_registered(name) or is_namespaced(name):
        return name
    if name not in _warned:
        _warned.add(name)
        log.warning(
            "unregistered failure_kind %r: use one of ngym.server.protocol.failure_kinds or '<server>:<kind>'", name
        )
    return name
