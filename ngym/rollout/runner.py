"""Many rollouts: rows × repeats with bounded concurrency, JSONL results, ``--resume``, aggregate metrics.

Each finished rollout is appended to the output as one JSON line as soon as it finishes (the row, the
verify response with ``reward`` and metrics, the full ``response``, ``_ng_task_index``/``_ng_rollout_index``
and ``rollout_info``). With ``resume`` the (task, repeat) pairs already in the output are skipped. The files,
the resume key and the append are the rollout ledger's (:mod:`ngym.rollout.ledger`, shared with
ngym-nemo-gym's collector). A
rollout that fails is reported and not written, so a later ``--resume`` tries it again. At the end every
line of the output goes to the environment's ``/aggregate_metrics``; the answer is returned and saved as
``<output stem>.metrics.json`` beside the output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx

from ngym.child_server import fetch_health, serve_environment
from ngym.errors import ConfigError
from ngym.examples import EXAMPLE_ROLLOUTS, EXAMPLE_ROWS
from ngym.rewards import bounds_from_health, out_of_range_failure
from ngym.rollout.agent import ROLLOUT_INFO_KEY, EnvSession, run_episode, run_rollout
from ngym.rollout.errors import RolloutError
from ngym.rollout.gymnasium import is_gymnasium_style, server_post_routes
from ngym.rollout.ledger import (
    LedgerAppender,
    done_keys,
    drop_truncated_tail,
    json_line,
    masked_count,
    mean_reward,
    pending,
    read_jsonl,
    read_results,
    rollout_keys,
    verify_responses,
)
from ngym.rollout.model_client import ModelClient
from ngym.rollout.replay_model import (
    ReplayIndex,
    create_replay_app,
    example_rollouts_of,
    index_key_items,
    input_items,
)
from ngym.rollout.replay_model import read_rows as read_replay_rows
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.server.protocol import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY
from ngym.targets import is_url, resolve

log = logging.getLogger("ngym.rollout")

#: ``--model replay``: serve the replay model locally and use it
REPLAY = "replay"


@dataclass
class RolloutOptions:
    """Everything ``ngym rollout`` takes (see ``docs/rollout.md``)."""

    target: str  # an installed environment's name, or the URL of a running one
    data: Path
    model_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    repeats: int = 1
    concurrency: int = 8
    max_steps: int | None = 32
    output: Path = Path("rollouts.jsonl")
    resume: bool = False
    timeout: float = 120.0
    max_retries: int = 4
    env_overrides: list[str] = field(default_factory=list)  # key=value for ``ngym run``; {model_url} expands
    #: recorded rollouts the replay model replays (default: the environment's, else example_rollouts.jsonl
    #: beside --data)
    replay_data: list[Path] = field(default_factory=list)


@dataclass
class RolloutEvent:
    """One finished (or failed) rollout, for progress display."""

    task_index: int
    rollout_index: int
    reward: float | None
    error: str | None = None


@dataclass
class RolloutSummary:
    output: Path
    metrics_path: Path
    done: int  # rollouts written by this run
    skipped: int  # already in the output (resume)
    failed: list[dict[str, Any]]
    mean_reward: float | None  # over every line of the output that is not masked
    masked: int  # lines of the output masked (mask_sample): left out of the mean
    aggregate_metrics: dict[str, Any]
    env_url: str
    model_url: str
    #: with ``--model replay``: row → (recorded reward, the server's) of each recorded row scored differently
    differs_from_recording: dict[int, tuple[float, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "metrics": str(self.metrics_path),
            "done": self.done,
            "skipped": self.skipped,
            "failed": self.failed,
            "mean_reward": self.mean_reward,
            "masked": self.masked,
            "aggregate_metrics": self.aggregate_metrics,
            "env_url": self.env_url,
            "model_url": self.model_url,
            "differs_from_recording": {str(k): list(v) for k, v in self.differs_from_recording.items()},
        }


def default_data(target: str) -> Path:
    """The rows ``ngym rollout`` reads when ``--data`` is not given: the installed environment's own example data,
    ``data/example.jsonl`` (its rows), else ``data/example_rollouts.jsonl`` (recorded rollouts, rows too).

    That is what ``ngym install`` writes for OpenEnv and verifiers environments, and what built-ins ship. A URL
    (or a fleet's environment) has no folder here, and an environment without example data has nothing to read:
    both are a ConfigError asking for ``--data``.
    """
    if is_url(target):
        raise ConfigError(f"{target}: a running server's data is not here: give --data ROWS.jsonl")
    spec = resolve(target)  # a clear error for a misspelt name
    found = spec.data_file(EXAMPLE_ROWS) or spec.data_file(EXAMPLE_ROLLOUTS)
    if found is None:
        raise ConfigError(
            f"{target} ships no example data (data/{EXAMPLE_ROWS} or data/{EXAMPLE_ROLLOUTS}): give --data ROWS.jsonl"
        )
    return found


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ConfigError(f"--data {path}: no such file")
    rows = read_jsonl(path)
    for number, row in enumerate(rows, 1):
        params = row.get("responses_create_params")
        if not isinstance(params, dict) or "input" not in params:
            raise ConfigError(f"{path}: row {number} needs responses_create_params with an input")
    if not rows:
        raise ConfigError(f"--data {path}: no rows")
    return rows


def metrics_path_for(output: Path) -> Path:
    return output.with_name(f"{output.stem}.metrics.json")


def metrics_request(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``/aggregate_metrics`` body: the verify responses, without the bulky trajectory and parameters."""
    return {
        "verify_responses": verify_responses(results, drop={"response", "responses_create_params", ROLLOUT_INFO_KEY})
    }


def _check_reachable(url: str) -> None:
    """One clear error up front when nothing answers at ``url`` (rather than one failed rollout per row)."""
    try:
        httpx.get(f"{url}/health", timeout=10.0)
    except httpx.HTTPError as exc:
        raise RolloutError(f"no environment answers at {url} ({exc!r}): is it running?") from None


@contextmanager
def _environment(options: RolloutOptions, model_url: str) -> Iterator[str]:
    overrides = [o.replace("{model_url}", model_url) for o in options.env_overrides]
    if is_url(options.target):
        if overrides:
            raise ConfigError("--set configures an environment ngym starts; it cannot change one at a URL")
        url = options.target.rstrip("/")
        _check_reachable(url)
        yield url
        return
    resolve(options.target)  # a clear error for a misspelt name, before starting anything
    with serve_environment(options.target, overrides=overrides, progress=_say) as url:
        yield url


def _say(line: str) -> None:
    """A progress line on stderr (while the environment ngym started is not ready yet)."""
    print(line, file=sys.stderr, flush=True)


@contextmanager
def _model_server(options: RolloutOptions, rows: list[dict[str, Any]]) -> Iterator[str]:
    if options.model != REPLAY or options.model_url:  # ``--model replay`` with a URL: a replay server running there
        if not options.model_url:
            raise ConfigError(
                "give --model-url (an OpenAI-compatible base URL, e.g. http://host:8000/v1) or --model replay"
            )
        yield options.model_url
        return

    recordings = replay_recordings(options)
    replay_rows = [*rows, *read_replay_rows(recordings)]
    check_replayable(rows, replay_rows, recordings)
    with serve_app_in_thread(create_replay_app(replay_rows)) as url:
        yield f"{url}/v1"


def replay_recordings(options: RolloutOptions) -> list[Path]:
    """The recorded rollouts ``--model replay`` replays: ``--replay-data``, else the installed environment's
    ``data/example_rollouts.jsonl``, else an ``example_rollouts.jsonl`` beside ``--data`` (a URL target)."""
    if options.replay_data:
        missing = [str(p) for p in options.replay_data if not Path(p).is_file()]
        if missing:
            raise ConfigError(f"--replay-data: no such file: {', '.join(missing)}")
        return [Path(p) for p in options.replay_data]
    if not is_url(options.target):
        examples = example_rollouts_of(options.target)
        if examples is not None:
            return [examples]
    sibling = Path(options.data).parent / "example_rollouts.jsonl"
    return [sibling] if sibling.is_file() and sibling.resolve() != Path(options.data).resolve() else []


def check_replayable(rows: list[dict[str, Any]], replay_rows: list[dict[str, Any]], recordings: list[Path]) -> None:
    """Fail before any rollout when the replay model has nothing to say to any row of --data."""
    index = ReplayIndex()
    index.add_rows(replay_rows)
    if not rows or any(index.match(input_items(row)) is not None for row in rows):
        return
    # A Gymnasium-style environment's recording starts with the row's input followed by reset's observation,
    # which the agent only sees once it runs: such a row may still be answered (when reset observes the same).
    recorded = [index_key_items(input_items(row)) for row in replay_rows if isinstance(row.get("response"), dict)]
    for row in rows:
        given = index_key_items(input_items(row))
        if any(len(items) > len(given) and items[: len(given)] == given for items in recorded):
            return
    looked = ", ".join(str(p) for p in recordings) or "no example_rollouts.jsonl beside --data"
    raise ConfigError(
        f"the replay model has no recording for any row of --data (it replays recorded responses or ground-truth "
        f"calls; looked in: {looked}); pass --replay-data FILE (recorded rollouts) or use --model-url"
    )


def run_rollouts(
    options: RolloutOptions,
    on_event: Callable[[RolloutEvent], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> RolloutSummary:
    """Run every pending (row, repeat) of ``options.data`` and aggregate; see the module docstring.

    ``on_start(pending)`` is called once the servers are up, with the number of rollouts to run;
    ``on_event`` after each rollout finishes or fails.
    """
    if options.repeats < 1 or options.concurrency < 1:
        raise ConfigError("--repeats and --concurrency must be at least 1")
    rows = read_rows(options.data)
    if is_url(options.target):  # nothing there: say so before anything else is started or checked
        _check_reachable(options.target.rstrip("/"))
    with ExitStack() as stack:
        model_url = stack.enter_context(_model_server(options, rows))
        env_url = stack.enter_context(_environment(options, model_url))
        return asyncio.run(_run(options, rows, env_url, model_url, on_event, on_start))


async def _run(
    options: RolloutOptions,
    rows: list[dict[str, Any]],
    env_url: str,
    model_url: str,
    on_event: Callable[[RolloutEvent], None] | None,
    on_start: Callable[[int], None] | None = None,
) -> RolloutSummary:

    api_key = os.environ.get(options.api_key_env) if options.api_key_env else None
    if options.api_key_env and api_key is None:
        raise ConfigError(f"--api-key-env {options.api_key_env}: that environment variable is not set")
    model = ModelClient(
        model_url, model=options.model, api_key=api_key, timeout=options.timeout, max_retries=options.max_retries
    )
    named = any((row.get("responses_create_params") or {}).get("model") for row in rows)
    if not named and await model.resolve_model() is None:  # every rollout would fail for want of one: say why once
        await model.close()
        raise ConfigError(model.no_model_line())
    # seed → tools → verify, or a Gymnasium-style server's reset → step… (told apart by its routes)
    routes = await asyncio.to_thread(server_post_routes, env_url, options.timeout)
    gymnasium = routes is not None and is_gymnasium_style(routes)
    one_rollout = run_episode if gymnasium else run_rollout
    # the rule ngym validate applies: a reward outside the server's reward_range is a failure, not a score
    health = None if gymnasium else await asyncio.to_thread(fetch_health, env_url, options.timeout)
    bounds = bounds_from_health(health)

    if options.resume and options.output.is_file():
        # A run killed mid-line left a torn last line: without this, the first result appended now would be
        # glued to it, and that line (the new result with it) would be lost to the metrics and the next resume.
        drop_truncated_tail(options.output)
    existing = read_results(options.output) if options.resume else []
    jobs = pending(rollout_keys(len(rows), options.repeats), done_keys(existing))
    if on_start:
        on_start(len(jobs))
    failed: list[dict[str, Any]] = []
    written: list[dict[str, Any]] = []
    # --model replay on recorded rollouts: the same trajectory, so a different reward means a stale recording
    replaying = options.model == REPLAY and not options.model_url
    differs: dict[int, tuple[float, float]] = {}
    semaphore = asyncio.Semaphore(options.concurrency)
    limits = httpx.Limits(max_connections=options.concurrency * 2)
    # No shared cookie jar: each rollout's EnvSession carries its own session cookie by hand. (A jar would
    # hand one rollout's cookie to another's seed_session and mix their sessions up.)
    no_jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    async with httpx.AsyncClient(timeout=options.timeout, limits=limits, cookies=no_jar) as http:
        with LedgerAppender(options.output, "a" if options.resume else "w") as sink:

            def fail(task_index: int, rollout_index: int, error: str) -> None:
                log.warning("rollout %d.%d failed: %s", task_index, rollout_index, error)
                failed.append({TASK_INDEX_KEY: task_index, ROLLOUT_INDEX_KEY: rollout_index, "error": error})
                if on_event:
                    on_event(RolloutEvent(task_index, rollout_index, None, error))

            async def one(task_index: int, rollout_index: int) -> None:
                async with semaphore:
                    try:
                        result = await one_rollout(
                            EnvSession(http, env_url),
                            model,
                            rows[task_index],
                            task_index=task_index,
                            rollout_index=rollout_index,
                            max_steps=options.max_steps,
                        )
                    except RolloutError as exc:
                        fail(task_index, rollout_index, str(exc))
                        return
                bad = None if gymnasium else out_of_range_failure(result.get("reward"), bounds)
                if bad is not None:
                    fail(task_index, rollout_index, bad)
                    return
                sink.append(json_line(result))
                written.append(result)
                recorded = rows[task_index].get("reward") if "response" in rows[task_index] else None
                got = result.get("reward")
                if replaying and isinstance(recorded, int | float) and isinstance(got, int | float) and got != recorded:
                    differs.setdefault(task_index, (float(recorded), float(got)))
                if on_event:
                    on_event(RolloutEvent(task_index, rollout_index, float(result.get("reward", 0.0))))

            await asyncio.gather(*(one(t, k) for t, k in jobs))
        everything = read_results(options.output)
        aggregate: dict[str, Any] = {}
        if everything:
            response = await http.post(f"{env_url}/aggregate_metrics", json=metrics_request(everything))
            if response.status_code >= 400:
                raise RolloutError(f"POST /aggregate_metrics → HTTP {response.status_code}: {response.text[:300]}")
            aggregate = response.json()
    await model.close()
    metrics_path = metrics_path_for(options.output)
    metrics_path.write_text(json.dumps(aggregate, indent=2) + "\n")
    return RolloutSummary(
        output=options.output,
        metrics_path=metrics_path,
        done=len(written),
        skipped=len(existing),
        failed=sorted(failed, key=lambda f: (f[TASK_INDEX_KEY], f[ROLLOUT_INDEX_KEY])),
        mean_reward=mean_reward(everything),
        masked=masked_count(everything),
        aggregate_metrics=aggregate,
        env_url=env_url,
        model_url=model_url,
        differs_from_recording=dict(sorted(differs.items())),
    )
