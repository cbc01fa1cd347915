"""Re-score WorkBench's recorded model outputs with ngym and with WorkBench's own scoring, case for case.

WorkBench's repository keeps every model run of the paper under ``data/results/<domain>/<model>_<all|domains>_
<YYYY-MM-DD_HH-MM-SS>.csv`` (columns ``query`` or ``task``, ``function_calls``, ``full_response``, ``error``).
They are not shipped with ngym and not committed here: put a copy of that ``data/results`` folder in
``~/.cache/ngym/workbench_results`` (or pass ``--results``). Each run is scored twice:

- by ngym's engine: ``scoring.score(data, predicted, ground_truth, error=error)``;
- by :class:`test_pandas_reference.Reference`, a pandas re-statement of WorkBench's write tools and of its
  ``calculate_metrics`` / ``is_correct`` (line breaks turned into ``\\n``, then ``eval``; a runner error makes the
  row wrong), which needs pandas 2.x like WorkBench.

It prints each disagreement, then per model and tool selection the accuracy by both scorers, and exits 1 on any
disagreement. Run with a pandas-2 interpreter from the repository root::

    PYTHONPATH=resources_servers:. python resources_servers/workplace_assistant/tests/rescore_workbench_results.py
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_pandas_reference import WORKBENCH, Reference  # noqa: E402

from ngym.config import cache_root

CACHE = cache_root() / "workbench_results"
RUN_NAME = re.compile(r"^(?P<model>.+?)_(?P<tools>all|domains)_(?P<when>\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})\.csv$")
DOMAINS = ["multi_domain", "email", "calendar", "analytics", "project_management", "customer_relationship_manager"]


def paper_runs(results: Path, year: str = "2024") -> dict[tuple[str, str, str], Path]:
    """The latest run per (model, tool selection, domain) recorded in ``year`` (the paper's runs are 2024's)."""
    latest: dict[tuple[str, str, str], Path] = {}
    for domain in DOMAINS:
        for path in sorted((results / domain).glob("*.csv")):
            match = RUN_NAME.match(path.name)
            if not match or not match["when"].startswith(year):
                continue
            key = (match["model"].lower().replace("mixtral", "mistral"), match["tools"], domain)
            if key not in latest or RUN_NAME.match(latest[key].name)["when"] < match["when"]:
                latest[key] = path
    return latest


def main(argv: list[str] | None = None) -> int:
    import pandas as pd
    from workplace_assistant.scoring import score
    from workplace_assistant.workspace import WorkBenchData

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=CACHE, help=f"WorkBench's data/results (default {CACHE})")
    parser.add_argument("--data", type=Path, default=WORKBENCH, help="WorkBench's data directory")
    args = parser.parse_args(argv)
    runs = paper_runs(args.results)
    if not runs:
        print(f"no 2024 runs under {args.results}/<domain>/ (copy WorkBench's data/results there)", file=sys.stderr)
        return 2
    data, reference = WorkBenchData.from_dir(args.data), Reference(args.data)
    truth: dict[str, dict[str, list[str]]] = {}
    for domain in DOMAINS:
        frame = pd.read_csv(args.data / "processed" / "queries_and_answers" / f"{domain}_queries_and_answers.csv",
                            dtype=str)  # fmt: skip
        truth[domain] = {q: ast.literal_eval(a) for q, a in zip(frame["query"], frame["answer"], strict=True)}
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # rows, ngym right, WorkBench right
    disagreements = unmatched = 0
    for (model, tools, domain), path in sorted(runs.items()):
        frame = pd.read_csv(path, dtype=str).fillna("")
        queries = frame["query"] if "query" in frame else frame["task"]
        for query, calls, error in zip(queries, frame["function_calls"], frame["error"], strict=True):
            gold = truth[domain].get(query)
            if gold is None:
                unmatched += 1
                continue
            predicted = ast.literal_eval(calls)
            ours = score(data, predicted, gold, error=error).correct
            theirs = not error and reference.is_correct(predicted, gold)
            counts = totals[(model, tools)]
            counts[0] += 1
            counts[1] += ours
            counts[2] += theirs
            if ours != theirs:
                disagreements += 1
                print(f"DISAGREE {path.name} {query!r}: ngym {ours}, WorkBench {theirs}\n  {predicted}\n  {gold}")
    print(f"{'model':<14} {'tools':<8} {'rows':>5} {'ngym':>7} {'WorkBench':>10}")
    for (model, tools), (rows, ours, theirs) in sorted(totals.items()):
        print(f"{model:<14} {tools:<8} {rows:>5} {ours / rows:>7.1%} {theirs / rows:>10.1%}")
    rows = sum(c[0] for c in totals.values())
    print(f"{len(runs)} runs, {rows} rollouts compared, {disagreements} disagreements, {unmatched} rows unmatched")
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
