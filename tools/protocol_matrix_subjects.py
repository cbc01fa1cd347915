"""The protocol matrix's sample of environments: how each is installed, served and what it recorded.

Built-ins run from ngym's own interpreter; a NeMo Gym catalogue environment from the fleet virtualenv
``ngym install nemo-gym:NAME`` made for it (``ngym.fleet.isolation``, cached); the OpenEnv and verifiers
environments from a virtualenv layered on ngym's (made once under the work folder) into which ``ngym install``
puts them. Every server is ``python -m ngym.cli run NAME`` in a process of its own, outside this checkout (its
``resources_servers/`` would shadow NeMo Gym's package of the same name).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ngym.child_server import free_port, stop_process, wait_healthy
from ngym.examples import read_example_rollouts
from ngym.fleet.isolation import ensure_venv, ngym_site_packages
from ngym.rollout.gymnasium import is_gymnasium_style, server_post_routes
from ngym.rollout.replay_model import create_replay_app
from ngym.rollout.thread_server import serve_app_in_thread

REPO = Path(__file__).resolve().parent.parent
OPENENV_FIXTURES = REPO / "plugins" / "ngym_openenv" / "tests" / "envs"
VERIFIERS_FIXTURES = REPO / "plugins" / "ngym_verifiers" / "tests" / "fixtures"
#: NeMo Gym 0.7.0's own re-verify of its environments' recordings (``make nemo-ci``'s reference)
NEMO_EXPECTED = REPO / "tools" / "nemo_ci_expected.json"
SERVE_TIMEOUT = 180.0


@dataclass(frozen=True)
class Subject:
    name: str  #: the name it is served as (and the table's label)
    kind: str  #: built-in | NeMo Gym | OpenEnv | verifiers
    why: str  #: what it stands for in the sample
    source: str = ""  #: what ``ngym install`` is given (NeMo Gym: the catalogue name)
    options: tuple[str, ...] = ()  #: ``--option key=value`` for the install


BUILTINS = [
    Subject("example_single_tool_call", "built-in", "one tool, verify reads the final answer"),
    Subject("example_session_state_mgmt", "built-in", "per-session state across tool calls"),
    Subject("workplace_assistant", "built-in", "many tools, verify replays the calls"),
    Subject("math_with_code", "built-in", "a code sandbox tool, math answer"),
    Subject("equivalence_llm_judge", "built-in", "an LLM judge (scripted here)"),
]
NEMO = [
    Subject("nemo_counter", "NeMo Gym", "in-process state (its own dict per session)", "example_session_state_mgmt"),
    Subject("example_multi_step", "NeMo Gym", "several tool calls, verify over the trajectory", "example_multi_step"),
    Subject("example_tool_call_multireward", "NeMo Gym", "several reward components", "example_tool_call_multireward"),
    Subject(
        "example_multi_turn_gymnasium", "NeMo Gym", "Gymnasium-style /reset + /step", "example_multi_turn_gymnasium"
    ),
    Subject("mcqa", "NeMo Gym", "multiple choice, no tools", "mcqa"),
    Subject("string_match", "NeMo Gym", "string comparison, no tools", "string_match"),
    Subject("math_advanced_calculations", "NeMo Gym", "math with a calculator tool", "math_advanced_calculations"),
    Subject("xlam_fc", "NeMo Gym", "function calling, calls compared with the answer", "xlam_fc"),
    Subject("arc_agi", "NeMo Gym", "grid puzzles, no tools", "arc_agi"),
    Subject("calendar", "NeMo Gym", "agent tools with per-session state", "calendar"),
    Subject(
        "single_step_tool_use_with_argument_comparison",
        "NeMo Gym",
        "one tool call, its arguments compared",
        "single_step_tool_use_with_argument_comparison",
    ),
]
OTHERS = [
    Subject(
        "tally_env",
        "OpenEnv",
        "an OpenEnv MCP environment run by OpenEnv 0.10.0",
        str(OPENENV_FIXTURES / "tally_env"),
        ("reward_rule=state:total_reward",),
    ),
    Subject(
        "vf_notes", "verifiers", "a verifiers tool environment (its own venv)", str(VERIFIERS_FIXTURES / "vf_notes")
    ),
]
SUBJECTS = [*BUILTINS, *NEMO, *OTHERS]


@dataclass
class Target:
    """How to serve one environment, and its recorded rollouts (each a dataset row + response + reward)."""

    subject: Subject
    python: Path
    rollouts: list[dict[str, Any]]
    env: dict[str, str] = field(default_factory=dict)
    fields: list[str] = field(default_factory=list)  #: ``key=value`` config fields for ``ngym run``
    judge: bool = False  #: grade with a scripted judge (the replay model, answering from the recordings)
    #: NeMo Gym 0.7.0's own re-verify of each recording, when known: a reward may equal it or the recorded one
    reverify: list[Any] = field(default_factory=list)

    @property
    def expected(self) -> list[set[Any]]:
        """Per rollout, the rewards that agree with the recording: its own, and NeMo Gym 0.7.0's re-verify of it."""
        recorded = [r.get("reward") for r in self.rollouts]
        again = self.reverify or [None] * len(recorded)
        return [{a, b} - {None} if a is not None else set() for a, b in zip(recorded, again, strict=True)]


@dataclass
class Server:
    url: str
    gymnasium: bool  #: speaks ``/reset`` + ``/step`` instead of seed/verify
    mcp: bool  #: started with ``expose_tools_over_mcp=true``
    catch_all: bool  #: routes its tools through one parameterised route (``POST /{path}``)
    log: Path


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "NGYM_STRICT_PLUGINS")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def prepare(subject: Subject, work: Path) -> Target:
    """Install the environment (once: cached) and read its recorded rollouts."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if subject.kind == "built-in":
        from ngym.targets import resolve

        folder = resolve(subject.name).folder
        assert folder is not None
        judge = "judge_base_url" in (folder / "configs" / f"{subject.name}.yaml").read_text()
        rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
        return Target(subject, Path(sys.executable), rollouts, _clean_env(), judge=judge)
    if subject.kind == "NeMo Gym":
        from ngym_nemo_gym.catalogue import wheel as nemo_wheel

        line = f"nemo-gym:{subject.source}" + (f" --as {subject.name}" if subject.name != subject.source else "")
        python = ensure_venv([line], logs / f"{subject.name}.install.log")
        folder = nemo_wheel.extract_environment(subject.source, work / "nemo" / subject.name)
        rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
        return Target(subject, python, rollouts, _clean_env(), reverify=nemo_reverify(subject.source, rollouts))
    if subject.kind == "OpenEnv":  # run by OpenEnv's own cached interpreter (its requirements added there)
        from tools.protocol_matrix_cells import openenv_python

        subject = replace(subject, options=(*subject.options, f"python={openenv_python()}"))
    venv = layered_venv(work / "venvs" / _key(subject), logs / f"{subject.name}.venv.log")
    python = venv / "bin" / "python"
    env = _clean_env(NGYM_VERIFIERS_RECORDS=str(venv / "verifiers-records"))  # their venvs: ngym's shared cache
    prefix = "openenv:" if subject.kind == "OpenEnv" else "verifiers:"
    marker = venv / ".installed"
    if not marker.is_file():
        options = [arg for option in subject.options for arg in ("--option", option)]
        cmd = [str(python), "-m", "ngym.cli", "install", f"{prefix}{subject.source}", *options]
        with (logs / f"{subject.name}.install.log").open("w") as log:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=venv, timeout=1800)
        if done.returncode != 0:
            tail = (logs / f"{subject.name}.install.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"ngym install {prefix}... failed: {tail[0] if tail else done.returncode}")
        marker.write_text(" ".join(cmd) + "\n")
    found = sorted(venv.rglob(f"{subject.name}/**/example_rollouts.jsonl")) or sorted(
        venv.rglob("example_rollouts.jsonl")
    )
    if not found:
        raise RuntimeError(f"ngym install made no example rollouts for {subject.name}")
    return Target(subject, python, read_example_rollouts(found[0]), env)


def nemo_reverify(name: str, rollouts: list[dict[str, Any]]) -> list[Any]:
    """NeMo Gym 0.7.0's own re-verify of each recorded response (``tools/nemo_ci_expected.json``, what ``make
    nemo-ci`` checks): a few recordings were scored by an older NeMo Gym, and say otherwise. Empty when unknown."""
    rewards = (json.loads(NEMO_EXPECTED.read_text()).get(name) or {}).get("rewards") or []
    return list(rewards) if len(rewards) == len(rollouts) else []


def _key(subject: Subject) -> str:
    """A venv per environment, its source and the ngym it layers on."""
    text = f"{subject.kind}|{subject.source}|{subject.options}|{ngym_site_packages()}"
    return f"{subject.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def layered_venv(venv: Path, log: Path) -> Path:
    """A virtualenv that sees ngym's packages (a ``.pth`` after its own site-packages), as fleet venvs do."""
    if (venv / ".ready").is_file():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    with log.open("w") as out:
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], stdout=out, stderr=out, check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "zz_ngym_base.pth").write_text(f"import site; site.addsitedir({ngym_site_packages()!r})\n")
    (venv / ".ready").write_text("")
    return venv


@contextlib.contextmanager
def served(target: Target, work: Path) -> Iterator[Server]:
    """``ngym run`` of the target in a process of its own (with MCP exposure when its config takes it)."""
    with contextlib.ExitStack() as stack:
        fields = list(target.fields)
        if target.judge:
            judge = stack.enter_context(serve_app_in_thread(create_replay_app(target.rollouts)))
            fields.append(f"judge_base_url={judge}/v1")
        log = work / "logs" / f"{target.subject.name}.serve.log"
        try:
            url, process = _start(target, [*fields, "expose_tools_over_mcp=true"], log, work)
            mcp = True
        except RuntimeError:  # a config that refuses the field (a Gymnasium server, a foreign app): serve without
            url, process = _start(target, fields, log, work)
            mcp = False
        stack.callback(stop_process, process)
        routes = server_post_routes(url) or set()
        catch_all = any(re.fullmatch(r"/\{[^/{}]+\}", route) for route in routes)
        yield Server(url, is_gymnasium_style(routes), mcp, catch_all, log)


def _start(target: Target, fields: list[str], log: Path, work: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    cmd = [str(target.python), "-m", "ngym.cli", "run", target.subject.name, "--port", str(port), *fields]
    with log.open("w") as out:
        process = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=target.env, cwd=work, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, SERVE_TIMEOUT, log, path="/openapi.json")
    except Exception as exc:
        stop_process(process)
        raise RuntimeError(f"{' '.join(cmd[2:5])}: {exc}") from None
    return url, process
