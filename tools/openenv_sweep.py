"""Every environment folder of an OpenEnv checkout through ngym, as a user would: ``make openenv-sweep``.

    python tools/openenv_sweep.py --envs /path/to/OpenEnv/envs [--only echo_env,grid_world_env] [--work DIR]
    python tools/openenv_sweep.py --git /path/to/OpenEnv.git        # a (bare) clone: its HEAD's envs/ is used

For each folder with an ``openenv.yaml``: ``ngym install openenv:<folder> --domain D`` (D from
``ngym_openenv.catalog.FOLDER_DOMAINS``, else ``other``), ``ngym validate NAME --json``, ``ngym rollout NAME
--model replay --json`` (no ``--data``: the example data install wrote), and the side by side of
``ngym_openenv.side_by_side`` (OpenEnv's own client against its own server and ngym, the same actions).
Everything runs in a throwaway virtualenv under ``--work`` that sees this
interpreter's packages (nothing lands in .venv); the environments' own virtualenvs are ngym's usual cache
(``~/.cache/ngym/openenv-venvs``), so a second run is quicker. Results are kept per folder in
``<work>/results/<folder>.json`` (delete one to redo it) and printed as the markdown table of
docs/coming-from-openenv.md. Outside CI: each environment is a virtualenv of its own (minutes each).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from ngym_openenv.catalog import FOLDER_DOMAINS

from ngym.config import cache_root

STEP_TIMEOUT = 1800  # seconds for one command (an install makes a virtualenv)


def child_venv(work: Path) -> tuple[str, dict[str, str]]:
    """A virtualenv in ``work/venv`` seeing this interpreter's packages (ngym, the plugins) through a .pth file."""
    venv = work / "venv"
    python = venv / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    Path(purelib, "ngym_parent_venv.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NGYM_STRICT_PLUGINS")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return str(python), env


def envs_from_git(git_dir: Path, into: Path) -> Path:
    """HEAD's ``envs/`` of a (bare) clone, written to ``into`` (files the clone lacks, e.g. LFS, are left out)."""
    listing = subprocess.run(
        ["git", "-C", str(git_dir), "ls-tree", "-r", "HEAD", "envs"], check=True, capture_output=True, text=True
    ).stdout
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        blob = subprocess.run(["git", "-C", str(git_dir), "cat-file", "blob", sha], capture_output=True)
        if blob.returncode == 0:
            (into / path).parent.mkdir(parents=True, exist_ok=True)
            (into / path).write_bytes(blob.stdout)
    return into / "envs"


def last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""


def sweep_one(folder: Path, python: str, env: dict[str, str], work: Path) -> dict[str, Any]:
    """install (unless installed) → validate → rollout (no --data) → side by side, for one folder."""
    spec = yaml.safe_load((folder / "openenv.yaml").read_text(encoding="utf-8")) or {}
    name = re.sub(r"[^A-Za-z0-9_]+", "_", str(spec.get("name") or folder.name)).strip("_").lower()
    row: dict[str, Any] = {"folder": folder.name, "name": name, "domain": FOLDER_DOMAINS.get(folder.name, "other")}

    def ngym(*args: str) -> subprocess.CompletedProcess[str]:
        command = [python, "-m", "ngym.cli", *args]
        try:
            return subprocess.run(command, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", f"timed out after {STEP_TIMEOUT} s")

    started = time.monotonic()
    listed = {r["name"] for r in json.loads(ngym("list", "--json").stdout or "[]")}
    if name not in listed:
        done = ngym("install", f"openenv:{folder}", "--domain", row["domain"])
        row["install_s"] = round(time.monotonic() - started)
        if done.returncode:
            row["installed"] = False
            row["reason"] = last_line(done.stderr) or last_line(done.stdout)
            row["traceback"] = "Traceback" in done.stderr
            return row
        row["example"] = next((x for x in done.stdout.splitlines() if "example rollout" in x or "no example" in x), "")
    row["installed"] = True
    validated = ngym("validate", name, "--json")
    try:
        checks = json.loads(validated.stdout)["checks"]
        row["validate"] = validated.returncode == 0
        row["validate_failed"] = [f"{c['name']}: {c.get('detail', '')}"[:300] for c in checks if not c["ok"]]
    except (ValueError, KeyError):
        row["validate"], row["validate_failed"] = False, [last_line(validated.stderr)]
    out = work / "rollouts" / f"{name}.jsonl"
    out.parent.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    rolled = ngym("rollout", name, "--model", "replay", "--output", str(out), "--json")
    try:
        summary = json.loads(rolled.stdout)
        row["rollout"] = {k: summary[k] for k in ("done", "mean_reward", "masked")} | {"failed": len(summary["failed"])}
    except (ValueError, KeyError):
        row["rollout"] = {"error": last_line(rolled.stderr)}
    compared = subprocess.run(
        [
            python,
            "-c",
            "import json, sys; from ngym.targets import resolve; from ngym_openenv.side_by_side import compare; "
            "print('SBS ' + json.dumps(compare(resolve(sys.argv[1]).server_class).as_dict(), default=str))",
            name,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    line = next((x for x in compared.stdout.splitlines() if x.startswith("SBS ")), None)
    row["side_by_side"] = json.loads(line[4:]) if line else {"problem": last_line(compared.stderr), "same": False}
    row["seconds"] = round(time.monotonic() - started)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of docs/coming-from-openenv.md."""
    lines = [
        "| folder | installed | validate | rollout (no --data, replay) | side by side (OpenEnv's client vs ngym) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if not row.get("installed"):
            lines.append(f"| `{row['folder']}` | no: {row.get('reason', '')} | – | – | – |")
            continue
        validate = "ok" if row.get("validate") else "fails: " + "; ".join(row.get("validate_failed") or [])
        rollout = row.get("rollout") or {}
        rolled = rollout.get(
            "error"
        ) or f"{rollout.get('done')} done, {rollout.get('failed')} failed, reward {rollout.get('mean_reward')}" + (
            f", {rollout['masked']} masked" if rollout.get("masked") else ""
        )
        sbs = row.get("side_by_side") or {}
        if sbs.get("problem"):
            side = f"not compared: {sbs['problem']}"
        elif not sbs.get("deterministic", True):
            side = "OpenEnv's own two episodes differ (reset ignores the seed): not comparable step by step"
        else:
            n = len(sbs.get("openenv") or [])
            side = f"{sbs.get('equal')}/{n} equal, verify {sbs.get('verify_reward')}"
            side += f" (expected {sbs.get('expected_reward')})"
            side += f"; client {sbs.get('client', '').split(':')[-1]}"
            if sbs.get("fallback"):
                side += f" (own client not used: {sbs['fallback']})"
        lines.append(f"| `{row['folder']}` | yes ({row['name']}, {row['domain']}) | {validate} | {rolled} | {side} |")
    return "\n".join(lines).replace("\n| ", "\n| ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=Path, help="a folder of OpenEnv environment folders (a checkout's envs/)")
    parser.add_argument("--git", type=Path, help="a clone of OpenEnv (bare is fine): its HEAD's envs/")
    parser.add_argument("--only", default="", help="comma-separated folder names")
    parser.add_argument("--work", type=Path, default=cache_root() / "openenv-sweep")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    envs = args.envs or os.environ.get("NGYM_OPENENV_ENVS")
    if envs is None and args.git is None:
        sys.exit("openenv-sweep: give --envs /path/to/OpenEnv/envs or --git /path/to/OpenEnv (a clone)")
    folder = Path(envs) if envs else envs_from_git(args.git, Path(tempfile.mkdtemp(prefix="openenv-", dir=args.work)))
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    folders = sorted(p for p in folder.iterdir() if (p / "openenv.yaml").is_file() and (not only or p.name in only))
    if not folders:
        sys.exit(f"openenv-sweep: no folder with an openenv.yaml in {folder}")
    python, env = child_venv(args.work)
    results = args.work / "results"
    results.mkdir(exist_ok=True)
    rows = []
    for env_folder in folders:
        cached = results / f"{env_folder.name}.json"
        if cached.is_file():
            rows.append(json.loads(cached.read_text()))
            continue
        print(f"openenv-sweep: {env_folder.name} ...", file=sys.stderr, flush=True)
        row = sweep_one(env_folder, python, env, args.work)
        cached.write_text(json.dumps(row, indent=2, default=str) + "\n")
        rows.append(row)
    print(table(rows))


if __name__ == "__main__":
    main()
