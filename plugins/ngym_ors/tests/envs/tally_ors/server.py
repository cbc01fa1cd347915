"""Two small Open Reward Standard environments, written as ``orwd init`` lays one out (``Server([...]).run()``).

- ``TallyEnvironment``: add amounts until the total is the task's target, then ``submit`` (reward 1.0 on target,
  less the further off; ``finished``); ``hint`` costs -0.1 (a non-null reward before the outcome); ``add`` with a
  negative amount raises (a tool error); ``crash`` ends the server process.
- ``QuizEnvironment``: a plain final answer ends the episode through its ``@terminal`` tool ``answer``.
"""

import os

from openreward.environments import Environment, JSONObject, Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel

TARGETS = {"train": [3, 5, 8], "test": [4]}
QUESTIONS = [{"question": "What is 2+2?", "answer": "4"}, {"question": "What is 3*3?", "answer": "9"}]


class Add(BaseModel):
    amount: int


class Crash(BaseModel):
    code: int


class Answer(BaseModel):
    answer: str


class TallyEnvironment(Environment):
    """Add amounts until the total is the target, then submit."""

    def __init__(self, task_spec: JSONObject = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 - ORS's signature
        super().__init__(task_spec)
        self.total = 0

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return [{"id": f"{split}-{i}", "target": t} for i, t in enumerate(TARGETS[split])]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Add amounts until the total is {self.task_spec['target']}, then submit.")]

    @tool
    async def add(self, params: Add) -> ToolOutput:
        """Add an amount (a non-negative integer) to the total."""
        if params.amount < 0:
            raise ValueError(f"amounts must not be negative (got {params.amount})")
        self.total += params.amount
        return ToolOutput(blocks=[TextBlock(text=f"total: {self.total}")])

    @tool
    async def hint(self) -> ToolOutput:
        """How far the total is from the target (costs 0.1)."""
        gap = int(self.task_spec["target"]) - self.total
        return ToolOutput(blocks=[TextBlock(text=f"{gap} to go")], reward=-0.1)

    @tool
    async def crash(self, params: Crash) -> ToolOutput:
        """Stop the whole server process (a broken environment)."""
        os._exit(params.code)

    @tool
    async def submit(self) -> ToolOutput:
        """Submit the total; this ends the episode."""
        target = int(self.task_spec["target"])
        reward = max(0.0, 1.0 - abs(target - self.total) / target)
        return ToolOutput(blocks=[TextBlock(text=f"submitted {self.total}")], reward=reward, finished=True)


class QuizEnvironment(Environment):
    """Answer the question in plain text."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return QUESTIONS

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=str(self.task_spec["question"]))]

    @tool
    async def scratch(self, params: Answer) -> ToolOutput:
        """Think aloud (no effect)."""
        return ToolOutput(blocks=[TextBlock(text="noted")])

    @terminal
    @tool
    async def answer(self, params: Answer) -> ToolOutput:
        """Your final answer."""
        right = params.answer.strip() == self.task_spec["answer"]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=float(right), finished=True)


if __name__ == "__main__":
    Server([TallyEnvironment, QuizEnvironment]).run()
