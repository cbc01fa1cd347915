"""``make demo``: every installed environment with example rollouts, driven end to end by ``ngym rollout``.

For each environment that ships ``data/example_rollouts.jsonl`` this runs, as a real command::

    ngym rollout NAME --data <its example_rollouts.jsonl> --model replay --output <tmp>/NAME.jsonl --json

which starts the environment (``ngym run NAME`` on a free port) and the offline replay model, and runs the
whole agent loop over HTTP: seed_session → model → tools → model … → verify. Environments whose config has a
``judge_base_url`` are pointed at the replay model, which also answers judge prompts (a scripted judge). The
rewards are printed per rollout; the exit code is non-zero if any recorded reward is not reproduced.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from ngym.child_python import python_module
from ngym.examples import read_jsonl
from ngym.server.protocol import TASK_INDEX_KEY
from ngym.targets import installed, installed_names


def _needs_judge(config: Path | None) -> bool:
    return config is not None and "judge_base_url" in config.read_text()


def demo_one(name: str, examples: Path, config: Path | None, workdir: Path) -> tuple[bool, str]:
    """Roll out one environment's examples with the replay model; (all rewards reproduced?, report line)."""
    output = workdir / f"{name}.jsonl"
    command = python_module(
        "ngym.cli",
        "rollout",
        name,
        "--data",
        str(examples),
        "--model",
        "replay",
        "--output",
        str(output),
        "--json",
    )
    if _needs_judge(config):
        command += ["--set", "judge_base_url={model_url}"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if not output.is_file():
        tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
        return False, f"{name}: FAILED (exit {run.returncode}): {' | '.join(tail)}"
    recorded = [row.get("reward") for row in read_jsonl(examples)]
    got = {row[TASK_INDEX_KEY]: row.get("reward") for row in read_jsonl(output)}
    rewards = [got.get(index) for index in range(len(recorded))]
    mismatches = [
        i
        for i, (want, have) in enumerate(zip(recorded, rewards, strict=True))
        if have is None or (want is not None and have != want)
    ]
    shown = " ".join("--" if r is None else f"{r:.1f}" for r in rewards)
    known = [r for r in rewards if r is not None]
    mean = sum(known) / len(known) if known else 0.0
    ok = not mismatches and run.returncode == 0
    return ok, f"{name:28s} rewards: {shown:40s} mean {mean:.2f}   {_status(recorded, mismatches, run.returncode)}"


def _status(recorded: list[float | None], mismatches: list[int], returncode: int) -> str:
    """The verdict, explained where it is read: a 0.0 that matches its recording is a wrong answer on purpose."""
    if mismatches:
        return f"MISMATCH at rows {mismatches} (reward differs from the recorded one)"
    if returncode != 0:
        return f"FAILED (exit {returncode})"
    zeros = sum(1 for want in recorded if want == 0.0)
    if zeros:
        answers = "wrong answers score" if zeros > 1 else "wrong answer scores"
        return f"ok, as recorded ({zeros} recorded {answers} 0.0)"
    return "ok, as recorded"


def main() -> int:
    print(
        "ngym demo: ngym rollout --model replay (offline replay model) through each environment over HTTP", flush=True
    )
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ngym-demo-") as tmp:
        for name in installed_names():
            environment = installed(name)
            examples = environment.data_file("example_rollouts.jsonl")
            if examples is None:
                print(f"{name:28s} no example rollouts, skipped", flush=True)
                continue
            try:
                ok, line = demo_one(name, examples, environment.config, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - one environment's trouble is reported, the rest still run
                ok, line = False, f"{name}: FAILED: {exc!r}"
            failures += not ok
            print(line, flush=True)
    print("all recorded rewards reproduced" if not failures else f"{failures} environment(s) did not reproduce")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
