"""NeMo Gym's catalogue side by side: ``bench/bench_heavy.py``'s runs on any NeMo Gym 0.7.0 environment by name.

Each environment is run exactly as bench_heavy runs its own list (same parts: the venvs it caches, NeMo Gym
serving the environment from its own venv, ``ngym run`` serving it, the HAProxy scripted judge for judge
environments, ``bench/heavy_load.py``'s closed loop with a ``/health`` prober beside it, rounds alternating),
with ngym as shipped only. The rows are the environment's own example data in NeMo Gym's wheel
(``data/example_rollouts.jsonl`` on ``data/example.jsonl``, paired by ``ngym.examples.match_row``); a recorded
rollout's tool calls are replayed in order, so multi-step and tool environments run their tools.

An environment that cannot run here is listed with the reason, found before any server starts (a GPU stack in its
requirements, a requirement fetched from outside the package registries, no example rollouts, a base class
rather than a server) or from the server's own last error line (a download at start-up, a missing credential).

Prints bench_heavy's detailed rows as they finish, then one summary table: NeMo Gym's and ngym's rollouts/s, their
ratio, the CPU per rollout ratio, ``/health`` p99 on each side and whether every row scored the same reward on both
(a difference is a bug, printed as **DIFFER**).

    .venv/bin/python bench/bench_catalogue.py [--envs text_to_sql,reasoning_gym] [--seconds 6] [--rounds 3]
        [--concurrency 16] [--jobs 2]
    make bench-catalogue
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bench_heavy as bh  # noqa: E402  (sets the work folder before tools.nemo_envs reads it)
from ngym.errors import ConfigError  # noqa: E402
from tools import nemo_envs_base as ne  # noqa: E402

#: Environments of NeMo Gym 0.7.0's catalogue not in docs/performance.md's other tables, one or more per shape.
#: ``make bench-catalogue`` runs them all; the ones that cannot run on this machine say why in the table.
CATALOGUE: dict[str, str] = {
    "text_to_sql": "text-to-SQL, LLM judge",
    "structured_outputs": "structured outputs (JSON schema)",
    "format_verification": "instruction following",
    "citation_if": "instruction following",
    "iheval": "instruction following",
    "gpqa_diamond": "multiple choice",
    "equivalence_rule": "rule-based answer check",
    "reasoning_gym": "reasoning_gym's verifiers",
    "swerl_gen": "SWE, patch scoring",
    "swerl_llm_judge": "SWE, patch scoring",
    "scicode": "code execution",
    "calendar": "tool env, multi-step",
    "workplace_assistant": "workplace tools, multi-step",
    "xlam_fc": "function calling",
    "single_step_tool_use_with_argument_comparison": "function calling",
    "math_advanced_calculations": "tool env (calculator)",
    "example_multi_turn_gymnasium": "multi-turn (Gymnasium-style)",
    "toolsandbox": "tool env, LLM judge",
    "verifif": "instruction following, LLM judge",
    "bigcodebench": "code execution (sandbox venv)",
    "bird_sql": "text-to-SQL (SQLite)",
    "spider2_lite": "text-to-SQL",
    "google_search": "web search",
    "instruction_following": "instruction following",
    "wmt_translation": "translation (COMET)",
}


def not_runnable(item: ne.Env) -> str | None:
    """Why the environment cannot be benchmarked here, when that is known before installing or serving it."""
    blocker = item.install_blocker()
    if blocker:
        return blocker
    if item.env.target is None:
        return ne.NOT_A_SERVER
    try:
        rows = item.payloads()
    except ConfigError as exc:  # a rollout two rows could equally be: replaying it would score the wrong task
        return f"rows not replayable: {exc}"
    if not rows:
        return "no example rollouts in NeMo Gym's wheel (nothing recorded to replay)"
    return None


def prepare_all(items: list[ne.Env], bases: dict[str, Path], jobs: int) -> dict[str, str]:
    """Every environment's two venvs, ``jobs`` at a time (installs are network- and disk-bound); the reasons of
    those that failed, by name."""

    def one(item: ne.Env) -> tuple[str, str | None]:
        try:
            bh.prepare(item, bases)
        except SystemExit as exc:
            return item.name, f"install failed: {exc}"
        return item.name, None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return {name: reason for name, reason in pool.map(one, items) if reason}


def serve_failure(item: ne.Env, message: str) -> str:
    """A server that exited at start-up, said with its own last error line and its category (bench_heavy's
    message alone says only the exit code)."""
    logs = ne.WORK / "logs" / item.name
    for log, side in ((logs / "ngym-0.serve.log", "ngym"), (logs / "nemo.serve.log", "nemo")):
        if log.is_file() and ne.last_error(log.read_text(errors="replace")):
            return f"{message}; {side}: {ne.replay_failure('serve failed', log, side)}"
    return message


def summary_row(name: str, shape: str, outcome: dict[str, Any]) -> str:
    """One line of the catalogue table from bench_heavy's outcome (medians over the rounds)."""
    med: dict[str, dict[str, float]] = {}
    rewards: dict[str, str] = {}
    for label, rounds in outcome["results"].items():
        med[label] = {
            key: statistics.median(r[key] for r in rounds)
            for key in ("rollouts_per_s", "cpu_ms_per_rollout", "health_p99_ms")
        }
        med[label]["errors"] = sum(r["errors"] for r in rounds)
        merged: dict[str, set[str]] = {}
        for r in rounds:
            for row, values in r["rewards"].items():
                merged.setdefault(row, set()).update(json.dumps(v) for v in values)
        rewards[label] = json.dumps({row: sorted(v) for row, v in sorted(merged.items())}, sort_keys=True)
    nemo, ngym = med["NeMo Gym"], med["ngym"]
    same = len(set(rewards.values())) == 1  # every server, ngym before a change too
    rows = len(json.loads(rewards["ngym"]))
    verdict = f"yes ({rows}/{outcome['rows']} rows)" if same else "**DIFFER**"
    if not nemo["rollouts_per_s"]:
        ngym_rate = ngym["rollouts_per_s"]
        return f"| {name} | {shape} | 0 ({nemo['errors']:.0f} errors) | {ngym_rate:.1f} | – | – | – | {verdict} |"
    errors = ""
    if nemo["errors"] or ngym["errors"]:  # a row rejected (4xx) on a side: its rollouts are not counted
        errors = f"; errors NeMo {nemo['errors']:.0f}, ngym {ngym['errors']:.0f}"
    return (
        f"| {name} | {shape} | {nemo['rollouts_per_s']:.1f} | {ngym['rollouts_per_s']:.1f} | "
        f"{ngym['rollouts_per_s'] / nemo['rollouts_per_s']:.2f}× | "
        f"{nemo['cpu_ms_per_rollout'] / max(ngym['cpu_ms_per_rollout'], 1e-9):.2f}× | "
        f"{nemo['health_p99_ms']:.1f} / {ngym['health_p99_ms']:.1f} | {verdict}{errors} |{before_cells(med)}"
    )


def before_cells(med: dict[str, dict[str, float]]) -> str:
    """With ``--before``: ngym before the change, its rollouts/s and CPU per rollout against NeMo Gym's."""
    before, nemo = med.get("ngym before"), med["NeMo Gym"]
    if before is None or not before["rollouts_per_s"]:
        return ""
    return (
        f" {before['rollouts_per_s']:.1f} ({before['rollouts_per_s'] / nemo['rollouts_per_s']:.2f}×) | "
        f"{nemo['cpu_ms_per_rollout'] / max(before['cpu_ms_per_rollout'], 1e-9):.2f}× |"
    )


TABLE_HEADER = (
    "| environment | shape | NeMo Gym rollouts/s | ngym rollouts/s | ngym / NeMo | CPU per rollout, NeMo / ngym | "
    "/health p99 ms, NeMo / ngym | rewards identical? |\n|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(CATALOGUE), help="comma-separated NeMo Gym environment names")
    parser.add_argument("--seconds", type=float, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2, help="environments installed at once (first run)")
    parser.add_argument("--judge", choices=("haproxy", "uvicorn"), default="haproxy")
    parser.add_argument("--prepare-only", action="store_true", help="only build the venvs")
    parser.add_argument(
        "--before",
        metavar="DIR",
        help="also serve with the ngym and ngym-nemo-gym sources in DIR (e.g. `git archive main ngym plugins | tar "
        "-x -C DIR`): a third server, ngym before a change, in the same alternating rounds",
    )
    args = parser.parse_args()
    args.shipped_only = not args.before  # bench_heavy's fork-template variants are its own subject
    if args.before:  # its sources first on the path: the editable installs' finders come after sys.path
        before = Path(args.before).resolve()
        path = f"{before}:{before / 'plugins' / 'ngym_nemo_gym'}"
        bh.VARIANTS = {"ngym": {}, "ngym before": {"PYTHONPATH": path}}
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind through the servers' finally blocks
    items = ne.load_envs(args.envs.split(","))
    skipped = {item.name: reason for item in items if (reason := not_runnable(item))}
    runnable = [item for item in items if item.name not in skipped]
    bases = {
        "nemo": ne.base_venv("nemo-base", ne.build_nemo_base, f"overlay of {ne.nemo_venv()}"),
        "ngym": ne.base_venv("ngym-base", ne.build_ngym_base, f"ngym editable from {ROOT}"),
    }
    skipped.update(prepare_all(runnable, bases, args.jobs))
    if args.prepare_only:
        for name, reason in skipped.items():
            print(f"{name}: {reason}")
        return
    print(
        f"machine: {os.cpu_count()} cores, shared; load average {os.getloadavg()[0]:.1f}; {args.rounds} alternating "
        f"rounds of {args.seconds:.0f}s, {args.concurrency} concurrent rollouts; judge: {args.judge}",
        flush=True,
    )
    summary: list[str] = []
    for item in runnable:
        if item.name in skipped:
            continue
        try:
            outcome = bh.bench_env(item, bases, args)
        except SystemExit as exc:
            skipped[item.name] = serve_failure(item, str(exc))
            print(f"| {item.name} | not measured: {skipped[item.name]} |", flush=True)
            continue
        (ne.WORK / "logs" / item.name / "bench.json").write_text(json.dumps(outcome, default=list))
        print("\n".join(bh.summarise(item.name, outcome)), flush=True)
        summary.append(summary_row(item.name, CATALOGUE.get(item.name, ""), outcome))
    header = TABLE_HEADER
    if args.before:
        header = header.replace(" |\n", " | ngym before rollouts/s (/ NeMo) | CPU per rollout, NeMo / ngym before |\n")
        header += "---|---|"
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}\n\n{header}")
    print("\n".join(summary))
    if skipped:
        print("\nNot runnable here:\n")
        for name, reason in skipped.items():
            print(f"- `{name}` ({CATALOGUE.get(name, 'other')}): {reason}")


if __name__ == "__main__":
    main()
