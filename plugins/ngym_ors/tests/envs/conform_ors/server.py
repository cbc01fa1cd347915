"""An Open Reward Standard environment for the conformance tests: served by ``openreward.environments.Server`` and
by ngym (``ngym install ors:``), the same requests must get the same answers.

``LedgerEnvironment``: ``deposit`` an amount (an integer, with an optional memo), ``balance`` (no input; a step
reward of -0.1), ``close`` ends the episode (reward 1.0 when the balance is the task's target, else 0.0),
``explode`` raises.
"""

from openreward.environments import Environment, JSONObject, Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel

TARGETS = {"train": [2, 5, 7], "test": [4]}


class Deposit(BaseModel):
    amount: int
    memo: str = ""


class LedgerEnvironment(Environment):
    """Deposit amounts until the balance is the target, then close the ledger."""

    def __init__(self, task_spec: JSONObject = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 - ORS's signature
        super().__init__(task_spec)
        self.balance_now = 0

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return [{"id": f"{split}-{i}", "target": t} for i, t in enumerate(TARGETS[split])]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Deposit until the balance is {self.task_spec['target']}, then close.")]

    @tool
    async def deposit(self, params: Deposit) -> ToolOutput:
        """Deposit an amount."""
        self.balance_now += params.amount
        return ToolOutput(blocks=[TextBlock(text=f"balance: {self.balance_now}")])

    @tool
    async def balance(self) -> ToolOutput:
        """The balance (costs 0.1)."""
        return ToolOutput(blocks=[TextBlock(text=str(self.balance_now))], reward=-0.1)

    @tool
    async def close(self) -> ToolOutput:
        """Close the ledger; this ends the episode."""
        right = self.balance_now == int(self.task_spec["target"])
        return ToolOutput(blocks=[TextBlock(text=f"closed at {self.balance_now}")], reward=float(right), finished=True)

    @tool
    async def explode(self) -> ToolOutput:
        """Raise an error (a broken tool)."""
        raise RuntimeError("the ledger exploded")


if __name__ == "__main__":
    Server([LedgerEnvironment]).run()
