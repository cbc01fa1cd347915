"""ORS sessions as ngym sessions: seeded with the row, tools run by their routes, the final answer by ``/verify``.

An ``Episode`` is what the ORS protocol adds to one ngym session and nothing more: the session's cookie (the
session itself, its state and its lifetime stay with the server's session manager), the row it was seeded
with, and the calls made so far (the trajectory ``/verify`` will read). Every step is an in-process request to
the environment's own app (``ngym.server.fronts.inprocess.RolloutSession``), carrying the session's cookie as a
NeMo Gym agent would.

Lifecycle: ``create`` seeds (``POST /seed_session``); the final-answer tool verifies (the server closes the
session after verify, or the front closes it when ``close_session_after_verify`` is off); ``delete`` (the client's
``/delete``) closes an unfinished session (``POST /close_session``) and forgets the episode. A lost session
(a tool route answering 410) ends the episode with no reward. Episodes idle past the server's session TTL
(whose ngym session the server has already expired) are forgotten.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pydantic_core

from ngym.server.fronts import gymnasium as shared_gym
from ngym.server.fronts import held, outcomes
from ngym.server.fronts.inprocess import RolloutSession
from ngym.server.fronts.ors import gymnasium, sse, trajectory, wire
from ngym.server.fronts.ors.rows import RowFacts
from ngym.server.fronts.ors.tools import SUBMIT_ARGUMENT, Toolbox, ToolSpec
from ngym.server.protocol.failure_kinds import VERIFIER_ERROR
from ngym.server.sessions.ids import SessionIdRule
from ngym.server.sessions.routing import RouteSlot

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from ngym.server.pipeline.resources import SimpleResourcesServer

log = logging.getLogger("ngym.ors")

#: Results kept per episode for clients that resume a cut ``/call`` stream by its task id.
KEPT_RESULTS = 4
#: An earlier call's result larger than this is let go when the next call starts (the last one is always kept).
RESUMABLE_BYTES = 64 * 1024
_SWEEP_SECONDS = 30.0


class FrontError(Exception):
    """A request the front refuses: HTTP ``status`` with ``detail`` (what to fix)."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Episode:
    sid: str
    facts: RowFacts
    session: RolloutSession
    steps: list[trajectory.Step] = field(default_factory=list)
    finished: bool = False
    closed: bool = False
    last_used: float = field(default_factory=time.monotonic)
    results: dict[str, asyncio.Future[bytes]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: a Gymnasium-style environment's episode (``/reset`` + ``/step``), None on NeMo Gym's seed/verify wire
    gym: shared_gym.GymEpisode | None = None
    #: bytes of the calls' arguments and answers in ``steps`` (``ngym.server.fronts.held``)
    held: int = 0

    @property
    def observation(self) -> str:
        """What the environment said at reset (Gymnasium-style environments), added to the prompt."""
        return self.gym.observation if self.gym is not None else ""

    @property
    def row(self) -> dict[str, Any]:
        return self.facts.row

    @property
    def tools(self) -> dict[str, ToolSpec]:
        return self.facts.tools


class Episodes:
    """The live ORS sessions of one server, by ORS session id."""

    def __init__(self, server: SimpleResourcesServer, app: ASGIApp, toolbox: Toolbox) -> None:
        self.server = server
        self.app = app
        self.toolbox = toolbox
        self.cookie_name = server.sessions.signer.cookie_name
        self._live: dict[str, Episode] = {}
        #: this process's place behind ``--workers`` (HAProxy routes an ORS request by its ``X-Session-ID``)
        self.slot = RouteSlot.from_env()
        self.id_rule = SessionIdRule(server.config.session_id_max_length, server.config.session_id_pattern)
        server.sessions.after_sweep(self._forget_idle)
        self._swept = time.monotonic()

    def __len__(self) -> int:
        return len(self._live)

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def create(self, sid: str, facts: RowFacts) -> Episode:
        """Seed an ngym session with the row of ``facts`` for the ORS session ``sid`` (400 if ``sid`` already has
        one)."""
        self._sweep()
        problem = self.id_rule.problem(sid)
        if problem is not None:
            raise FrontError(400, f"X-Session-ID {problem}")
        if not self.slot.owns(sid):
            raise FrontError(503, self._elsewhere(sid))
        if sid in self._live:
            raise FrontError(400, f"Session already exists: {sid!r}")
        if len(self._live) >= self.server.config.max_sessions:
            self._forget_finished()
        session = RolloutSession(self.app, self.cookie_name)
        gym: shared_gym.GymEpisode | None = None
        if self.toolbox.gymnasium:
            answer, gym = await gymnasium.reset(session, facts.seed_body)
        else:
            answer = await session.seed(facts.seed_body)
        if answer.status >= 400:
            # The environment's own refusal (422 for a row it does not accept, 503 when full), passed on as is.
            raise FrontError(answer.status, _detail(answer.text))
        if not session.live:
            route = "/reset" if gym is not None else "/seed_session"
            raise FrontError(500, f"the environment's {route} answered without a session cookie")
        if gym is None and not facts.prompt_text:
            told = _seed_prompt(answer.text)
            if told:
                facts.told(told)
        episode = Episode(sid=sid, facts=facts, session=session, gym=gym)
        self._live[sid] = episode
        return episode

    def get(self, sid: str) -> Episode:
        episode = self.find(sid)
        if episode is None:
            if not self.slot.owns(sid):
                raise FrontError(503, self._elsewhere(sid))
            raise FrontError(
                404, f"Active environment not found: no ORS session {sid!r} (deleted or expired? POST /create first)"
            )
        return episode

    def _elsewhere(self, sid: str) -> str:
        """Why a request naming ``sid`` is not served here: another process of the routing set holds it (this one
        got the request because that one is down, or the request went around the proxy). A ``/create`` seeded
        here would hold a session no later request reaches."""
        return (
            f"ORS session {sid!r} belongs to another worker of this server (this is {self.slot.describe()}); that "
            "worker is down or restarting, or the request went around the proxy: retry through the server's address"
        )

    def find(self, sid: str) -> Episode | None:
        """The live episode ``sid`` (marked used now), or None."""
        episode = self._live.get(sid)
        if episode is not None:
            episode.last_used = time.monotonic()
        return episode

    async def delete(self, sid: str) -> None:
        """Forget an episode, closing its ngym session unless it is closed already. Unknown ids are fine."""
        episode = self._live.pop(sid, None)
        if episode is not None:
            await self._close(episode)

    def forget_closed(self, sid: str) -> bool:
        """``delete`` when nothing is left to close: forget the episode if it is closed (or unknown) and say True;
        False for an open one (``delete`` closes it)."""
        episode = self._live.get(sid)
        if episode is not None:
            if not episode.closed:
                return False
            del self._live[sid]
        return True

    async def _close(self, episode: Episode) -> None:
        if episode.closed:
            return
        episode.closed = True
        if episode.gym is not None:
            answer = await gymnasium.close(episode.session, episode.gym)
        else:
            answer = await episode.session.close()
        if answer is not None and answer.status >= 400:
            log.warning("ORS session %s: /close_session answered %s: %s", episode.sid, answer.status, answer.text[:200])

    def _forget_finished(self) -> None:
        """Forget the finished episodes a client never deleted (their sessions are closed), oldest first, down to
        half the server's ``max_sessions``: the table stays bounded when clients skip ``/delete``."""
        finished = sorted((e.last_used, sid) for sid, e in self._live.items() if e.finished)
        excess = len(self._live) - self.server.config.max_sessions // 2
        for _, sid in finished[: max(0, excess)]:
            del self._live[sid]

    def _sweep(self) -> None:
        """Forget episodes idle longer than the server's session TTL (the server expired their sessions), at most
        every ``_SWEEP_SECONDS`` on a ``/create``; the server's own sweep does it too (``_forget_idle``)."""
        now = time.monotonic()
        if now - self._swept < _SWEEP_SECONDS:
            return
        self._swept = now
        ttl = self.server.config.session_ttl_seconds
        for sid in [sid for sid, e in self._live.items() if now - e.last_used > ttl and not e.lock.locked()]:
            del self._live[sid]

    async def _forget_idle(self) -> None:
        """After the server's session sweep: forget the episodes it expired, their rows and trajectories with
        them (an abandoned episode held its trajectory, up to ``max_session_tool_bytes``, until the next
        ``/create``)."""
        self._swept = 0.0
        self._sweep()

    # ---- steps -------------------------------------------------------------------------------------

    async def call(self, episode: Episode, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one ORS tool call; the ``RunToolOutput`` answer (as a dict)."""
        async with episode.lock:  # one step at a time: the trajectory keeps the order the tools ran in
            if episode.finished:
                done = (
                    f"{name!r} was not run: the episode has finished (a tool returned finished=True), "
                    "so no further tool calls are accepted."
                )
                return wire.tool_error(done, "episode_finished")
            if name == self.toolbox.submit_name:
                answer = arguments.get(SUBMIT_ARGUMENT)
                if not isinstance(answer, str) or set(arguments) - {SUBMIT_ARGUMENT}:
                    return wire.tool_error(f"{name} takes one string argument, {SUBMIT_ARGUMENT!r}", "input_validation")
                return await self._submit(episode, answer)
            if name not in episode.tools:
                available = sorted(episode.tools)
                return wire.tool_error(f"{name!r} is not a valid tool; available tools: {available}", "not_found")
            return await self._run_tool(episode, name, episode.tools[name].given(arguments))

    async def _run_tool(self, episode: Episode, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if episode.gym is not None:
            item = shared_gym.call_item(name, arguments, f"call_{episode.gym.steps}")
            return await self._gym_step(episode, [item])
        config = self.server.config
        arguments_text = held.arguments_text(arguments)
        size = held.size_of(arguments_text)
        refused = held.call_refused(episode.held, size, config)
        if refused is not None:  # not run, not kept
            return wire.tool_error(refused, "input_validation")
        answer = await episode.session.call(name, arguments)
        if answer.status == 410:  # the session's state is gone: the rollout cannot be scored
            episode.finished = True
            await self.delete(episode.sid)
            return wire.tool_success(
                answer.text, reward=None, finished=True, metadata=trajectory.lost_metadata(_detail(answer.text))
            )
        # NeMo Gym's agent keeps every answer, errors included, as the call's output: so does the trajectory.
        kept = held.answer_kept(episode.held + size, answer.text, config)
        episode.held += size + held.size_of(kept)
        episode.steps.append(trajectory.Step(name, arguments_text, kept))
        if self.server.tool_outcomes and answer.status == 200:
            outcome = outcomes.read(answer.text)
            if outcome is not None:
                return await self._outcome(episode, outcome)
        if answer.status == 422:  # worded as openreward's server words it (its SDK reads the reason from the prefix)
            return wire.tool_error(f"Tool input validation error: {answer.text}", "input_validation")
        return wire.tool_success(answer.text, reward=None, finished=False, metadata=None)

    async def _outcome(self, episode: Episode, outcome: outcomes.Outcome) -> dict[str, Any]:
        """A call whose answer carries its outcome (``outcomes``), as ``openreward``'s server answers it."""
        if outcome.refused == outcomes.RAISED:
            raise sse.ToolRaised(outcome.text)
        if outcome.refused is not None:
            return wire.tool_error(outcome.text, cast("wire.ErrorReason", outcome.refused))
        if outcome.finished:
            return await self._submit(episode, "", shown=outcome.text)
        return wire.tool_success(outcome.text, reward=None, finished=False, metadata=None)

    async def _gym_step(self, episode: Episode, items: list[dict[str, Any]]) -> dict[str, Any]:
        assert episode.gym is not None
        answer, over = await gymnasium.step(episode.session, episode.row, episode.gym, items)
        if over:
            episode.finished = True
            await self._close(episode)
        return answer

    async def _submit(self, episode: Episode, final_text: str, shown: str | None = None) -> dict[str, Any]:
        """End the episode through ``/verify``; the final call's answer (``shown``: its text, else one saying the
        reward)."""
        if episode.gym is not None:
            return await self._gym_step(episode, [shared_gym.message_item(final_text, episode.gym.steps)])
        row = episode.row
        response = trajectory.response(episode.steps, final_text, row, f"resp_ors_{episode.sid}")
        answer = await episode.session.verify(episode.facts.verify_body(response), echo=False)
        episode.finished = True
        if answer.status >= 400:
            await self._close(episode)
            metadata = {"mask_sample": True, "failure_kind": VERIFIER_ERROR, "failure_reason": answer.text[:2000]}
            return wire.tool_success(
                f"verify failed (HTTP {answer.status})", reward=None, finished=True, metadata=metadata
            )
        if self.server.config.close_session_after_verify:
            episode.closed = True  # the server closed it after verify
            episode.session.forget()
        else:
            await self._close(episode)
        verified = pydantic_core.from_json(answer.body) if answer.body else None
        if not isinstance(verified, dict):
            return wire.tool_success("verify answered no object", reward=None, finished=True, metadata=None)
        reward = trajectory.reward_of(verified)
        text = (
            "The episode is over: no reward (masked)." if reward is None else f"The episode is over. Reward: {reward}"
        )
        text = text if shown is None else shown
        return wire.tool_success(
            text, reward=reward, finished=True, metadata=trajectory.outcome_metadata(verified, row)
        )


def _seed_prompt(text: str) -> str:
    """The ``prompt`` text a seed answer carries (an installed ORS environment's), else ``""``."""
    try:
        data = json.loads(text)
    except ValueError:
        return ""
    prompt = data.get("prompt") if isinstance(data, dict) else None
    return prompt if isinstance(prompt, str) else ""


def _detail(text: str) -> Any:
    """An answer's ``detail`` (its JSON ``detail`` field when it has one, else the text)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return data.get("detail", data) if isinstance(data, dict) else data
