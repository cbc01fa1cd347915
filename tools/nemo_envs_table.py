"""The table of ``tools/nemo_envs.py``: per-environment results (JSON) → ``docs/nemo-gym-environments.md``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tools.nemo_replay_inprocess import is_server_error

TOTAL = 145


def _tests(side: dict[str, Any] | None) -> str:
    if not side:
        return "not run"
    status = str(side.get("status", "?"))
    if status in ("pass", "fail", "no tests"):
        counts = f"{side.get('passed', 0)} passed, {side.get('failed', 0)} failed"
        if side.get("errors"):
            counts += f", {side['errors']} errors"
        return f"**{status}** ({counts})" if status == "pass" else f"{status} ({counts})"
    return status


def _same(a: float | None, b: float | None) -> bool:
    """One row's rewards agree; a row both sides reject (a 4xx: the recorded row does not fit 0.7.0's own request
    model) agrees too."""
    return (a is None and b is None) or (None not in (a, b) and abs(a - b) < 1e-6)  # type: ignore[operator]


def nondeterministic_rows(result: dict[str, Any]) -> list[int] | None:
    """The rows whose reward differs between NeMo Gym's own two replays (each in a new process), or None when
    NeMo's side was replayed once only (measured before it replayed twice)."""
    nemo = (result.get("nemo") or {}).get("replay") or {}
    first, again = nemo.get("rewards") or [], nemo.get("rewards_again")
    if not first or again is None:
        return None
    return [i for i, (a, b) in enumerate(zip(first, again, strict=False)) if not _same(a, b)]


#: Reasons a replay could not run that lie in this machine, not in ngym (NeMo Gym serving the environment would meet
#: them too; its in-process replay may not, as it skips the server's start-up).
ENVIRONMENT_LIMITS = ("needs internet", "needs GPU", "needs a config value", "needs credentials", "needs prepared data")


def replay_agreement(result: dict[str, Any]) -> tuple[str, bool | None]:
    """(text, all rows agree?) comparing ngym's replayed rewards with NeMo Gym's (re-verified, else recorded).

    An environment NeMo Gym itself scores differently from one replay to the next (unseeded randomness) cannot
    agree row by row with any one run: it is reported as nondeterministic (None), not as agreeing or not."""
    if not result.get("has_rollouts"):
        return "no example rollouts", None
    ngym = (result.get("ngym") or {}).get("replay") or {}
    nemo = (result.get("nemo") or {}).get("replay") or {}
    ours = ngym.get("rewards") or []
    if not ours:
        reason = ngym.get("reason") or "not replayed"
        scored = sum(1 for r in nemo.get("rewards") or [] if r is not None)
        if scored and not any(f"({category})" in reason for category in ENVIRONMENT_LIMITS):
            # NeMo Gym scored rows that ngym could not: a gap, not a row left out of the count
            return f"ngym: {reason} (NeMo Gym scored {scored} rows)", False
        return f"ngym: {reason}", None
    theirs, against = nemo.get("rewards") or [], "NeMo"
    if theirs and nemo.get("rows") != ngym.get("rows"):  # the two sides replayed different rows
        return "NeMo's replay is of other rows (older pairing): re-run `--replay-only --side nemo`", None
    nemo_errors = [e for e in nemo.get("errors") or [] if e]
    if theirs and all(r is None for r in theirs) and any(is_server_error(e) for e in nemo_errors):
        # NeMo Gym's own replay failed on every row (a 5xx, not a rejection): it scored nothing to compare with
        failed = f"NeMo Gym's own replay failed ({nemo_errors[0][:80]})"
        if result.get("model_refs") or ngym.get("scripted_policy"):  # recorded rewards came from a real judge
            return f"{failed}; ngym scored {ours} with the scripted judge: nothing to compare", None
        theirs = []
    if not theirs:  # NeMo's side did not replay: the rewards its run recorded
        theirs, against = result.get("recorded") or [], "recorded"
    pairs = [(a, b) for a, b in zip(ours, theirs, strict=False)]
    agree = sum(1 for a, b in pairs if _same(a, b))
    rejected = sum(1 for a, b in pairs if a is None and b is None)
    text = f"{agree}/{len(pairs)} vs {against}" + (f" ({rejected} rejected by both)" if rejected else "")
    if result.get("model_refs") or ngym.get("scripted_policy"):
        text += " (scripted judge)"
    varying = nondeterministic_rows(result) if against == "NeMo" else None
    if varying:
        own = len(pairs) - len(varying)
        return (
            f"{text}; **nondeterministic under NeMo Gym itself**: its own two replays agree on {own}/{len(pairs)} "
            "rows (unseeded randomness), so no row-by-row comparison holds",
            None,
        )
    return text, agree == len(pairs) and bool(pairs)


def _commits(rows: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        commit = (row.get("ngym") or {}).get("commit") or "?"
        counts[commit] = counts.get(commit, 0) + 1
    return ", ".join(f"`{c}` ({n})" for c, n in sorted(counts.items(), key=lambda item: -item[1])) or "none"


def _category(reason: str | None) -> str:
    return (reason or "").split(":", 1)[0] or "?"


def _reason_lines(results: list[dict[str, Any]]) -> list[str]:
    """How many failed (or were skipped) for which reason, per side."""
    lines = []
    for side, label in (("nemo", "NeMo Gym"), ("ngym", "ngym")):
        counts: dict[str, int] = {}
        for result in results:
            outcome = result.get(side) or {}
            if outcome and outcome.get("status") not in ("pass", "no tests"):
                counts[_category(outcome.get("reason"))] = counts.get(_category(outcome.get("reason")), 0) + 1
        if counts:
            shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda item: -item[1]))
            lines.append(f"- not passing under {label}, by reason: {shown}.")
    return [*lines, ""] if lines else []


def _gap_lines(results: list[dict[str, Any]]) -> list[str]:
    """The goal: every environment whose tests pass under NeMo Gym passes under ngym. The ones that do not."""
    gaps = [
        r
        for r in results
        if (r.get("nemo") or {}).get("status") == "pass" and (r.get("ngym") or {}).get("status") not in (None, "pass")
    ]
    if not gaps:
        return []
    lines = [f"**Passing under NeMo Gym but not (yet) under ngym: {len(gaps)}** —"]
    lines += [f"`{r['name']}` ({(r['ngym'].get('reason') or r['ngym'].get('status') or '')[:140]})" for r in gaps]
    return [" ".join(lines).replace("|", "\\|"), ""]


def write_table(results_dir: Path, table: Path) -> None:
    results = [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))] if results_dir.is_dir() else []
    nemo_pass = [r for r in results if (r.get("nemo") or {}).get("status") == "pass"]
    ngym_pass = [r for r in results if (r.get("ngym") or {}).get("status") == "pass"]
    both = [r for r in nemo_pass if (r.get("ngym") or {}).get("status") == "pass"]
    nemo_pass_measured = [r for r in nemo_pass if r.get("ngym")]
    nemo_run = [r for r in results if r.get("nemo")]
    ngym_run = [r for r in results if r.get("ngym")]
    replayed = [(r, *replay_agreement(r)) for r in results]
    agreeing = [r for r, _, ok in replayed if ok]
    replayable = [r for r, _, ok in replayed if ok is not None]
    random_envs = [r["name"] for r in results if nondeterministic_rows(r) and (r.get("ngym") or {}).get("replay")]
    lines = [
        "# NeMo Gym 0.7.0's environments under ngym",
        "",
        f"Generated by `make nemo-envs` (`tools/nemo_envs.py`) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
        " Do not edit by hand.",
        "",
        "**What was run, on this machine (2 CPU cores, no GPU, internet limited to package registries):**",
        f"- measured under NeMo Gym 0.7.0 (Python 3.13, nemo-gym 0.7.0 + the environment's requirements): "
        f"{len(nemo_run)} of {TOTAL} environments; under ngym (`ngym install nemo-gym:NAME` + `ngym test NAME`, "
        f"Python 3.13): {len(ngym_run)} of {TOTAL}.",
        f"- own tests pass under NeMo Gym: **{len(nemo_pass)}**; under ngym: **{len(ngym_pass)}**. The goal "
        f"(every environment passing under NeMo Gym passes under ngym): of the {len(nemo_pass_measured)} passing "
        f"under NeMo Gym that were also measured under ngym, **{len(both)}** pass under ngym.",
        f"- replay: {len(replayable)} environments' example rollouts were replayed through `ngym run` "
        f"(`/seed_session` + `/verify` over HTTP); all rows score what NeMo Gym scores in **{len(agreeing)}**. "
        "NeMo's reward is the row re-verified in-process by NeMo Gym 0.7.0's own app "
        "(`tools/nemo_replay_inprocess.py`), else the reward recorded in `example_rollouts.jsonl`. An environment "
        "whose verify calls a judge model gets a scripted judge (an OpenAI-compatible server answering the "
        "environment's own \"equal\" label, `tools/nemo_scripted_judge.py`) on both sides: NeMo Gym's own "
        "`ServerClient` and `ngym run --model-url`; such rewards are compared with NeMo's, not the recorded ones. "
        "NeMo Gym replays each environment twice, in two processes: "
        + (
            f"{len(random_envs)} score differently from one NeMo replay to the next (unseeded randomness in the "
            f"environment itself: {', '.join(f'`{n}`' for n in random_envs)}); they are marked nondeterministic "
            "and counted neither way."
            if random_envs
            else "none scored differently from one NeMo replay to the next."
        ),
        "- an environment not listed was not reached in the time this run had; re-running resumes.",
        f"- ngym side measured at commit(s): {_commits(ngym_run)}.",
        "",
        *_gap_lines(results),
        *_reason_lines(results),
        "Reasons: *needs GPU* (a CUDA stack in its requirements), *needs internet* (requirements or tests fetch "
        "from outside the package registries), *missing system tool* (docker, java, ...), *missing package*, "
        "*needs credentials* (an API key the config requires), *needs a config value* (a `${...}` the config leaves "
        "to the user, e.g. an image name: NeMo Gym refuses to start it alike), "
        "*compat gap* (ngym's `nemo_gym` lacks something), "
        "*needs prepared data* (a data cache the environment's own prepare step fills from an upstream source), "
        "*file outside the wheel* (a test reads a file of NeMo Gym's repository that its wheel does not ship), "
        "*test failure* (anything else). The first error line is quoted. In the replay column, *not a server* marks "
        "a base class other environments build on.",
        "",
        "| environment | domain | tests under NeMo Gym | tests under ngym | replay agreement | reason |",
        "|---|---|---|---|---|---|",
    ]
    for result, agreement, _ in replayed:
        reasons = []
        for side, label in (("nemo", "NeMo"), ("ngym", "ngym")):
            reason = (result.get(side) or {}).get("reason")
            if reason:
                reasons.append(f"{label}: {reason}")
        reason_text = "; ".join(reasons).replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {result['name']} | {result.get('domain') or '?'} | {_tests(result.get('nemo'))} | "
            f"{_tests(result.get('ngym'))} | {agreement.replace('|', '/')} | {reason_text} |"
        )
    table.write_text("\n".join(lines) + "\n")
