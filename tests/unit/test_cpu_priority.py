"""CPU priorities of the serving process and its children (ngym/server/hosting/cpu_priority.py).

Each case runs in a fresh interpreter: nice values and at-fork hooks belong to the whole process, and the test
process must not carry them into later tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

# Reports the level of the process and of a multiprocessing child and grandchild forked after the call.
PROBE = """
import json, multiprocessing as mp, os
from ngym.server.hosting import cpu_priority

def grandchild(conn):
    conn.send(os.getpriority(os.PRIO_PROCESS, 0))

def child(conn):
    recv, send = mp.Pipe(duplex=False)
    p = mp.get_context("fork").Process(target=grandchild, args=(send,))
    p.start()
    conn.send((os.getpriority(os.PRIO_PROCESS, 0), recv.recv()))
    p.join()

def forked_levels():
    recv, send = mp.Pipe(duplex=False)
    p = mp.get_context("fork").Process(target=child, args=(send,))
    p.start()
    levels = recv.recv()
    p.join()
    return levels

base = os.getpriority(os.PRIO_PROCESS, 0)
"""


def run_python(code: str, env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("NGYM_SERVER_PRIORITY", "RAY_worker_niceness")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_priority_asked_leaves_the_process_and_ray_alone() -> None:
    code = (
        "import json, os\nfrom ngym.server.hosting.cpu_priority import apply_cpu_priorities\napply_cpu_priorities()\n"
    )
    code += "print(json.dumps({'ray': os.environ.get('RAY_worker_niceness'), 'nice': os.nice(0)}))"
    assert run_python(code, {}) == {"ray": None, "nice": os.nice(0)}


def test_raised_server_forks_children_at_its_former_level() -> None:
    result = run_python(
        PROBE
        + """
cpu_priority.apply_cpu_priorities()
print(json.dumps({"base": base, "server": os.getpriority(os.PRIO_PROCESS, 0), "forked": forked_levels(),
                  "root": os.geteuid() == 0}))
""",
        {"NGYM_SERVER_PRIORITY": "3"},
    )
    base = result["base"]
    if result["root"]:  # permitted (an unprivileged process may not lower its nice value: RLIMIT_NICE is 0)
        assert result["server"] == base - 3
        # The child and the grandchild run where they would have run without the raise.
        assert result["forked"] == [base, base]
    else:
        assert result["server"] == base


def test_raise_not_permitted_is_a_log_line_and_no_change() -> None:
    # Root may always raise: drop to an unprivileged user first (everything imported before: the interpreter's
    # files may not be readable by that user), as a server not run by root would be.
    drop = "os.setgid(65534)\nos.setuid(65534)\n" if os.geteuid() == 0 else ""
    result = run_python(
        PROBE
        + "import logging, multiprocessing.connection, multiprocessing.popen_fork, multiprocessing.synchronize\n"
        + drop
        + """
logging.basicConfig(level=logging.INFO)
raised = cpu_priority.raise_server(4)
print(json.dumps({"raised": raised, "base": base, "server": os.getpriority(os.PRIO_PROCESS, 0),
                  "forked": forked_levels()}))
""",
        {},
    )
    assert result["raised"] is False
    assert result["server"] == result["base"]
    assert result["forked"] == [result["base"], result["base"]]


def test_a_bad_value_leaves_the_priority_alone() -> None:
    result = run_python(
        "import json, os\nfrom ngym.server.hosting.cpu_priority import apply_cpu_priorities, server_priority\n"
        "apply_cpu_priorities()\nprint(json.dumps({'level': server_priority(), 'nice': os.nice(0)}))",
        {"NGYM_SERVER_PRIORITY": "high"},
    )
    assert result == {"level": 0, "nice": os.nice(0)}
