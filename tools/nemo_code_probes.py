"""Hostile model code against NeMo Gym's code-executing environments served by ngym (``code_gen``, ``scicode``).

Each probe is one ``/verify`` whose model answer is code that does not solve the task but tries something else:
huge output, an endless loop, a fork bomb, a 6 GB allocation, files written outside, leaving its process early,
reading the grader's expected output from the stack, reading ngym's session secret. The table says, per probe,
the HTTP status, the reward, the seconds it took, whether ``/health`` still answered and the server's resident
memory (the process tree, MB) afterwards. A reward of 1.0 for code that does not solve the task is a wrong reward.

    ngym install nemo-gym:code_gen        # in a Python 3.13 virtualenv holding ngym and ngym-nemo-gym
    NGYM_SESSION_SECRET=planted-secret-0123456789 ngym run code_gen --port 8011 &
    python tools/nemo_code_probes.py code_gen http://127.0.0.1:8011 PATH/TO/code_gen/data --pid SERVER_PID

``scicode`` needs ``test_data_fpath=`` (an empty file is enough for these probes: none of them reaches its data).
Run it where a fork bomb cannot hurt others (a ``pids`` cgroup around the server, as docs/nemo-gym-environments.md
says).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import httpx

SECRET_PLANTED = "planted-secret-0123456789"
OUTSIDE = "/tmp/ngym-probe-written-by-model-code"

#: code_gen: the code's stdout is compared with the expected output of each test (or its function called)
CODE_GEN = {
    "huge_stdout": "import sys\nsys.stdout.write('x' * 60_000_000)",
    "infinite_loop": "while True: pass",
    "fork_bomb": "import os\nwhile True:\n    try: os.fork()\n    except Exception: pass",
    "memory_6gb": "x = bytearray(6 * 1024**3)\nprint(len(x))",
    "write_outside": f"open({OUTSIDE!r}, 'w').write('x')\nprint(1)",
    "exit_early": "import os\nos._exit(0)",
    "ignore_alarm": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: pass",
    "read_expected_from_frames": (
        "import sys\nf, outs = sys._getframe(), None\n"
        "while f is not None and outs is None:\n"
        "    outs = next((f.f_locals[k] for k in ('all_outputs', 'outputs') if k in f.f_locals), None)\n"
        "    f = f.f_back\n"
        "print(outs if isinstance(outs, str) else (outs[0] if outs else ''))"
    ),
    "read_session_secret": (
        "import os\nif os.environ.get('NGYM_SESSION_SECRET'):\n"
        "    open('/tmp/ngym-probe-secret-seen', 'w').write(os.environ['NGYM_SESSION_SECRET'])\nprint(1)"
    ),
}
#: scicode: each sub-step's program passes when it exits 0
SCICODE = {
    "honest_wrong": "def f():\n    return 0\n",
    "exit_early": "import os\nos._exit(0)\n",
    "huge_stdout": "import sys\nsys.stdout.write('x' * 50_000_000)\nraise SystemExit(3)\n",
    "infinite_loop": "while True: pass\n",
    "read_session_secret": (
        "import os\nif os.environ.get('NGYM_SESSION_SECRET'):\n"
        "    open('/tmp/ngym-probe-secret-seen', 'w').write(os.environ['NGYM_SESSION_SECRET'])\nraise SystemExit(3)\n"
    ),
}


def rss_mb(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, MB."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS"):
                    total += int(line.split()[1])
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except OSError:
            continue
    return total // 1024


def response_with(text: str) -> dict[str, Any]:
    message = {"type": "output_text", "text": text, "annotations": []}
    output = [{"type": "message", "role": "assistant", "id": "m1", "status": "completed", "content": [message]}]
    return {"id": "r", "created_at": 0, "model": "m", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "output": output}  # fmt: skip


def bodies(env: str, data: Path) -> dict[str, dict[str, Any]]:
    row = json.loads((data / "example.jsonl").read_text().splitlines()[0])
    if env == "scicode":
        recorded = json.loads((data / "example_rollouts.jsonl").read_text().splitlines()[0])
        steps = [f"{row['problem_id']}.{i + 1}" for i in range(len(row["sub_steps"]))]
        return {
            name: {**row, "response": recorded["response"], "solutions": dict.fromkeys(steps, code)}
            for name, code in SCICODE.items()
        }
    return {name: {**row, "response": response_with(f"```python\n{code}\n```")} for name, code in CODE_GEN.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", choices=["code_gen", "scicode"])
    parser.add_argument("url")
    parser.add_argument("data", type=Path, help="the environment's data/ folder (example.jsonl and its rollouts)")
    parser.add_argument("--pid", type=int, default=0, help="the server's process, for its memory")
    args = parser.parse_args()
    print(f"| {args.env} probe | status | reward | seconds | /health | server RSS MB |")
    print("|---|---|---|---|---|---|")
    with httpx.Client(base_url=args.url, timeout=900) as http:
        for name, body in bodies(args.env, args.data).items():
            started = time.monotonic()
            try:
                answer = http.post("/verify", json=body)
                status: int | str = answer.status_code
                reward = answer.json().get("reward") if answer.status_code == 200 else "-"
            except httpx.HTTPError as exc:
                status, reward = type(exc).__name__, "-"
            seconds = time.monotonic() - started
            health = http.get("/health").status_code
            memory = rss_mb(args.pid) if args.pid else "-"
            print(f"| {name} | {status} | {reward} | {seconds:.1f} | {health} | {memory} |", flush=True)
    print(f"\nfile written outside by model code: {Path(OUTSIDE).exists()}")
    print(f"session secret seen by model code: {Path('/tmp/ngym-probe-secret-seen').exists()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
