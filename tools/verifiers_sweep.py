"""Sweep verifiers environments through ngym, side by side with verifiers' own scoring (``make verifiers-sweep``).

For each source (a folder with a pyproject.toml, a ``.py`` module, or a distribution on the package index):

1. ``ngym install verifiers:SOURCE`` (records in a scratch folder; when the package declares no domain, again with
   ``--domain`` FALLBACK, and the table says so);
2. ``ngym validate NAME`` on the example data the install made;
3. side by side on the same rollouts (each of the first N tasks answered with its reference answer, no tool
   calls): verifiers itself (``vf-eval`` with a scripted model for a 0.4 taskset; ``Environment.evaluate`` with it
   for a <= 0.3 ``load_environment``) and ngym (``/seed_session`` + ``/verify`` on the installed server); every
   reward function's score and the reward must be equal.

Prints a Markdown table (environment, installed?, validate, side by side, reason) and writes ``sweep.jsonl``
into ``--out``. Outside CI: each distinct requirement set is a venv (minutes the first time, cached after).

    python tools/verifiers_sweep.py [--n 3] [--domain-fallback agent] [--out DIR] SOURCE...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ngym.testing.scripted_model import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]

DRIVER = ROOT / "tests" / "conformance" / "verifiers_driver.py"
WORKER_DIR = ROOT / "plugins" / "ngym_verifiers" / "ngym_verifiers"
#: vf-eval with datasets.load_dataset reading the environment's -o dataset: files (the worker's own shim)
VF_EVAL_WITH_FILES = (
    f"import json, sys; sys.path.insert(0, {str(WORKER_DIR)!r}); import worker;"
    " worker.local_datasets(json.loads(sys.argv.pop(1))); sys.argv[0] = 'vf-eval';"
    " from verifiers.v1.cli.eval.main import main; sys.exit(main())"
)


def ngym(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], capture_output=True, text=True, timeout=timeout, env=os.environ
    )


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def install(source: str, fallback: str) -> tuple[dict[str, Any], str | None]:
    """Install (``SOURCE#KEY=VALUE#...`` adds ``-o KEY=VALUE``s); (result, the environment's name or None)."""
    started = time.monotonic()
    source, *pairs = source.split("#")
    options = [arg for pair in pairs for arg in ("-o", pair)]
    done = ngym("install", f"verifiers:{source}", *options)
    asked = "--domain" in done.stdout + done.stderr and done.returncode != 0 and "declares no domain" in done.stderr
    if asked:
        done = ngym("install", f"verifiers:{source}", "--domain", fallback, *options)
    out = done.stdout + done.stderr
    result: dict[str, Any] = {
        "source": source,
        "installed": done.returncode == 0,
        "domain_asked": asked,
        "install_seconds": round(time.monotonic() - started, 1),
        "install_last": last_line(out),
    }
    match = re.search(r"ngym: installed (\w+) \(", out)
    return result, match.group(1) if match else None


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


async def ngym_side(name: str, n: int, script: dict[str, list[Any]] | None) -> dict[str, dict[str, Any]]:
    """The first n tasks through the installed server: with ``script`` ({prompt words: turns}, a turn being a final
    text or a list of [tool, arguments] calls), each played call by call through the tool routes; without, each
    task's reference answer (the recorded example rollouts). Keyed by the script's key (or the prompt's text)."""
    from ngym_verifiers import examples

    from ngym.plugins.registry import reset_registry
    from ngym.testing import RolloutClient, app_for, serve_in_process

    reset_registry()
    rollouts = examples.folder_of(name) / "data" / "example_rollouts.jsonl"
    recorded = [json.loads(line) for line in rollouts.read_text().splitlines()][:n] if rollouts.is_file() else []
    results: dict[str, dict[str, Any]] = {}
    async with serve_in_process(app_for(name)) as http:
        for index in range(n if script else len(recorded)):
            client = RolloutClient(http)
            seed = {"idx": index} if script else recorded[index]["verifiers"]
            seeded = await client.call("/seed_session", {"verifiers": seed})
            prompt = " ".join(text_of(m.get("content")) for m in seeded["prompt"])
            if script:
                key = next((k for k in script if k in prompt), None)
                if key is None:
                    raise RuntimeError(f"no script for task {index}: {prompt[:120]!r}")
                output, tool_outputs = await play(client, script[key])
                response: dict[str, Any] = {
                    "id": "r", "created_at": 0.0, "model": "scripted", "object": "response", "output": output,
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                }  # fmt: skip
            else:
                key, response, tool_outputs = prompt_key(seeded["prompt"]), recorded[index]["response"], []
            verified = await client.call(
                "/verify", {"responses_create_params": {"input": []}, "response": response, "verifiers": seed}
            )
            answer = text_of(response["output"][-1].get("content")) if response["output"] else ""
            results[key] = {"answer": answer, "verify": verified, "tool_outputs": tool_outputs}
    return results


async def play(client: Any, turns: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """A script's turns as Responses output items, each tool call made through the server's tool route."""
    output: list[dict[str, Any]] = []
    tool_outputs: list[str] = []
    for turn_index, turn in enumerate(turns):
        if isinstance(turn, str):
            output.append({"type": "message", "id": f"msg_{turn_index}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": turn, "annotations": []}]})  # fmt: skip
            continue
        answers = []
        for call_index, (tool, arguments) in enumerate(turn):
            call_id = f"call_{turn_index}_{call_index}"
            answer = await client.call(f"/{tool}", arguments)
            tool_outputs.append(answer["output"])
            output.append({"type": "function_call", "name": tool, "arguments": json.dumps(arguments),
                           "call_id": call_id, "id": f"fc_{call_id}", "status": "completed"})  # fmt: skip
            answers.append({"type": "function_call_output", "call_id": call_id, "output": answer["output"]})
        output.extend(answers)
    return output, tool_outputs


def prompt_key(messages: list[dict[str, Any]]) -> str:
    """The last user message's text: what tells the scripted model which task it is answering."""
    users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    return (users[-1] if users else " ".join(text_of(m.get("content")) for m in messages)).strip()[:400]


def verifiers_side(record: Any, scripts: dict[str, list[Any]], n: int, work: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "NGYM_SCRIPTED_KEY": "x"}
    with ScriptedModel(scripts) as model:
        if record.api == "legacy":
            done = subprocess.run(
                [record.python, str(DRIVER), "legacy", record.module, model.base_url, str(n)],
                capture_output=True, text=True, timeout=1200, env=env,
            )  # fmt: skip
            if done.returncode:
                raise RuntimeError(last_line(done.stderr))
            return list(json.loads(done.stdout.strip().splitlines()[-1]))
        vf_eval = [str(Path(record.python).with_name("vf-eval"))]
        if record.datasets:  # verifiers reads the same local files as ngym's worker does (-o dataset:NAME=FILE)
            vf_eval = [record.python, "-c", VF_EVAL_WITH_FILES, json.dumps(record.datasets)]
        done = subprocess.run(
            [*vf_eval, record.module, "--model", "scripted", "--client.base-url", model.base_url,
             "--client.api-key-var", "NGYM_SCRIPTED_KEY", "-n", str(n), "-c", "1", "--push", "false",
             "--output-dir", str(work), "--rich", "None", "--env.agent.runtime.type", "subprocess"],
            capture_output=True, text=True, timeout=1800, env=env,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(last_line(done.stderr))
    traces = next(work.glob("*/traces.jsonl"))
    done = subprocess.run([record.python, str(DRIVER), "v1", str(traces)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(last_line(done.stderr))
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def side_by_side(name: str, n: int, script: dict[str, list[Any]] | None) -> dict[str, Any]:
    from ngym_verifiers import records

    record = records.read(name)
    ours = asyncio.run(ngym_side(name, n, script))
    if not ours:
        return {"side_by_side": "no example rollouts to compare"}
    scripts: dict[str, list[Any]] = (
        {k: script[k] for k in ours} if script else {k: [r["answer"]] for k, r in ours.items()}
    )
    with tempfile.TemporaryDirectory(prefix="vf-sweep-") as work:
        try:
            theirs = verifiers_side(record, scripts, len(ours), Path(work))
        except Exception as exc:  # verifiers' own run failed: reported, not compared
            return {"side_by_side": f"verifiers' own run failed: {exc}"[:400]}
    equal, functions, calls, differences = 0, 0, 0, []
    for row in theirs:
        key = next((k for k in ours if k in row["prompt"]), None)
        if key is None:
            differences.append(f"verifiers scored a task ngym did not play: {row['prompt'][:80]!r}")
            continue
        mine = ours[key]["verify"]
        if row.get("errors") or row.get("error"):
            differences.append(f"verifiers' rollout errored: {row.get('errors') or row.get('error')}"[:200])
            continue
        scores = {k: v for k, v in row["rewards"].items() if v is not None}
        functions += len(scores)
        same = all(abs(mine["reward_components"].get(k, float("nan")) - v) < 1e-9 for k, v in scores.items())
        same = same and abs(mine["reward"] - row["reward"]) < 1e-9
        same = same and ours[key]["tool_outputs"] == row["tool_outputs"]
        calls += len(row["tool_outputs"])
        equal += same
        if not same:
            differences.append(
                f"{key[:60]!r}: verifiers {scores} = {row['reward']}, tools {row['tool_outputs']}; ngym"
                f" {mine['reward_components']} = {mine['reward']}, tools {ours[key]['tool_outputs']}"
            )
    what = f"{functions} scores, {calls} tool outputs" if script else f"{functions} scores, reference answers"
    verdict = f"{equal}/{len(theirs)} rollouts equal ({what})" if theirs else "verifiers scored nothing"
    return {
        "side_by_side": verdict,
        "rewards": [row["reward"] for row in theirs],
        "ngym_rewards": [ours[k]["verify"]["reward"] for k in ours],
        "differences": differences,
        "all_equal": bool(theirs) and equal == len(theirs) == len(ours),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--n", type=int, default=3, help="rollouts compared per environment")
    parser.add_argument("--domain-fallback", default="agent")
    parser.add_argument(
        "--scripts",
        type=Path,
        default=Path(__file__).with_name("verifiers_sweep_scripts.json"),
        help="JSON {environment: {prompt words: [turns]}}: scripted rollouts with tool calls for those environments",
    )
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="ngym-vf-sweep-")))
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    os.environ["NGYM_VERIFIERS_RECORDS"] = str(options.out / "records")
    scripts = json.loads(options.scripts.read_text()) if options.scripts.is_file() else {}
    rows = []
    with (options.out / "sweep.jsonl").open("a") as log:
        for source in options.sources:
            result, name = install(source, options.domain_fallback)
            result["name"] = name
            if name:
                validated = ngym("validate", name)
                result["validate"] = (
                    "valid" if validated.returncode == 0 else last_line(validated.stdout + validated.stderr)
                )
                try:
                    script = scripts.get(name)
                    result.update(side_by_side(name, len(script) if script else options.n, script))
                except Exception as exc:  # one environment's failure must not end the sweep
                    result["side_by_side"] = f"ngym side failed: {type(exc).__name__}: {exc}"[:400]
            rows.append(result)
            log.write(json.dumps(result) + "\n")
            log.flush()
            print(json.dumps(result), flush=True)
    print("\n| source | installed | validate | side by side | reason / note |\n|---|---|---|---|---|")
    for r in rows:
        note = "" if r["installed"] else r["install_last"].removeprefix("ngym: error: ")
        print(
            f"| {Path(r['source']).name or r['source']} | {'yes' if r['installed'] else 'no'}"
            f"{' (--domain asked)' if r['domain_asked'] else ''} | {r.get('validate', '—')} |"
            f" {r.get('side_by_side', '—')} | {note} |"
        )


if __name__ == "__main__":
    main()
