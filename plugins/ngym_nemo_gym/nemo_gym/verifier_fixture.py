"""NeMo Gym's verifier fixtures: JSONL cases that pin a verifier's rewards, checked in-process.

A fixture file holds one case a line: ``{"name", "kind", "request", "expected_reward" | "expected_error"}`` with
``kind`` one of ``full_reward`` (must score the best end of the reward range), ``zero_reward`` (the worst end),
``malformed`` (verify must raise an error containing ``expected_error``) and ``determinism`` (scored twice on fresh,
reseeded servers, equal both times; required when the verifier declares itself ``seeded``).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "VerifierFixture",
    "VerifierFixtureCase",
    "VerifierFixtureError",
    "VerifierFixtureResult",
    "exercise_verifier_fixture",
    "load_verifier_fixture",
]

CaseKind = Literal["full_reward", "zero_reward", "malformed", "determinism"]
Invocation = Callable[[Any, BaseModel], Any]


class VerifierFixtureError(ValueError):
    """The fixture is invalid, or the verifier does not do what it says."""


@dataclass(frozen=True)
class VerifierFixture:
    server_factory: Callable[[], Any]
    request_model: type[BaseModel]
    cases_path: str | Path
    invoke: Invocation | None = None
    reseed: Invocation | None = None


class VerifierFixtureCase(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1)
    kind: CaseKind
    request: dict[str, Any]
    expected_reward: Annotated[float, Field(strict=True, allow_inf_nan=False)] | None = None
    expected_error: str | None = None

    @model_validator(mode="after")
    def _one_expectation(self) -> VerifierFixtureCase:
        if self.kind == "malformed":
            if not self.expected_error or self.expected_reward is not None:
                raise ValueError("a malformed case requires expected_error and forbids expected_reward")
        elif self.expected_reward is None or self.expected_error is not None:
            raise ValueError(f"a {self.kind} case requires expected_reward and forbids expected_error")
        return self


@dataclass(frozen=True)
class VerifierFixtureResult:
    name: str
    kind: CaseKind
    observed_rewards: tuple[float, ...] = ()


def load_verifier_fixture(path: str | Path) -> list[VerifierFixtureCase]:
    """The cases of a fixture file; :class:`VerifierFixtureError` naming the line when one is invalid."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError) as exc:
        raise VerifierFixtureError(f"Could not read verifier fixture '{path}': {exc}") from exc
    cases = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            cases.append(VerifierFixtureCase.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise VerifierFixtureError(
                f"Invalid JSON in verifier fixture '{path}' at line {number}: {exc.msg}"
            ) from exc
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
            raise VerifierFixtureError(f"Invalid verifier fixture '{path}' at line {number}: {first['msg']}") from exc
    if not cases:
        raise VerifierFixtureError(f"Verifier fixture '{path}' contains no cases")
    return cases


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _reward(result: Any, case: VerifierFixtureCase) -> float:
    reward = result.get("reward") if isinstance(result, Mapping) else getattr(result, "reward", result)
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise VerifierFixtureError(f"Case '{case.name}' returned a non-finite numeric reward: {reward!r}")
    return float(reward)


async def _score(fixture: VerifierFixture, case: VerifierFixtureCase, *, reseed: bool = False) -> float:
    """Score one case on a fresh server. Errors propagate as raised (malformed cases expect them)."""
    if reseed and fixture.reseed is None:
        raise VerifierFixtureError("a seeded determinism case requires a reseed adapter")
    try:
        server = fixture.server_factory()
    except Exception as exc:
        raise VerifierFixtureError(f"Case '{case.name}' could not create a fresh server: {exc}") from exc
    request = fixture.request_model.model_validate(case.request)
    if reseed and fixture.reseed is not None:  # (a missing adapter was refused above)
        await _maybe_await(fixture.reseed(server, request))
    if fixture.invoke is not None:
        result = fixture.invoke(server, request)
    else:
        verify = getattr(server, "verify", None)
        if not callable(verify):
            raise VerifierFixtureError("server_factory returned an object without a callable verify method")
        result = verify(request)
    return _reward(await _maybe_await(result), case)


async def _score_checked(fixture: VerifierFixture, case: VerifierFixtureCase, *, reseed: bool = False) -> float:
    try:
        return await _score(fixture, case, reseed=reseed)
    except VerifierFixtureError:
        raise
    except Exception as exc:
        raise VerifierFixtureError(f"Case '{case.name}' failed: {exc}") from exc


def _require_equal(actual: float, expected: float, message: str) -> None:
    if actual != expected:
        raise VerifierFixtureError(f"{message}: expected {expected}, observed {actual}")


def _rewrite(path: Path, cases: list[VerifierFixtureCase]) -> None:
    if path.is_symlink() or not path.is_file():
        raise VerifierFixtureError(f"Refusing to replace non-regular verifier fixture '{path}'")
    text = "".join(json.dumps(c.model_dump(mode="json", exclude_none=True), sort_keys=True) + "\n" for c in cases)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, path.stat().st_mode & 0o777)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _check_range(reward_range: Sequence[float]) -> tuple[float, float]:
    if len(reward_range) != 2:
        raise VerifierFixtureError("reward_range must contain exactly two endpoints")
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in reward_range):
        raise VerifierFixtureError("reward_range endpoints must be finite numbers")
    lower, upper = float(reward_range[0]), float(reward_range[1])
    if not (math.isfinite(lower) and math.isfinite(upper)) or lower > upper:
        raise VerifierFixtureError("reward_range must contain finite endpoints with lower <= upper")
    return lower, upper


async def exercise_verifier_fixture(
    fixture: VerifierFixture,
    *,
    reward_range: Sequence[float],
    higher_is_better: bool = True,
    determinism: str | Enum,
    update_expected: bool = False,
) -> tuple[VerifierFixtureResult, ...]:
    """Check every case of ``fixture`` against its verifier, without starting a server."""
    path = Path(fixture.cases_path)
    cases = load_verifier_fixture(path)
    lower, upper = _check_range(reward_range)
    if not isinstance(higher_is_better, bool):
        raise VerifierFixtureError("higher_is_better must be a boolean")
    best, worst = (upper, lower) if higher_is_better else (lower, upper)
    best_end, worst_end = ("upper", "lower") if higher_is_better else ("lower", "upper")
    mode = str(getattr(determinism, "value", determinism))
    if mode not in {"seeded", "stochastic", "unknown"}:
        raise VerifierFixtureError(f"Unsupported determinism value: {mode!r}")
    required = {"full_reward", "zero_reward", "malformed"} | ({"determinism"} if mode == "seeded" else set())
    missing = sorted(required - {case.kind for case in cases})
    if missing:
        raise VerifierFixtureError(f"Verifier fixture '{path}' is missing required cases: {', '.join(missing)}")

    results: list[VerifierFixtureResult] = []
    observed_by_index: dict[int, float] = {}
    for index, case in enumerate(cases):
        if case.kind == "determinism" and mode != "seeded":
            continue
        if case.kind == "malformed":
            try:
                await _score(fixture, case)
            except VerifierFixtureError:
                raise
            except Exception as exc:
                assert case.expected_error is not None  # a malformed case requires one (validated on load)
                if case.expected_error not in str(exc):
                    raise VerifierFixtureError(
                        f"Malformed case '{case.name}' error did not contain {case.expected_error!r}: {exc}"
                    ) from exc
            else:
                raise VerifierFixtureError(f"Malformed case '{case.name}' did not raise an error")
            results.append(VerifierFixtureResult(case.name, case.kind))
            continue
        observed = await _score_checked(fixture, case, reseed=case.kind == "determinism")
        if not lower <= observed <= upper:
            raise VerifierFixtureError(
                f"Case '{case.name}' returned reward {observed} outside declared range [{lower}, {upper}]"
            )
        rewards = [observed]
        if case.kind == "full_reward":
            _require_equal(observed, best, f"Full-reward case '{case.name}' does not pin the {best_end} endpoint")
        elif case.kind == "zero_reward":
            _require_equal(observed, worst, f"Zero-reward case '{case.name}' does not pin the {worst_end} endpoint")
        else:
            again = await _score_checked(fixture, case, reseed=True)
            rewards.append(again)
            _require_equal(again, observed, f"Determinism case '{case.name}' changed on a fresh server")
        if update_expected:
            observed_by_index[index] = observed
        else:
            _require_equal(observed, float(case.expected_reward or 0.0), f"Case '{case.name}' reward mismatch")
        results.append(VerifierFixtureResult(case.name, case.kind, tuple(rewards)))

    if update_expected:
        updated = [
            case.model_copy(update={"expected_reward": observed_by_index[i]}) if i in observed_by_index else case
            for i, case in enumerate(cases)
        ]
        if updated != cases:
            _rewrite(path, updated)
    return tuple(results)
