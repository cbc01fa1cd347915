"""Which environments speak which protocol: recorded rollouts replayed over NeMo's wire, MCP, ORS and OpenEnv.

For each environment of a sample (the built-ins, NeMo Gym catalogue environments installed with ``ngym install
nemo-gym:NAME``, an installed OpenEnv environment and an installed verifiers environment), ``ngym run`` serves it
in a process of its own and its recorded example rollouts are replayed four ways on that one server:

- **NeMo's wire** (``ngym.train.wire``, the trainers' client): seed, the recorded tool calls, ``/verify`` with the
  recorded response; a Gymnasium-style server (``/reset`` + ``/step``) is replayed as NeMo's gymnasium agent runs it;
- **MCP** (the ``mcp`` SDK's client, ``expose_tools_over_mcp=true``): seed, the tool calls over MCP, verify;
- **ORS** (``openreward``'s own client, at ``/ors``): a session on the row, the tool calls, the final-answer tool;
- **OpenEnv** (OpenEnv's own ``GenericEnvClient``, at ``/openenv``): reset with the row, a step per tool call,
  a final message step.

A cell passes when every rollout's reward equals the recording's and NeMo's wire's; otherwise it says why.
Results go to a JSON (for CI) and, with ``--docs``, to the table in docs/training.md.

    python tools/protocol_matrix.py                          # the whole sample (~10 min; installs once)
    python tools/protocol_matrix.py --only example_single_tool_call,example_session_state_mgmt --json out.json
    python tools/protocol_matrix.py --docs                   # rewrite the table in docs/training.md

The ORS client comes from the trainer venv (``tools/trainer_venv.sh``), OpenEnv from a cached venv
(``openenv==0.10.0``), NeMo Gym environments from ngym's fleet venvs (``~/.cache/ngym/fleet-venvs``); work files in
``~/.cache/ngym/protocol-matrix``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ngym.config import cache_root  # noqa: E402
from tools.protocol_matrix_cells import PROTOCOLS, Cell, run_cells  # noqa: E402
from tools.protocol_matrix_subjects import SUBJECTS, Subject, prepare, served  # noqa: E402

WORK = Path(os.environ.get("NGYM_MATRIX_DIR") or cache_root() / "protocol-matrix")
DOCS = REPO / "docs" / "training.md"
SECTION = "## Which environments speak which protocol"
COMMAND = "python tools/protocol_matrix.py --docs"
LABELS = {"nemo": "NeMo's wire", "mcp": "MCP", "ors": "ORS (`/ors`)", "openenv": "OpenEnv (`/openenv`)"}


def measure(subject: Subject, work: Path, clients: dict[str, str]) -> dict[str, Any]:
    """One environment's row: its cells, each pass / fail / n/a with the rewards and the reason."""
    start = time.monotonic()
    row: dict[str, Any] = {"name": subject.name, "kind": subject.kind, "why": subject.why}
    try:
        target = prepare(subject, work)
    except Exception as exc:  # noqa: BLE001 - an environment that cannot be installed is a row saying why
        row["error"] = f"not installed: {type(exc).__name__}: {exc}"[:400]
        row["cells"] = {p: Cell("fail", reason=row["error"]).as_dict() for p in PROTOCOLS}
        return row
    row["rollouts"] = len(target.rollouts)
    row["recorded"] = [r.get("reward") for r in target.rollouts]
    if target.reverify:  # NeMo Gym 0.7.0's own score of the same recordings (older ones may differ)
        row["nemo_reverify"] = list(target.reverify)
    try:
        with served(target, work) as server:
            cells = run_cells(server, target, clients)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"not served: {type(exc).__name__}: {exc}"[:400]
        cells = {p: Cell("fail", reason=row["error"]) for p in PROTOCOLS}
    row["cells"] = {p: cell.as_dict() for p, cell in cells.items()}
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: one line per environment, a column per protocol (✓ n/n, or the reason)."""
    lines = [
        "| environment | kind | rollouts | " + " | ".join(LABELS[p] for p in PROTOCOLS) + " |",
        "|---|---|---|" + "---|" * len(PROTOCOLS),
    ]
    for row in rows:
        cells = []
        for protocol in PROTOCOLS:
            cell = row["cells"][protocol]
            if cell["status"] == "pass":
                cells.append(f"✓ {len(cell['rewards'])}/{row.get('rollouts', 0)}")
            else:
                mark = "✗" if cell["status"] == "fail" else "—"
                cells.append(f"{mark} {cell['reason']}".replace("|", "\\|"))
        name = f"`{row['name']}`"
        lines.append(f"| {name} | {row['kind']} | {row.get('rollouts', 0)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs(rows: list[dict[str, Any]], path: Path = DOCS) -> None:
    """Replace the table under the section's heading (kept: the text before the first table line)."""
    text = path.read_text()
    if SECTION not in text:
        raise SystemExit(f"{path} has no section {SECTION!r}: add it (a heading and a sentence) first")
    head, _, rest = text.partition(SECTION)
    body, sep, tail = rest.partition("\n## ")
    intro = body.split("\n| environment |", 1)[0].rstrip("\n")
    after = body.split("\n| environment |", 1)[1].split("\n\n", 1)[1] if "\n| environment |" in body else ""
    new = f"{SECTION}{intro}\n\n{markdown(rows)}\n\n{after.strip()}\n"
    path.write_text(head + new.rstrip("\n") + "\n" + (f"\n## {tail}" if sep else ""))


def failing(rows: list[dict[str, Any]]) -> list[str]:
    """Cells that fail (not those that do not apply): one line each."""
    return [
        f"{row['name']} / {LABELS[p]}: {row['cells'][p]['reason']}"
        for row in rows
        for p in PROTOCOLS
        if row["cells"][p]["status"] == "fail"
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated environment names of the sample")
    parser.add_argument(
        "--json",
        type=Path,
        default=WORK / "matrix.json",
        help="where the results go (with --only, the file's other rows are kept)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="environments measured at once (default 1)")
    parser.add_argument("--docs", action="store_true", help=f"write the table into {DOCS.relative_to(REPO)}")
    parser.add_argument("--ors-python", help="the ORS client's interpreter (default: tools/trainer_venv.sh's)")
    parser.add_argument("--openenv-python", help="OpenEnv's interpreter (default: a cached venv, made once)")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: every server started is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    subjects = SUBJECTS
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {s.name for s in SUBJECTS})
        if unknown:
            names = ", ".join(s.name for s in SUBJECTS)
            print(f"protocol_matrix: no environment {', '.join(unknown)} in the sample ({names})", file=sys.stderr)
            return 2
        subjects = [s for s in SUBJECTS if s.name in wanted]
    from tools.protocol_matrix_cells import client_pythons

    clients = client_pythons(args.ors_python, args.openenv_python, WORK)

    def one(subject: Subject) -> dict[str, Any]:
        print(f"protocol_matrix: {subject.name} ({subject.kind}) ...", flush=True)
        row = measure(subject, WORK, clients)
        summary = ", ".join(f"{p} {row['cells'][p]['status']}" for p in PROTOCOLS)
        print(f"protocol_matrix: {subject.name}: {summary} ({row.get('seconds', 0)} s)", flush=True)
        return row

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(one, subjects))
    if args.only and args.json.is_file():  # the other environments' rows stay as last measured
        measured = {row["name"]: row for row in rows}
        kept = {row["name"]: row for row in json.loads(args.json.read_text()).get("environments", [])}
        rows = [measured.get(s.name) or kept[s.name] for s in SUBJECTS if s.name in measured or s.name in kept]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": COMMAND, "protocols": list(PROTOCOLS), "environments": rows}
    args.json.write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    print(markdown(rows))
    print(f"protocol_matrix: results in {args.json}")
    if args.docs:
        write_docs(rows)
        print(f"protocol_matrix: table written to {DOCS.relative_to(REPO)}")
    problems = failing(rows)
    for line in problems:
        print(f"FAIL {line}")
    return 1 if problems else 0


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


if __name__ == "__main__":
    raise SystemExit(main())
