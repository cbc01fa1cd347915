"""``ngym install ors:<folder>``: an ORS environment (``envs/tally_ors``, written for these tests as ``orwd init``
lays one out) installed with the real ``openreward`` from the package index in its own venv, served by
``ngym run``, driven over NeMo Gym's wire, and compared with what ``openreward``'s own client gets from
``openreward``'s own server (``reference_driver.py``, run with the environment's venv's openreward).

No environment published on the package index is used: none there runs offline (the index's ``openreward-server``
0.0.1 is an empty placeholder; ``inspect-openreward`` and ``firehorse-cli`` are harnesses, not environments). The
distribution path is checked with a wheel built here (``envs/ors_echo_dist``) that pip finds through
``PIP_FIND_LINKS``, as it would on an index.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ngym.testing import RolloutClient, make_response

HERE = Path(__file__).parent
FOLDER = HERE / "envs" / "tally_ors"
DIST = HERE / "envs" / "ors_echo_dist"
REFERENCE = HERE / "reference_driver.py"
ORS_DRIVER = HERE.parents[2] / "tests" / "ors" / "ors_driver.py"
TALLY, QUIZ = "tally_environment", "quiz_environment"

#: scripted episodes of the tally environment (train split): the tool calls a model would make
TALLY_EPISODES = [
    {"index": 0, "calls": [["add", {"amount": 3}], ["submit", {}]]},  # on target: 1.0
    {"index": 1, "calls": [["add", {"amount": 2}], ["hint", {}], ["add", {"amount": 2}], ["submit", {}]]},  # 0.8
    {"index": 2, "calls": [["hint", {}], ["add", {"amount": 2}], ["submit", {}]]},  # 0.25
]
QUIZ_EPISODES = [
    {"index": 0, "calls": [["scratch", {"answer": "two and two"}]], "final": "4"},
    {"index": 1, "calls": [], "final": "8"},
]


def ngym(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
    )


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A records folder of its own; the environments' venvs stay in ngym's cache (warm on the next run)."""
    folder = tmp_path_factory.mktemp("ors-records")
    old = os.environ.get("NGYM_ORS_RECORDS")
    os.environ["NGYM_ORS_RECORDS"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("NGYM_ORS_RECORDS", None)
    else:
        os.environ["NGYM_ORS_RECORDS"] = old


@pytest.fixture(scope="module")
def installed(records: Path) -> list[str]:
    """Both environments of the folder, installed with the CLI as a user does."""
    for cls in ("TallyEnvironment", "QuizEnvironment"):
        done = ngym("install", f"ors:{FOLDER}", "-o", f"environment={cls}")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "ngym: installed" in done.stdout + done.stderr
    return [TALLY, QUIZ]


@pytest.fixture(scope="module")
def ors_python(installed: list[str], records: Path) -> Path:
    """An interpreter with openreward 0.1.167 from the package index: the environment's own venv, made by the
    install (openreward's client and its reference server are both in the SDK; neither runs ngym code)."""
    return Path(json.loads((records / f"{TALLY}.json").read_text())["python"])


@contextlib.contextmanager
def ngym_run(name: str) -> Iterator[str]:
    """``ngym run NAME`` in a process of its own; its URL."""
    served = subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "run", name, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    url, seen = "", []
    try:
        assert served.stdout is not None
        deadline = time.monotonic() + 120
        while not url and time.monotonic() < deadline and served.poll() is None:
            line = served.stdout.readline()
            seen.append(line)
            if f"serving {name}" in line:
                url = line.split(" at ")[1].split()[0]
        assert url, "ngym run did not say where it serves:\n" + "".join(seen[-30:])
        while time.monotonic() < deadline and served.poll() is None:  # it listens once its startup is done
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url.rstrip('/')}/health", timeout=5).status_code == 200:
                    break
            time.sleep(0.1)
        # keep reading its output (a full pipe would stop the server's logging, and so the server)
        threading.Thread(target=lambda: seen.extend(served.stdout or []), daemon=True).start()
        yield url.rstrip("/")
    except BaseException:
        sys.stderr.write("".join(seen[-60:]))
        raise
    finally:
        served.terminate()
        served.wait(30)


@pytest.fixture(scope="module")
def tally_url(installed: list[str]) -> Iterator[str]:
    """One ``ngym run tally_environment`` for the tests that drive it (each rollout its own session)."""
    with ngym_run(TALLY) as url:
        yield url


@pytest.fixture(scope="module")
def expected_tally(ors_python: Path) -> list[dict[str, Any]]:
    """openreward's own client and server on ``TALLY_EPISODES``."""
    return reference(ors_python, "TallyEnvironment", "train", TALLY_EPISODES)


def reference(
    python: Path,
    environment: str,
    split: str,
    episodes: list[dict[str, Any]],
    folder: Path = FOLDER,
    module: str = "server",
) -> list[dict[str, Any]]:
    """What openreward's own client gets from openreward's own server on ``episodes``."""
    plan = {"folder": str(folder), "module": module, "environment": environment, "split": split, "episodes": episodes}
    done = subprocess.run(
        [str(python), str(REFERENCE)], input=json.dumps(plan), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])["episodes"]
    return answer


def last_reward(rewards: list[float | None]) -> float | None:
    found = [r for r in rewards if r is not None]
    return found[-1] if found else None


async def nemo_rollout(http: httpx.AsyncClient, split: str, episode: dict[str, Any]) -> dict[str, Any]:
    """One rollout over NeMo Gym's wire: seed with the task, the tool calls, verify (the final text, if any)."""
    client = RolloutClient(http)
    row = {"ors": {"split": split, "index": episode["index"]}, "responses_create_params": {"input": []}}
    seeded = await client.call("/seed_session", row)
    outputs = [(await client.post(f"/{name}", arguments)).json() for name, arguments in episode["calls"]]
    response = make_response(episode.get("final"), [(n, a) for n, a in episode["calls"]])
    verified: dict[str, Any] = await client.call("/verify", {**row, "response": response})
    return {"prompt": seeded["prompt"], "outputs": outputs, "verified": verified}


async def nemo_rollouts(url: str, split: str, episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        return list(await asyncio.gather(*(nemo_rollout(http, split, e) for e in episodes)))


def test_bad_install_input_is_one_line_and_a_nonzero_exit(records: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {
        ("ors:",): "give what to install",
        (f"ors:{tmp_path / 'missing'}",): "no such folder",
        (f"ors:{empty}",): "server.py",
        (f"ors:{FOLDER}", "-o", "colour=red"): "unknown option",
        (f"ors:{FOLDER}", "--as", "not-a-name"): "not a usable environment name",
        (f"ors:{FOLDER}", "--replace"): "--replace does not apply to ors: environments",
    }
    for args, expected in cases.items():
        done = ngym("install", *args)
        output = (done.stdout + done.stderr).strip()
        assert done.returncode != 0, output
        assert expected in output, output
        assert "Traceback" not in output and len(output.splitlines()) == 1, output


def test_a_module_of_several_environments_asks_which(records: Path) -> None:
    done = ngym("install", f"ors:{FOLDER}")
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode != 0
    assert "several environments (QuizEnvironment, TallyEnvironment)" in output[-1]
    assert "-o environment=NAME" in output[-1]
    assert "Traceback" not in "\n".join(output)


def test_installed_environments_are_listed_with_their_rows_and_validate(installed: list[str], records: Path) -> None:
    listed = ngym("list", "--json")
    assert listed.returncode == 0, listed.stderr
    names = {row["name"] for row in json.loads(listed.stdout)}
    assert {TALLY, QUIZ} <= names
    rows = [json.loads(line) for line in (records / TALLY / "data" / "example.jsonl").read_text().splitlines()]
    assert [r["ors"] for r in rows] == [{"split": "train", "index": i} for i in range(3)] + [
        {"split": "test", "index": 0}
    ]
    assert rows[0]["responses_create_params"]["input"][0]["content"].startswith("Add amounts until the total is 3")
    tools = {t["name"]: t["parameters"] for t in rows[0]["responses_create_params"]["tools"]}
    assert set(tools) == {"add", "crash", "hint", "submit"}
    assert tools["add"]["properties"]["amount"]["type"] == "integer"  # ORS's own JSON Schema
    # recorded at install on the environment's own server: the shortest episode that ends (submit at once)
    recorded = [json.loads(line) for line in (records / TALLY / "data" / "example_rollouts.jsonl").open()]
    assert [r["reward"] for r in recorded] == [0.0, 0.0, 0.0, 0.0]
    validated = ngym("validate", TALLY)  # replays them through ngym: the same rewards
    assert validated.returncode == 0 and "4 rollouts replayed" in validated.stdout, validated.stdout + validated.stderr


def test_the_environment_orwd_init_scaffolds_validates_once_installed(ors_python: Path, tmp_path: Path) -> None:
    """openreward's own scaffold (`orwd init`), installed as the install's `try:` line then says: its one tool
    needs an answer (`answer(answer: str)`), so the recorded rollout passes it an empty one; with no recording,
    `ngym validate` of a fresh scaffold failed ("no rollouts to replay")."""
    folder = tmp_path / "first_env"
    made = subprocess.run(
        [str(ors_python.parent / "orwd"), "init", "first_env", "--dir", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    # the requirements of the tally environment: its venv (made by the `installed` fixture) is reused
    (folder / "requirements.txt").write_text((FOLDER / "requirements.txt").read_text())
    done = ngym("install", f"ors:{folder}", "--as", "first_env")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 dataset rows, 2 recorded rollouts" in done.stdout + done.stderr, done.stdout + done.stderr
    try:
        recorded = [json.loads(line) for line in (records_of("first_env") / "example_rollouts.jsonl").open()]
        assert [(r["response"]["output"][0]["name"], r["reward"]) for r in recorded] == [("answer", 0.0)] * 2
        validated = ngym("validate", "first_env")
        assert validated.returncode == 0, validated.stdout + validated.stderr
        assert "2 rollouts replayed, rewards [0.0, 0.0]" in validated.stdout
    finally:
        ngym("uninstall", "first_env", "-y")


def records_of(name: str) -> Path:
    """The data folder ``ngym install ors:`` wrote for ``name``."""
    return Path(os.environ["NGYM_ORS_RECORDS"]) / name / "data"


def test_rewards_over_nemo_gyms_wire_equal_openreward_client_and_server(
    tally_url: str, expected_tally: list[dict[str, Any]]
) -> None:
    assert [last_reward(e["rewards"]) for e in expected_tally] == [1.0, 0.8, 0.25]
    # parallel sessions at once, each its own ORS session: the rewards stay each episode's own
    got = asyncio.run(nemo_rollouts(tally_url, "train", TALLY_EPISODES * 3))
    for seen, want in zip(got, expected_tally * 3, strict=True):
        assert seen["verified"]["reward"] == last_reward(want["rewards"])
        assert seen["verified"]["ors"]["rewards"] == want["rewards"]
        assert [o["output"] for o in seen["outputs"]] == [o["text"] for o in want["outputs"]]
    assert got[0]["prompt"] == "Add amounts until the total is 3, then submit."
    assert httpx.get(f"{tally_url}/health", timeout=30).json()["live_sessions"] == 0


def test_a_plain_final_answer_goes_to_the_terminal_tool(installed: list[str], ors_python: Path) -> None:
    expected = reference(ors_python, "QuizEnvironment", "test", QUIZ_EPISODES)
    assert [last_reward(e["rewards"]) for e in expected] == [1.0, 0.0]
    with ngym_run(QUIZ) as url:
        got = asyncio.run(nemo_rollouts(url, "test", QUIZ_EPISODES))
    assert [g["verified"]["reward"] for g in got] == [last_reward(e["rewards"]) for e in expected]


def test_tool_errors_and_unfinished_episodes_are_masked_and_the_server_stays_up(tally_url: str) -> None:
    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=tally_url, timeout=60) as http:
            raised = await nemo_rollout(http, "train", {"index": 0, "calls": [["add", {"amount": -1}]]})
            invalid = await nemo_rollout(
                http, "train", {"index": 0, "calls": [["add", {"amount": "many"}], ["add", {"amount": 3}]]}
            )
            unfinished = await nemo_rollout(http, "train", {"index": 0, "calls": [["add", {"amount": 3}]]})
            after = await nemo_rollout(http, "train", TALLY_EPISODES[0])
            return [raised, invalid, unfinished, after]

    raised, invalid, unfinished, after = asyncio.run(run())
    assert raised["outputs"][0] == {
        "output": "amounts must not be negative (got -1)",
        "is_error": True,
        "reason": "raised",
    }
    assert raised["verified"]["mask_sample"] is True
    assert "raised" in raised["verified"]["failure_reason"]
    assert invalid["outputs"][0]["is_error"] is True and invalid["outputs"][0]["reason"] == "input_validation"
    assert "input validation" in invalid["outputs"][0]["output"].lower()
    assert invalid["verified"]["mask_sample"] is True  # the valid add alone does not finish the episode
    assert unfinished["verified"]["mask_sample"] is True
    assert "did not finish" in unfinished["verified"]["failure_reason"]
    assert after["verified"]["reward"] == 1.0 and not after["verified"]["mask_sample"]


def test_served_back_over_ngyms_ors_front_the_rewards_are_the_same(
    tally_url: str, expected_tally: list[dict[str, Any]], ors_python: Path
) -> None:
    """The round trip: the installed environment served by ngym, driven over ngym's own /ors front by
    openreward's client: the inner ORS tools, as openreward's server answers them (submit ends the episode with its
    reward, and no tool runs after it: the front's final answer is refused, ``episode_finished``)."""
    plan = {
        "url": f"{tally_url}/ors/",
        "env_name": TALLY,
        "split": "train",
        "episodes": [{"index": e["index"], "calls": e["calls"], "answer": ""} for e in TALLY_EPISODES],
        "parallel": True,
    }
    done = subprocess.run(
        [str(ors_python), str(ORS_DRIVER)], input=json.dumps(plan), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert [s if isinstance(s, str) else s["name"] for s in seen["splits"]] == ["train", "test"]
    assert seen["num_tasks"] == 3
    assert set(seen["tools"]) >= {"add", "hint", "submit"}
    assert seen["tool_schemas"]["add"]["properties"]["amount"]["type"] == "integer"
    ends = [episode["outputs"][-1] for episode in seen["episodes"]]  # submit's output
    assert [end["reward"] for end in ends] == [last_reward(e["rewards"]) for e in expected_tally]
    assert all(end["finished"] for end in ends)
    assert all(episode["final"]["reason"] == "episode_finished" for episode in seen["episodes"])
    assert [e["prompt"] for e in seen["episodes"]][0] == "Add amounts until the total is 3, then submit."


def test_a_dead_environment_server_masks_its_episodes_and_is_started_again(tally_url: str) -> None:
    async def run() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=tally_url, timeout=60) as http:
            crashed = await nemo_rollout(http, "train", {"index": 0, "calls": [["crash", {"code": 3}]]})
            after = await nemo_rollout(http, "train", TALLY_EPISODES[1])
            return [crashed, after]

    crashed, after = asyncio.run(run())
    assert "the environment failed" in crashed["outputs"][0]["detail"]
    assert crashed["verified"]["mask_sample"] is True and crashed["verified"]["failure_kind"] == "verifier_error"
    assert after["verified"]["reward"] == 0.8 and not after["verified"]["mask_sample"]


def test_a_distribution_from_the_package_index(records: Path, ors_python: Path, tmp_path: Path) -> None:
    """``ors:<distribution>``: pip brings it into the environment's venv (here from a wheel built from
    ``envs/ors_echo_dist`` and offered to pip as a package index would, through ``PIP_FIND_LINKS``)."""
    project = tmp_path / "project"
    shutil.copytree(DIST, project)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(project)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    os.environ["PIP_FIND_LINKS"] = str(wheels)
    try:
        done = ngym("install", "ors:ors-echo-dist")
    finally:
        os.environ.pop("PIP_FIND_LINKS")
    assert done.returncode == 0, done.stdout + done.stderr
    episodes = [{"index": 0, "calls": [["say", {"word": "apple"}]]}, {"index": 1, "calls": [["say", {"word": "fig"}]]}]
    expected = reference(ors_python, "EchoEnvironment", "test", episodes, DIST, "ors_echo_dist")
    with ngym_run("echo_environment") as url:
        got = asyncio.run(nemo_rollouts(url, "test", episodes))
    assert [g["verified"]["reward"] for g in got] == [last_reward(e["rewards"]) for e in expected] == [1.0, 0.0]


def test_uninstall_removes_it(installed: list[str], records: Path) -> None:
    done = ngym("uninstall", QUIZ, "-y")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (records / f"{QUIZ}.json").exists() and not (records / QUIZ).exists()
    names = {row["name"] for row in json.loads(ngym("list", "--json").stdout)}
    assert QUIZ not in names and TALLY in names
