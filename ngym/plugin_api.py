"""What a plugin may use of ngym beyond ``ngym``'s own names: the public API of the core for plugin authors.

A plugin (a session store, an ecosystem adapter such as ``ngym-nemo-gym``) imports from ``ngym`` and from here,
never from ``ngym.server.*`` or a private name: ``tests/unit/test_layers.py`` checks that for ``plugins/``. What
is here keeps its name and meaning across releases; what is not may move.

- **Sessions**: ``SessionManager`` (the session protocol: typed seed and close, rebind, close hooks; a server's
  is ``server.sessions``), ``RequestSession`` (a request's, ``server.bound_session(request)``),
  ``current_request_session``, ``SimpleResourcesServer.install_sessions(app)`` for an app built by hand.
- **Session stores**: ``SessionStore`` to implement, ``SessionRecord``, ``SessionLimitReached``,
  ``SessionStoreError``, ``redact_url``, ``SESSION_SECRET_ENV``,
  ``SESSION_SECRET_FILE_ENV``, ``secret_configured``.
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
- **Install sources** (an ecosystem's ``ngym install <prefix>:``): ``InstallSource``, ``InstallSources`` (what
  the ``ngym_register_install_sources`` hook receives), ``Listing`` (``ngym list --available``'s rows with a line
  under them), ``run_pip`` / ``pip_uninstall_args`` (pip in ngym's own
  interpreter), the registry of installed environments (``get_registry``, ``reset_registry`` after an install,
  ``Register`` for the registration hook), ``needs_of`` (what an environment still needs before it serves),
  ``did_you_mean``, ``cache_dir`` (``~/.cache/ngym``, ``NGYM_CACHE_DIR``), ``cache_root`` (the machine's
  ``$XDG_CACHE_HOME/ngym``, for what is made once and reused: wheels, virtualenvs).
- **Ecosystems installed outside pip** (``ngym-ors``, ``ngym-verifiers``): ``Ecosystem`` (the two registrations),
  ``InstalledServer`` (one installed environment's server class), ``RecordShelf`` (its records),
  ``installed_classes`` (``<package>.installed:<name>``), ``InstalledRecord``.
- **Images**: ``ContainerPayload``, ``EnvironmentVenv``, ``ImageLayout`` (what a server class adds to its image:
  ``container_payload``), ``PluginSourceError`` (a source that cannot be imaged, with the reason).
- **Example data**: ``EXAMPLE_ROWS``, ``EXAMPLE_ROLLOUTS`` (the file names under ``data/``), ``dataset_row`` (a
  recorded rollout's dataset row).
- **Tests**: ``free_port``; a server class's app driven in process (``app_for_class``, ``serve_in_process``,
  ``RolloutClient`` carrying the session cookie, ``make_response`` for a verify body);
  ``environment_test_command`` (how ``gym env test`` runs an environment's tests);
  ``run_environment_tests`` (run them in a scratch copy, counted: ``EnvTestResult``), ``stage_environment`` and
  ``referenced_environments`` (that copy's layout), ``environment_test_report_command`` (the command it runs).

Names load on first use (as ``ngym``'s do): a plugin registering a hook at start-up pulls in no server runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngym._exports import lazy_exports

# The public names, each written once (``ngym._exports``): what type checkers see, and at run time the table a
# name loads from on first use.
if TYPE_CHECKING:
    # Exported under another name than the one they are defined with: an assignment, which checkers export.
    from ngym import envtest as _envtest
    from ngym.child_server import free_port as free_port
    from ngym.config import cache_dir as cache_dir
    from ngym.config import cache_root as cache_root
    from ngym.containerize.errors import PluginSourceError as PluginSourceError
    from ngym.containerize.payload import ContainerPayload as ContainerPayload
    from ngym.containerize.payload import EnvironmentVenv as EnvironmentVenv
    from ngym.containerize.payload import ImageLayout as ImageLayout
    from ngym.envtest import EnvTestResult as EnvTestResult
    from ngym.envtest import referenced_environments as referenced_environments
    from ngym.envtest import run_environment_tests as run_environment_tests
    from ngym.envtest import stage_environment as stage_environment
    from ngym.errors import SessionStoreError as SessionStoreError
    from ngym.examples import EXAMPLE_ROLLOUTS as EXAMPLE_ROLLOUTS
    from ngym.examples import EXAMPLE_ROWS as EXAMPLE_ROWS
    from ngym.examples import dataset_row as dataset_row
    from ngym.installer import pip_uninstall_args as pip_uninstall_args
    from ngym.installer import run_pip as run_pip
    from ngym.metrics.aggregate import aggregate_metrics as aggregate_metrics
    from ngym.plugins.ecosystem import Ecosystem as Ecosystem
    from ngym.plugins.ecosystem import InstalledRecord as InstalledRecord
    from ngym.plugins.installed import installed_classes as installed_classes
    from ngym.plugins.installed_server import InstalledServer as InstalledServer
    from ngym.plugins.record_shelf import RecordShelf as RecordShelf
    from ngym.plugins.registry import Register as Register
    from ngym.plugins.registry import get_registry as get_registry
    from ngym.plugins.registry import reset_registry as reset_registry
    from ngym.plugins.sources import InstallSource as InstallSource
    from ngym.plugins.sources import InstallSources as InstallSources
    from ngym.plugins.sources import Listing as Listing
    from ngym.readiness import needs_of as needs_of
    from ngym.rollout.ledger import LedgerAppender as LedgerAppender
    from ngym.rollout.ledger import done_keys as done_keys
    from ngym.rollout.ledger import drop_truncated_tail as drop_truncated_tail
    from ngym.rollout.ledger import json_line as json_line
    from ngym.rollout.ledger import mean_reward as mean_reward
    from ngym.rollout.ledger import pending as pending
    from ngym.rollout.ledger import read_jsonl as read_jsonl
    from ngym.rollout.ledger import read_results as read_results
    from ngym.rollout.ledger import rollout_key as rollout_key
    from ngym.rollout.ledger import rollout_keys as rollout_keys
    from ngym.rollout.ledger import rollout_order as rollout_order
    from ngym.rollout.ledger import verify_responses as verify_responses
    from ngym.run_carriers import GLOBAL_CONFIG_ENV as GLOBAL_CONFIG_ENV
    from ngym.run_carriers import SERVER_URLS_ENV as SERVER_URLS_ENV
    from ngym.run_carriers import read_global_config as read_global_config
    from ngym.run_carriers import read_server_urls as read_server_urls
    from ngym.run_carriers import write_global_config as write_global_config
    from ngym.run_carriers import write_server_urls as write_server_urls
    from ngym.server.fronts import mcp as _mcp
    from ngym.server.fronts.mcp import MCP_PATH as MCP_PATH
    from ngym.server.fronts.mcp import SEED_METADATA_KEY as SEED_METADATA_KEY
    from ngym.server.fronts.mcp import TOKEN_HEADER as TOKEN_HEADER
    from ngym.server.pipeline.intake import parse_body as parse_body
    from ngym.server.pipeline.intake import read_json as read_json
    from ngym.server.pipeline.intake import validate_body as validate_body
    from ngym.server.pipeline.middleware import raise_server_exceptions as raise_server_exceptions
    from ngym.server.pipeline.middleware import strip_rollout_prefix as strip_rollout_prefix
    from ngym.server.pipeline.routes import add_health_routes as add_health_routes
    from ngym.server.pipeline.routes import judge_failure_body as judge_failure_body
    from ngym.server.protocol import failure_kinds as failure_kinds
    from ngym.server.protocol.bodies import ROLLOUT_INDEX_KEY as ROLLOUT_INDEX_KEY
    from ngym.server.protocol.bodies import TASK_INDEX_KEY as TASK_INDEX_KEY
    from ngym.server.protocol.bodies import AggregateMetrics as AggregateMetrics
    from ngym.server.protocol.bodies import AggregateMetricsRequest as AggregateMetricsRequest
    from ngym.server.protocol.responses import ResponseCreateParams as ResponseCreateParams
    from ngym.server.sessions.cookies import SESSION_SECRET_ENV as SESSION_SECRET_ENV
    from ngym.server.sessions.cookies import SESSION_SECRET_FILE_ENV as SESSION_SECRET_FILE_ENV
    from ngym.server.sessions.cookies import secret_configured as secret_configured
    from ngym.server.sessions.factory import redact_url as redact_url
    from ngym.server.sessions.lost import keeps_no_state as keeps_no_state
    from ngym.server.sessions.manager import RequestSession as RequestSession
    from ngym.server.sessions.manager import SessionConflict as SessionConflict
    from ngym.server.sessions.manager import SessionManager as SessionManager
    from ngym.server.sessions.manager import current_request_session as current_request_session
    from ngym.server.sessions.store import SessionLimitReached as SessionLimitReached
    from ngym.server.sessions.store import SessionRecord as SessionRecord
    from ngym.server.sessions.store import SessionStore as SessionStore
    from ngym.suggest import did_you_mean as did_you_mean
    from ngym.testing import RolloutClient as RolloutClient
    from ngym.testing import app_for_class as app_for_class
    from ngym.testing import make_response as make_response
    from ngym.testing import serve_in_process as serve_in_process

    environment_test_command = _envtest.pytest_command
    environment_test_report_command = _envtest.reported_pytest_command
    install_mcp = _mcp.install

if not TYPE_CHECKING:  # checkers see the imports above (``as``: re-exported); this is their run-time side
    __getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
