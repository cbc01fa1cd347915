"""Example data made at install (rows + recorded rollouts), and ngym validate/profile's view of it.

The worker is a scripted stand-in here (no verifiers venv is needed); the real environments are checked in
``tests/conformance/test_verifiers_commands.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ngym_verifiers import examples, records
from ngym_verifiers import server as server_module
from ngym_verifiers.process import WorkerError
from ngym_verifiers.records import Record

from ngym.plugins.registry import reset_registry
from ngym.targets import resolve
from ngym.validation import validate_async

TOOLS = [
    {
        "name": "add_note",
        "description": "Add a note.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }
]
DESCRIBED: dict[str, Any] = {
    "api": "v1",
    "tools": TOOLS,
    "examples": [
        {"seed": {"idx": 0}, "prompt": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": [{"type": "text", "text": "Say apple."}]}],
         "tools": TOOLS, "answer": "apple"},
        {"seed": {"idx": 1}, "prompt": "Say pear.", "tools": TOOLS, "answer": None},
        {"seed": {"idx": 2}, "prompt": "Say fig.", "tools": TOOLS, "answer": "fig"},
    ],
}  # fmt: skip


class ScoringWorker:
    """Scores 1.0 when the last assistant text is the task's answer, else 0.0; ``broken`` tasks fail to score."""

    def __init__(self, broken: tuple[int, ...] = ()) -> None:
        self.broken = broken
        self.seeded: dict[str, int] = {}
        self.closed: list[str] = []

    async def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        if op == "seed":
            self.seeded[fields["session"]] = fields["row"].get("idx", 0)
            return {"prompt": []}
        if op == "verify":
            idx = self.seeded[fields["session"]]
            if idx in self.broken:
                raise WorkerError("failed", "ZeroDivisionError: division by zero")
            answer = DESCRIBED["examples"][idx]["answer"] or ""
            texts = [m.get("content") for m in fields["messages"] if m.get("role") == "assistant"]
            score = 1.0 if texts and texts[-1] == answer and answer else 0.0
            return {"reward": score, "rewards": {"exact": {"score": score, "weight": 1.0}}}
        if op == "close":
            self.closed.append(fields["session"])
            return {}
        if op == "describe":
            return dict(DESCRIBED)
        raise AssertionError(op)

    async def stop(self) -> None:
        pass


@pytest.fixture
def records_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path / "records"))
    reset_registry()
    yield tmp_path / "records"
    reset_registry()


async def test_rows_carry_the_seed_the_prompt_and_the_tools_and_rollouts_the_environments_own_score() -> None:
    worker = ScoringWorker(broken=(2,))
    made = await examples.record(worker, DESCRIBED)  # type: ignore[arg-type]
    assert [row["verifiers"] for row in made.rows] == [{"idx": 0}, {"idx": 1}, {"idx": 2}]
    params = made.rows[0]["responses_create_params"]
    assert params["input"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say apple."}]
    assert params["tools"][0] == {"type": "function", "name": "add_note", "description": "Add a note.",
                                  "parameters": TOOLS[0]["parameters"], "strict": False}  # fmt: skip
    assert made.rows[1]["responses_create_params"]["input"] == [{"role": "user", "content": "Say pear."}]
    # the reference answer scored by the environment (1.0); no answer: an empty reply, scored as it scores (0.0)
    assert [r["reward"] for r in made.rollouts] == [1.0, 0.0]
    assert made.rollouts[0]["response"]["output"][0]["content"][0]["text"] == "apple"
    # a task whose scoring failed has no recorded rollout (never a made-up reward), and says why
    assert len(made.problems) == 1 and "task 2" in made.problems[0] and "ZeroDivisionError" in made.problems[0]
    assert sorted(worker.closed) == [f"ngym-install-example-{i}" for i in range(3)]  # every install session closed


async def test_an_installed_environment_validates_from_the_examples_made_at_install(
    records_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await examples.record(ScoringWorker(), DESCRIBED)  # type: ignore[arg-type]
    folder = examples.write("vf_fake", made)
    records.write(Record(name="vf_fake", module="vf_fake", python="/nonexistent", source="verifiers:vf_fake",
                         distribution=None, domain="agent", api="v1", tools=TOOLS))  # fmt: skip
    lines = (folder / "data" / "example_rollouts.jsonl").read_text().splitlines()
    assert [json.loads(line)["reward"] for line in lines] == [1.0, 0.0, 1.0]

    async def start(*args: Any) -> ScoringWorker:
        return ScoringWorker()

    monkeypatch.setattr(server_module.Worker, "start", start)
    assert resolve("vf_fake").folder == folder  # every command finds the examples there
    report = await validate_async("vf_fake")
    assert report.ok, report.render()
    assert "3 rollouts replayed, rewards [1.0, 0.0, 1.0]" in report.render()


async def test_a_reinstall_without_rollouts_removes_the_old_ones(records_dir: Path) -> None:
    made = await examples.record(ScoringWorker(), DESCRIBED)  # type: ignore[arg-type]
    folder = examples.write("vf_fake", made)
    examples.write("vf_fake", examples.Examples(rows=made.rows))
    assert (folder / "data" / "example.jsonl").is_file()
    assert not (folder / "data" / "example_rollouts.jsonl").exists()
    examples.remove("vf_fake")
    assert not folder.exists()


def test_containerize_without_the_venv_stops_with_the_reason(records_dir: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    records.write(Record(name="vf_fake", module="vf_fake", python="/nonexistent", source="verifiers:vf_fake",
                         distribution=None, domain="agent", api="v1", tools=TOOLS))  # fmt: skip
    command = [
        sys.executable,
        "-m",
        "ngym.cli",
        "containerize",
        "vf_fake",
        "--no-build",
        "--output",
        str(tmp_path / "c"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "vf_fake: its interpreter /nonexistent is missing, so its virtualenv cannot go into an image" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "c").exists()
