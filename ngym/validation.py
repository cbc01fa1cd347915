"""``ngym validate``: check an environment the way a trainer will use it, in-process.

1. **registration**: the class loads and follows the rules (domain, config class, ``verify``, name);
2. **app**: its app builds and starts (lifespan included);
3. **examples**: every row of ``data/example_rollouts.jsonl`` replays (seed_session → the recorded tool
   calls → verify) to a reward in [0, 1] (the server's ``reward_range``) that equals the recorded ``reward``;
4. **soundness**: responses that ignore the task — empty, a refusal only, malformed output items, an echo
   of the prompt — are sent to ``/verify`` after a fresh seed on every example row. None may crash the
   server (no 5xx), and none may score 1.0 on every row (a "do nothing" task can legitimately score 1.0
   for an empty response, so one row alone is a warning, not a failure). A server whose reward never
   depends on the response sets ``always_full_reward = True`` and skips the "not 1.0" half.

A Gymnasium-style server (``/reset`` + ``/step``, no ``/seed_session``: NeMo Gym's ``GymnasiumServer``) is checked
the way NeMo Gym's ``gymnasium_agent`` drives it (``ngym.rollout.gymnasium``): each example is replayed turn by
turn through ``/reset`` and ``/step`` and its summed reward (any scale: games score -1, 10, …) must equal the
recorded one; each soundness probe is one ``/step`` after a ``/reset``, and may not crash the server.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ngym.errors import ConfigError, PluginError
from ngym.examples import dataset_row, read_example_rollouts, read_jsonl
from ngym.rewards import reward_problem
from ngym.rollout.gymnasium import RESET, STEP, ModelRequest, Recording, drive_async, episode, is_gymnasium_style
from ngym.server.pipeline.app import create_app, in_working_directory
from ngym.server.pipeline.resources import SimpleResourcesServer
from ngym.server.protocol import FAILURE_CLASS_KEY, FAILURE_JUDGE_ERROR_KEY
from ngym.targets import Environment, resolve
from ngym.testing import RolloutClient, run_recorded_rollout, serve_in_process

#: ``progress(stage)`` is told what validation is doing now (the CLI shows it while a slow verifier works).
Progress = Callable[[str], None]

SOUNDNESS_PROBES = ("empty response", "refusal only", "malformed output items", "echo of the prompt")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class ValidationReport:
    target: str
    name: str
    server_class: str = ""
    domain: str | None = None
    distribution: str | None = None
    checks: list[Check] = field(default_factory=list)
    routes: list[str] = field(default_factory=list)  #: every POST route (the text summarises them)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str = "", warnings: list[str] | None = None) -> bool:
        self.checks.append(Check(name, ok, detail, warnings or []))
        return ok

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def render(self) -> str:
        head = f"{self.name} ({self.server_class or self.target}"
        head += f", domain {self.domain}" if self.domain else ""
        head += f", {self.distribution})" if self.distribution else ")"
        lines = [head]
        seen: set[str] = set()
        said: dict[str, str] = {}  # failure detail -> the first check that said it
        for check in self.checks:
            detail = check.detail
            if not check.ok and detail in said:
                detail = f"the same failure as {said[detail]}"  # e.g. every soundness probe failing to seed
            elif not check.ok:
                said[detail] = check.name
            lines.append(f"  {'ok  ' if check.ok else 'FAIL'}  {check.name}: {detail}")
            for warning in check.warnings:
                if warning in seen:
                    continue  # said once, under the first check, naming the others that share it
                seen.add(warning)
                others = [c.name for c in self.checks if c is not check and warning in c.warnings]
                others = [o.removeprefix(f"{check.name.split(':')[0]}: ") for o in others]
                lines.append(f"        warning: {warning}" + (f" (same for: {', '.join(others)})" if others else ""))
        lines.append("valid" if self.ok else "INVALID: fix the FAIL lines above")
        return "\n".join(lines)


def _prompt_text(row: dict[str, Any]) -> str:
    params = row.get("responses_create_params") or {}
    given = params.get("input")
    if isinstance(given, str):
        return given
    texts: list[str] = []
    for item in given or []:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(t for t in texts if t)


def _message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": "msg_probe", "role": "assistant", "status": "completed", "content": content}


def probe_outputs(row: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The ``output`` of each soundness probe for one dataset row."""
    return {
        "empty response": [],
        "refusal only": [_message([{"type": "refusal", "refusal": "I'm sorry, but I can't help with that."}])],
        "malformed output items": [
            {"type": "function_call", "name": "no_such_tool", "arguments": "{not json", "call_id": "call_x"},
            {"type": "function_call_output", "call_id": "call_missing", "output": "\u0000"},
            _message([]),
        ],
        "echo of the prompt": [
            _message([{"type": "output_text", "text": _prompt_text(row) or "echo", "annotations": []}])
        ],
    }


def _response_template(rollouts: list[dict[str, Any]]) -> dict[str, Any]:
    for rollout in rollouts:
        if isinstance(rollout.get("response"), dict):
            return copy.deepcopy(rollout["response"])
    return {
        "id": "resp_probe",
        "created_at": 0.0,
        "model": "ngym-validate",
        "object": "response",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def _unscored(verified: dict[str, Any]) -> str | None:
    """Why ``/verify`` could not score at all (its judge or another service failed), else None."""
    failure = verified.get(FAILURE_CLASS_KEY)
    if not failure:
        return None
    return f"{failure}: {verified.get(FAILURE_JUDGE_ERROR_KEY) or 'no detail'}"


#: the routes every resources server has; the rest are its tools.
_PROTOCOL_ROUTES = {"/seed_session", "/verify", "/close_session", "/aggregate_metrics"}


def summarise_routes(routes: list[str], shown: int = 3) -> str:
    """``N POST routes: K tools (/a, /b, …) + the protocol's``: a long tool list stays short (--json has all)."""
    tools = [r for r in routes if r not in _PROTOCOL_ROUTES]
    protocol = [r for r in routes if r in _PROTOCOL_ROUTES]
    if len(routes) <= shown + len(protocol):
        return f"{len(routes)} POST routes: {', '.join(routes)}"
    named = ", ".join(tools[:shown])
    return f"{len(routes)} POST routes: {len(tools)} tools ({named}, …; --json lists all) + {', '.join(protocol)}"


async def _replay_episode(http: Any, rollout: dict[str, Any]) -> dict[str, Any]:
    """A Gymnasium-style server: the recorded rollout's turns through /reset and /step; the episode's result."""
    client = RolloutClient(http)
    recording = Recording(rollout["response"], {**rollout["response"], "output": []})

    async def turn(request: ModelRequest) -> dict[str, Any] | None:
        return recording(request)

    result = await drive_async(episode(dataset_row(rollout)), client.call, turn)
    return {"reward": result.reward, "terminated": result.terminated, "truncated": result.truncated}


def by_failure(problems: list[tuple[int, str]]) -> str:
    """Row failures grouped by what failed: one entry per distinct message with its row count, so 25 rows
    failing the same way (a missing data file) read as one line, not 25. ``problems`` hold 0-based indices; rows
    are shown numbered from 1, as the progress line and the file's lines count them."""
    rows_of: dict[str, list[int]] = {}
    for index, message in problems:
        rows_of.setdefault(message, []).append(index + 1)
    parts = []
    for message, rows in rows_of.items():
        shown = ", ".join(map(str, rows[:8])) + (", …" if len(rows) > 8 else "")
        parts.append(f"row {rows[0]}: {message}" if len(rows) == 1 else f"{len(rows)} rows ({shown}): {message}")
    return "; ".join(parts)


async def _replay(
    report: ValidationReport,
    http: Any,
    rollouts: list[dict[str, Any]],
    progress: Progress,
    gymnasium: bool = False,
    bounds: tuple[float, float] | None = (0.0, 1.0),
) -> str | None:
    """Replay the recorded rollouts; the reason verify could not score (then the rest is not tried), else None."""
    problems: list[tuple[int, str]] = []
    rewards: list[float] = []
    for index, rollout in enumerate(rollouts):
        progress(f"replaying example rollout {index + 1}/{len(rollouts)}")
        if not isinstance(rollout.get("response"), dict):
            problems.append((index, "no recorded 'response'"))
            continue
        try:
            if gymnasium:
                verified = await _replay_episode(http, rollout)
            else:
                verified = await run_recorded_rollout(RolloutClient(http), rollout)
        except AssertionError as exc:
            problems.append((index, str(exc)))
            continue
        unscored = _unscored(verified)
        if unscored is not None:
            # Not a wrong reward but no reward: every other row would wait for the same dead service.
            detail = f"row {index + 1}: /verify could not score it ({unscored}); other rows not tried: is it running?"
            report.add("examples", False, detail)
            return unscored
        reward = verified.get("reward")
        bad = reward_problem(reward, None if gymnasium else bounds)
        if bad or not isinstance(reward, int | float):  # (the second half only tells mypy what the first checked)
            problems.append((index, bad or f"reward {reward!r} is not a number"))
            continue
        rewards.append(float(reward))
        expected = rollout.get("reward")
        if expected is not None and float(reward) != float(expected):
            problems.append((index, f"reward {reward} != recorded {expected}"))
    detail = f"{len(rollouts)} rollouts replayed, rewards {rewards}" if not problems else by_failure(problems)
    report.add("examples", not problems, detail)
    return None


async def _soundness(
    report: ValidationReport,
    http: Any,
    rows: list[dict[str, Any]],
    template: dict[str, Any],
    exempt: bool,
    progress: Progress,
    gymnasium: bool = False,
    bounds: tuple[float, float] | None = (0.0, 1.0),
) -> None:
    # A Gymnasium-style server: reset, then the probe as the model's one turn. One step of an episode scores
    # on the environment's own scale and is rarely its end, so only crashes (and non-numbers) are failures.
    seed_route, verify_route = (RESET, STEP) if gymnasium else ("/seed_session", "/verify")
    exempt = exempt or gymnasium
    for probe in SOUNDNESS_PROBES:
        crashes: list[tuple[int, str]] = []
        full: list[int] = []
        statuses: set[int] = set()
        for index, row in enumerate(rows):
            progress(f"soundness probe {probe!r}, row {index + 1}/{len(rows)}")
            client = RolloutClient(http)
            seeded = await client.post(seed_route, row)
            if seeded.status_code >= 400:
                crashes.append((index, f"{seed_route} → {seeded.status_code}: {seeded.text[:200]}"))
                continue
            response = {**template, "output": probe_outputs(row)[probe]}
            answer = await client.post(verify_route, {**row, "response": response})
            statuses.add(answer.status_code)
            if answer.status_code >= 500:
                crashes.append((index, f"{verify_route} → {answer.status_code}: {answer.text[:200]}"))
            elif answer.status_code == 200:
                reward = answer.json().get("reward")
                bad = reward_problem(reward, None if gymnasium else bounds)
                if bad:
                    crashes.append((index, bad))
                elif reward == 1.0:
                    full.append(index)
        warnings: list[str] = []
        ok = not crashes
        if crashes:
            detail = by_failure(crashes)
        elif full and not exempt and len(full) == len(rows):
            ok = False
            detail = f"scored 1.0 on every example row ({len(rows)}): the verifier does not look at the response"
        else:
            detail = f"no crash (HTTP {', '.join(map(str, sorted(statuses)))})"
            if full and exempt:
                detail += ", 1.0 allowed (always_full_reward)"
            elif full:
                shown = [index + 1 for index in full]
                warnings.append(f"scored 1.0 on row(s) {shown}: fine only if doing nothing is right there")
        report.add(f"soundness: {probe}", ok, detail, warnings)


async def validate_async(target: str, progress: Progress = lambda stage: None) -> ValidationReport:
    """Validate an environment: an installed name, or one on disk (folder, config YAML, app.py): ``ngym.targets``."""
    subject = resolve(target)
    report = ValidationReport(target=target, name=subject.name, distribution=subject.distribution)
    if subject.config_error is not None:
        report.add("registration", False, subject.config_error)
        return report
    try:
        subject.check_config_domain()
        cls = subject.server_class
        report.server_class = f"{cls.__module__}:{cls.__qualname__}"
        domain, _config = subject.registration
        report.domain = domain.value
    except (PluginError, ConfigError) as exc:
        report.add("registration", False, str(exc))
        return report
    report.add("registration", True, f"domain {domain.value}, config {_config.__name__}, verify implemented")
    # served from where it would be served (a NeMo Gym environment's own folder: its configs name files there)
    with in_working_directory(subject.target):
        return await _check_app(report, subject, cls, progress)


async def _check_app(
    report: ValidationReport, subject: Environment, cls: type[SimpleResourcesServer], progress: Progress
) -> ValidationReport:
    """Build and start the app, replay its examples and probe its verifier, into ``report``."""
    try:
        app = create_app(subject.serve_spec(), cls=cls)
    except Exception as exc:
        report.add("app", False, f"cannot build the app: {exc}")
        return report

    rollouts_path = subject.folder / "data" / "example_rollouts.jsonl" if subject.folder else None
    if rollouts_path is None or not rollouts_path.is_file():
        rollouts: list[dict[str, Any]] = []
    else:
        rollouts = read_example_rollouts(rollouts_path)
    rows = [dataset_row(r) for r in rollouts]
    if not rows and subject.folder and (subject.folder / "data" / "example.jsonl").is_file():
        rows = read_jsonl(subject.folder / "data" / "example.jsonl")

    try:
        async with serve_in_process(app) as http:
            report.routes = sorted(getattr(r, "path", "") for r in app.routes if "POST" in getattr(r, "methods", ()))
            gymnasium = is_gymnasium_style(report.routes)
            protocol = " (Gymnasium-style: /reset + /step)" if gymnasium else ""
            report.add("app", True, f"started; {summarise_routes(report.routes)}{protocol}")
            unscored = None
            if rollouts:
                unscored = await _replay(report, http, rollouts, progress, gymnasium, cls.reward_range)
            else:
                missing = rollouts_path or "data/example_rollouts.jsonl"
                report.add("examples", False, f"no rollouts to replay: add {missing}")
            if unscored is not None:
                report.add("soundness", False, "not tried: /verify cannot score while that service does not answer")
            elif rows:
                probes = (report, http, rows, _response_template(rollouts), cls.always_full_reward, progress)
                await _soundness(*probes, gymnasium=gymnasium, bounds=cls.reward_range)
            else:
                report.add("soundness", False, "no example rows (data/example.jsonl) to probe the verifier with")
    except Exception as exc:  # the app failed to start or stop
        report.add("app", False, f"lifespan failed: {exc!r}")
    return report


def validate(target: str, progress: Progress = lambda stage: None) -> ValidationReport:
    """Synchronous ``validate_async`` (for the CLI)."""
    return asyncio.run(validate_async(target, progress))
