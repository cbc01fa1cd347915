"""TRL's three environment slots for ngym environments: ``train_dataset``, ``environment_factory``, ``reward_funcs``.

TRL 1.16's ``GRPOTrainer(environment_factory=...)`` makes one instance of the factory per generation (pooled and
reused across batches), calls ``reset(**row)`` on each before generating, runs the instance's public methods as
the model's tools, and scores each finished rollout with ``reward_funcs(prompts=, completions=, environments=,
...)``. Here, for an environment served by ``ngym run`` or a fleet (``ngym up``):

- ``train_dataset``: one example per dataset row: ``prompt`` (the row's ``responses_create_params.input`` as
  chat messages) and ``ngym_row`` (the row, as JSON, for seeding); for a blend also ``environment``;
- ``environment_factory``: a class whose ``reset(**row)`` seeds a new session over NeMo Gym's wire (each
  instance its own cookie, so N generations are N sessions at once), with one public method per tool the rows
  declare (or, if they declare none, per tool route of the server's OpenAPI document), its typed signature and
  docstring built from the tool's JSON Schema, that calls ``POST /<tool>`` in that session;
- ``reward_funcs``: ``[ngym_verify]``, which sends ``/verify`` the Responses-format trajectory built from TRL's
  completion (its tool calls and their outputs), exactly what NeMo Gym's agent would send, and closes the session.
  A masked verify (a lost session, a failed judge) or none at all is ``None``: TRL leaves the sample out, it is
  never scored 0.0. So is a rollout the environment did not see whole: its seed found the environment down or
  full (a fleet's dead unit answers 503; ``reset`` goes on, the tools then fail) or a tool call could not reach
  it; such a trajectory is not verified at all (a trajectory-only verify would score calls that never ran).

Example (see docs/training.md)::

    slots = ngym.train.trl.environment("http://127.0.0.1:8000", "rows.jsonl")
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), **slots.trainer_kwargs())
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx

from ngym.train.needs import trainer_missing
from ngym.train.rows import declared_tools, load_rows, prompt_messages, responses_trajectory
from ngym.train.tools import openapi_tools, tool_function
from ngym.train.wire import DEFAULT_TIMEOUT, Rollout, WireError, reward_of, sync_wire

log = logging.getLogger("ngym.train")

#: the column of ``train_dataset`` holding each example's dataset row (JSON) for seeding
ROW_COLUMN = "ngym_row"
#: the column TRL reads to route an example of a blend to its environment
ENVIRONMENT_COLUMN = "environment"

Rows = str | Path | Iterable[Mapping[str, Any]]


class NgymEnvironment:
    """Base of the classes :func:`environment` makes: one rollout at a time on one ngym environment.

    Subclasses add one public method per tool; this class has no public method but ``reset`` (TRL offers every
    public method to the model as a tool), so its own helpers are private (``_call``, ``_finish``).
    """

    _url: ClassVar[str] = ""
    _env_name: ClassVar[str] = ""
    _timeout: ClassVar[float] = DEFAULT_TIMEOUT

    def __init__(self) -> None:
        self._wire = sync_wire(self._url, self._timeout)
        self._rollout: Rollout | None = None
        self._lock = threading.Lock()

    def reset(self, **example: Any) -> None:
        """Start this generation's rollout: a new session seeded with the example's row (an open one is closed)."""
        raw = example.get(ROW_COLUMN)
        if raw is None:
            raise ValueError(
                f"the example has no {ROW_COLUMN!r} column: use the train_dataset of ngym.train.trl "
                "(or add the dataset row, as JSON, under that column)"
            )
        row = json.loads(raw) if isinstance(raw, str) else dict(raw)
        with self._lock:
            if self._rollout is not None:  # a rollout that was never scored: its session is closed
                self._wire.close(self._rollout)
            rollout = Rollout(row)
            try:
                self._wire.seed(rollout)
            except WireError as exc:
                if not exc.unavailable:  # the environment refused this row: a dataset error, said at once
                    raise
                # The environment is down or full (a fleet's dead unit answers 503): this generation goes on
                # without it and gets no reward (TRL leaves it out), the other environments of a blend train on.
                log.warning("%s: this rollout gets no reward", exc)
            self._rollout = rollout

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Run ``tool`` in this rollout's session; its answer's body, as the model sees it. A rollout whose session
        could not be seeded raises ``WireError`` (TRL shows the model the error and counts a failed tool call)."""
        rollout = self._rollout
        if rollout is None:
            raise RuntimeError(f"{tool} called before reset: no session")
        return self._wire.call(rollout, tool, arguments)

    def _finish(self, completion: str | Sequence[Mapping[str, Any]]) -> float | None:
        """Verify the finished rollout and close its session; its reward, or None when there is none to learn from."""
        with self._lock:
            rollout, self._rollout = self._rollout, None
            if rollout is None:
                return None
            try:
                verified = self._wire.verify(rollout, responses_trajectory(rollout.row, completion, model="trl"))
            finally:
                self._wire.close(rollout)
        return reward_of(verified)


def environment_class(
    url: str, tools: Sequence[Mapping[str, Any]], *, name: str = "", timeout: float = DEFAULT_TIMEOUT
) -> type[NgymEnvironment]:
    """A :class:`NgymEnvironment` subclass for the environment at ``url``, one public method per declared tool."""
    methods: dict[str, Any] = {"_url": url.rstrip("/"), "_env_name": name, "_timeout": timeout}
    for spec in tools:
        function = tool_function(spec)
        if function is not None:
            methods[function.__name__] = function
    label = "".join(part.capitalize() for part in (name or "served").replace("-", "_").split("_") if part)
    cls = type(f"{label}Environment", (NgymEnvironment,), methods)
    cls.__doc__ = f"The ngym environment {name or url} at {url}, one session per rollout."
    return cls


def ngym_verify(
    prompts: list[Any],
    completions: list[Any],
    environments: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """TRL reward function: each rollout's ``/verify`` reward; None (excluded by TRL) when masked or missing."""
    if environments is None:
        raise ValueError("ngym_verify scores ngym environments: pass environment_factory to GRPOTrainer as well")

    def one(pair: tuple[Any, Any]) -> float | None:
        env, completion = pair
        return env._finish(completion) if isinstance(env, NgymEnvironment) else None

    pairs = list(zip(environments, completions, strict=True))
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(pairs)))) as pool:
        return list(pool.map(one, pairs))


@dataclass
class TRLSlots:
    """What ``GRPOTrainer`` takes for ngym environments; ``trainer_kwargs()`` gives all three."""

    examples: list[dict[str, Any]]
    environment_factory: type[NgymEnvironment] | dict[str, type[NgymEnvironment]]
    reward_funcs: list[Callable[..., list[float | None]]]

    @property
    def train_dataset(self) -> Any:
        """The examples as a ``datasets.Dataset`` (imported here: only the trainer's venv needs ``datasets``)."""
        import importlib

        try:
            datasets = importlib.import_module("datasets")
        except ModuleNotFoundError as missing:
            raise trainer_missing(missing, "ngym.train.trl's train_dataset", "trl (it brings datasets)") from None
        return datasets.Dataset.from_list(self.examples)

    def trainer_kwargs(self) -> dict[str, Any]:
        """``train_dataset``, ``environment_factory`` and ``reward_funcs``, for ``GRPOTrainer(**...)``."""
        return {
            "train_dataset": self.train_dataset,
            "environment_factory": self.environment_factory,
            "reward_funcs": self.reward_funcs,
        }


def _examples(rows: list[dict[str, Any]], name: str | None) -> list[dict[str, Any]]:
    extra = {ENVIRONMENT_COLUMN: name} if name is not None else {}
    return [{"prompt": prompt_messages(row), ROW_COLUMN: json.dumps(row), **extra} for row in rows]


def tools_for(url: str, rows: list[dict[str, Any]], *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The tools the model is offered: those the rows declare (what NeMo Gym's wire hands the model), else, for
    rows that declare none, the server's own tool routes from its OpenAPI document."""
    declared = declared_tools(rows)
    if declared:
        return declared
    try:
        response = httpx.get(f"{url.rstrip('/')}/openapi.json", timeout=timeout)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ValueError(
            f"the rows declare no tools and {url}/openapi.json cannot be read ({type(exc).__name__}): "
            "is the environment served there?"
        ) from None
    return openapi_tools(document) if isinstance(document, dict) else []


def environment(url: str, data: Rows, *, name: str = "", timeout: float = DEFAULT_TIMEOUT) -> TRLSlots:
    """TRL's slots for one environment served at ``url`` (``ngym run``), its rows from ``data`` (JSONL or dicts)."""
    rows = load_rows(data)
    factory = environment_class(url, tools_for(url, rows), name=name, timeout=timeout)
    return TRLSlots(_examples(rows, None), factory, [ngym_verify])


def blend(environments: Mapping[str, tuple[str, Rows]], *, timeout: float = DEFAULT_TIMEOUT) -> TRLSlots:
    """TRL's slots for several environments in one run: ``{name: (url, rows)}``; each example names its own."""
    if not environments:
        raise ValueError("blend of no environments")
    examples: list[dict[str, Any]] = []
    factories: dict[str, type[NgymEnvironment]] = {}
    for name, (url, data) in environments.items():
        rows = load_rows(data)
        factories[name] = environment_class(url, tools_for(url, rows), name=name, timeout=timeout)
        examples += _examples(rows, name)
    return TRLSlots(examples, factories, [ngym_verify])


def fleet_urls(head_url: str, *, timeout: float = 10.0) -> dict[str, str]:
    """``{name: url}`` of the environments of a running fleet, from its head server (what ``ngym up`` prints)."""
    head = head_url.rstrip("/")
    try:
        response = httpx.get(f"{head}/server_instances", timeout=timeout)
        response.raise_for_status()
        instances = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ValueError(f"no fleet head server answers at {head} ({type(exc).__name__}): is the fleet up?") from None
    head_host = urlsplit(head).hostname or "127.0.0.1"
    urls: dict[str, str] = {}
    for item in instances if isinstance(instances, list) else []:
        if isinstance(item, dict) and item.get("kind") == "environment":
            host = str(item.get("host", ""))
            host = head_host if host in ("", "0.0.0.0", "::") else host
            urls[str(item["name"])] = f"http://{host}:{item['port']}"
    return urls


def fleet(head_url: str, data: Mapping[str, Rows], *, timeout: float = DEFAULT_TIMEOUT) -> TRLSlots:
    """A :func:`blend` of a fleet's environments by name: ``data`` maps each name to train on to its rows."""
    urls = fleet_urls(head_url)
    missing = sorted(set(data) - set(urls))
    if missing:
        have = ", ".join(sorted(urls)) or "none"
        raise ValueError(f"the fleet at {head_url} has no environment {', '.join(missing)} (it has: {have})")
    return blend({name: (urls[name], rows) for name, rows in data.items()}, timeout=timeout)
