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
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ngym_nemo_gym.catalogue import wheel as nemo_wheel  # noqa: E402
from ngym_nemo_gym.catalogue.folder import COMPAT_DISTRIBUTION, DEV_REQUIREMENTS, NemoEnvironment, read_environment  # noqa: E402

from ngym.config import cache_root  # noqa: E402
from ngym.envtest import pytest_command, read_junit, stage_environment, test_environ  # noqa: E402
from ngym.errors import ConfigError  # noqa: E402
from ngym.examples import match_row  # noqa: E402
from tools.nemo_replay_inprocess import is_server_error, replay_row  # noqa: E402

WORK = Path(os.environ.get("NGYM_NEMO_ENVS_DIR") or cache_root() / "nemo-envs")


@functools.cache
def nemo_venv() -> Path:
    """NeMo Gym 0.7.0's own Python 3.13 virtualenv, the one ``make conformance`` uses: made on first use by
    ``tools/nemo_venv.sh`` (``NGYM_NEMO_VENV`` puts it elsewhere), which prints its path."""
    # stdout is the path; stderr (its progress while it makes the venv, ~80 s, or why it cannot) goes to the user
    made = subprocess.run(
        ["bash", str(REPO / "tools" / "nemo_venv.sh")], stdout=subprocess.PIPE, text=True, check=False
    )
    if made.returncode != 0:
        raise SystemExit("nemo_envs: could not make NeMo Gym's virtualenv (tools/nemo_venv.sh said why above)")
    return Path(made.stdout.strip().splitlines()[-1])


PY313 = os.environ.get("NGYM_PY313") or str(Path.home() / ".pyenv" / "versions" / "3.13.0" / "bin" / "python3")
TABLE = REPO / "docs" / "nemo-gym-environments.md"
TEST_TIMEOUT = int(os.environ.get("NGYM_NEMO_TEST_TIMEOUT", "600"))
INSTALL_TIMEOUT = int(os.environ.get("NGYM_NEMO_INSTALL_TIMEOUT", "900"))
#: One replayed row's wait for ``/verify``: longer than the slowest wait an environment's verify does by design on
#: this machine (competitive_coding_challenges waits 240 s for its code sandbox before it gives up).
ROW_TIMEOUT = int(os.environ.get("NGYM_NEMO_ROW_TIMEOUT", "300"))
#: ``ngym run``'s start-up, up to listening: an environment may load data or wait for a service first
#: (competitive_coding_challenges waits up to 240 s for its code sandbox, then refuses to start).
SERVE_TIMEOUT = int(os.environ.get("NGYM_NEMO_SERVE_TIMEOUT", "300"))
#: A row failing after this long stops the replay (the next rows would wait as long for the same reason).
SLOW_FAILURE = 60
#: All rows of one environment's replay together.
REPLAY_BUDGET = int(os.environ.get("NGYM_NEMO_REPLAY_BUDGET", "900"))
TEST_TOOLS = [*DEV_REQUIREMENTS, "httpx>=0.27"]
#: Requirements that mean a GPU machine learning stack (CUDA wheels of several GB): not installed here.
GPU_STACK = {"torch", "torchvision", "torchaudio", "vllm", "flashinfer-python", "unbabel-comet", "tensorflow", "jax"}
#: Lines that are never the reason: pip's index warnings, uvicorn's closing line after a failed start-up (the
#: reason, ``ngym: error: ...``, is the line before it).
NOISE = re.compile(r"^(WARNING: Location |ERROR:\s+Application startup failed)")


# ---------------------------------------------------------------------------------------------- virtualenvs
def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def make_overlay(venv: Path, bases: list[Path]) -> Path:
    """A pip-less 3.13 virtualenv whose site-packages adds the ``bases`` venvs' site-packages after its own."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([PY313, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        lines = [f"import site; site.addsitedir({str(site_packages(b))!r})" for b in bases]
        (site_packages(venv) / "_ngym_overlay.pth").write_text("\n".join(lines) + "\n")
    return venv / "bin" / "python"


def pip_install(python: Path, args: list[str], log: Path) -> tuple[bool, str]:
    """``python -m pip install ARGS``; (ok, the error line) with pip's output kept in ``log``."""
    result = run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args], log, INSTALL_TIMEOUT)
    if result.returncode == 0:
        return True, ""
    return False, last_error(log.read_text(errors="replace"))


def base_venv(name: str, build: Any, spec: str = "") -> Path:
    """A shared base virtualenv, built once under a lock (parallel runs wait for it); rebuilt when ``spec``
    (what it must hold) changed."""
    venv = WORK / "venvs" / name
    marker = venv / ".ready"
    with locked(WORK / "locks" / f"venv-{name}.lock", wait=True):
        if not marker.exists() or marker.read_text() != spec:
            shutil.rmtree(venv, ignore_errors=True)
            build(venv)
            marker.write_text(spec)
    return venv


def build_nemo_base(venv: Path) -> None:
    python = make_overlay(venv, [nemo_venv()])
    ok, error = pip_install(python, TEST_TOOLS, WORK / "logs" / "nemo-base.install.log")
    if not ok:
        raise RuntimeError(f"nemo-base: {error}")


def build_ngym_base(venv: Path) -> None:
    subprocess.run([PY313, "-m", "venv", str(venv)], check=True, capture_output=True)
    compat = REPO / "plugins" / "ngym_nemo_gym"
    packages = ["-e", str(REPO), *(["-e", str(compat)] if (compat / "pyproject.toml").is_file() else [])]
    ok, error = pip_install(venv / "bin" / "python", [*packages, *TEST_TOOLS], WORK / "logs" / "ngym-base.install.log")
    if not ok:
        raise RuntimeError(f"ngym-base: {error}")


# ------------------------------------------------------------------------------------------------- helpers
#: Every child started (each in its own process group), so an interrupted run leaves none behind.
_CHILDREN: set[subprocess.Popen] = set()


_STOPPING: list[bool] = []


def spawn(args: list[str], **kwargs: Any) -> subprocess.Popen:
    if _STOPPING:  # interrupted: the worker threads finish without starting anything new
        raise RuntimeError("interrupted")
    process = subprocess.Popen(args, **kwargs)
    _CHILDREN.add(process)
    return process


def _stop_children(signum: int, frame: Any) -> None:
    _STOPPING.append(True)
    for process in list(_CHILDREN):
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, 9)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def scripted_judge(text: str, log: Path):
    """``tools/nemo_scripted_judge.py`` on a free port, answering ``text``; its base URL."""
    import httpx

    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = spawn(
            [sys.executable, str(REPO / "tools" / "nemo_scripted_judge.py"), str(port), text],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        process.wait()


def run(args: list[str], log: Path, timeout: int, **kwargs: Any) -> subprocess.CompletedProcess:
    """Run a command with its output in ``log``; a timeout is exit code 124 (the process group is killed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = spawn(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            out.write(f"\n[nemo_envs] timed out after {timeout}s\n")
            code = 124
    return subprocess.CompletedProcess(args, code)


def last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not NOISE.match(ln)]
    for line in reversed(lines):
        if line.startswith(("ERROR", "E   ")) or ("Error" in line.split(":")[0] and not line.startswith("note")):
            return line[:300]
    return (lines[-1] if lines else "")[:300]


@contextlib.contextmanager
def locked(path: Path, *, wait: bool = False):
    """An exclusive lock file; without ``wait`` a held lock yields False (another run is on it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def git_commit() -> str:
    """This checkout's commit (``+dirty`` with uncommitted changes): what a result was measured with."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "ngym", "plugins", "tools"], capture_output=True, text=True
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sources_hash(*roots: Path) -> str:
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".toml", ".yaml", ".txt") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: (category, pattern over a failing log): the first match names the reason.
REASONS: list[tuple[str, re.Pattern[str]]] = [
    ("needs GPU", re.compile(r"CUDA|nvidia-smi|No CUDA GPUs|torch\.cuda|cudaGetDevice", re.I)),
    (
        "needs internet",
        re.compile(
            r"Temporary failure in name resolution|Name or service not known|Failed to establish a new connection"
            r"|Could not resolve host|huggingface\.co|github\.com|ConnectTimeout|Network is unreachable",
            re.I,
        ),
    ),
    (
        "missing system tool",
        re.compile(
            r"No such file or directory: '(docker|java|lean|lake|apptainer|enroot|g\+\+|gcc|node|npm|bash|git|"
            r"chromium|sqlite3|[a-z0-9_.-]+)'|docker\.errors|DockerException|command not found",
            re.I,
        ),
    ),
    # a ${...} its config leaves to the user (NeMo Gym refuses to start it alike): cvdp's ${cvdp_sim_image}
    (
        "needs a config value",
        re.compile(r"which no config sets|is unset \('\?\?\?'\)|Interpolation key '[^']+' not found"),
    ),
    (
        "needs credentials",
        re.compile(
            r"\b\w*(api_key|api_token|access_token|secret|_cx)\w*:?\s+Field required"
            r"|API key (is )?(required|missing|not set)|(OPENAI|ANTHROPIC|TAVILY|GOOGLE|HF|SERPER|EXA)_API_KEY"
            r"|Missing credentials|AuthenticationError"
            r"|\b(api_key|api_token|access_token)\.\w+: Input should be a valid",  # a key the config leaves null
            re.I,
        ),
    ),
    # a field its config class requires and its YAML leaves out (terminal_bench_4's `environment`)
    ("needs a config value", re.compile(r"does not validate with its config: .*Field required")),
    ("compat gap", re.compile(r"No module named 'nemo_gym|nemo_gym\.\w+.*(AttributeError|ImportError)", re.I)),
    ("missing package", re.compile(r"ModuleNotFoundError|No matching distribution|ImportError", re.I)),
    # a cache its own prepare step fills from an upstream source (deepswe's data/cache/tasks): not shipped
    # or a file its README says to download first (indian_banking's data/db.json, from Hugging Face)
    (
        "needs prepared data",
        re.compile(
            r"(FileNotFoundError|does not exist).*/data/(cache|runtime)/|not found\..*(Hugging ?Face|download)", re.I
        ),
    ),
    ("file outside the wheel", re.compile(r"FileNotFoundError", re.I)),
]


def classify(text: str, side: str = "ngym") -> str:
    """The reason category of a failure's text (``compat gap`` only for ngym's side: NeMo is NeMo)."""
    for category, pattern in REASONS:
        if category == "compat gap" and side != "ngym":
            continue
        if pattern.search(text):
            return category
    return "test failure"


def failure_reason(log: Path, side: str) -> str:
    """``<category>: <first error line>``: the category from that line when it says, else from the whole log."""
    summary = failure_summary(log)
    category = classify(summary, side)
    if category == "test failure":
        category = classify(log.read_text(errors="replace") if log.is_file() else "", side)
    return f"{category}: {summary}"


def failure_summary(log: Path) -> str:
    """The first ``E`` line of pytest's output (or the last error), for the table."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    first = next((ln.strip() for ln in text.splitlines() if ln.startswith("E   ")), None)
    return (first or last_error(text))[:200]


#: The replay reason of an environment whose entrypoint defines no server (NeMo Gym's own config says so:
#: gymnasium's is "Base class for Gymnasium-style servers. Not a standalone server.").
NOT_A_SERVER = "not a server: a base class other environments build on (its entrypoint defines no server to run)"


def replay_failure(what: str, log: Path, side: str, exit_code: int | None = None) -> str:
    """``<what> (<category>): <error line>``: the category from the error line when it says, else from the whole
    log (a download's retries print the host several lines before the last error); never an empty message."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    line = last_error(text)
    if not line:
        line = f"exited with code {exit_code} and printed nothing" if exit_code is not None else "no output"
    category = classify(line, side)
    if category == "test failure":
        category = classify(text, side)
    return f"{what} ({category}): {line}" if category != "test failure" else f"{what}: {line}"


# --------------------------------------------------------------------------------------------- environments
def verify_payloads(inputs: list[dict[str, Any]], rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``/verify`` bodies NeMo Gym's ``gym eval reverify`` would send: each recorded rollout's ``response`` on
    the dataset row (``data/example.jsonl``) it was recorded from, told apart by the row's identity as ngym's own
    example replay tells it (``ngym.examples.match_row``: the whole row, then ``_ng_task_index``, then a prompt
    only one distinct row has, then the position when the fields agree). A rollout two different rows could equally
    be raises ConfigError: verifying it on another row's task fields would be a silent wrong reward.

    A rollout line alone is a verify *response* (reward, judge evaluations, ...): with no row it is sent without
    what verify added to it. Nulls in ``responses_create_params`` are dropped (NeMo dumps rows ``exclude_none``;
    its strict request model rejects ``parallel_tool_calls: null``). Built here, under ngym's interpreter, and
    handed to both sides: ``nemo_replay_inprocess.py`` runs under NeMo Gym's, where ngym is not installed."""
    position_pairs = len(inputs) == len(rollouts)
    payloads = []
    for index, rollout in enumerate(rollouts):
        where = f"example_rollouts.jsonl:{index + 1}"
        source = match_row(rollout, inputs, position=index if position_pairs else None, where=where)
        if source is None:  # no dataset row: the rollout without what verify added to it
            source = {k: v for k, v in rollout.items() if k not in ("reward", "response")}
        payload = {**source, "response": rollout.get("response")}
        params = payload.get("responses_create_params")
        if isinstance(params, dict):
            payload["responses_create_params"] = {k: v for k, v in params.items() if v is not None}
        payloads.append(payload)
    return payloads


@dataclass
class Env:
    env: NemoEnvironment
    tree: Path  # the extracted wheel's root (holding resources_servers/)

    @property
    def name(self) -> str:
        return self.env.name

    def extra_requirements(self) -> list[str]:
        """The environment's own requirements, without nemo-gym (what NeMo's `gym env test` adds to it): neither
        the compat distribution that stands for it under ngym (with any extra, e.g. ``[docker]`` for
        ``nemo-gym[sandbox]``) nor the test tools that stand for ``nemo-gym[dev]``."""
        compat = re.compile(rf"^{re.escape(COMPAT_DISTRIBUTION)}\b(?!-)", re.IGNORECASE)
        return [
            r for r in self.env.requirements if r not in DEV_REQUIREMENTS and not compat.match(r)
        ] + self.env.pip_lines

    def install_blocker(self) -> str | None:
        """Why the requirements cannot be installed on this machine, when that is known beforehand."""
        names = {re.split(r"[\s<>=!~\[;@]", r, maxsplit=1)[0].lower() for r in self.extra_requirements()}
        gpu = sorted(names & GPU_STACK)
        if gpu:
            return f"needs GPU: requires {', '.join(gpu)} (CUDA wheels, not installed on this CPU machine)"
        urls = [r for r in self.env.pip_lines if re.search(r"(git\+|https?://)", r)]
        if urls:
            return f"needs internet: requirement fetched from {urls[0][:80]}"
        return None

    def rows(self, name: str = "example_rollouts.jsonl") -> list[dict[str, Any]]:
        path = self.env.folder / "data" / name
        if not path.is_file():
            return []
        rows = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # NeMo ships some as "<PLACEHOLDER ROW>" lines
                row = json.loads(line) if line.strip() else None
                if isinstance(row, dict):
                    rows.append(row)
        return rows

    def payloads(self) -> list[dict[str, Any]]:
        """What replaying sends to ``/verify``: each recorded response on its dataset row."""
        return verify_payloads(self.rows("example.jsonl"), self.rows())

    def model_refs(self) -> list[str]:
        """Model servers the resources server's config names (judges etc.): replays need them."""
        if self.env.config is None:
            return []
        fields = nemo_wheel.resources_server_fields(self.env.config.read_text()) or {}
        refs: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                if value.get("type") == "responses_api_models" and "name" in value:
                    refs.append(str(value["name"]))
                for item in value.values():
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)

        walk(fields)
        return refs

    def policy_values(self) -> list[str]:
        """The ``policy_*`` values its config's ``${...}`` read though it sets none (``${policy_base_url}``)."""
        if self.env.config is None:
            return []
        import yaml

        text = self.env.config.read_text()
        defined = set(yaml.safe_load(text) or {})
        keys = ("policy_base_url", "policy_api_key", "policy_model_name")
        return [k for k in keys if k not in defined and re.search(r"\$\{(oc\.select:)?" + k + r"[},.]", text)]

    def judge_text(self) -> str:
        """What the scripted judge answers: the environment's own "equal"/positive label when it has one."""
        fields = self.config_fields()
        labels = [str(v) for k, v in fields.items() if k.endswith("_label") and isinstance(v, str)]
        return str(fields.get("judge_equal_label") or (labels[0] if labels else "[[A=B]]"))

    def config_fields(self) -> dict[str, Any]:
        fields = dict(nemo_wheel.resources_server_fields(self.env.config.read_text()) or {}) if self.env.config else {}
        fields.pop("entrypoint", None)
        return fields

    def instance_name(self) -> str:
        if self.env.config is None:
            return self.name
        import yaml

        tree = yaml.safe_load(self.env.config.read_text()) or {}
        return next((k for k, v in tree.items() if isinstance(v, dict) and "resources_servers" in v), self.name)


def extract_tree() -> Path:
    """Every environment of the wheel, extracted once (read-only source for both sides)."""
    tree = WORK / "tree"
    marker = tree / ".ready"
    with locked(WORK / "locks" / "tree.lock", wait=True):
        if not marker.exists():
            shutil.rmtree(tree, ignore_errors=True)
            import zipfile

            with zipfile.ZipFile(nemo_wheel.nemo_gym_wheel()) as zf:
                # the wheel's whole tree but NeMo Gym's own code: environments read files next to them
                # (benchmarks/, responses_api_agents/, ...) relative to the folder holding resources_servers/
                members = [m for m in zf.namelist() if not m.startswith(("nemo_gym/", "nemo_gym-"))]
                zf.extractall(tree, members)
            marker.write_text("ok")
    return tree


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
def judge_for(item: Env, log: Path):
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


def load_envs(only: list[str] | None) -> list[Env]:
    tree = extract_tree()
    root = tree / "resources_servers"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise SystemExit(f"unknown environments: {', '.join(unknown)}")
        names = [n for n in names if n in only]
    known = set(names) | {p.name for p in root.iterdir() if p.is_dir()}
    return [Env(read_environment(root / n, known), tree) for n in names]


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
            pending = {
                pool.submit(measure, e, sides, keys, args.force, bases, args.stale, args.replay_only) for e in envs
            }
            while pending:  # wake every second: a SIGTERM handler only runs when this thread runs Python
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
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
