"""Prepare the serving process as a warm template for the processes an environment forks.

Many environments verify in a child process made per call (NeMo Gym's ``math_with_judge`` forks one per
``/verify`` with ``multiprocessing.get_context("fork")``, so a wedged SymPy call can be killed). A forked child
starts with a copy of the server's memory: whatever the server has already built, the child gets for free;
whatever it has not, every child builds again and throws away. Profiling math_with_judge (pyinstrument, see
docs/performance.md) shows that most of a verify child's time is ANTLR building its parsing DFA for
``latex2sympy2`` on the first parse (~0.4 s), not the comparison itself (~0.04–0.1 s).

So, once, before the server accepts connections, :func:`prepare_fork_template`

* runs a *warmer* for each well-known library the environment has already imported (only then: it never
  imports a library an environment does not use). A warmer calls the library's pure functions on fixed inputs
  to fill its caches (ANTLR's DFA is a memo: results are unchanged, only the first parse is faster), or imports
  the submodules children import (scipy's: a code sandbox forked per session imports ``scipy.optimize`` in
  each child otherwise, ~1 s of CPU; NeMo Gym's heavier server process happens to have them loaded);
* if asked (``NGYM_FORK_CHILD_NICE=N``, default 0: off), lowers the scheduling priority of the processes the
  server forks by N nice levels, so that when a burst of verify children saturates the cores the event loop that
  answers every other rollout (seeds, tools, ``/health``) is scheduled first. Off by default: on a machine shared
  with other work, lowered children also run later than that work, and an environment whose verify has a
  wall-clock timeout (math_with_judge's 10 s) would time out, and score 0.0, sooner under such load;
* freezes the garbage collector's view of everything made so far (``gc.freeze``), so the collector in a
  child does not touch (and copy) those pages, as CPython's documentation recommends for pre-fork servers;
* when a warmer ran (a template of scipy or math-verify size, for an environment known to fork), collapses the
  process's anonymous memory into transparent huge pages (``madvise(MADV_COLLAPSE)``, Linux 6.1+). ``fork``
  copies one page-table entry per 2 MiB there instead of 512, and a child's exit tears down as many fewer:
  forking a 240 MB math_with_code template and reaping its sandbox took ~30 % less CPU on both sides
  (docs/performance.md). The memory's content is unchanged (the kernel copies it into the huge pages); the
  template's pages the server or a child later writes are split back to 4 KiB pages by the kernel, so the gain
  slowly shrinks over a long run. ``NGYM_FORK_HUGEPAGES=0`` turns it off, ``=1`` applies it to any template.

The environment's code is not touched; it sees only that its children finish sooner.
Set ``NGYM_FORK_WARMUP=0`` to turn all of it off (for a comparison, or to rule it out).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("ngym.server")

WARMUP_ENV = "NGYM_FORK_WARMUP"
CHILD_NICE_ENV = "NGYM_FORK_CHILD_NICE"
DEFAULT_CHILD_NICE = 0
HUGEPAGES_ENV = "NGYM_FORK_HUGEPAGES"

#: LaTeX and plain expressions covering what math answers are made of (integers, fractions, roots, powers,
#: pi, intervals, sets, decimals, negative numbers, text in boxes): each fills part of the parser's DFA.
MATH_SAMPLES: tuple[tuple[str, str], ...] = (
    ("\\boxed{32}", "The answer is \\boxed{32}."),
    ("\\boxed{\\frac{333}{1997}}", "So $p = \\boxed{\\dfrac{333}{1997}}$"),
    ("\\boxed{\\sqrt{2}}", "\\(\\boxed{\\sqrt{2}}\\)"),
    ("\\boxed{-3}", "Hence \\boxed{-4}"),
    ("\\boxed{\\frac{(3-\\sqrt{3})^{4}}{6}}", "\\boxed{\\frac{3+\\sqrt{3}}{6}}"),
    ("\\boxed{2\\pi}", "\\boxed{6.28}"),
    ("\\boxed{(0, 1]}", "\\boxed{[0,1)}"),
    ("\\boxed{\\{1, 2, 3\\}}", "\\boxed{1,2,3}"),
    ("\\boxed{x^2 + 2x + 1}", "\\boxed{(x+1)^2}"),
    ("\\boxed{\\text{(B)}}", "\\boxed{B}"),
    ("\\boxed{0.5}", "\\boxed{\\frac{1}{2}}"),
    ("\\boxed{\\infty}", "\\boxed{\\log_2 8 \\cdot \\sin(\\theta) \\leq 1}"),
)


def _warm_math_verify() -> None:
    """Parse and compare :data:`MATH_SAMPLES` with math-verify's own entry points, with the extraction configs
    environments use (LaTeX gold; expression and LaTeX predictions), so latex2sympy's ANTLR DFA is built."""
    math_verify = sys.modules["math_verify"]  # imported by the environment (the warmer runs only then)
    parse, verify = math_verify.parse, math_verify.verify
    gold_config = (math_verify.LatexExtractionConfig(),)
    pred_config = (math_verify.ExprExtractionConfig(), math_verify.LatexExtractionConfig())

    for gold_text, pred_text in MATH_SAMPLES:
        gold = parse(gold_text, extraction_config=gold_config)
        pred = parse(pred_text, extraction_config=pred_config)
        verify(gold, pred)


#: scipy's subpackages code run in a sandbox reaches for (the ones NeMo Gym's own server process has loaded by
#: the time it serves math_with_code, through its heavier imports: its sandbox children get them for free).
SCIPY_SUBPACKAGES = (
    "constants",
    "fft",
    "integrate",
    "interpolate",
    "linalg",
    "ndimage",
    "optimize",
    "sparse",
    "spatial",
    "special",
    "stats",
)


def _warm_scipy() -> None:
    """Import scipy's common subpackages: ``import scipy`` alone loads none of them, so every sandbox child
    whose code says ``from scipy.optimize import fsolve`` would import it again (~1 s of CPU each)."""
    import importlib

    for name in SCIPY_SUBPACKAGES:
        importlib.import_module(f"scipy.{name}")


#: Library module → its warmer. A warmer runs only when the module is already in ``sys.modules``.
WARMERS: dict[str, Callable[[], None]] = {"math_verify": _warm_math_verify, "scipy": _warm_scipy}


def enabled() -> bool:
    return os.environ.get(WARMUP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def child_niceness() -> int:
    """How much lower forked children run than the server (``NGYM_FORK_CHILD_NICE``; 0 = the same)."""
    value = os.environ.get(CHILD_NICE_ENV, "").strip()
    try:
        return max(0, min(19, int(value))) if value else DEFAULT_CHILD_NICE
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", CHILD_NICE_ENV, value, DEFAULT_CHILD_NICE)
        return DEFAULT_CHILD_NICE


_registered_for: set[int] = set()


def lower_forked_children(increment: int) -> None:
    """Make every process this process forks from now on run ``increment`` nice levels lower (its own children
    only: a child's own forks keep the child's level). Registered once per process."""
    server_pid = os.getpid()
    if increment <= 0 or server_pid in _registered_for:
        return
    _registered_for.add(server_pid)

    def after_in_child() -> None:
        if os.getppid() == server_pid:  # hooks are inherited: a grandchild is not lowered twice
            with contextlib.suppress(OSError):  # never a reason for the child to fail
                os.nice(increment)

    os.register_at_fork(after_in_child=after_in_child)


MADV_COLLAPSE = 25  # linux/mman.h (6.1+): collapse a range into transparent huge pages, synchronously
HUGE_PAGE = 2 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def anonymous_ranges(maps: str) -> list[tuple[int, int]]:
    """The whole 2 MiB-aligned stretches of private writable anonymous memory (the heap, Python's arenas,
    numpy's buffers) in a ``/proc/self/maps`` text; file mappings and the stack are left out."""
    ranges: list[tuple[int, int]] = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[1][:2] != "rw" or fields[1][3] != "p":
            continue
        name = fields[5] if len(fields) > 5 else ""
        if name and name != "[heap]":
            continue
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        start = -(-low // HUGE_PAGE) * HUGE_PAGE
        end = high // HUGE_PAGE * HUGE_PAGE
        ranges.extend((address, address + HUGE_PAGE) for address in range(start, end, HUGE_PAGE))
    return ranges


def collapse_to_huge_pages() -> int:
    """Collapse this process's anonymous memory into transparent huge pages; the bytes collapsed (0 where the
    kernel has no THP, refuses, or this is not Linux). Each 2 MiB stretch is asked for on its own: the kernel
    refuses some (a stretch it cannot back), and one refusal must not leave the rest 4 KiB."""
    if not sys.platform.startswith("linux") or not THP_SETTING.is_file() or "[never]" in THP_SETTING.read_text():
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    collapsed = 0
    for start, end in anonymous_ranges(Path("/proc/self/maps").read_text()):
        if libc.madvise(start, end - start, MADV_COLLAPSE) == 0:
            collapsed += end - start
    return collapsed


def hugepages_wanted(warmed: list[str]) -> bool:
    """``NGYM_FORK_HUGEPAGES``: 0 never, 1 always; unset, when a warmer ran (a large template that forks)."""
    value = os.environ.get(HUGEPAGES_ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    return bool(warmed) or value in ("1", "true", "yes", "on")


def prepare_fork_template() -> list[str]:
    """Warm the imported libraries' caches and freeze the collector's generations; the warmed libraries' names.

    Called once per serving process, after the environment is built and before it serves. A warmer that fails
    is logged and skipped: warming is an optimisation, never a reason not to serve.
    """
    if not enabled():
        return []
    lower_forked_children(child_niceness())
    warmed = []
    for module, warm in WARMERS.items():
        if module not in sys.modules:
            continue
        began = time.perf_counter()
        try:
            warm()
        except BaseException as exc:  # math-verify's timeouts subclass BaseException
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            log.warning("fork warm-up of %s failed, skipped: %r", module, exc)
            continue
        warmed.append(module)
        log.debug("fork warm-up of %s: %.0f ms", module, (time.perf_counter() - began) * 1e3)
    # No gc.collect() first: it costs tens of milliseconds of start-up for every environment, forking or not,
    # and what it would free is start-up garbage of a few objects, kept for the process's life either way.
    gc.freeze()
    if hugepages_wanted(warmed):
        began = time.perf_counter()
        try:
            collapsed = collapse_to_huge_pages()
        except OSError as exc:  # no libc to load, /proc unreadable: an optimisation, never a reason not to serve
            log.warning("fork template: huge pages skipped: %r", exc)
        else:
            log.debug(
                "fork template: %d MiB in huge pages, %.0f ms", collapsed >> 20, (time.perf_counter() - began) * 1e3
            )
    return warmed
