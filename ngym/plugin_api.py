"""What a plugin may use of ngym beyond ``ngym``'s own names: the public API of the core for plugin authors.

A plugin (a session store, an ecosystem adapter such as ``ngym-nemo-gym``) imports from ``ngym`` and from here,
never from ``ngym.server.*`` or a private name: ``tests/unit/test_layers.py`` checks that for ``plugins/``. What
is here keeps its name and meaning across releases; what is not may move.

- **Sessions**: ``SessionManager`` (the session protocol: typed seed and close, rebind, close hooks; a server's
  is ``server.sessions``), ``RequestSession`` (a request's, ``server.bound_session(request)``),
  ``current_request_session``, ``SimpleResourcesServer.install_sessions(app)`` for an app built by hand.
- **Session stores**: ``SessionStore`` to implement, ``SessionRecord``, ``SessionLimitReached``,
  ``SessionStoreError``, ``redact_url``, ``SESSION_SECRET_ENV``.
- **Request bodies**: ``read_json`` / ``parse_body`` (400 when not JSON), ``validate_body`` (422 with field
  errors): a plugin's routes answer bad input as ngym's do.
- **Lost sessions**: ``keeps_no_state`` marks a ``seed_session`` that keeps no per-rollout state (a verify
  without a live session is then scored, not masked ``session_lost``).
- **Serving**: ``raise_server_exceptions`` (errors reach a test client, as NeMo Gym's bare apps do),
  ``strip_rollout_prefix``, ``add_health_routes``, MCP exposure (``install_mcp``, ``MCP_PATH``, ...).
- **Wire vocabulary**: ``judge_failure_body``, ``AggregateMetrics``/``AggregateMetricsRequest``,
  ``ResponseCreateParams``, ``TASK_INDEX_KEY``/``ROLLOUT_INDEX_KEY``, ``failure_kinds`` (the module).
- **The run's carriers**: ``SERVER_URLS_ENV`` / ``GLOBAL_CONFIG_ENV`` and their readers and writers
  (``read_server_urls``, ``write_server_urls``, ``read_global_config``, ``write_global_config``).
- **Statistics**: ``aggregate_metrics`` (what ``/aggregate_metrics`` answers).
- **The rollout ledger** (``ngym.rollout.ledger``, shared by ``ngym rollout`` and a plugin's collector): input
  rows (``read_jsonl``), the resume key (``rollout_key``, ``rollout_keys``, ``rollout_order``), resume
  (``read_results``, ``done_keys``, ``pending``, ``drop_truncated_tail``), the append (``LedgerAppender``,
  ``json_line``) and the ``/aggregate_metrics`` body (``verify_responses``, ``mean_reward``).
- **Tests**: ``free_port``; ``environment_test_command`` (how ``gym env test`` runs an environment's tests);
  ``run_environment_tests`` (run them in a scratch copy, counted: ``EnvTestResult``), ``stage_environment`` and
  ``referenced_environments`` (that copy's layout), ``environment_test_report_command`` (the command it runs).

Names load on first use (as ``ngym``'s do): a plugin registering a hook at start-up pulls in no server runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time the names load on first use (below)
    from ngym.child_server import free_port
    from ngym.errors import SessionStoreError
    from ngym.metrics.aggregate import aggregate_metrics
    from ngym.nemo.envtest import EnvTestResult, referenced_environments, run_environment_tests, stage_environment
    from ngym.nemo.envtest import pytest_command as environment_test_command
    from ngym.nemo.envtest import reported_pytest_command as environment_test_report_command
    from ngym.rollout.ledger import (
        LedgerAppender,
        done_keys,
        drop_truncated_tail,
        json_line,
        mean_reward,
        pending,
        read_jsonl,
        read_results,
        rollout_key,
        rollout_keys,
        rollout_order,
        verify_responses,
    )
    from ngym.run_carriers import (
        GLOBAL_CONFIG_ENV,
        SERVER_URLS_ENV,
        read_global_config,
        read_server_urls,
        write_global_config,
        write_server_urls,
    )
    from ngym.server.mcp_exposure import MCP_PATH, SEED_METADATA_KEY, TOKEN_HEADER
    from ngym.server.mcp_exposure import install as install_mcp
    from ngym.server.middleware import raise_server_exceptions, strip_rollout_prefix
    from ngym.server.protocol import failure_kinds
    from ngym.server.protocol.bodies import (
        ROLLOUT_INDEX_KEY,
        TASK_INDEX_KEY,
        AggregateMetrics,
        AggregateMetricsRequest,
    )
    from ngym.server.protocol.responses import ResponseCreateParams
    from ngym.server.request_bodies import parse_body, read_json, validate_body
    from ngym.server.routes import add_health_routes, judge_failure_body
    from ngym.server.sessions.cookies import SESSION_SECRET_ENV
    from ngym.server.sessions.factory import redact_url
    from ngym.server.sessions.lost import keeps_no_state
    from ngym.server.sessions.manager import (
        RequestSession,
        SessionConflict,
        SessionManager,
        current_request_session,
    )
    from ngym.server.sessions.store import SessionLimitReached, SessionRecord, SessionStore

#: public name → (module, name in that module); ``None`` as the name: the module itself
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "free_port": ("ngym.child_server", "free_port"),
    "SessionStoreError": ("ngym.errors", "SessionStoreError"),
    "GLOBAL_CONFIG_ENV": ("ngym.run_carriers", "GLOBAL_CONFIG_ENV"),
    "SERVER_URLS_ENV": ("ngym.run_carriers", "SERVER_URLS_ENV"),
    "read_global_config": ("ngym.run_carriers", "read_global_config"),
    "read_server_urls": ("ngym.run_carriers", "read_server_urls"),
    "write_global_config": ("ngym.run_carriers", "write_global_config"),
    "write_server_urls": ("ngym.run_carriers", "write_server_urls"),
    "MCP_PATH": ("ngym.server.mcp_exposure", "MCP_PATH"),
    "SEED_METADATA_KEY": ("ngym.server.mcp_exposure", "SEED_METADATA_KEY"),
    "TOKEN_HEADER": ("ngym.server.mcp_exposure", "TOKEN_HEADER"),
    "install_mcp": ("ngym.server.mcp_exposure", "install"),
    "aggregate_metrics": ("ngym.metrics.aggregate", "aggregate_metrics"),
    "environment_test_command": ("ngym.nemo.envtest", "pytest_command"),
    "LedgerAppender": ("ngym.rollout.ledger", "LedgerAppender"),
    "done_keys": ("ngym.rollout.ledger", "done_keys"),
    "drop_truncated_tail": ("ngym.rollout.ledger", "drop_truncated_tail"),
    "json_line": ("ngym.rollout.ledger", "json_line"),
    "mean_reward": ("ngym.rollout.ledger", "mean_reward"),
    "pending": ("ngym.rollout.ledger", "pending"),
    "read_jsonl": ("ngym.rollout.ledger", "read_jsonl"),
    "read_results": ("ngym.rollout.ledger", "read_results"),
    "rollout_key": ("ngym.rollout.ledger", "rollout_key"),
    "rollout_keys": ("ngym.rollout.ledger", "rollout_keys"),
    "rollout_order": ("ngym.rollout.ledger", "rollout_order"),
    "verify_responses": ("ngym.rollout.ledger", "verify_responses"),
    "environment_test_report_command": ("ngym.nemo.envtest", "reported_pytest_command"),
    "EnvTestResult": ("ngym.nemo.envtest", "EnvTestResult"),
    "referenced_environments": ("ngym.nemo.envtest", "referenced_environments"),
    "run_environment_tests": ("ngym.nemo.envtest", "run_environment_tests"),
    "stage_environment": ("ngym.nemo.envtest", "stage_environment"),
    "raise_server_exceptions": ("ngym.server.middleware", "raise_server_exceptions"),
    "keeps_no_state": ("ngym.server.sessions.lost", "keeps_no_state"),
    "strip_rollout_prefix": ("ngym.server.middleware", "strip_rollout_prefix"),
    "failure_kinds": ("ngym.server.protocol.failure_kinds", None),
    "ROLLOUT_INDEX_KEY": ("ngym.server.protocol.bodies", "ROLLOUT_INDEX_KEY"),
    "TASK_INDEX_KEY": ("ngym.server.protocol.bodies", "TASK_INDEX_KEY"),
    "AggregateMetrics": ("ngym.server.protocol.bodies", "AggregateMetrics"),
    "AggregateMetricsRequest": ("ngym.server.protocol.bodies", "AggregateMetricsRequest"),
    "ResponseCreateParams": ("ngym.server.protocol.responses", "ResponseCreateParams"),
    "parse_body": ("ngym.server.request_bodies", "parse_body"),
    "read_json": ("ngym.server.request_bodies", "read_json"),
    "validate_body": ("ngym.server.request_bodies", "validate_body"),
    "add_health_routes": ("ngym.server.routes", "add_health_routes"),
    "judge_failure_body": ("ngym.server.routes", "judge_failure_body"),
    "SESSION_SECRET_ENV": ("ngym.server.sessions.cookies", "SESSION_SECRET_ENV"),
    "redact_url": ("ngym.server.sessions.factory", "redact_url"),
    "RequestSession": ("ngym.server.sessions.manager", "RequestSession"),
    "SessionConflict": ("ngym.server.sessions.manager", "SessionConflict"),
    "SessionManager": ("ngym.server.sessions.manager", "SessionManager"),
    "current_request_session": ("ngym.server.sessions.manager", "current_request_session"),
    "SessionLimitReached": ("ngym.server.sessions.store", "SessionLimitReached"),
    "SessionRecord": ("ngym.server.sessions.store", "SessionRecord"),
    "SessionStore": ("ngym.server.sessions.store", "SessionStore"),
}

__all__ = [
    "AggregateMetrics",
    "EnvTestResult",
    "AggregateMetricsRequest",
    "GLOBAL_CONFIG_ENV",
    "LedgerAppender",
    "MCP_PATH",
    "ROLLOUT_INDEX_KEY",
    "RequestSession",
    "ResponseCreateParams",
    "SEED_METADATA_KEY",
    "SERVER_URLS_ENV",
    "SESSION_SECRET_ENV",
    "SessionConflict",
    "SessionLimitReached",
    "SessionManager",
    "SessionRecord",
    "SessionStore",
    "SessionStoreError",
    "TASK_INDEX_KEY",
    "TOKEN_HEADER",
    "add_health_routes",
    "aggregate_metrics",
    "current_request_session",
    "done_keys",
    "drop_truncated_tail",
    "environment_test_command",
    "environment_test_report_command",
    "failure_kinds",
    "free_port",
    "install_mcp",
    "json_line",
    "judge_failure_body",
    "keeps_no_state",
    "mean_reward",
    "parse_body",
    "pending",
    "raise_server_exceptions",
    "read_global_config",
    "read_json",
    "read_jsonl",
    "read_results",
    "read_server_urls",
    "redact_url",
    "rollout_key",
    "rollout_keys",
    "rollout_order",
    "referenced_environments",
    "run_environment_tests",
    "stage_environment",
    "strip_rollout_prefix",
    "validate_body",
    "verify_responses",
    "write_global_config",
    "write_server_urls",
]


def __getattr__(name: str) -> Any:
    export = _EXPORTS.get(name)
    if export is None:
        raise AttributeError(f"module 'ngym.plugin_api' has no attribute {name!r}")
    module = importlib.import_module(export[0])
    value = module if export[1] is None else getattr(module, export[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
