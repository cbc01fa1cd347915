"""verifiers 0.4 tasks that need a runtime (``setup(self, trace, runtime)``, a reward taking ``runtime``), under ngym.

``vf_scratch`` (written from verifiers' own template): its setup writes the task's word into the runtime's folder,
and its ``checked`` reward runs a program there that reads it back. Installed with ``ngym install verifiers:...``
(its own cached venv, verifiers 0.4.0), played by ``vf-eval`` with verifiers' own subprocess runtime and through
ngym with the same scripted replies: every reward function's score equal. Then what ngym's runtime adds: a folder
per rollout, removed at close; the environment's venv on ``PATH``; a command past its time limit or its output cap
is killed and masks the rollout (no reward, never 0.0); reads and writes stay in the rollout's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ngym.testing.scripted_model import Turn
from tests.conformance.test_verifiers_fidelity import (
    FIXTURES,
    compare,
    install,
    play_through_ngym,
    vf_eval_rewards,
)

SCRATCH_SCRIPTS: dict[str, list[Turn]] = {
    "amber": ["amber"],  # checked in the runtime and short: 1.0
    "cobalt": ["I am quite sure the word is cobalt"],  # checked, not short: 0.75
    "scarlet": ["crimson"],  # short only: 0.25
}


@pytest.fixture(scope="module")
def scratch_record(records_dir: Path) -> Any:
    return install(str(FIXTURES / "vf_scratch.py"), records_dir, domain="other")


async def test_a_task_needing_a_runtime_is_served_and_scores_as_vf_eval(scratch_record: Any, tmp_path: Path) -> None:
    record = scratch_record
    assert record.api == "v1" and [r["name"] for r in record.rewards] == ["checked", "short"]
    theirs = vf_eval_rewards(record, "vf_scratch", SCRATCH_SCRIPTS, tmp_path)
    assert [theirs[k]["reward"] for k in SCRATCH_SCRIPTS] == [1.0, 0.75, 0.25]  # the scripts play what they claim
    assert all(not row["errors"] for row in theirs.values())
    compare(theirs, await play_through_ngym(record.name, SCRATCH_SCRIPTS))


def folders(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.is_dir())


async def test_each_rollout_has_its_own_folder_removed_at_close(
    scratch_record: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rollouts, two folders holding what their setup wrote; ``python`` is the environment's; a uv script
    (``runtime.run_uv_script``, as verifiers' gsm8k scores) runs there too; close removes a rollout's folder, the
    worker's exit the rest."""
    from ngym_verifiers.process import Worker

    monkeypatch.setenv("NGYM_VERIFIERS_RUNTIME_DIR", str(tmp_path))
    worker = await Worker.start(scratch_record.python, scratch_record.module)
    try:
        await worker.ask("seed", session="a", row={"idx": 0})
        await worker.ask("seed", session="b", row={"idx": 1})
        a, b = folders(tmp_path)
        assert (a / "word.txt").read_text() == "amber" and (b / "word.txt").read_text() == "cobalt"
        # `python` in a runtime is the environment's own (its venv activated), not whatever PATH had first
        assert Path((a / "python.txt").read_text().strip()).parent == Path(scratch_record.python).parent
        scored = await worker.ask("verify", session="a", messages=[{"role": "assistant", "content": "amber"}])
        assert scored["reward"] == 1.0
        scored = await worker.ask("verify", session="b", messages=[{"role": "assistant", "content": "cobalt [uv]"}])
        assert scored["rewards"]["checked"]["score"] == 1.0  # the check, run as a uv script, found the word
        await worker.ask("close", session="a")
        assert folders(tmp_path) == [b]
    finally:
        await worker.stop()
    assert folders(tmp_path) == []  # the worker's exit takes the open rollouts' folders too


async def test_a_runtime_command_past_its_limits_masks_the_rollout(
    scratch_record: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that never ends, one that prints without end, a write outside the folder: the reward fails with the
    reason, so the rollout is masked (no reward), and the worker goes on serving."""
    from ngym_verifiers.process import Worker, WorkerError

    monkeypatch.setenv("NGYM_VERIFIERS_RUNTIME_DIR", str(tmp_path / "runtimes"))
    monkeypatch.setenv("NGYM_VERIFIERS_RUNTIME_OUTPUT_BYTES", "100000")
    # The time limit gets a worker of its own: under a 1 s limit, the other commands (a Python start, on a loaded
    # machine) could hit the limit before what they are there to show.
    for timeout, cases in (
        ("1", [("sleep", r"did not finish within 1 s \(killed; NGYM_VERIFIERS_RUNTIME_TIMEOUT sets the limit\)")]),
        (
            "600",
            [
                ("flood", r"printed more than 100000 bytes on stdout \(killed; NGYM_VERIFIERS_RUNTIME_OUTPUT_BYTES"),
                ("escape", r"'../escaped.txt' is outside the rollout's folder"),
            ],
        ),
    ):
        monkeypatch.setenv("NGYM_VERIFIERS_RUNTIME_TIMEOUT", timeout)
        worker = await Worker.start(scratch_record.python, scratch_record.module)
        try:
            for mode, reason in cases:
                await worker.ask("seed", session=mode, row={"idx": 0})
                reply = [{"role": "assistant", "content": f"amber [{mode}]"}]
                with pytest.raises(WorkerError, match=reason) as failed:
                    await worker.ask("verify", session=mode, messages=reply)
                assert failed.value.kind == "failed"
            if timeout != "1":
                assert not (tmp_path / "runtimes" / "escaped.txt").exists()
                scored = await worker.ask("verify", session=mode, messages=[{"role": "assistant", "content": "amber"}])
                assert scored["reward"] == 1.0  # still serving, and that rollout's folder still there
        finally:
            await worker.stop()


async def test_a_masked_runtime_reward_reaches_the_client_as_no_reward(
    scratch_record: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ngym's wire: the failing runtime command is a masked sample with the reason, not a reward of 0.0."""
    from ngym.testing import RolloutClient, app_for, serve_in_process

    monkeypatch.setenv("NGYM_VERIFIERS_RUNTIME_TIMEOUT", "1")
    async with serve_in_process(app_for(scratch_record.name)) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {"verifiers": {"idx": 0}})
        message = {"type": "message", "id": "m0", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "amber [sleep]", "annotations": []}]}  # fmt: skip
        response = {"id": "r", "created_at": 0.0, "model": "m", "object": "response", "parallel_tool_calls": True,
                    "tool_choice": "auto", "tools": [], "output": [message]}  # fmt: skip
        verified = await client.call(
            "/verify", {"responses_create_params": {"input": []}, "response": response, "verifiers": {"idx": 0}}
        )
    assert verified["mask_sample"] is True
    assert "did not finish within 1 s" in verified["failure_reason"]
