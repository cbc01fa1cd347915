"""`ngym list` with 30 installed plugins vs `ngym --help`.

Makes a throwaway venv (``--system-site-packages``, plus a ``.pth`` that adds .venv's site-packages so ngym
and the built-ins are visible), installs 30 dummy environment distributions into it (written the way pip
lays out a wheel install: the package + ``*.dist-info`` with METADATA, entry_points.txt, RECORD), each
of whose modules takes ~20 ms to import (a stand-in for heavy plugin code), then times, as subprocesses:

  ngym --help            (never touches plugins' code)
  ngym list (cold)       (empty inspection cache: every environment is imported once)
  ngym list (warm)       (the usual case: the cache answers, no plugin module is imported)

and prints the medians and the warm-list / --help ratio. Everything is removed afterwards.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.entry, when run as a script
from bench.entry import prepare  # noqa: E402

PLUGINS = 30
RUNS = 7

MODULE = '''"""Dummy environment {i} for the list benchmark."""
import time

from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer

time.sleep(0.02)  # stands in for heavy imports (numpy, a model client, ...)


class Server(SimpleResourcesServer):
    """Dummy {i}: exists to be listed."""

    config: BaseResourcesServerConfig
    domain = Domain.OTHER

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
'''


def install_dummies(site: Path) -> None:
    for i in range(PLUGINS):
        package = f"ngym_bench_dummy_{i}"
        (site / package).mkdir()
        (site / package / "__init__.py").write_text("")
        (site / package / "app.py").write_text(MODULE.format(i=i))
        info = site / f"{package}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ngym-bench-dummy-{i}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(f"[ngym.resources_servers]\nbench_dummy_{i} = {package}.app:Server\n")
        (info / "INSTALLER").write_text("bench\n")
        (info / "RECORD").write_text(
            f"{package}/__init__.py,,\n{package}/app.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
        )


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run: on a loaded machine the CPU time is what ngym costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ngym-bench-list-"))
    try:
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        site = Path(
            subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        parent = sysconfig.get_paths()["purelib"]
        (site / "ngym_parent_venv.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
        install_dummies(site)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NGYM_STRICT_PLUGINS")}
        env["NGYM_CACHE_DIR"] = str(work / "cache")
        ngym = [python, "-m", "ngym.cli"]

        listed = subprocess.run([*ngym, "list"], env=env, check=True, capture_output=True, text=True).stdout
        count = sum(line.startswith("bench_dummy_") for line in listed.splitlines())
        assert count == PLUGINS, listed

        timed([*ngym, "--help"], env)  # warm the OS file cache
        helps = [timed([*ngym, "--help"], env) for _ in range(RUNS)]
        colds = []
        for _ in range(3):
            shutil.rmtree(work / "cache", ignore_errors=True)
            colds.append(timed([*ngym, "list"], env))
        timed([*ngym, "list"], env)  # fill the cache
        warms = [timed([*ngym, "list"], env) for _ in range(RUNS)]

        def med(runs: list[tuple[float, float]], index: int) -> float:
            return statistics.median(run[index] for run in runs)

        total = len([line for line in listed.splitlines()[1:] if line and not line.startswith("  ")])
        print(f"{PLUGINS} dummy plugins installed ({total} environments listed), median of {RUNS} runs")
        print(f"(load average {os.getloadavg()[0]:.1f}; wall ms, and CPU ms: what ngym itself costs):")
        for label, runs in (("ngym --help", helps), ("ngym list (warm)", warms), ("ngym list (cold)", colds)):
            print(f"  {label:18s} {med(runs, 0) * 1000:7.0f} ms wall {med(runs, 1) * 1000:7.0f} ms CPU")
        wall_ratio, cpu_ratio = med(warms, 0) / med(helps, 0), med(warms, 1) / med(helps, 1)
        print(f"  ratio warm list / --help: {wall_ratio:.2f} wall, {cpu_ratio:.2f} CPU")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    prepare(__doc__)
    main()
