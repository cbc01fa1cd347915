"""verifiers environments under ngym, measured against verifiers itself (issue 24, item 3).

Two environments, installed with ``ngym install verifiers:...`` into their own cached venvs:

- ``vf_notes``: made with verifiers 0.4.0's ``vf-init vf_notes -T``, given a stateful tool (a notebook in the
  rollout's ``State``) and two weighted rewards (0.75 / 0.25);
- ``vf_ledger``: a verifiers 0.3.1 ``load_environment`` module: a ``StatefulToolEnv`` (the balance in its
  state, injected by ``update_tool_args``) with a ``Rubric`` of two weighted functions (0.6 / 0.4).

The same scripted rollouts (``scripted_model.ScriptedModel``, an OpenAI-compatible model answering by
script) are played twice: by verifiers itself (``vf-eval`` with its own harness, tool server and reward
functions for 0.4; ``Environment.evaluate`` for 0.3.1), and through ngym (``/seed_session``, one tool route
per call, ``/verify``). Tool outputs must be equal call by call, and every reward function's score, its
weight and the reward equal, function by function.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ngym.plugins.registry import reset_registry
from ngym.testing import RolloutClient, app_for, serve_in_process
from ngym.testing.scripted_model import ScriptedModel, Turn

FIXTURES = Path(__file__).resolve().parents[2] / "plugins" / "ngym_verifiers" / "tests" / "fixtures"
DRIVER = Path(__file__).with_name("verifiers_driver.py")

NOTES_SCRIPTS: dict[str, list[Turn]] = {
    "apple": [[("vf_notes_add_note", {"text": "apple"})], "apple"],  # both rewards: 1.0
    "river": ["river"],  # answers, never wrote it down: 0.75
    "lantern": [[("vf_notes_add_note", {"text": "lamp"}), ("vf_notes_read_notes", {})], "lamp"],  # 0.0
}
LEDGER_SCRIPTS: dict[str, list[Turn]] = {
    "Start at 5": [[("deposit", {"amount": 3})], [("deposit", {"amount": 4}), ("balance", {})], "It is 12"],  # 1.0
    "Start at 0": [[("deposit", {"amount": 10})], [("deposit", {"amount": -4})], "It is 4"],  # ledger only: 0.4
    "Start at 2": [[("balance", {})], "It is 3"],  # answer only: 0.6
}


@pytest.fixture(scope="module")
def notes_record(records_dir: Path) -> Any:
    return install(str(FIXTURES / "vf_notes"), records_dir)


@pytest.fixture(scope="module")
def ledger_record(records_dir: Path) -> Any:
    return install(str(FIXTURES / "vf_ledger.py"), records_dir, domain="math")  # a module has no metadata


def install(source: str, records_dir: Path, domain: str | None = None) -> Any:
    from ngym_verifiers.install import install_source

    record = install_source(f"verifiers:{source}", domain=domain, echo=lambda line: None)
    reset_registry()
    return record


async def play_through_ngym(name: str, scripts: dict[str, list[Turn]]) -> dict[str, dict[str, Any]]:
    """Each script as one ngym rollout: the tool calls through the tool routes, then /verify."""
    results: dict[str, dict[str, Any]] = {}
    async with serve_in_process(app_for(name)) as http:
        for idx in range(len(scripts)):
            client = RolloutClient(http)
            seeded = await client.call("/seed_session", {"verifiers": {"idx": idx}})
            prompt = " ".join(str(m.get("content")) for m in seeded["prompt"])
            key = next(k for k in scripts if k in prompt)
            output: list[dict[str, Any]] = []
            tool_outputs: list[str] = []
            for turn_index, turn in enumerate(scripts[key]):
                if isinstance(turn, str):
                    output.append(
                        {"type": "message", "id": f"msg_{turn_index}", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": turn, "annotations": []}]}
                    )  # fmt: skip
                    continue
                # One model turn: its calls first, then their outputs (how the Responses API lays out parallel calls).
                outputs = []
                for call_index, (tool, arguments) in enumerate(turn):
                    call_id = f"call_{turn_index}_{call_index}"
                    answer = await client.call(f"/{tool}", arguments)
                    tool_outputs.append(answer["output"])
                    output.append({"type": "function_call", "name": tool, "arguments": json.dumps(arguments),
                                   "call_id": call_id, "id": f"fc_{call_id}", "status": "completed"})  # fmt: skip
                    outputs.append({"type": "function_call_output", "call_id": call_id, "output": answer["output"]})
                output.extend(outputs)
            response = {"id": "resp", "created_at": 0.0, "model": "scripted", "object": "response",
                        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip
            verified = await client.call(
                "/verify", {"responses_create_params": {"input": []}, "response": response, "verifiers": {"idx": idx}}
            )
            assert not verified.get("mask_sample"), verified.get("failure_reason")
            results[key] = {"tool_outputs": tool_outputs, "verify": verified}
    return results


def run_in_venv(python: str, *args: str, timeout: float = 600) -> Any:
    done = subprocess.run(
        [python, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, "NGYM_SCRIPTED_KEY": "x"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def by_script(rows: list[dict[str, Any]], scripts: dict[str, list[Turn]]) -> dict[str, dict[str, Any]]:
    return {next(k for k in scripts if k in row["prompt"]): row for row in rows}


def vf_eval_rewards(record: Any, taskset: str, scripts: dict[str, list[Turn]], out: Path) -> dict[str, dict[str, Any]]:
    """``vf-eval`` (verifiers' own runner, its subprocess runtime) played by ``scripts`` on ``taskset``: each
    script's rewards as the driver reads them from the traces it wrote into ``out``."""
    vf_eval = str(Path(record.python).with_name("vf-eval"))
    with ScriptedModel(scripts) as model:
        done = subprocess.run(
            [vf_eval, taskset, "--model", "scripted", "--client.base-url", model.base_url,
             "--client.api-key-var", "NGYM_SCRIPTED_KEY", "-n", str(len(scripts)), "-c", "1", "--push", "false",
             "--output-dir", str(out), "--rich", "None", "--env.agent.runtime.type", "subprocess"],
            capture_output=True, text=True, timeout=900, env={**os.environ, "NGYM_SCRIPTED_KEY": "x"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    traces = next(out.glob("*/traces.jsonl"))
    return by_script(run_in_venv(record.python, str(DRIVER), "v1", str(traces)), scripts)


def compare(verifiers_rows: dict[str, dict[str, Any]], ngym_rows: dict[str, dict[str, Any]]) -> None:
    assert verifiers_rows.keys() == ngym_rows.keys()
    for key, theirs in verifiers_rows.items():
        ours = ngym_rows[key]
        assert ours["tool_outputs"] == theirs["tool_outputs"], key
        components = ours["verify"]["reward_components"]
        assert components == pytest.approx(theirs["rewards"]), key  # every function's score, by name
        if "weights" in theirs:
            assert ours["verify"]["reward_weights"] == pytest.approx(theirs["weights"]), key
        assert ours["verify"]["reward"] == pytest.approx(theirs["reward"]), key


async def test_verifiers_0_4_taskset_matches_vf_eval(notes_record: Any, tmp_path: Path) -> None:
    record = notes_record
    assert record.api == "v1" and record.domain == "agent"
    assert [r["name"] for r in record.rewards] == ["noted", "reward"]
    theirs = vf_eval_rewards(record, "vf_notes", NOTES_SCRIPTS, tmp_path)
    assert [theirs[k]["reward"] for k in NOTES_SCRIPTS] == [1.0, 0.75, 0.0]  # the scripts play what they claim
    assert all(not row["errors"] for row in theirs.values())
    ours = await play_through_ngym(record.name, NOTES_SCRIPTS)
    compare(theirs, ours)
    # the tools' schemas are the ones verifiers' own tool server advertised to the model
    advertised = theirs["apple"]["tools"]
    for tool in record.tools:
        assert tool["parameters"] == advertised[tool["name"]], tool["name"]


async def test_verifiers_0_3_stateful_tool_env_matches_evaluate(ledger_record: Any) -> None:
    record = ledger_record
    assert record.api == "legacy"
    with ScriptedModel(LEDGER_SCRIPTS) as model:
        rows = run_in_venv(record.python, str(DRIVER), "legacy", record.module, model.base_url, "3")
    theirs = by_script(rows, LEDGER_SCRIPTS)
    assert [theirs[k]["reward"] for k in LEDGER_SCRIPTS] == pytest.approx([1.0, 0.4, 0.6])
    assert all(row["error"] is None for row in theirs.values())
    ours = await play_through_ngym(record.name, LEDGER_SCRIPTS)
    compare(theirs, ours)


COUNTER_DATA = Path(__file__).resolve().parents[2] / "resources_servers/example_session_state_mgmt/data/example.jsonl"
COUNTER_SCRIPTS: dict[str, list[Turn]] = {
    "starts at 3. Add 3,": [[("increment_counter", {"count": 3})], "It is 6"],  # ends at 6 == expected: 1.0
    "starts at 0. Add 2 then add 5": [[("increment_counter", {"count": 2})], [("increment_counter", {"count": 5})],
                                      [("get_counter_value", {})], "It is 7"],  # 7 == expected: 1.0
    "starts at 10. Add -4": [[("increment_counter", {"count": -3})], "It is 7"],  # 7 != 6: 0.0
}  # fmt: skip


def test_verifiers_nemo_gym_taskset_drives_ngym_builtin(notes_record: Any, tmp_path: Path) -> None:
    """The other direction: verifiers 0.4's own ``nemo_gym`` taskset, configured by file (``vf-eval @ eval.toml``;
    its ``--env.taskset...`` flag form fails in verifiers itself), drives ngym's built-in counter served by
    ``ngym run``: seed, tools and verify over NeMo Gym's wire, the reward ngym's verify gives."""
    from ngym.child_server import free_port, stop_process, wait_healthy

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "run", "example_session_state_mgmt", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server, 60)
        vf_eval = str(Path(notes_record.python).with_name("vf-eval"))
        with ScriptedModel(COUNTER_SCRIPTS) as model:
            config = tmp_path / "eval.toml"
            config.write_text(
                f'model = "scripted"\nmax_concurrent = 1\npush = false\noutput_dir = "{tmp_path / "out"}"\n'
                f'[client]\nbase_url = "{model.base_url}"\napi_key_var = "NGYM_SCRIPTED_KEY"\n'
                f"[select]\nlimit = 3\n"
                f'[env.taskset]\nid = "nemo_gym"\ndataset = "{COUNTER_DATA}"\n'
                f'[env.taskset.task]\nresources_url = "http://127.0.0.1:{port}"\n'
                f'[env.agent.runtime]\ntype = "subprocess"\n'
            )
            done = subprocess.run(
                [vf_eval, "@", str(config)], capture_output=True, text=True, timeout=900,
                env={**os.environ, "NGYM_SCRIPTED_KEY": "x"},
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
        traces = next((tmp_path / "out").glob("*/traces.jsonl"))
        rows = by_script(run_in_venv(notes_record.python, str(DRIVER), "v1", str(traces)), COUNTER_SCRIPTS)
        assert {key: row["rewards"] for key, row in rows.items()} == {
            key: {"nemo_gym": expected} for key, expected in zip(COUNTER_SCRIPTS, [1.0, 1.0, 0.0], strict=True)
        }
        assert all(not row["errors"] for row in rows.values())
        # the counter's tools answered through ngym's routes: the outputs the model saw
        assert rows["starts at 0. Add 2 then add 5"]["tool_outputs"][-1] == '{"count":7}'
    finally:
        stop_process(server)


@pytest.mark.parametrize(
    ("fixture", "reason"),
    [
        ("vf_guess.py", "env_response speaks between model turns"),
        ("vf_ranked.py", "group-level reward functions"),
        ("vf_debate.py", r"load_environment\(\) returned a vf_debate.DebateEnv, not a verifiers Environment"),
        ("vf_hubrows.py", "refused: it needs the dataset ngym-tests/never-published from the Hugging Face Hub, which"),
    ],
)
def test_what_does_not_map_is_refused_at_install(
    ledger_record: Any, records_dir: Path, fixture: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MultiTurnEnv game, a group reward, a load_environment returning something else than a verifiers
    Environment and rows only the Hugging Face Hub has (offline) are refused with the reason in one line (same
    cached venv as vf_ledger)."""
    from ngym_verifiers.install import VerifiersInstallError, install_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as a machine without the Hub, without datasets' 30 s of retries
    with pytest.raises(VerifiersInstallError, match=reason) as refused:
        install_source(f"verifiers:{FIXTURES / fixture}", domain="games", echo=lambda line: None)
    assert "\n" not in str(refused.value) and "Traceback" not in str(refused.value)
    assert not (records_dir / f"{Path(fixture).stem}.json").exists()


async def test_a_taskset_exporting_its_own_env_is_refused(notes_record: Any) -> None:
    """verifiers 0.4's multi-turn form: the package exports an ``Env`` whose ``run()`` speaks between model turns
    (``vf_chatty``: a scripted user asks again). Put beside vf_notes in its venv (verifiers 0.4.0), as a module
    install copies a module, and asked what it serves: refused with the reason, never served without its Env."""
    from ngym_verifiers.install import copy_module
    from ngym_verifiers.process import Worker, WorkerError

    copy_module(Path(notes_record.python), FIXTURES / "vf_chatty.py")
    with pytest.raises(WorkerError, match=r"exports its own Env \(ChattyEnv\) whose run\(\) drives the rollout") as e:
        await Worker.start(notes_record.python, "vf_chatty")
    assert e.value.kind == "refused"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("intercept", r"RewritingTask rewrites the conversation between the model and its tools \(@vf.intercept:"),
        ("remote", r"RemoteToolset's tools are served by a remote MCP server \(http://127.0.0.1:9/mcp\)"),
        ("stop", r"StoppingTask stops its rollouts on what the model.s responses or requests carry \(@vf.stop: cited"),
    ],
)
async def test_a_task_a_server_cannot_play_is_refused(
    notes_record: Any, mode: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verifiers 0.4 tasks whose rollouts ngym cannot score as verifiers would (bash_interception's
    ``@vf.intercept``; a remote MCP toolset; a stop on the model's response): refused with the reason when asked what
    it serves (a task needing a runtime is served: test_verifiers_runtime.py)."""
    from ngym_verifiers.install import copy_module
    from ngym_verifiers.process import Worker, WorkerError

    copy_module(Path(notes_record.python), FIXTURES / "vf_rewrites.py")
    monkeypatch.setenv("VF_REWRITES", mode)
    worker = await Worker.start(notes_record.python, "vf_rewrites")
    try:
        with pytest.raises(WorkerError, match=reason) as refused:
            await worker.ask("describe")
    finally:
        await worker.stop()
    assert refused.value.kind == "refused"


def test_a_hub_dataset_can_be_given_from_a_file(
    ledger_record: Any, records_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused offline above; with ``-o dataset:NAME=FILE.jsonl`` the environment's own ``load_dataset(NAME)``
    reads the file, its own code shapes the rows, and its own reward scores the reference answers."""
    from ngym_verifiers import examples
    from ngym_verifiers.install import install_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "abc"}\n{"text": "ngym"}\n')
    record = install_source(
        f"verifiers:{FIXTURES / 'vf_hubrows.py'}",
        domain="other",
        options={"dataset:ngym-tests/never-published": str(rows)},
        echo=lambda line: None,
    )
    rows.unlink()  # the install kept its own copy, which the server reads at each start
    assert record.datasets and Path(record.datasets["ngym-tests/never-published"]).is_file()
    folder = examples.folder_of(record.name) / "data"
    recorded = [json.loads(line) for line in (folder / "example_rollouts.jsonl").read_text().splitlines()]
    answers = [r["response"]["output"][0]["content"][0]["text"] for r in recorded]
    assert answers == ["cba", "mygn"] and [r["reward"] for r in recorded] == [1.0, 1.0]
    reset_registry()
    done = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "validate", record.name], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


async def test_a_module_that_is_no_environment_is_refused(notes_record: Any) -> None:
    """verifiers' own ``compact`` is a harness: verifiers' loader says it exports no Taskset; ngym says what it is."""
    from ngym_verifiers.install import copy_module
    from ngym_verifiers.process import Worker, WorkerError

    copy_module(Path(notes_record.python), FIXTURES / "vf_harness.py")
    with pytest.raises(WorkerError, match=r"vf_harness is not a verifiers environment: .* exports CompactingHarness"):
        await Worker.start(notes_record.python, "vf_harness")


async def test_a_taskset_wide_toolset_is_served_with_each_rollouts_state(notes_record: Any) -> None:
    """One shared server (set up once per worker, as verifiers does) and two interleaved rollouts: each call sees
    its own rollout's state, and each rollout is scored on its own state."""
    from ngym_verifiers.install import copy_module
    from ngym_verifiers.process import Worker

    copy_module(Path(notes_record.python), FIXTURES / "vf_shared.py")
    worker = await Worker.start(notes_record.python, "vf_shared")
    try:
        described = await worker.ask("describe")
        assert [t["name"] for t in described["tools"]] == ["pad_roundtrip"]
        for session, idx in (("a", 0), ("b", 1)):
            await worker.ask("seed", session=session, row={"idx": idx})
        outputs = [
            (await worker.ask("tool", session=s, name="pad_roundtrip", arguments={"word": w}))["output"]
            for s, w in (("a", "alpha"), ("b", "bravo"), ("a", "again"))
        ]
        assert outputs == ["->alpha (setups 1)", "->bravo (setups 1)", "alpha->again (setups 1)"]
        scored = await worker.ask("verify", session="b", messages=[{"role": "assistant", "content": "bravo"}])
        assert scored["reward"] == 1.0
        scored = await worker.ask("verify", session="a", messages=[{"role": "assistant", "content": "alpha"}])
        assert scored["reward"] == 0.0  # a's slot holds "again"
    finally:
        await worker.stop()


#: What a model may send for ``add(a: int, b: int)``: numbers as strings, an integral float, a fractional one.
TYPED_CALLS = [{"a": 3, "b": 4}, {"a": "3", "b": "4"}, {"a": 3.0, "b": 4}, {"a": 3.7, "b": 4}, {"a": 3}]

#: What a model may send for ``label(flag: bool, tags: list[int], where: Point, note: str | None = None, times:
#: int = 2)``: bools as strings and numbers, lists of other types, a nested object with extra or missing fields,
#: optional and defaulted parameters left out or null, extra and missing arguments.
LABEL_CALLS = [
    {"flag": True, "tags": [1, 2], "where": {"x": 1}},
    {"flag": "true", "tags": ["1", 2.0], "where": {"x": "3", "y": "1.5"}},
    {"flag": 1, "tags": [], "where": {"x": 1, "y": 2}, "note": "n", "times": 5},
    {"flag": "yes", "tags": [1], "where": {"x": 1}, "note": None},
    {"flag": 2, "tags": [1], "where": {"x": 1}},
    {"flag": True, "tags": "1,2", "where": {"x": 1}},
    {"flag": True, "tags": [1.5], "where": {"x": 1}},
    {"flag": True, "tags": [1], "where": {"x": 1, "z": 9}},
    {"flag": True, "tags": [1], "where": {"y": 1}},
    {"flag": True, "tags": [1], "where": [1, 2]},
    {"flag": True, "tags": [1], "where": '{"x": 1}'},
    {"flag": True, "tags": [1], "where": {"x": 1}, "times": None},
    {"flag": True, "tags": [1], "where": {"x": 1}, "extra": 1},
    {"flag": True, "where": {"x": 1}},
    {"flag": None, "tags": [1], "where": {"x": 1}},
    {},
]
TYPED_CALLS_BY_TOOL = {"add": TYPED_CALLS, "label": LABEL_CALLS}

#: verifiers' own tool server (MCPServer with the toolset registered, as ``Toolset._serve`` does), called in process
#: in the environment's venv; the text is what verifiers' harness shows the model (``mcp_content_to_chat_content``).
VERIFIERS_TOOL_SERVER = """
import asyncio, json, sys
from mcp.server.mcpserver import MCPServer
from verifiers.v1.harnesses.utils.mcp import mcp_content_to_chat_content
import vf_typed

async def main():
    toolset = vf_typed.CalcToolset(vf_typed.CalcConfig().tools)
    server = MCPServer("calc")
    toolset.register(server)
    out = []
    for tool, arguments in json.loads(sys.argv[1]):
        try:
            result = await server.call_tool(tool, arguments)
            out.append([mcp_content_to_chat_content(result.content), bool(result.is_error)])
        except Exception as exc:  # what MCPServer's call handler turns into an error result
            out.append([str(exc), True])
    print(json.dumps(out))

asyncio.run(main())
"""


async def test_tool_arguments_are_validated_as_verifiers_validates_them(notes_record: Any) -> None:
    """Numbers as strings are coerced, an integral float is an int, a fractional float and a missing argument are
    the same errors, with the same text, as verifiers' own tool server gives the model; so are bools, lists, a
    nested object, optional and defaulted parameters, extra and missing arguments."""
    from ngym_verifiers.install import copy_module
    from ngym_verifiers.process import Worker

    copy_module(Path(notes_record.python), FIXTURES / "vf_typed.py")
    calls = [(tool, arguments) for tool, listed in TYPED_CALLS_BY_TOOL.items() for arguments in listed]
    theirs = run_in_venv(notes_record.python, "-c", VERIFIERS_TOOL_SERVER, json.dumps(calls))
    worker = await Worker.start(notes_record.python, "vf_typed")
    try:
        await worker.ask("seed", session="s", row={"idx": 0})
        ours = []
        for tool, arguments in calls:
            answer = await worker.ask("tool", session="s", name=f"calc_{tool}", arguments=arguments)
            ours.append([answer["output"], bool(answer.get("is_error"))])
    finally:
        await worker.stop()
    assert [o[0] for o in ours[:3]] == ["7", "7", "7"]  # "3" + "4" is 7, not "34"; 3.0 is 3, not "7.0"
    assert ours[3][1] and "int_from_float" in ours[3][0]
    differing = [
        f"{c}\n  ngym:      {o}\n  verifiers: {t}" for c, o, t in zip(calls, ours, theirs, strict=False) if o != t
    ]
    assert ours == theirs, "\n".join(differing)
