"""Runs in the trainer venv (tools/trainer_venv.sh): verl 0.9.1's own multi-turn ``ToolAgentLoop`` (its state
machine, hermes tool parser, Continuous Token builder, create/execute/release around each call) with the tools its
config loader made from ``ngym train verl-tools``; then ngym's ``compute_score`` on what the loop hands verl's reward
function.

Only the model is scripted (the loop's ``server_manager``): it answers each ``generate`` with the next recorded turn
of a rollout, as token ids of a tokenizer trained here (byte-level BPE, nothing downloaded) whose chat template
renders tools, tool calls and tool responses in the hermes format. JSON payload on stdin; prints
``NGYM-RESULT <json>``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
from omegaconf import OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.tool_registry import initialize_tools_from_config
from verl.workers.rollout.replica import TokenOutput

from ngym.train.verl import compute_score, verl_row

# A hermes-style template (tools listed in the system turn, calls in <tool_call>, answers in <tool_response>).
TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- for m in messages if m.role == 'system' %}{{ m.content }}\n{% endfor %}"
    "# Tools\n{%- for t in tools %}\n{{ t | tojson }}{%- endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' and tools %}"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=800, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    raw.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    fast.chat_template = TEMPLATE
    return fast


def model_turns(output: list[dict[str, Any]]) -> list[str]:
    """The recorded model turns as the text a model writes: each call its own turn, then the final answer."""
    turns = []
    for item in output:
        if item.get("type") == "function_call":
            call = {"name": item["name"], "arguments": json.loads(item["arguments"])}
            turns.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        elif item.get("type") == "message" and item.get("role") == "assistant":
            turns.append("".join(part.get("text", "") for part in item.get("content", [])))
    return turns


class ScriptedServer:
    """The loop's ``server_manager``: the next recorded turn of the rollout whose prompt this is."""

    def __init__(self, tok: PreTrainedTokenizerFast, scripts: dict[str, list[str]]) -> None:
        self.tok = tok
        self.scripts = scripts  # keyed by a marker in the prompt
        self.calls = 0

    async def generate(self, *, request_id: str, prompt_ids: list[int], **_: Any) -> TokenOutput:
        self.calls += 1
        text = self.tok.decode(prompt_ids)
        key = next(k for k in self.scripts if k in text)
        answered = text.count("<tool_response>")
        turns = self.scripts[key]
        turn = turns[min(answered, len(turns) - 1)]
        ids = self.tok.encode(turn, add_special_tokens=False) + [self.tok.convert_tokens_to_ids("<|im_end|>")]
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="completed")


async def main_async(payload: dict[str, Any]) -> dict[str, Any]:
    rollouts = payload["rollouts"]
    tools = initialize_tools_from_config(payload["config"])
    names = [t.name for t in tools]
    scripts: dict[str, list[str]] = {}
    rows = []
    for index, rollout in enumerate(rollouts):
        row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
        rows.append(verl_row(row, payload["url"], names, index=index))
        scripts[f"[rollout {index}]"] = model_turns(rollout["response"]["output"])
    corpus = [json.dumps(r) for r in rollouts] + [TEMPLATE]
    tok = tokenizer(corpus)
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 8192,
                    "response_length": 8192,
                    "full_determinism": False,
                    "multi_turn": {
                        "max_user_turns": 16,
                        "max_assistant_turns": 16,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": 100000,
                        "tool_response_truncate_side": "middle",
                        "format": "hermes",
                    },
                }
            }
        }
    )
    server = ScriptedServer(tok, scripts)
    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tok,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(OmegaConf.create({})),
        tools=ToolListWrap(tools),
    )

    async def run(index: int, row: dict[str, Any]) -> Any:
        prompt = [dict(m) for m in row["prompt"]]
        prompt[-1]["content"] = f"[rollout {index}] " + prompt[-1]["content"]  # which script answers this prompt
        return await loop.run(
            {"temperature": 1.0}, raw_prompt=prompt, tools_kwargs=row["extra_info"]["tools_kwargs"], extra_info={}
        )

    async def score(row: dict[str, Any], output: Any) -> dict[str, Any]:
        # verl's reward managers hand compute_score the row's extra_info updated with the loop's extra fields
        extra_info = {**row["extra_info"], **output.extra_fields}
        response = tok.decode(output.response_ids)
        held = dict(extra_info.get("ngym_rollout") or {})
        scored = await asyncio.to_thread(
            compute_score, row["data_source"], response, "", extra_info, on_masked=payload.get("on_masked", "raise")
        )
        return {
            "score": None if scored["score"] != scored["score"] else scored["score"],
            "tool_rewards": output.extra_fields.get("tool_rewards"),
            "tool_calls_in_response": response.count("<tool_call>"),
            "tool_outputs_in_response": response.count("<tool_response>"),
            "num_turns": output.num_turns,
            "trajectory": [i["type"] for i in held.get("output", [])],
        }

    # ``occupy``: that many sessions are seeded (the server full at its max_sessions) while the loop runs, and closed
    # before scoring: the environment refused the tools' seeds but is there again for the reward function.
    occupied = [_seed(payload["url"], rows[0]) for _ in range(payload.get("occupy", 0))]
    outputs = await asyncio.gather(*(run(i, r) for i, r in enumerate(rows)))
    for cookie in occupied:
        httpx.post(f"{payload['url']}/close_session", json={}, headers={"cookie": cookie}, timeout=30)
    results = await asyncio.gather(*(score(r, o) for r, o in zip(rows, outputs, strict=True)))
    return {"results": list(results), "generate_calls": server.calls}


def _seed(url: str, row: dict[str, Any]) -> str:
    answer = httpx.post(f"{url}/seed_session", json=json.loads(row["extra_info"]["ngym_row"]), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.headers["set-cookie"].split(";")[0]


def main() -> None:
    payload = json.load(sys.stdin)
    print("NGYM-RESULT " + json.dumps(asyncio.run(main_async(payload))))


if __name__ == "__main__":
    main()
