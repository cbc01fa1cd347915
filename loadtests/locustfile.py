"""Whole-rollout load test of an ngym environment, for Locust's own CLI and web UI.

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000              # web UI on :8089
    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 --headless -u 20 -r 20 -t 30s

The same scenario as ``ngym profile``: each user runs whole rollouts back to back (seed_session with a row,
the row's recorded tool calls, verify with the recorded response, close_session), carrying its own
session cookie by hand. What to replay:

    NGYM_PROFILE_DATA=path/rows.jsonl   rows or example rollouts (default: the environment's own examples)
    NGYM_PROFILE_ENV=name               the environment (for its examples and a plugin's scenario hook);
                                        default: the name the server reports at GET /health
    NGYM_PROFILE_ROLLOUTS=N             stop once N whole rollouts have ended (finished or failed), whatever
                                        --run-time says: a scripted run measured in rollouts, not seconds

Start the environment yourself (``ngym run NAME --port 8000``); ``ngym profile NAME`` does both for you.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import gevent
from locust import events

from ngym.profiling.scenario import load_rows, resolve_scenario
from ngym.profiling.target import fetch_health, resolve_target
from ngym.profiling.user import RolloutTracker, RolloutUser
from ngym.rollout.gymnasium import server_post_routes


class WholeRollout(RolloutUser):
    """One simulated agent: whole rollouts, back to back, one session cookie per rollout."""

    abstract = False


def _configure(host: str | None) -> None:
    data = os.environ.get("NGYM_PROFILE_DATA")
    name = os.environ.get("NGYM_PROFILE_ENV")
    if name is None and host:
        health = fetch_health(host) or {}
        name = health.get("name") if isinstance(health.get("name"), str) else None
    if data:
        path = Path(data)
    elif name:
        _, path = resolve_target(name, None)
    else:
        raise SystemExit(
            "loadtests/locustfile.py: set NGYM_PROFILE_DATA=rows.jsonl or NGYM_PROFILE_ENV=<environment name> "
            "(or start the server first, so its /health names it)"
        )
    WholeRollout.rows = load_rows(path)
    # the protocol the server speaks (seed/verify, or a Gymnasium-style server's reset/step), from its routes
    WholeRollout.scenario = resolve_scenario(name, server_post_routes(host) if host else None)
    print(f"ngym: {len(WholeRollout.rows)} rows from {path}; scenario {type(WholeRollout.scenario).__name__}")


@events.test_start.add_listener
def _on_test_start(environment: Any, **_kwargs: Any) -> None:
    _configure(environment.host or WholeRollout.host)
    WholeRollout.tracker = RolloutTracker()
    WholeRollout.row_counter = itertools.count()
    limit = os.environ.get("NGYM_PROFILE_ROLLOUTS")
    if limit:
        gevent.spawn(_quit_after, environment, WholeRollout.tracker, int(limit))


def _quit_after(environment: Any, tracker: RolloutTracker, rollouts: int) -> None:
    """Stop the run once ``rollouts`` whole rollouts have ended (NGYM_PROFILE_ROLLOUTS)."""
    while tracker.finished + tracker.failed < rollouts:
        gevent.sleep(0.05)
    environment.runner.quit()


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_kwargs: Any) -> None:
    tracker = getattr(WholeRollout, "tracker", None)
    if tracker is None:
        return
    tracker.stop()
    print(
        f"ngym: {tracker.finished} rollouts finished ({tracker.finished / tracker.elapsed_s:.1f}/s), "
        f"{tracker.failed} failed"
    )
