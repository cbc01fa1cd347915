"""Train with TRL's own ``GRPOTrainer`` against ngym environments; run in the trainer venv (tools/trainer_venv.sh).

``python trl_driver.py SPEC.json OUT.json``. For each run of the spec: a tiny Qwen2 initialised here (hidden 32,
2 layers), a byte-level BPE tokenizer trained here with TRL's shipped ``qwen3_chat_template``, and the three slots
from ``ngym.train.trl`` (one environment by URL, or a fleet's by name). Only the model's ``generate`` is replaced:
it emits a recorded rollout's tool calls, turn by turn, then its final answer (the last of each group of
generations answers at once, without a tool); TRL parses the calls, runs the
environment's tools over NeMo Gym's wire, and scores with ``/verify``. Written to OUT.json per run: every sample
TRL logged (prompt, completion, reward; NaN as null), the reward means TRL logged, the optimizer steps, the live
sessions each environment reported while a batch was being generated, and the session cookies of that batch.

A run's ``mask`` ({"step": S, "index": I}) closes generation I's session of step S (``POST /close_session`` with
its cookie) before its first tool call: the rollout whose session is lost. A run's ``kill`` ({"step": S, "pid":
P}) kills a fleet unit's process group once step S's sessions are seeded: its environment is gone mid-run.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from transformers.utils import get_json_schema
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen3_chat_template

from ngym.train import trl as ngym_trl

N = 4  # generations per prompt: one optimizer step's batch
NO_TOOL_ANSWER = "I cannot tell."
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]


def scripts_of(path: str) -> list[dict[str, Any]]:
    """Each recorded rollout as {user, row, turns}: a turn is a list of tool calls, the last turn the final text."""
    out = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        turns: list[Any] = []
        current: list[dict[str, Any]] = []
        final = ""
        for item in record["response"]["output"]:
            if item.get("type") == "function_call":
                current.append({"name": item["name"], "arguments": json.loads(item.get("arguments") or "{}")})
            else:
                if current:
                    turns.append(current)
                    current = []
                if item.get("type") == "message":
                    final = "".join(p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict))
        if current:
            turns.append(current)
        row = {k: v for k, v in record.items() if k not in ("response", "reward")}
        messages = row["responses_create_params"]["input"]
        user = messages if isinstance(messages, str) else [m for m in messages if m.get("role") == "user"][-1]
        user_text = user if isinstance(user, str) else user["content"]
        if not isinstance(user_text, str):
            user_text = "".join(p.get("text", "") for p in user_text)
        out.append(
            {
                "user": user_text,
                "row": row,
                "turns": turns,
                "final": final or "Done.",
                "recorded_reward": record.get("reward"),
            }
        )
    return out


def make_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=SPECIALS[1:]
    )
    fast.chat_template = qwen3_chat_template
    fast.padding_side = "left"
    return fast


def render(turn: list[dict[str, Any]] | str) -> str:
    if isinstance(turn, str):
        return turn
    return "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in turn)


def submit(answer: str) -> dict[str, Any]:
    """A call of the ORS front's final-answer tool."""
    return {"name": "submit_answer", "arguments": {"answer": answer}}


class Recorder(TrainerCallback):
    """After each optimizer step: the samples TRL logged for it (its own ``_logs``)."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.samples: list[dict[str, Any]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = self.trainer._logs
        rewards = logs["rewards"][self.trainer.reward_func_names[0]]
        for prompt, completion, reward in zip(logs["prompt"], logs["completion"], rewards, strict=True):
            value = None if reward is None or math.isnan(reward) else float(reward)
            self.samples.append(
                {"step": state.global_step, "prompt": prompt, "completion": completion, "reward": value}
            )


def health(url: str) -> dict[str, Any]:
    """The environment's /health answer; {} when it gives none (a fleet's dead unit: its front's 503)."""
    answer = httpx.get(f"{url}/health", timeout=30)
    return answer.json() if answer.status_code == 200 else {}


def kill_unit(pid: int) -> None:
    """Kill a fleet unit's process group (``ngym run`` leads it) and wait until its leader is gone."""
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"unit {pid} still there after SIGKILL")


def one_run(run: dict[str, Any]) -> dict[str, Any]:
    envs = run["environments"]  # name -> {url, rollouts}
    scripts = {name: scripts_of(spec["rollouts"]) for name, spec in envs.items()}
    ors = run.get("ors")  # {"url", "env_name", "split"}: TRL's own OpenRewardSpec against the server's /ors front
    if ors:
        os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = ors["url"].rstrip("/") + "/"
        from trl.experimental.openreward import OpenRewardSpec

        spec = OpenRewardSpec(ors["url"], env_name=ors["env_name"], split=ors["split"], **ors.get("options", {}))
        trainer_kwargs: dict[str, Any] = {
            "train_dataset": spec.train_dataset,
            "environment_factory": spec.environment_factory,
            "reward_funcs": spec.reward_funcs,
        }
        ((name, env_spec),) = envs.items()
        urls = {name: env_spec["url"]}
    elif run.get("fleet"):
        slots = ngym_trl.fleet(run["fleet"], {name: spec["rollouts"] for name, spec in envs.items()})
        urls = ngym_trl.fleet_urls(run["fleet"])
    elif len(envs) == 1:
        ((name, spec),) = envs.items()
        slots = ngym_trl.environment(spec["url"], spec["rollouts"], name=name)
        urls = {name: spec["url"]}
    else:
        slots = ngym_trl.blend({n: (s["url"], s["rollouts"]) for n, s in envs.items()})
        urls = {n: s["url"] for n, s in envs.items()}
    if run.get("interleave"):  # one row of each environment in turn, so every optimizer step meets another one
        by_env: dict[str, list[Any]] = {}
        for example in slots.examples:
            by_env.setdefault(example["environment"], []).append(example)
        slots.examples = [e for group in zip(*by_env.values(), strict=False) for e in group]
    if not ors:
        trainer_kwargs = slots.trainer_kwargs()

    texts = [json.dumps(s["row"]) + render(t) + s["final"] for ss in scripts.values() for s in ss for t in s["turns"]]
    texts += [json.dumps(s["row"]) + s["final"] + NO_TOOL_ANSWER for ss in scripts.values() for s in ss]
    texts += [render([submit(s["final"])]) for ss in scripts.values() for s in ss]
    tokenizer = make_tokenizer(texts * 2)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=65536,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)

    all_scripts = [(name, s) for name, ss in scripts.items() for s in ss]
    state: dict[str, Any] = {"generate_calls": 0, "batches": []}
    trainer_ref: dict[str, Any] = {}
    eos = tokenizer.eos_token_id

    def match(text: str) -> tuple[str, dict[str, Any]]:
        found = [(len(s["user"]), name, s) for name, s in all_scripts if s["user"] and s["user"] in text]
        if not found:
            raise AssertionError(f"no recorded rollout matches the prompt: {text[-300:]!r}")
        _, name, script = max(found, key=lambda f: f[0])
        return name, script

    def generate(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_: Any) -> torch.Tensor:
        trainer = trainer_ref["trainer"]
        new_ids = []
        turns_seen = []
        masks = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        for index, (ids, mask) in enumerate(zip(input_ids, masks, strict=True)):
            text = tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=False)
            _, script = match(text)
            turn = text.count("<|im_start|>assistant") - 1
            turns_seen.append(turn)
            # The group's last generation answers at once, without a tool: rewards differ within the group, so
            # GRPO's advantages, and its update, are not all zero. Over ORS an answer is the final-answer tool's.
            no_tool = (turn == 0 and index == N - 1) or NO_TOOL_ANSWER in text
            if ors:
                steps = [[submit(NO_TOOL_ANSWER)]] if no_tool else [*script["turns"], [submit(script["final"])]]
                steps.append("Done.")
            else:
                steps = [NO_TOOL_ANSWER] if no_tool else [*script["turns"], script["final"]]
            reply = render(steps[min(turn, len(steps) - 1)])
            new_ids.append(tokenizer.encode(reply, add_special_tokens=False) + [eos])
        if all(t == 0 for t in turns_seen):  # a new batch: every generation is at its first turn
            environments = list(trainer.environments or [])
            batch = {
                "step": trainer.state.global_step,
                "cookies": [
                    (e._rollout.cookies if e._rollout else {}).get("ngym_session", "") for e in environments if not ors
                ],
                "live_sessions": {n: health(u).get("live_sessions") for n, u in urls.items()},
            }
            kill = run.get("kill")  # {"step": S, "pid": P}: a fleet unit dies after the batch's sessions are seeded
            if kill and kill["step"] == trainer.state.global_step:
                kill_unit(kill["pid"])
                batch["killed"] = kill["pid"]
            mask_spec = run.get("mask")
            if mask_spec and mask_spec["step"] == trainer.state.global_step:
                victim = environments[mask_spec["index"]]
                cookie = "; ".join(f"{k}={v}" for k, v in victim._rollout.cookies.items())
                closed = httpx.post(f"{victim._url}/close_session", json={}, headers={"cookie": cookie}, timeout=30)
                batch["masked"] = {"index": mask_spec["index"], "close_status": closed.status_code}
            state["batches"].append(batch)
        state["generate_calls"] += 1
        width = max(len(n) for n in new_ids)
        padded = [n + [tokenizer.pad_token_id] * (width - len(n)) for n in new_ids]
        return torch.cat([input_ids, torch.tensor(padded, dtype=input_ids.dtype)], dim=1)

    model.generate = generate  # the scripted policy: the only part of the run that is not TRL's own
    args = GRPOConfig(
        output_dir=run["output_dir"],
        use_cpu=True,
        per_device_train_batch_size=N,
        num_generations=N,
        max_completion_length=run.get("max_completion_length", 8192),
        max_steps=run.get("max_steps", 2),
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        shuffle_dataset=False,
        learning_rate=1e-3,
        max_tool_calling_iterations=run.get("max_tool_calling_iterations", 12),
        seed=0,
    )
    recorder = Recorder()
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, callbacks=[recorder], **trainer_kwargs)
    recorder.trainer = trainer_ref["trainer"] = trainer
    # The tools as TRL itself describes them to the model (its own extraction, transformers' schema builder)
    tool_schemas = {
        str(env): [get_json_schema(tool)["function"] for tool in tools] for env, tools in trainer._env_tools.items()
    }
    trainer.train()

    for sample in recorder.samples:
        user = [m for m in sample["prompt"] if m.get("role") == "user"][-1]["content"]
        name, script = match(user)
        sample["environment"] = name
        sample["row"] = script["row"]
    metric = f"rewards/{trainer.reward_func_names[0]}/mean"
    return {
        "label": run["label"],
        "global_step": trainer.state.global_step,
        "samples": recorder.samples,
        "logged_means": [h[metric] for h in trainer.state.log_history if metric in h],
        "tool_call_frequency": [h.get("tools/call_frequency") for h in trainer.state.log_history if "loss" in h],
        "grad_norms": [float(h["grad_norm"]) for h in trainer.state.log_history if "grad_norm" in h],
        "batches": state["batches"],
        "tool_schemas": tool_schemas,
        "live_sessions_after": {n: health(u).get("live_sessions") for n, u in urls.items()},
        "urls": urls,
        "versions": {
            "trl": __import__("trl").__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    results = [one_run(run) for run in spec["runs"]]
    Path(sys.argv[2]).write_text(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
