"""Measure NeMo Gym 0.7.0's environments under ngym and under NeMo Gym itself; write the table to docs/.

For each environment of the nemo-gym 0.7.0 wheel (``pip download``-ed into ``~/.cache/ngym/nemo-wheel``):

* **NeMo Gym side**: its own tests, the way ``gym env test`` runs them (pytest from inside its folder,
  pytest-asyncio in auto mode), in a Python 3.13 virtualenv holding nemo-gym 0.7.0 plus the environment's
  requirements; then its recorded example rollouts (``data/example_rollouts.jsonl``) re-verified in-process
  through NeMo's own app (``tools/nemo_replay_inprocess.py``).
* **ngym side**: ``ngym install nemo-gym:<name>`` into a virtualenv holding ngym and ``ngym-nemo-gym``,
  ``ngym test <name>``, then ``ngym run <name>`` and the same rows replayed over HTTP
  (``/seed_session`` + ``/verify``, one cookie session per row); rewards compared with NeMo's.

Virtualenvs are layered so 145 of them stay cheap: a base per side (``nemo-base`` on top of the read-only
NeMo venv, ``ngym-base`` with ngym editable from this checkout), and per environment an overlay made with
``venv --without-pip`` whose ``.pth`` adds the base's site-packages (``site.addsitedir``, so the base's own
``.pth`` files work too); pip sees the base's packages as installed and adds only what is missing.

Resumable and parallel-safe: each environment's result is ``results/<name>.json`` under the work folder
(``~/.cache/ngym/nemo-envs``), stamped per side with the commit and a hash of ngym's, the compat layer's
and these tools' sources; kept on later runs (``--stale`` re-measures those taken with other sources,
``--force`` all); a per-environment lock file makes
two concurrent runs skip each other's environments. ``--table-only`` rewrites the table from the results.

    python tools/nemo_envs.py [--jobs 2] [--only a,b] [--side both|nemo|ngym] [--limit N] [--force]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # tools.*, when run as a script

from ngym_nemo_gym.catalogue import wheel as nemo_wheel  # noqa: E402

from ngym.envtest import pytest_command, read_junit, stage_environment, test_environ  # noqa: E402
from ngym.errors import ConfigError  # noqa: E402
from tools.nemo_envs_base import (  # noqa: E402
    _STOPPING,
    INSTALL_TIMEOUT,
    NOT_A_SERVER,
    REPLAY_BUDGET,
    REPO,
    ROW_TIMEOUT,
    SERVE_TIMEOUT,
    SLOW_FAILURE,
    TABLE,
    TEST_TIMEOUT,
    WORK,
    Env,
    _stop_children,
    base_venv,
    build_nemo_base,
    build_ngym_base,
    classify,
    failure_reason,
    free_port,
    git_commit,
    last_error,
    load_envs,
    locked,
    make_overlay,
    nemo_venv,
    pip_install,
    replay_failure,
    run,
    scripted_judge,
    sources_hash,
    spawn,
)
from tools.nemo_envs_base import verify_payloads as verify_payloads  # noqa: E402 - re-exported: the fleet tests
from tools.nemo_replay_inprocess import is_server_error, replay_row  # noqa: E402


# --------------------------------------------------------------------------------------------- NeMo side
def measure_nemo(item: Env, base: Path) -> dict[str, Any]:
    name, logs = item.name, WORK / "logs" / item.name
    result: dict[str, Any] = {"status": "error", "reason": None}
    if item.install_blocker():
        return {**result, "status": "skipped", "reason": item.install_blocker()}
    python = base / "bin" / "python"
    extra = item.extra_requirements()
    if extra:
        python = make_overlay(WORK / "venvs" / f"nemo-{name}", [base, nemo_venv()])
        ok, error = pip_install(python, extra, logs / "nemo.install.log")
        if not ok:
            return {**result, "status": "install failed", "reason": f"{classify(error, 'nemo')}: {error}"}
    run_root, folder = nemo_run_root(item)
    env = nemo_side_environ(folder, run_root)
    junit = logs / "nemo.junit.xml"
    junit.unlink(missing_ok=True)
    start = time.monotonic()
    log = logs / "nemo.test.log"
    args = pytest_command(["-q", f"--junitxml={junit}"], python=str(python))  # as `gym env test` runs them
    code = run(args, log, TEST_TIMEOUT, cwd=folder, env=env).returncode
    result.update(read_junit(junit).totals(), exit_code=code, seconds=round(time.monotonic() - start, 1))
    result["status"] = "pass" if code == 0 else ("no tests" if code == 5 else "fail")
    if code not in (0, 5):
        result["reason"] = failure_reason(log, "nemo")
    result["replay"] = replay_twice(item, python, folder, run_root, logs)
    return result


def nemo_side_environ(folder: Path, run_root: Path) -> dict[str, str]:
    """What NeMo's interpreter runs an environment's tests and replay in: the staged folder and root on
    ``PYTHONPATH`` as ``gym env test`` puts them, and nothing of this process's own ``PYTHONPATH``."""
    return test_environ(folder, run_root, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


def replay_twice(item: Env, python: Path, folder: Path, run_root: Path, logs: Path) -> dict[str, Any]:
    """NeMo's replay, then again in a new process: ``rewards_again`` holds the second run's rewards. Where the two
    differ, NeMo Gym itself is nondeterministic on those rows (an unseeded random deal, say), and ngym's rewards
    cannot be compared with one NeMo run (``tools/nemo_envs_table.replay_agreement``)."""
    first = replay_nemo(item, python, folder, run_root, logs)
    if not first.get("rewards"):
        return first
    shutil.copy(logs / "nemo.replay.log", logs / "nemo.replay.first.log")
    second = replay_nemo(item, python, folder, run_root, logs)
    return {**first, "rewards_again": second.get("rewards") or None}


def nemo_run_root(item: Env) -> tuple[Path, Path]:
    """A NeMo Gym project root for one run, staged as every environment test run is
    (``ngym.envtest.stage_environment``): this environment and the siblings it imports copied (its tests may
    write next to themselves), every other environment of the wheel's tree and its shared root folders linked;
    (root, environment folder)."""
    run_root = WORK / "runs" / "nemo" / item.name
    shutil.rmtree(run_root, ignore_errors=True)
    run_root.mkdir(parents=True)
    return run_root, stage_environment(item.env.folder, run_root, link_other_environments=True)


def replay_nemo(item: Env, python: Path, folder: Path, run_root: Path, logs: Path) -> dict[str, Any]:
    try:
        rows = item.payloads()
    except ConfigError as exc:
        return {"rewards": [], "reason": f"not replayed: {exc}"}
    if not rows or item.env.target is None:
        return {"rewards": [], "reason": "no example rollouts" if not rows else NOT_A_SERVER}
    rows_file = logs / "rows.jsonl"
    rows_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = logs / "nemo.replay.json"
    out.unlink(missing_ok=True)
    args = [
        str(python),
        str(REPO / "tools" / "nemo_replay_inprocess.py"),
        item.env.target,
        item.instance_name(),
        json.dumps(item.config_fields()),
        str(rows_file),
        str(out),
    ]
    env = nemo_side_environ(folder, run_root)
    with judge_for(item, logs / "nemo.judge.log") as (urls, values):
        config = [str(folder / item.env.config.relative_to(item.env.folder))] if item.env.config else []
        extra = [*config, json.dumps(values)] if config else []
        code = run([*args, json.dumps(urls), *extra], logs / "nemo.replay.log", 300, cwd=folder, env=env).returncode
    if code or not out.is_file():
        return {"rewards": [], "reason": replay_failure("replay failed", logs / "nemo.replay.log", "nemo")}
    return {**json.loads(out.read_text()), "rows": rows_hash(rows)}


# -------------------------------------------------------------------------------------------- ngym side
def measure_ngym(item: Env, base: Path) -> dict[str, Any]:
    name, logs = item.name, WORK / "logs" / item.name
    result: dict[str, Any] = {"status": "error", "reason": None}
    if item.install_blocker():
        return {**result, "status": "skipped", "reason": item.install_blocker()}
    venv = WORK / "venvs" / f"ngym-{name}"
    shutil.rmtree(venv, ignore_errors=True)  # a fresh install every time: the install is what is measured
    python = make_overlay(venv, [base])
    env = {**os.environ, "NGYM_CACHE_DIR": str(venv / "ngym-cache")}
    # every ngym command runs outside this checkout: `python -m` puts the working folder first on sys.path,
    # and this checkout's own resources_servers/ (ngym's built-ins) would shadow the installed environment
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    install = run(
        [str(python), "-m", "ngym.cli", "install", f"nemo-gym:{name}"],
        logs / "ngym.install.log",
        INSTALL_TIMEOUT,
        env=env,
        cwd=logs,
    )
    result["install_seconds"] = round(time.monotonic() - start, 1)
    if install.returncode:
        error = last_error((logs / "ngym.install.log").read_text(errors="replace"))
        return {**result, "status": "install failed", "reason": f"{classify(error)}: {error}"}
    junit = logs / "ngym.junit.xml"
    junit.unlink(missing_ok=True)
    log = logs / "ngym.test.log"
    start = time.monotonic()
    code = run(
        [str(python), "-m", "ngym.cli", "test", name, "-q", f"--junitxml={junit}"], log, TEST_TIMEOUT, env=env, cwd=logs
    ).returncode
    result.update(read_junit(junit).totals(), exit_code=code, seconds=round(time.monotonic() - start, 1))
    result["status"] = "pass" if code == 0 else ("no tests" if code == 5 else "fail")
    if code not in (0, 5):
        result["reason"] = failure_reason(log, "ngym")
    result["replay"] = replay_ngym(item, python, env, logs)
    return result


@contextlib.contextmanager
def judge_for(item: Env, log: Path) -> Iterator[tuple[dict[str, str], list[str]]]:
    """A scripted judge for every model server the environment names, and as the policy model its config's
    ``${policy_*}`` read (NeMo Gym users give those in env.yaml): ``({name: url}, ["policy_base_url=...", ...])``,
    both empty when it needs none."""
    refs = sorted(set(item.model_refs()))
    policy = item.policy_values()
    if not refs and not policy:
        yield {}, []
        return
    with scripted_judge(item.judge_text(), log) as url:
        given = {"policy_base_url": f"{url}/v1", "policy_api_key": "scripted", "policy_model_name": "scripted"}
        yield {ref: url for ref in refs}, [f"{key}={given[key]}" for key in policy]


def replay_ngym(item: Env, python: Path, env: dict[str, str], logs: Path) -> dict[str, Any]:
    """Serve with ``ngym run`` (a scripted judge behind ``--model-url`` when it names model servers) and replay
    every recorded row over HTTP."""
    try:
        rows = item.payloads()
    except ConfigError as exc:
        return {"rewards": [], "reason": f"not replayed: {exc}"}
    if not rows or item.env.target is None:
        return {"rewards": [], "reason": "no example rollouts" if not rows else NOT_A_SERVER}
    with judge_for(item, logs / "ngym.judge.log") as (urls, values):
        model_urls = [arg for name, url in urls.items() for arg in ("--model-url", f"{name}={url}")]
        outcome = _serve_and_replay(item, python, env, logs, rows, [*model_urls, *values])
        return {**outcome, "rows": rows_hash(rows), **({"scripted_policy": True} if values else {})}


def _serve_and_replay(
    item: Env, python: Path, env: dict[str, str], logs: Path, rows: list[dict[str, Any]], model_urls: list[str]
) -> dict[str, Any]:
    import httpx

    port = free_port()
    log_path = logs / "ngym.serve.log"
    with log_path.open("w") as log:
        server = spawn(
            [str(python), "-m", "ngym.cli", "run", item.name, "--port", str(port), *model_urls],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=logs,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVE_TIMEOUT
        while True:
            if server.poll() is not None:
                return {"rewards": [], "reason": replay_failure("serve failed", log_path, "ngym", server.returncode)}
            try:  # any answer means it listens (a Gymnasium-style server has no route at /)
                if httpx.get(base_url + "/", timeout=2).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return {"rewards": [], "reason": f"serve failed: not up after {SERVE_TIMEOUT}s"}
            time.sleep(0.5)
        return replay_rows(base_url, rows)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()


def rows_hash(rows: list[dict[str, Any]]) -> str:
    """What a replay sent (its ``/verify`` bodies), hashed: the table compares rewards only of the same rows."""
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:12]


def replay_again(item: Env, side: str, base: Path) -> dict[str, Any] | None:
    """The side's replay alone, in the virtualenv its last measurement left (None when there is none)."""
    logs = WORK / "logs" / item.name
    logs.mkdir(parents=True, exist_ok=True)
    if side == "nemo":
        python = base / "bin" / "python"
        if item.extra_requirements():  # its requirements, installed when no measurement left them
            python = WORK / "venvs" / f"nemo-{item.name}" / "bin" / "python"
            if not python.exists():
                python = make_overlay(WORK / "venvs" / f"nemo-{item.name}", [base, nemo_venv()])
                if not pip_install(python, item.extra_requirements(), logs / "nemo.install.log")[0]:
                    return None
        run_root, folder = nemo_run_root(item)
        return replay_twice(item, python, folder, run_root, logs)
    venv = WORK / "venvs" / f"ngym-{item.name}"
    if not (venv / "bin" / "python").exists():
        return None
    return replay_ngym(item, venv / "bin" / "python", {**os.environ, "NGYM_CACHE_DIR": str(venv / "ngym-cache")}, logs)


def replay_rows(base_url: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Replay ``rows`` against a served environment, each in its own session (cookie jar).

    A row that times out (``ROW_TIMEOUT``) or fails on the wire scores None with the reason. After a row that
    failed slowly (a timeout, or an error after ``SLOW_FAILURE`` seconds: a batch that never fills, a code sandbox
    that never comes up) the other rows are not sent, since they would wait the same way; nor are rows past the
    ``REPLAY_BUDGET``. Either way the environment's test results stand."""
    import httpx

    results: list[tuple[float | None, str | None]] = []
    deadline = time.monotonic() + REPLAY_BUDGET
    stop = ""
    for row in rows:
        if not stop and time.monotonic() > deadline:
            stop = f"not replayed: the replay's {REPLAY_BUDGET}s budget is spent"
        if stop:
            results.append((None, stop))
            continue
        start = time.monotonic()
        try:
            with httpx.Client(base_url=base_url, timeout=ROW_TIMEOUT) as client:  # its own cookie jar: one session
                results.append(replay_row(client, row))
        except httpx.TimeoutException:
            results.append((None, f"timed out after {ROW_TIMEOUT}s"))
        except httpx.HTTPError as exc:
            results.append((None, f"{type(exc).__name__}: {exc}"[:300]))
        seconds = time.monotonic() - start
        reward, error = results[-1]
        if reward is None and (seconds > SLOW_FAILURE or (error or "").startswith("timed out")):
            stop = f"not replayed: an earlier row failed after {seconds:.0f}s"
    rewards = [reward for reward, _ in results]
    errors = [error for _, error in results]
    answered = [r is not None or ((e or "").startswith("HTTP ") and not is_server_error(e)) for r, e in results]
    if not any(answered):  # no row answered at all: say why, as a failed NeMo replay does
        category = classify(errors[0] or "", "ngym")
        what = "replay failed" if category == "test failure" else f"replay failed ({category})"
        return {"rewards": [], "errors": errors, "reason": f"{what}: {errors[0]}"}
    return {"rewards": rewards, "errors": errors}


# ----------------------------------------------------------------------------------------------- driver
def measure(
    item: Env,
    sides: list[str],
    keys: dict[str, str],
    force: bool,
    bases: dict[str, Path],
    stale: bool = False,
    replay_only: bool = False,
) -> str:
    path = WORK / "results" / f"{item.name}.json"
    with locked(WORK / "locks" / f"{item.name}.lock") as mine:
        if not mine:
            return f"{item.name}: another run holds it, skipped"
        result = json.loads(path.read_text()) if path.is_file() else {}
        rows = item.rows()
        result.update(
            name=item.name,
            domain=item.env.domain,
            has_rollouts=bool(rows),
            recorded=[row.get("reward") for row in rows],
            model_refs=item.model_refs(),
        )
        done = []
        for side in sides:
            previous = result.get(side) or {}
            if replay_only:
                if previous.get("status") in (None, "skipped", "install failed", "error"):
                    continue  # not installable: nothing to replay in
                try:
                    replay = replay_again(item, side, bases[side])
                except Exception as exc:
                    replay = {"rewards": [], "reason": f"harness error: {exc!r}"[:300]}
                if replay is None or _STOPPING:
                    continue
                stamp = {
                    "replay_commit": git_commit(),
                    "replay_when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                result[side] = {**previous, "replay": replay, **stamp}
                done.append(f"{side} replayed")
                continue
            if previous and not force and (previous.get("key") == keys[side] or not stale):
                continue
            measure_side = measure_nemo if side == "nemo" else measure_ngym
            try:
                outcome = measure_side(item, bases[side])
            except Exception as exc:  # one environment's surprise must not stop the other 144
                outcome = {"status": "error", "reason": f"harness error: {exc!r}"[:300]}
            if _STOPPING:  # interrupted mid-way: what it measured is not a result
                return f"{item.name}: interrupted"
            result[side] = {
                **outcome,
                "key": keys[side],
                "commit": git_commit(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            done.append(f"{side} {outcome['status']}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
    return f"{item.name}: {', '.join(done) or 'cached'}"


def reclassify(results_dir: Path) -> None:
    """Failure reasons of failed test runs, recomputed from their logs (after the categories changed)."""
    for path in sorted(results_dir.glob("*.json")):
        result = json.loads(path.read_text())
        for side in ("nemo", "ngym"):
            outcome = result.get(side) or {}
            log = WORK / "logs" / result["name"] / f"{side}.test.log"
            if outcome.get("status") == "fail" and log.is_file():
                outcome["reason"] = failure_reason(log, side)
            install_log = WORK / "logs" / result["name"] / f"{side}.install.log"
            if outcome.get("status") == "install failed" and install_log.is_file():
                text = install_log.read_text(errors="replace")
                outcome["reason"] = f"{classify(text, side)}: {last_error(text)}"
        path.write_text(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="comma-separated environment names")
    parser.add_argument("--side", choices=["both", "nemo", "ngym"], default="both")
    parser.add_argument("--limit", type=int, help="measure at most N environments not yet measured")
    parser.add_argument("--force", action="store_true", help="re-measure even when cached")
    parser.add_argument(
        "--stale", action="store_true", help="re-measure results taken with other sources (default: keep them)"
    )
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="re-run only the replays, in the virtualenvs the last measurement left (its test results kept)",
    )
    parser.add_argument("--table-only", action="store_true", help="only rewrite the table from the results")
    parser.add_argument("--no-table", action="store_true", help="measure only; leave docs/ alone (CI)")
    parser.add_argument("--reclassify", action="store_true", help="recompute failure reasons from the kept logs")
    args = parser.parse_args(argv)
    import signal

    signal.signal(signal.SIGTERM, _stop_children)
    if not args.table_only:
        only = args.only.split(",") if args.only else None
        sides = ["nemo", "ngym"] if args.side == "both" else [args.side]
        keys = {
            "nemo": f"nemo-gym-{nemo_wheel.NEMO_GYM_VERSION}-v3",
            "ngym": sources_hash(REPO / "ngym", REPO / "plugins" / "ngym_nemo_gym", REPO / "tools"),
        }
        envs = load_envs(only)
        if args.limit:

            def pending(e: Env) -> bool:
                path = WORK / "results" / f"{e.name}.json"
                result = json.loads(path.read_text()) if path.is_file() else {}
                return args.force or any(
                    not result.get(s) or (args.stale and result[s].get("key") != keys[s]) for s in sides
                )

            envs = [e for e in envs if pending(e)][: args.limit]
        bases = {}
        if "nemo" in sides:
            bases["nemo"] = base_venv("nemo-base", build_nemo_base, f"overlay of {nemo_venv()}")
        if "ngym" in sides:
            # rebuilt when ngym's or the compat layer's declared dependencies change (code is editable)
            pyprojects = [REPO / "pyproject.toml", REPO / "plugins" / "ngym_nemo_gym" / "pyproject.toml"]
            declared = hashlib.sha256(b"".join(p.read_bytes() for p in pyprojects if p.is_file())).hexdigest()[:12]
            bases["ngym"] = base_venv("ngym-base", build_ngym_base, f"ngym editable from {REPO}, deps {declared}")
        print(f"measuring {len(envs)} environment(s), {args.jobs} at a time, work folder {WORK}", flush=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            running = {
                pool.submit(measure, e, sides, keys, args.force, bases, args.stale, args.replay_only) for e in envs
            }
            while running:  # wake every second: a SIGTERM handler only runs when this thread runs Python
                done, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    print(future.result(), flush=True)
    if args.reclassify:
        reclassify(WORK / "results")
    if not args.no_table:
        from tools.nemo_envs_table import write_table

        write_table(WORK / "results", TABLE)
        print(f"wrote {TABLE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
