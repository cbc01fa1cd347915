"""An OpenEnv environment served as an ngym resources server.

One rollout (ngym session) is one OpenEnv episode: ``/seed_session`` opens a WebSocket to the environment's own
OpenEnv server, which creates a fresh environment instance for it, and sends ``reset`` (the row's
``episode_id``, else the session id, and its ``seed`` and ``reset_kwargs``); each tool call is one ``step``;
``/verify`` turns the steps' rewards into the episode's reward (``ngym_openenv.reward``); closing the session
ends the WebSocket, and OpenEnv's server calls the environment's ``close()`` once.

Tools: an MCP environment's tools (``CallToolAction``) are routes named after them, whose body is the tool's
arguments; any other environment has one route, ``/step``, whose body is its Action. Either answers with
OpenEnv's own step answer, ``{"observation": {...}, "reward": ..., "done": ...}``, unchanged.

Concurrency is the environment's own: its server gives each episode its own executor (or the one shared thread
under ``REQUIRES_SINGLE_THREAD_EXECUTOR``) and runs at most ``max_concurrent_envs`` episodes. ngym starts
``instances`` such servers (``ngym_openenv.pool``); a seed finding every slot taken waits up to
``seed_wait_seconds`` for one, then answers HTTP 503 with ``Retry-After``. A rollout that never closes its session
gives its slot back on the idle sweep (``session_ttl_seconds``, 300 s by default here). The servers ngym starts
listen on unix sockets in 0700 folders (``launch.start(private=True)``): only this ngym server reaches them.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fastapi import Body, FastAPI, HTTPException, Request
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from ngym import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from ngym_openenv import launch
from ngym_openenv.manifest import Manifest
from ngym_openenv.pool import Backend, Pool
from ngym_openenv.reward import NoReward, check_rule, episode_reward
from ngym_openenv.wire import CAPACITY_REACHED, Episode, OpenEnvError, OpenEnvUnreachable

if TYPE_CHECKING:
    from ngym.plugin_api import ContainerPayload, ImageLayout

log = logging.getLogger("ngym_openenv")

# NeMo Gym's shared failure kinds (ngym.server.protocol.failure_kinds).
SESSION_LOST = "session_lost"
VERIFIER_ERROR = "verifier_error"


class OpenEnvConfig(BaseResourcesServerConfig):
    """An OpenEnv environment's settings (``ngym run NAME key=value`` overrides any of them)."""

    openenv_url: str | None = Field(
        default=None,
        description="Front the OpenEnv server running at this URL (http(s):// or ws(s)://) instead of starting the "
        "installed one.",
    )
    reward_rule: str | None = Field(
        default=None, description="last, sum or state:<field> (default: the one chosen at install; see the docs)."
    )
    startup_timeout_seconds: float = Field(default=180.0, gt=0)
    instances: int = Field(
        default=1,
        ge=1,
        le=64,
        description="OpenEnv servers (processes) to start; each runs up to the environment's max_concurrent_envs "
        "episodes (1 for most environments), so this bounds the rollouts that can run at once. Ignored with "
        "openenv_url.",
    )
    seed_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How long a seed waits for a free episode slot when every one is in use, before answering 503.",
    )
    session_ttl_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Idle sessions are closed after this, giving their episode slot back (an abandoned rollout "
        "would otherwise hold one of few slots).",
    )
    message_timeout_seconds: float = Field(default=120.0, gt=0, description="Per reset/step answer.")

    @field_validator("reward_rule")
    @classmethod
    def _known_rule(cls, value: str | None) -> str | None:
        return None if value is None else check_rule(value)


class OpenEnvSeedRequest(BaseSeedSessionRequest):
    """The row: optional ``episode_id``, ``seed`` and ``reset_kwargs`` passed to the environment's ``reset``."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    seed: int | None = None
    reset_kwargs: dict[str, Any] = Field(default_factory=dict)


class OpenEnvSeedResponse(BaseSeedSessionResponse):
    """``reset``'s observation, as OpenEnv's client receives it, and the episode id."""

    episode_id: str
    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False


class OpenEnvVerifyResponse(BaseVerifyResponse):
    """The episode's reward under ``reward_rule``, with the steps' rewards it came from."""

    episode_id: str | None = None
    reward_rule: str
    step_rewards: list[float | None] = Field(default_factory=list)
    steps: int = 0
    episode_done: bool = False


class EpisodeSession:
    """A rollout's live state: its WebSocket episode and what its steps answered."""

    def __init__(self, episode: Episode, episode_id: str, backend: Backend | None = None) -> None:
        self.episode = episode
        self.episode_id = episode_id
        self.backend = backend  # the OpenEnv server whose slot it holds, until closed
        self.step_rewards: list[float | None] = []
        self.done = False
        self.lost: str | None = None  # why the episode was lost, once it is

    def record(self, answer: dict[str, Any]) -> None:
        reward = answer.get("reward")
        self.step_rewards.append(float(reward) if isinstance(reward, int | float) else None)
        self.done = bool(answer.get("done"))


class OpenEnvServer(SimpleResourcesServer):
    """An OpenEnv environment (installed by ``ngym install openenv:...``); subclasses set ``manifest``."""

    config: OpenEnvConfig
    manifest: ClassVar[Manifest]
    session_affinity_required = True  # a session is a live WebSocket to the environment's server
    reward_range = None  # OpenEnv rewards pass through at the environment's own scale (DIPG's is -50…+30)
    _pool: Pool | None = PrivateAttr(default=None)

    # ---- lifecycle -----------------------------------------------------------------------------------

    @property
    def reward_rule(self) -> str:
        return self.config.reward_rule or self.manifest.reward_rule

    async def on_startup(self) -> None:
        m = self.manifest
        url = self.config.openenv_url or m.url
        if url:
            self._pool = Pool([Backend(url, capacity=m.max_concurrent_envs)])
            return
        if not (m.python and m.app):
            raise launch.LaunchError(f"{m.name}: its manifest names neither a URL nor an app to start")
        python, app = m.python, m.app

        def start() -> launch.OpenEnvProcess:
            return launch.start(
                python,
                app,
                app_dir=m.app_dir,
                env=m.env,
                timeout=self.config.startup_timeout_seconds,
                progress=log.warning,  # how long it has waited, its log and last line: a slow start is seen
                private=True,  # a unix socket in a 0700 folder: only this ngym server reaches it
            )

        started = await asyncio.gather(
            *(asyncio.to_thread(start) for _ in range(self.config.instances)), return_exceptions=True
        )
        processes = [p for p in started if isinstance(p, launch.OpenEnvProcess)]
        failed = next((e for e in started if isinstance(e, BaseException)), None)
        if failed is not None:
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in processes))
            raise failed
        self._pool = Pool([Backend(p.url, uds=p.uds, capacity=m.max_concurrent_envs, process=p) for p in processes])
        log.info("%s: %d OpenEnv server(s) %s started", m.name, len(processes), app)

    async def on_shutdown(self) -> None:
        if self._pool is not None:
            running = [b.process for b in self._pool.backends if b.process is not None]
            await asyncio.gather(*(asyncio.to_thread(p.stop) for p in running))
            self._pool = None

    @classmethod
    def container_payload(cls, layout: ImageLayout, workdir: Path) -> ContainerPayload:
        """What its image carries beyond the wheels (read by ``ngym containerize``): ``ngym_openenv.image``."""
        # deferred: the image tooling is loaded by `ngym containerize` alone, never by a running server
        from ngym_openenv.image import container_payload

        return container_payload(cls.manifest, layout, workdir)

    # ---- routes ----------------------------------------------------------------------------------------

    @property
    def process(self) -> launch.OpenEnvProcess | None:
        """The (first) OpenEnv server this ngym server started (None when it fronts one by URL, or before start-up)."""
        running = self.processes
        return running[0] if running else None

    @property
    def processes(self) -> list[launch.OpenEnvProcess]:
        """Every OpenEnv server this ngym server started (``instances`` of them)."""
        return [] if self._pool is None else [b.process for b in self._pool.backends if b.process is not None]

    @property
    def pool(self) -> Pool | None:
        """The OpenEnv servers and the episodes held on each (None before start-up)."""
        return self._pool

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.state.openenv = self  # lets tests and embedders reach the OpenEnv process
        if self.manifest.tool_mode == "mcp":
            for tool in self.manifest.tools:
                app.post(
                    f"/{tool.name}",
                    summary=tool.name,
                    description=tool.description or f"The environment's MCP tool {tool.name}.",
                    openapi_extra=_body_schema(tool.input_schema),
                )(self._tool_route(tool.name))
        else:
            app.post(
                "/step",
                summary="step",
                description="One step of the environment: the body is its Action.",
                openapi_extra=_body_schema(self.manifest.action_schema),
            )(self._step_route())
        return app

    def _tool_route(self, tool_name: str) -> Any:
        async def call_tool(request: Request, arguments: dict[str, Any] = Body(default_factory=dict)) -> Any:
            action = {"type": "call_tool", "tool_name": tool_name, "arguments": arguments}
            return await self._step(request, action)

        call_tool.__name__ = tool_name
        return call_tool

    def _step_route(self) -> Any:
        async def step(request: Request, action: dict[str, Any] = Body(...)) -> Any:
            return await self._step(request, action)

        return step

    async def _step(self, request: Request, action: dict[str, Any]) -> dict[str, Any]:
        session: EpisodeSession = self.session_state(request)
        if session.lost is not None:
            raise HTTPException(410, f"this rollout's OpenEnv episode is lost: {session.lost}")
        try:
            answer = await session.episode.step(action)
        except OpenEnvUnreachable as exc:
            session.lost = exc.message
            raise HTTPException(410, f"this rollout's OpenEnv episode is lost: {exc.message}") from None
        except OpenEnvError as exc:
            # The environment refused the action (validation) or failed executing it: the caller's to see.
            status = 422 if exc.code == "VALIDATION_ERROR" else 400
            raise HTTPException(status, {"message": exc.message, "openenv_error": exc.details}) from None
        session.record(answer)
        return answer

    async def seed_session(self, request: Request, body: OpenEnvSeedRequest) -> OpenEnvSeedResponse:
        pool = self._pool
        if pool is None:
            raise HTTPException(503, "the OpenEnv server is not running", headers={"Retry-After": "5"})
        episode_id = body.episode_id or self.session_id(request)
        data: dict[str, Any] = {**body.reset_kwargs, "episode_id": episode_id}
        if body.seed is not None:
            data["seed"] = body.seed
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.seed_wait_seconds
        while True:
            backend = await pool.acquire(deadline)
            if backend is None:
                raise self._full(pool)
            try:
                episode, answer = await self._open_episode(backend, data)
            except BaseException:
                await pool.release(backend)
                raise
            if episode is not None:
                break
            # OpenEnv refused it at capacity though ngym's count had a slot free: a slot another client holds (a
            # server fronted by URL), or one OpenEnv has not freed yet after a close. Try again until the deadline.
            if loop.time() >= deadline:
                raise self._full(pool)
            await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
        self.set_session_state(request, EpisodeSession(episode, episode_id, backend))
        return OpenEnvSeedResponse(
            episode_id=episode_id,
            observation=answer.get("observation") or {},
            reward=answer.get("reward"),
            done=bool(answer.get("done")),
        )

    async def _open_episode(self, backend: Backend, data: dict[str, Any]) -> tuple[Episode | None, dict[str, Any]]:
        """Connect to ``backend`` and reset: the episode and its answer, or (None, {}) when it is at capacity."""
        try:
            episode = await Episode.open(backend.url, timeout=self.config.message_timeout_seconds, uds=backend.uds)
        except OpenEnvUnreachable as exc:
            raise HTTPException(503, exc.message, headers={"Retry-After": "5"}) from None
        try:
            return episode, await episode.reset(**data)
        except OpenEnvError as exc:
            await episode.close()
            if exc.code == CAPACITY_REACHED:
                return None, {}
            status = 503 if isinstance(exc, OpenEnvUnreachable) else 400
            raise HTTPException(status, f"the environment's reset failed: {exc.message}") from None
        except BaseException:
            await episode.close()
            raise

    def _full(self, pool: Pool) -> HTTPException:
        """503 for a seed that found no free slot in ``seed_wait_seconds``: what the environment allows, and what
        to raise."""
        per_server = self.manifest.max_concurrent_envs
        allows = f"{per_server} episode(s) at once per server" if per_server else "a limited number of episodes"
        remedy = (
            "raise instances to run more rollouts at once"
            if self.processes
            else "the OpenEnv server at openenv_url is full: end the episodes other clients hold there, or serve more"
        )
        return HTTPException(
            503,
            f"{self.manifest.name} allows {allows} (its max_concurrent_envs) and every slot on its "
            f"{len(pool.backends)} server(s) stayed in use for {self.config.seed_wait_seconds:g} s "
            f"(seed_wait_seconds): {remedy}.",
            headers={"Retry-After": "1"},
        )

    async def verify(self, request: Request, body: BaseVerifyRequest) -> OpenEnvVerifyResponse:
        session: EpisodeSession | None = self.session_state(request, required=False)
        rule = self.reward_rule
        if session is None:
            return self._masked(body, rule, None, SESSION_LOST, "no live episode for this rollout (seed it first)")
        if session.lost is not None:
            return self._masked(body, rule, session, SESSION_LOST, f"the OpenEnv episode was lost: {session.lost}")
        state: dict[str, Any] | None = None
        try:
            if rule.startswith("state:"):
                state = await session.episode.state()
            reward = episode_reward(rule, session.step_rewards, state)
        except NoReward as exc:
            return self._masked(body, rule, session, VERIFIER_ERROR, f"reward rule {rule!r}: {exc}")
        except OpenEnvError as exc:
            return self._masked(body, rule, session, SESSION_LOST, f"reading the episode's state failed: {exc}")
        return OpenEnvVerifyResponse(**body.model_dump(), reward=reward, **_episode_fields(session, rule))

    def _masked(
        self, body: BaseVerifyRequest, rule: str, session: EpisodeSession | None, kind: str, reason: str
    ) -> OpenEnvVerifyResponse:
        log.warning("%s: verify masked (%s): %s", self.manifest.name, kind, reason)
        fields = _episode_fields(session, rule) if session is not None else {"reward_rule": rule}
        return OpenEnvVerifyResponse(
            **body.model_dump(), reward=0.0, mask_sample=True, failure_kind=kind, failure_reason=reason, **fields
        )

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        if isinstance(state, EpisodeSession):
            try:
                await state.episode.close()
            finally:
                backend, state.backend = state.backend, None  # its slot, given back once
                if backend is not None and self._pool is not None:
                    await self._pool.release(backend)


def _episode_fields(session: EpisodeSession, rule: str) -> dict[str, Any]:
    return {
        "episode_id": session.episode_id,
        "reward_rule": rule,
        "step_rewards": session.step_rewards,
        "steps": len(session.step_rewards),
        "episode_done": session.done,
    }


def _body_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI's request body for a route whose body is a JSON object of this schema (shown on /docs)."""
    if not schema:
        return {}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def server_class(manifest: Manifest) -> type[OpenEnvServer]:
    """A server class for ``manifest`` made in memory (what the generated module's ``Server`` is, for tests and
    embedding; ``ngym install`` writes it as a module so that every process imports the same class)."""
    description = manifest.description.splitlines()[0] if manifest.description else f"OpenEnv {manifest.name}"
    namespace = {"manifest": manifest, "domain": manifest.domain, "description": description, "__module__": __name__}
    return type(f"OpenEnv_{manifest.name}", (OpenEnvServer,), namespace)
