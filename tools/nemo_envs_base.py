"""What ``tools/nemo_envs.py`` (and ``bench/bench_heavy.py``, ``bench_catalogue.py``) is built on: its settings, the
layered virtualenvs, the children it starts, a failure's reason read from its log, the wheel's environments (``Env``).
"""

from __future__ import annotations

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ngym_nemo_gym.catalogue import wheel as nemo_wheel  # noqa: E402
from ngym_nemo_gym.catalogue.folder import (  # noqa: E402
    COMPAT_DISTRIBUTION,
    DEV_REQUIREMENTS,
    NemoEnvironment,
    read_environment,
)

from ngym.config import cache_root  # noqa: E402
from ngym.examples import match_row  # noqa: E402

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
_CHILDREN: set[subprocess.Popen[Any]] = set()


_STOPPING: list[bool] = []


def spawn(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
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
def scripted_judge(text: str, log: Path) -> Iterator[str]:
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


def run(args: list[str], log: Path, timeout: int, **kwargs: Any) -> subprocess.CompletedProcess[str]:
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
def locked(path: Path, *, wait: bool = False) -> Iterator[bool]:
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
        port: int = sock.getsockname()[1]
        return port


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
