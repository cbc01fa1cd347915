"""The serving process as a fork template (ngym/server/hosting/fork_template.py): warmed libraries, lowered children.

Each case runs in a fresh interpreter: warming, ``gc.freeze`` and at-fork hooks change the whole process, and the
test process must not carry them into later tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("math_verify")


def run_python(code: str, **env: str) -> dict:
    import os

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


DFA_STATES = """
def dfa_states():
    from latex2sympy2_extended.antlr_parser import PSParser
    return sum(len(d._states) for d in PSParser.decisionsToDFA)
"""

# A verify child as math_with_judge makes one: forked per call, the answer sent back over a pipe.
FORKED_VERIFY = """
import multiprocessing as mp
def child(gold, pred, conn):
    from math_verify import parse, verify
    conn.send((bool(verify(parse(gold), parse(pred))), __import__("os").nice(0), dfa_states()))
def forked(gold, pred):
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=child, args=(gold, pred, send))
    process.start()
    result = recv.recv()
    process.join()
    return result
"""

PAIRS = [
    ("\\\\boxed{\\\\frac{1}{2}}", "so \\\\boxed{0.5}"),
    ("\\\\boxed{\\\\sqrt{2}}", "\\\\boxed{2^{1/2}}"),
    ("\\\\boxed{-3}", "\\\\boxed{-4}"),
    ("\\\\boxed{(0,1]}", "\\\\boxed{(0,1]}"),
]


def test_forked_children_start_with_the_parser_built_and_score_the_same() -> None:
    code = (
        DFA_STATES
        + FORKED_VERIFY
        + f"""
import math_verify, os
pairs = {PAIRS!r}
cold = [forked(g, p) for g, p in pairs]
from ngym.server.hosting.fork_template import prepare_fork_template
warmed = prepare_fork_template()
template_states = dfa_states()
warm = [forked(g, p) for g, p in pairs]
print(json.dumps({{"warmed": warmed, "template_states": template_states, "cold": cold, "warm": warm,
                   "own_nice": os.nice(0)}}))
"""
    )
    result = run_python("import json\n" + code, NGYM_FORK_CHILD_NICE="3")
    assert result["warmed"] == ["math_verify"]
    assert result["template_states"] > 0  # the server itself now holds the DFA its children inherit
    # the same verdicts from children of a cold and of a warm server (the DFA is a memo, not a rule)
    assert [r[0] for r in result["cold"]] == [r[0] for r in result["warm"]] == [True, True, False, True]
    assert all(r[2] >= result["template_states"] for r in result["warm"])
    # children forked before the template was prepared run at the server's level, those after 3 lower
    assert {r[1] for r in result["cold"]} == {result["own_nice"]}
    assert {r[1] for r in result["warm"]} == {result["own_nice"] + 3}


def test_a_grandchild_is_not_lowered_twice_and_zero_turns_lowering_off() -> None:
    code = """
import json, os
from ngym.server.hosting.fork_template import prepare_fork_template
prepare_fork_template()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    child = os.nice(0)
    inner = os.fork()
    if inner == 0:
        os.write(write, json.dumps([child, os.nice(0)]).encode())
        os._exit(0)
    os.waitpid(inner, 0)
    os._exit(0)
os.waitpid(pid, 0)
child, grandchild = json.loads(os.read(read, 100))
print(json.dumps({"own": os.nice(0), "child": child, "grandchild": grandchild}))
"""
    lowered = run_python(code, NGYM_FORK_CHILD_NICE="4")
    assert lowered["child"] == lowered["grandchild"] == lowered["own"] + 4
    same = run_python(code, NGYM_FORK_CHILD_NICE="0")
    assert same["child"] == same["grandchild"] == same["own"]


def test_unused_libraries_are_not_imported_and_the_switch_turns_it_all_off() -> None:
    code = """
import gc, json, sys
from ngym.server.hosting.fork_template import prepare_fork_template
warmed = prepare_fork_template()
print(json.dumps({"warmed": warmed, "imported": "math_verify" in sys.modules, "frozen": gc.get_freeze_count()}))
"""
    plain = run_python(code)
    assert plain["warmed"] == [] and plain["imported"] is False and plain["frozen"] > 0
    default = run_python(
        "import os\nfrom ngym.server.hosting.fork_template import prepare_fork_template\nprepare_fork_template()\n"
        "own = os.nice(0)\npid = os.fork()\nif pid == 0: os._exit(os.nice(0) - own)\n"
        "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"
    )
    assert default == 0  # children are lowered only when NGYM_FORK_CHILD_NICE asks
    off = run_python("import math_verify\n" + code, NGYM_FORK_WARMUP="0")
    assert off == {"warmed": [], "imported": True, "frozen": 0}


def test_a_failing_warmer_is_logged_and_serving_goes_on() -> None:
    code = """
import json, logging, sys, types
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
sys.modules["broken_lib"] = types.ModuleType("broken_lib")
from ngym.server.hosting import fork_template
def broken() -> None:
    raise RuntimeError("no parser today")
fork_template.WARMERS["broken_lib"] = broken
print(json.dumps({"warmed": fork_template.prepare_fork_template()}))
"""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "fork warm-up of broken_lib failed, skipped: RuntimeError('no parser today')" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"warmed": []}


def test_scipy_subpackages_are_imported_only_for_an_environment_that_imported_scipy() -> None:
    code = """
import json, sys
from ngym.server.hosting.fork_template import prepare_fork_template
warmed = prepare_fork_template()
loaded = {name: f"scipy.{name}" in sys.modules for name in ("optimize", "stats")}
print(json.dumps({"warmed": warmed, **loaded}))
"""
    pytest.importorskip("scipy")
    assert run_python("import scipy\n" + code) == {"warmed": ["scipy"], "optimize": True, "stats": True}
    assert run_python(code) == {"warmed": [], "optimize": False, "stats": False}


MAPS = """\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/python3
00651000-00a52000 rw-p 00000000 00:00 0           [heap]
7f0000000000-7f0000700000 rw-p 00000000 00:00 0
7f0000700000-7f0000b00000 rw-s 00000000 00:01 44  /dev/shm/shared
7f0001000000-7f0001400000 rw-p 00000000 08:02 1   /usr/lib/libfoo.so
7f0002200000-7f0002400000 rw-p 00000000 00:00 0
7ffc00000000-7ffc00400000 rw-p 00000000 00:00 0   [stack]
"""


def test_only_whole_huge_pages_of_private_anonymous_memory_are_collapsed() -> None:
    from ngym.server.hosting.fork_template import HUGE_PAGE, anonymous_ranges

    ranges = anonymous_ranges(MAPS)
    assert all(end - start == HUGE_PAGE and start % HUGE_PAGE == 0 for start, end in ranges)
    starts = [start for start, _ in ranges]
    # the heap's one whole 2 MiB page; the anonymous 7 MiB mapping's three; the last mapping, exactly one.
    # Not the code, the shared mapping, the library's data or the stack.
    assert starts == [0x800000, 0x7F0000000000, 0x7F0000200000, 0x7F0000400000, 0x7F0002200000]


# Touches 96 MiB, prepares the template, and reports the process's huge pages and what a forked child reads.
HUGE_PAGES = """
import hashlib, json, os
from pathlib import Path
data = bytearray(os.urandom(1 << 20) * 96)
digest = hashlib.sha256(data).hexdigest()
def anon_huge():
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return int(next(line.split()[1] for line in rollup if line.startswith("AnonHugePages:"))) << 10
before = anon_huge()
from ngym.server.hosting import fork_template
collapsed = []  # what each collapse the template asked for got from the kernel
ask = fork_template.collapse_to_huge_pages
fork_template.collapse_to_huge_pages = lambda: collapsed.append(ask()) or collapsed[-1]
fork_template.prepare_fork_template()
after = anon_huge()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, hashlib.sha256(data).hexdigest().encode())
    os._exit(0)
os.waitpid(pid, 0)
setting = fork_template.THP_SETTING
thp = setting.is_file() and "[never]" not in setting.read_text()
# what ngym asks the kernel to collapse: every whole 2 MiB stretch of the process's anonymous memory
asked = sum(end - start for start, end in fork_template.anonymous_ranges(Path("/proc/self/maps").read_text()))
same = os.read(read, 64).decode() == digest
print(json.dumps({"before": before, "after": after, "same": same, "thp": thp, "asked": asked, "collapsed": collapsed}))
"""


def test_the_template_goes_to_huge_pages_when_asked_and_children_read_the_same_memory() -> None:
    asked = run_python(HUGE_PAGES, NGYM_FORK_HUGEPAGES="1")
    assert asked["same"] is True
    if asked["thp"]:
        # a kernel with transparent huge pages is asked for the stretches of the 96 MiB; how many it can give
        # depends on how fragmented the machine's memory is (not the test's to control): none is taken away
        assert asked["asked"] >= 64 << 20 and len(asked["collapsed"]) == 1
        assert asked["after"] - asked["before"] >= asked["collapsed"][0] - (4 << 20)  # what the kernel said it did
    else:
        assert asked["after"] == asked["before"] and asked["collapsed"] == [0]
    # No warmer ran (no math_verify, no scipy): by default a small template is left as it is; 0 turns it off.
    for setting in ({}, {"NGYM_FORK_HUGEPAGES": "0"}):
        left = run_python(HUGE_PAGES, **setting)
        assert left["same"] is True
        assert left["after"] - left["before"] < 32 << 20, setting
        assert left["collapsed"] == [], setting
