"""What one simulated user does: whole rollouts, one dataset row at a time.

A **scenario** performs one rollout for one row through a ``RolloutSession``. The default,
``RecordedRolloutScenario``, replays the row's recorded rollout exactly as a NeMo Gym agent would send it:
``/seed_session`` with the row, each recorded ``function_call`` (in order, with its arguments), ``/verify``
with the recorded response, then ``/close_session``. A row without a recorded response is seed → verify
(with an empty response) → close. A Gymnasium-style server (``/reset`` + ``/step``, no ``/seed_session``: NeMo
Gym's ``GymnasiumServer``) gets ``GymnasiumScenario``: the recorded trajectory replayed turn by turn through
``/reset`` and ``/step``, as NeMo Gym's ``gymnasium_agent`` sends it (``ngym.rollout.gymnasium``). A plugin
supplies its own scenario with the ``ngym_profile_scenario`` hook.

This module does not import Locust (which monkey-patches the process with gevent on import); the Locust
user class that runs a scenario lives in ``ngym.profiling.user``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ngym.errors import ConfigError
from ngym.examples import (
    EXAMPLE_ROLLOUTS,
    EXAMPLE_ROWS,
    dataset_row,
    example_file,
    read_example_rollouts,
    recorded_tool_calls,
)
from ngym.plugins.manager import get_plugin_manager
from ngym.rollout.gymnasium import Recording, drive, episode, is_gymnasium_style

#: The response sent to /verify for a row that has no recorded rollout: a valid Responses object, no output.
EMPTY_RESPONSE: dict[str, Any] = {
    "id": "resp_ngym_profile",
    "created_at": 0.0,
    "model": "ngym-profile",
    "object": "response",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


class RolloutFailed(Exception):
    """A request of the rollout failed (non-2xx or transport error); it is already in Locust's statistics."""


class RolloutSession(Protocol):
    """One rollout's client: carries the session cookie by hand from each response onto the next request."""

    def post(self, path: str, body: Any = None, name: str | None = None) -> Any:
        """POST ``body`` as JSON to ``path``; return the decoded JSON body.

        Raises ``RolloutFailed`` on a non-2xx status or a transport error (after recording it as a failure
        in Locust's statistics under ``name``, default ``path``).
        """
        ...


@runtime_checkable
class Scenario(Protocol):
    """One whole rollout for one dataset row. Return the verify response (a dict) if there was one."""

    def run(self, session: RolloutSession, row: dict[str, Any]) -> dict[str, Any] | None: ...


class RecordedRolloutScenario:
    """The default scenario: seed → recorded tool calls → verify with the recorded response → close.

    ``close_session`` is sent even when verify failed (the session must be freed either way); it is
    skipped only when seeding failed, since then there is no session.
    """

    def run(self, session: RolloutSession, row: dict[str, Any]) -> dict[str, Any] | None:
        data = dataset_row(row)
        response = row.get("response")
        session.post("/seed_session", data)
        try:
            for call in recorded_tool_calls(response):
                session.post(f"/{call.name}", call.arguments)
            verified: dict[str, Any] | None = session.post("/verify", {**data, "response": response or EMPTY_RESPONSE})
        except RolloutFailed:
            # Free the session, then report the first failure. (Not on other exceptions: a user being
            # stopped mid-request must not start another request.)
            with contextlib.suppress(RolloutFailed):  # (a failed close is still in Locust's statistics)
                session.post("/close_session", {})
            raise
        session.post("/close_session", {})
        return verified


class GymnasiumScenario:
    """A Gymnasium-style server: /reset with the row, /step with each recorded model turn until the episode
    ends, /close when the server advertises it. The rollout's reward is the sum of the steps' rewards."""

    def run(self, session: RolloutSession, row: dict[str, Any]) -> dict[str, Any] | None:
        data = dataset_row(row)
        result = drive(episode(data), session.post, Recording(row.get("response"), EMPTY_RESPONSE))
        return {"reward": result.reward, "terminated": result.terminated, "truncated": result.truncated}


def load_rows(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file of dataset rows or example rollouts (row + ``response`` + ``reward``)."""
    rows = read_example_rollouts(path)
    for number, row in enumerate(rows, 1):
        try:
            recorded_tool_calls(row.get("response"))  # fail now, not under load, on undecodable arguments
        except ConfigError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from None
    if not rows:
        raise ConfigError(f"{path}: no rows")
    return rows


def data_file_in(folder: Path) -> Path | None:
    """An environment folder's profile data: ``data/example_rollouts.jsonl``, else ``data/example.jsonl``."""
    return example_file(folder, EXAMPLE_ROLLOUTS) or example_file(folder, EXAMPLE_ROWS)


def resolve_scenario(name: str | None, post_routes: Iterable[str] | None = None) -> Scenario:
    """The scenario a plugin supplies for environment ``name`` (hook ``ngym_profile_scenario``), else the one
    its protocol needs: ``GymnasiumScenario`` when the server's ``post_routes`` are ``/reset`` + ``/step``
    without ``/seed_session``, else ``RecordedRolloutScenario``."""
    if name:
        supplied = get_plugin_manager().hook.ngym_profile_scenario(name=name)
        if isinstance(supplied, type):  # a scenario class: one instance serves every user
            supplied = supplied()
        if supplied is not None:
            if not isinstance(supplied, Scenario):
                raise ConfigError(f"the ngym_profile_scenario of {name!r} returned {supplied!r}: it has no run()")
            return supplied
    if post_routes is not None and is_gymnasium_style(post_routes):
        return GymnasiumScenario()
    return RecordedRolloutScenario()
