"""An ORS environment shipped as a distribution: say the task's word back (reward 1.0 when it matches)."""

from openreward.environments import Environment, JSONObject, TextBlock, ToolOutput, tool
from pydantic import BaseModel


class Say(BaseModel):
    word: str


class EchoEnvironment(Environment):
    """Say the word back."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return [{"word": "apple"}, {"word": "pear"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Say {self.task_spec['word']}.")]

    @tool
    async def say(self, params: Say) -> ToolOutput:
        """Say a word; this ends the episode."""
        right = params.word == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text=params.word)], reward=float(right), finished=True)
