"""The environment's own event loop: the author's coroutines run on a thread of their own, off the serving loop.

uvicorn's event loop (the *serving loop*) reads every request, keeps sessions, validates bodies, writes answers
and answers ``/health``. An environment's handlers (``verify``, ``seed_session``, its tools, its start-up and
shutdown hooks) are the author's code, and some of it blocks the loop it runs on: NeMo Gym's math_with_code
forks its sandbox (``Process.start``) and waits for it to exit (``Process.join(timeout=1)``) from ``async``
handlers, math_with_judge forks a verifier per ``/verify``. On the serving loop, every other rollout's request
and every ``/health`` waits behind those calls.

With the environment loop on, each such coroutine runs on **one** dedicated event loop in **one** thread (the
same loop for all of them, for the whole life of the process), and the serving loop awaits its result. So:

- what the environment creates bound to a loop (an ``asyncio.Semaphore``, an aiohttp session, a lock) is
  created and used on that one loop, as before (it was the serving loop; it is now the environment's);
- the environment's calls still run one at a time where they block (their own loop), but the serving loop
  parses, validates and answers the other rollouts' requests meanwhile, and a call that sleeps (``join``,
  ``waitpid``, a pipe read) releases the GIL to it;
- context variables (ngym's current session) are seen by the environment's coroutine as on the serving loop
  (copied when the call is handed over); a cancelled request cancels the environment's task;
- a handler taking the ``Request`` reads its body as before (``await request.json()``): the body is read on the
  serving loop before the handler is handed over. What still needs the serving loop's channel
  (``request.is_disconnected()``, streaming a body that was not read) is not available there.

It is on for a server class that says so (``own_event_loop = True``) and, when the class does not say
(``None``, the default), for an environment whose own modules use ``multiprocessing`` (``starts_processes``):
the pattern measured to block the serving loop. ``NGYM_ENV_LOOP=1``/``=0`` turns it on or off per process,
whatever the class says. It is not on for every environment: handing each call to another thread costs a light
environment more than it saves (NeMo Gym's mcqa forced onto it: half the rollouts/s; docs/performance.md).
Only a served app moves (``serve_on_environment_loop`` is one of the app extensions ``build_app`` applies,
registered by ``ngym.server``); an app built by ``setup_webserver`` alone, as an environment's own tests build it,
keeps everything on the loop it runs on.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.requests import Request

from ngym.server.pipeline.extensions import set_placement
from ngym.server.pipeline.routes import AUTHOR_CALLS_STATE

ENV_LOOP_ENV = "NGYM_ENV_LOOP"

T = TypeVar("T")


class EnvironmentLoop:
    """A daemon thread running an event loop of its own; ``run(coroutine)`` runs a coroutine there.

    The thread starts at the first ``run`` (never at import or build time: a process that forks its workers
    before serving must not fork a thread it cannot take along). The loop is of the serving loop's type (uvloop
    when uvicorn serves on uvloop).
    """

    def __init__(self, name: str = "ngym-environment-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The environment's loop once started in this process, else None."""
        return self._loop if self._pid == os.getpid() else None

    def _started(self, like: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # never started, or inherited through a fork
                loop = _new_loop_like(like)
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=serve, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` run on the environment's loop (directly, when already on it)."""
        current = asyncio.get_running_loop()
        loop = self._started(current)
        if current is loop:  # the environment calling itself: already where it must run
            return await coroutine
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return await asyncio.wrap_future(future, loop=current)
        except asyncio.CancelledError:
            future.cancel()  # the request went away: so does the environment's task
            raise

    def stop(self) -> None:
        """Stop the loop and its thread (a test's clean-up; a serving process simply exits)."""
        with self._lock:
            loop, thread = self.loop, self._thread
            self._loop, self._thread, self._pid = None, None, 0
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()


def _new_loop_like(like: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
    """A new loop of ``like``'s type (uvloop's, when uvicorn serves on it, or asyncio's), else asyncio's default."""
    try:
        loop = type(like)()
    except Exception:  # a loop class that wants arguments
        return asyncio.new_event_loop()
    return loop if isinstance(loop, asyncio.AbstractEventLoop) else asyncio.new_event_loop()


#: This process's environment loop (one per serving process: each worker has its own).
ENVIRONMENT_LOOP = EnvironmentLoop()


def wanted(server_class: type) -> bool:
    """Whether ``server_class``'s coroutines run on the environment loop: ``NGYM_ENV_LOOP`` (``1``/``0``) when
    set, else the class's ``own_event_loop`` when it says (True/False), else whether it starts processes from
    its own code (``starts_processes``)."""
    setting = os.environ.get(ENV_LOOP_ENV, "").strip().lower()
    if setting in {"1", "true", "yes", "on"}:
        return True
    if setting in {"0", "false", "no", "off"}:
        return False
    declared = getattr(server_class, "own_event_loop", None)
    if declared is not None:
        return bool(declared)
    return starts_processes(server_class)


#: Packages whose modules are the runtime's, not the environment's: what they import says nothing of it.
_RUNTIME_PACKAGES = ("ngym", "nemo_gym", "ngym_nemo_gym", "builtins")


def starts_processes(server_class: type) -> bool:
    """Whether the environment's own modules (those defining its class and its bases, the runtime's left out)
    hold ``multiprocessing`` (the module or anything from it) or a ``ProcessPoolExecutor``: an environment that
    starts processes from its handlers, whose ``Process.start``/``join`` would otherwise block the serving loop
    (NeMo Gym's math_with_code, math_with_judge). Ray's ``.remote()`` is not counted: it does not block."""
    import sys

    for cls in server_class.__mro__:
        module_name = getattr(cls, "__module__", "") or ""
        if module_name.split(".", 1)[0] in _RUNTIME_PACKAGES:
            continue
        module = sys.modules.get(module_name)
        for value in vars(module).values() if module is not None else ():
            origin = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
            if isinstance(origin, str) and (origin == "multiprocessing" or origin.startswith("multiprocessing.")):
                return True
            if value is _process_pool_executor():
                return True
    return False


def _process_pool_executor() -> Any:
    import concurrent.futures

    return concurrent.futures.ProcessPoolExecutor


def on_environment_loop(function: Callable[..., Awaitable[T]]) -> Callable[..., Coroutine[Any, Any, T]]:
    """``function`` (a coroutine function) made to run on the environment loop; same name and signature, so
    FastAPI reads its parameters as before."""

    @functools.wraps(function)
    async def run_there(*args: Any, **kwargs: Any) -> T:
        for value in (*args, *kwargs.values()):
            if isinstance(value, Request):
                # The request's body arrives through the serving loop's channel: read here (Starlette keeps it),
                # so ``await request.json()`` on the environment's loop reads the kept copy.
                await value.body()

        async def call() -> T:  # called there too: not a line of the author's code runs on the serving loop
            return await function(*args, **kwargs)

        return await ENVIRONMENT_LOOP.run(call())

    run_there.__ngym_environment_loop__ = True  # type: ignore[attr-defined]
    return run_there


#: ``app.state`` attribute: True once the app serves on the environment loop.
ON_ENVIRONMENT_LOOP_STATE = "ngym_on_environment_loop"


def serve_on_environment_loop(app: Any, server: Any) -> bool:
    """For an app about to be served (``build_app``): when ``server`` wants it (``wanted``), move the author's
    hooks of the standard routes, its own ``async`` method routes and (through ``app.state``) its start-up and
    shutdown hooks to the environment loop. An app built by ``setup_webserver`` alone (an environment's own
    tests) is left as it is. True when moved."""
    if not wanted(type(server)):
        return False
    author = getattr(app.state, AUTHOR_CALLS_STATE, None)
    if author is not None:
        author.place(on_environment_loop)
    place_environment_routes(app, server)
    set_placement(app, on_environment_loop)  # its start-up and shutdown hooks (``placed_for``)
    setattr(app.state, ON_ENVIRONMENT_LOOP_STATE, True)
    return True


def place_environment_routes(app: Any, server: Any) -> int:
    """Put the environment's own routes (``app.post("/tool")(self.tool)``: an ``async`` method of ``server``) on the
    environment loop; the number of routes placed. (The standard routes call the author's hooks through
    ``ngym.server.pipeline.routes.AuthorCalls``.)"""
    from fastapi import routing

    placed_count = 0
    for route in app.router.routes:
        call = getattr(getattr(route, "dependant", None), "call", None)
        if not (
            isinstance(route, routing.APIRoute)
            and inspect.ismethod(call)
            and call.__self__ is server
            and inspect.iscoroutinefunction(call)
        ):
            continue
        route.dependant.call = on_environment_loop(call)
        # The route's ASGI app closed over the old call when the route was made: made again from the new one.
        handler = routing.request_response(route.get_route_handler())
        wrap = getattr(routing, "wrap_app_with_body_limit", None)  # FastAPI 0.13x+: the route's body limit
        route.app = wrap(handler, getattr(route, "max_body_size", None)) if wrap is not None else handler
        placed_count += 1
    return placed_count
