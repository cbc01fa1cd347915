"""NeMo Gym's episode servers (``nemo_gym.base_environment_server``), on ngym.

An environment server runs one whole episode per ``POST /run`` (a typed ``BaseEpisodeRequest`` in, a typed
``BaseEpisodeResponse`` out) and aggregates metrics over episodes. This base adds what every such server needs:
an admission limit (``max_concurrent_episodes``, waiting at most ``queue_timeout_seconds``), an episode deadline
(``default_episode_timeout_seconds``), cleanup callbacks that always run (last registered first, within
``cleanup_timeout_seconds``, even when the episode failed or was cancelled), and failures folded into the
response: a timeout or a ``HandledEpisodeError`` becomes ``failure`` in a 200 answer, never a 500.
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypeVar

from anyio import CancelScope
from fastapi import Body, FastAPI
from pydantic import ConfigDict, PositiveFloat, PositiveInt, model_validator

from nemo_gym.config_types import AggregateMetrics, AggregateMetricsRequest, BaseRunServerInstanceConfig
from nemo_gym.episode_types import BaseEpisodeRequest, BaseEpisodeResponse, EpisodeFailure, EpisodeId
from nemo_gym.rollout_correlation import rollout_context
from nemo_gym.server_utils import SimpleServer

__all__ = [
    "BaseEnvironmentServer",
    "BaseEnvironmentServerConfig",
    "CleanupCallback",
    "CleanupContext",
    "CleanupHandle",
    "HandledEpisodeError",
]

log = logging.getLogger(__name__)

EpisodeRequestT = TypeVar("EpisodeRequestT", bound=BaseEpisodeRequest[Any])
EpisodeResponseT = TypeVar("EpisodeResponseT", bound=BaseEpisodeResponse[Any])
CleanupCallback = Callable[[], Awaitable[None]]
#: A failure reason is cut to this many characters (an exception's text can be a whole response body).
_MAX_REASON = 2000


class BaseEnvironmentServerConfig(BaseRunServerInstanceConfig):
    """Episode limits; ``cleanup_timeout_seconds`` has no default: every server must bound its unwinding."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent_episodes: PositiveInt | None = None
    queue_timeout_seconds: PositiveFloat | None = None
    default_episode_timeout_seconds: PositiveFloat | None = None
    cleanup_timeout_seconds: PositiveFloat

    @model_validator(mode="after")
    def _queue_is_bounded(self) -> Self:
        if self.max_concurrent_episodes is not None and self.queue_timeout_seconds is None:
            raise ValueError("queue_timeout_seconds is required when max_concurrent_episodes is enabled")
        return self


@dataclass
class _CleanupEntry:
    name: str
    callback: CleanupCallback
    active: bool = True
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def close(self) -> None:
        async with self.lock:
            if self.active:
                await self.callback()
                self.active = False  # only after success: a failed close may be tried again


@dataclass
class CleanupHandle:
    """Close one registered participant early (it is then skipped when the episode unwinds)."""

    entry: _CleanupEntry
    timeout_seconds: float

    async def close(self) -> None:
        async with asyncio.timeout(self.timeout_seconds):
            await self.entry.close()


@dataclass
class CleanupContext:
    """The cleanup callbacks of one episode.

    They run in this process, last registered first, one after another, within one total
    ``cleanup_timeout_seconds``. A failing callback is logged and the next still runs. Callbacks must be
    idempotent (a timed-out remote close may have happened); nothing retries them once the episode is over.
    """

    episode_id: EpisodeId
    cleanup_timeout_seconds: float
    _cleanups: list[_CleanupEntry] = field(default_factory=list)

    def register_cleanup(self, name: str, callback: CleanupCallback) -> CleanupHandle:
        entry = _CleanupEntry(name=name, callback=callback)
        self._cleanups.append(entry)
        return CleanupHandle(entry, self.cleanup_timeout_seconds)

    async def aclose(self) -> None:
        try:
            async with asyncio.timeout(self.cleanup_timeout_seconds):
                for entry in reversed(self._cleanups):
                    try:
                        await entry.close()
                    except Exception:
                        log.exception("Episode cleanup failed: %s", entry.name)
        except TimeoutError:
            log.error("Episode cleanup timed out: episode_id=%s", self.episode_id)


class HandledEpisodeError(Exception):
    """Raise from ``run`` to end the episode with ``failure`` in its response."""

    def __init__(self, failure: EpisodeFailure) -> None:
        super().__init__(failure.failure_reason)
        self.failure = failure


class BaseEnvironmentServer(SimpleServer, Generic[EpisodeRequestT, EpisodeResponseT]):
    """A server with one typed episode route; subclasses set ``request_model``/``response_model`` and write
    ``run(request, cleanup)`` and ``aggregate_metrics``."""

    config: BaseEnvironmentServerConfig
    request_model: ClassVar[type[Any]]
    response_model: ClassVar[type[Any]]
    _admission: asyncio.Semaphore | None = None

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        limit = self.config.max_concurrent_episodes
        self._admission = asyncio.Semaphore(limit) if limit is not None else None

    def setup_webserver(self) -> FastAPI:
        app = FastAPI(title=self.config.name or type(self).__name__)

        async def run_endpoint(body: Any) -> Any:
            return await self.run_request(body)

        # The body and answer types are the subclass's: set them where FastAPI reads them.
        run_endpoint.__annotations__["body"] = self.request_model
        run_endpoint.__annotations__["return"] = self.response_model
        app.post("/run", response_model=self.response_model)(run_endpoint)

        async def aggregate_metrics_endpoint(body: AggregateMetricsRequest) -> AggregateMetrics:
            return await self.aggregate_metrics(body)

        app.post("/aggregate_metrics", response_model=AggregateMetrics)(aggregate_metrics_endpoint)
        self.setup_liveness(app)
        return app

    async def run_request(self, request: Any) -> Any:
        """One episode under the admission limit and deadline, its cleanup always run, failures in the answer."""
        acquired = False
        if self._admission is not None:
            try:
                await asyncio.wait_for(self._admission.acquire(), timeout=self.config.queue_timeout_seconds)
            except TimeoutError:
                failure = EpisodeFailure(
                    failure_reason="Episode admission timed out", terminal=False, stage="admission"
                )
                return self.failure_response(request, failure)
            acquired = True

        cleanup = CleanupContext(request.episode_id, float(self.config.cleanup_timeout_seconds))
        cancelled: asyncio.CancelledError | None = None
        response: Any = None
        deadline = asyncio.timeout(self.config.default_episode_timeout_seconds)
        # Calls the episode makes (cleanup included) carry its attempt-qualified rollout id.
        with rollout_context(request.episode_id.capture_key):
            try:
                try:
                    async with deadline:
                        response = await self.run(request, cleanup)
                except TimeoutError as error:
                    if deadline.expired():
                        failure = EpisodeFailure(failure_reason="Episode timed out", terminal=False)
                        response = self.failure_response(request, failure)
                    else:  # a TimeoutError of the environment's own, not the deadline
                        response = self._unhandled_failure_response(request, error)
                except HandledEpisodeError as error:
                    response = self.failure_response(request, error.failure)
                except asyncio.CancelledError as error:
                    cancelled = error
                except Exception as error:
                    response = self._unhandled_failure_response(request, error)
            finally:
                try:
                    with CancelScope(shield=True):  # a cancelled episode still releases what it holds
                        await cleanup.aclose()
                finally:
                    if acquired and self._admission is not None:
                        self._admission.release()
        if cancelled is not None:
            raise cancelled
        response = self.response_model.model_validate(response)
        self.validate_response_identity(request, response)
        return response

    @abstractmethod
    async def run(self, request: Any, cleanup: CleanupContext) -> Any:
        """Run one episode of this environment's protocol."""

    @abstractmethod
    async def aggregate_metrics(self, body: AggregateMetricsRequest = Body()) -> AggregateMetrics:
        """Metrics over the episodes' results."""

    def _unhandled_failure_response(self, request: Any, error: Exception) -> Any:
        log.exception("Unhandled environment server error: episode_id=%s", request.episode_id)
        reason = f"Unhandled environment server error: {type(error).__name__}: {error}"
        return self.failure_response(request, EpisodeFailure(failure_reason=reason[:_MAX_REASON], terminal=True))

    def failure_response(self, request: Any, failure: EpisodeFailure) -> Any:
        failed = {"episode_id": request.episode_id, "task_id": request.task.task_id}
        return self.response_model.model_validate({**failed, "failure": failure.model_dump(mode="json")})

    @staticmethod
    def validate_response_identity(request: Any, response: Any) -> None:
        if response.episode_id != request.episode_id:
            raise ValueError("response episode_id does not match request")
        if response.task_id != request.task.task_id:
            raise ValueError("response task_id does not match request")
