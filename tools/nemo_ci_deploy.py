"""nemo-ci's deploy stage: two NeMo Gym environments taken the way a user ships one, in a virtualenv of their own
holding ``ngym[docker,profile]`` and the compat layer:

    ngym install nemo-gym:NAME --replace
    ngym containerize NAME --base-image ngym-base:bookworm --run --json   → image built, healthy, first row's reward
    ngym profile NAME --users 5 --duration 5s --json --data ROWS           → 0 failed rollouts, 0 reward mismatches

One environment answers ``/seed_session`` + ``/verify`` (mcqa), one is Gymnasium-style (``/reset`` + ``/step``:
example_multi_turn_gymnasium), so both of ngym's rollout drivers run against a real container and a real server.
The rewards are NeMo Gym 0.7.0's own for each recorded rollout (``DeployCase.nemo_rewards``). The profile
replays the recorded rows with those rewards put in, so "reward mismatches" counts rollouts that scored
anything else.

The virtualenv is cached under the nemo-ci work folder, keyed by what it installs (the Python, the
``pyproject.toml`` files of ngym and the compat layer: ngym itself is editable, so code changes need no rebuild).
The images are tagged ``ngym-nemo-ci-deploy-NAME:ci`` and removed afterwards.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BASE_IMAGE = "ngym-base:bookworm"
EXTRAS = "docker,profile"


@dataclass(frozen=True)
class DeployCase:
    name: str
    why: str
    #: NeMo Gym 0.7.0's own reward for each line of the environment's ``data/example_rollouts.jsonl``, in order
    #: (each line on the dataset row it was recorded from, as ``ngym.examples.read_example_rollouts`` pairs them)
    nemo_rewards: tuple[float, ...]


#: The rewards were measured with NeMo Gym 0.7.0 itself (its venv, its server class in-process): mcqa through
#: ``tools/nemo_replay_inprocess.py`` (seed → verify); example_multi_turn_gymnasium driven turn by turn through
#: ``/reset`` + ``/step`` with ``ngym.rollout.gymnasium``'s episode, as its gymnasium_agent does (they equal the
#: rewards the agent recorded). mcqa's recorded line 2 says 0.0 where NeMo's server scores 1.0: the server is
#: the reference.
DEPLOY_ENVIRONMENTS = (
    DeployCase("mcqa", "seed_session → verify; metrics hooks; judge-free", (0.0, 1.0, 1.0, 1.0, 1.0)),
    DeployCase("example_multi_turn_gymnasium", "Gymnasium-style /reset + /step, a sibling base class", (1.0,) * 5),
)


def _run(args: list[str], log: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    log.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=log.parent)
    log.write_text(f"$ {' '.join(args)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
    return done


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def deploy_venv(work: Path, python: str) -> Path:
    """The stage's virtualenv, rebuilt only when what it installs changed."""
    compat = REPO / "plugins" / "ngym_nemo_gym"
    what = [python, EXTRAS, (REPO / "pyproject.toml").read_text(), (compat / "pyproject.toml").read_text()]
    key = hashlib.sha256("\0".join(what).encode()).hexdigest()[:12]
    venv = work / "venvs" / f"deploy-{key}"
    marker = venv / ".ready"
    packages = ["-e", f"{REPO}[{EXTRAS}]", "-e", str(compat)]
    spec = " ".join(packages) + "\n"
    log = work / "logs" / "deploy-venv.install.log"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    if marker.exists():
        if marker.read_text() == spec:
            return venv
        # Same dependencies, another checkout (CI clones to a new folder each run): the editable installs
        # still point at the old one, which may be gone. Re-point them; the dependencies stay.
        done = _run([*pip, "--no-deps", *packages], log, 900)
        if done.returncode == 0:
            marker.write_text(spec)
            return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    done = _run([*pip, *packages], log, 900)
    if done.returncode != 0:
        raise RuntimeError(f"deploy venv: pip install failed ({_last_line(done.stderr)}; log {log})")
    marker.write_text(spec)
    return venv


def profile_rows(folder: Path, rewards: list[float], out: Path) -> Path:
    """The environment's recorded rollouts, each with NeMo Gym's reward in place of the recorded one, in
    ``out/example_rollouts.jsonl`` beside a copy of its ``example.jsonl`` (NeMo's recorded lines are verify
    responses: ngym profile completes each from its dataset row there, as from the environment's own folder)."""
    data = folder / "data"
    lines = [json.loads(line) for line in (data / "example_rollouts.jsonl").read_text().splitlines() if line]
    if len(lines) != len(rewards):
        raise RuntimeError(f"{folder.name}: {len(lines)} recorded rollouts, {len(rewards)} expected rewards")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data / "example.jsonl", out / "example.jsonl")
    rows = out / "example_rollouts.jsonl"
    rows.write_text("".join(json.dumps({**line, "reward": r}) + "\n" for line, r in zip(lines, rewards, strict=True)))
    return rows


def _json_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    start = done.stdout.find("{")
    try:
        value = json.loads(done.stdout[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def deploy_one(case: DeployCase, ngym: Path, work: Path, nemo_src: Path) -> dict[str, Any]:
    """install → containerize --run → profile for one environment; ``problems`` empty when all held."""
    logs = work / "logs" / "deploy"
    result: dict[str, Any] = {"name": case.name, "problems": []}
    problems: list[str] = result["problems"]
    done = _run([str(ngym), "install", f"nemo-gym:{case.name}", "--replace"], logs / f"{case.name}.install.log", 900)
    if done.returncode != 0:
        problems.append(f"ngym install: {_last_line(done.stderr or done.stdout)}")
        return result
    rewards = list(case.nemo_rewards)

    tag = f"ngym-nemo-ci-deploy-{case.name.replace('_', '-')}:ci"
    containerize = [str(ngym), "containerize", case.name, "--base-image", BASE_IMAGE, "--tag", tag, "--run", "--json"]
    started = time.monotonic()
    try:
        done = _run(containerize, logs / f"{case.name}.containerize.log", 900)
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)  # whatever happened
    result["containerize_seconds"] = round(time.monotonic() - started, 1)
    built = _json_of(done) if done.returncode == 0 else None
    if built is None:
        problems.append(f"ngym containerize: exit {done.returncode}: {_last_line(done.stderr or done.stdout)}")
    else:
        run = built.get("run") or {}
        rollout = run.get("rollout") or {}
        result.update(
            image_mb=round((built.get("image_size") or 0) / 1e6, 1),
            build_seconds=built.get("build_seconds"),
            health=run.get("health"),
            reward=rollout.get("reward"),
            rollout_path=rollout.get("path"),
        )
        if run.get("health") != "healthy":
            problems.append(f"container health {run.get('health')!r}, not 'healthy'")
        # the smoke rollout replays the first line recorded at 1.0 (else the first): compare with NeMo's for it
        line = int(rollout.get("example_line") or 1)
        if rollout.get("reward") != rewards[line - 1]:
            problems.append(
                f"containerize --run: reward {rollout.get('reward')} != NeMo Gym's {rewards[line - 1]} (line {line})"
            )

    rows = profile_rows(nemo_src / "resources_servers" / case.name, rewards, logs / f"{case.name}.profile-data")
    profile = [str(ngym), "profile", case.name, "--users", "5", "--duration", "5s", "--json", "--data", str(rows)]
    done = _run(profile, logs / f"{case.name}.profile.log", 300)
    measured = _json_of(done)
    if measured is None:
        problems.append(f"ngym profile: exit {done.returncode}: {_last_line(done.stderr or done.stdout)}")
        return result
    finished, failed = measured.get("rollouts_finished", 0), measured.get("rollouts_failed")
    result.update(
        rollouts=finished,
        failed=failed,
        rollouts_per_s=measured.get("rollouts_per_s"),
        mean_reward=measured.get("mean_reward"),
        reward_mismatches=measured.get("reward_mismatches"),
    )
    if done.returncode != 0:
        problems.append(f"ngym profile: exit {done.returncode}: {_last_line(done.stderr)}")
    if not finished or failed != 0:
        problems.append(f"ngym profile: {finished} rollouts finished, {failed} failed")
    if measured.get("reward_mismatches") != 0:
        problems.append(f"ngym profile: {measured.get('reward_mismatches')} rollouts scored other than NeMo Gym")
    return result


def run_deploy_stage(work: Path, python: str, nemo_src: Path) -> list[str]:
    """Every deploy case; one ``deploy NAME: …`` line per problem (empty: all passed). Prints a line per case."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return ["deploy: no Docker engine answers (start it: bash docker/ci-setup.sh)"]
    try:
        venv = deploy_venv(work, python)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        return [f"deploy: {exc}"]
    problems: list[str] = []
    for case in DEPLOY_ENVIRONMENTS:
        result = deploy_one(case, venv / "bin" / "ngym", work, nemo_src)
        shown = {k: v for k, v in result.items() if k not in ("name", "problems")}
        print(f"deploy {case.name}: {json.dumps(shown)}", flush=True)
        problems.extend(f"deploy {case.name}: {problem}" for problem in result["problems"])
    return problems
