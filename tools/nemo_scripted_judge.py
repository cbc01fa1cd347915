"""A scripted judge for replaying NeMo Gym environments offline: an OpenAI-compatible server (``/v1/responses``
and ``/v1/chat/completions``) that answers every request with one fixed text.

Replaying a judge environment's example rollouts needs a judge; the recorded rows do not hold what the judge
said. With the same scripted verdict on both sides (NeMo Gym's own ``ServerClient`` in
``nemo_replay_inprocess.py``, ``ngym run --model-url NAME=URL`` under ngym), both run the environment's whole
verify path (prompt building, the HTTP call, parsing the verdict, the reward) and must agree.

    python tools/nemo_scripted_judge.py PORT "[[A=B]]"
"""

from __future__ import annotations

import sys
import time
from typing import Any

from fastapi import FastAPI


def create_judge_app(text: str) -> FastAPI:
    app = FastAPI(title="scripted judge")
    calls: list[str] = []

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": "scripted-judge", "object": "model", "created": 0, "owned_by": "ngym"}],
        }

    @app.post("/v1/responses")
    async def responses(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("responses")
        return {
            "id": f"resp_scripted_{len(calls)}",
            "object": "response",
            "created_at": time.time(),
            "model": body.get("model") or "scripted-judge",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": f"msg_scripted_{len(calls)}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 1,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 1,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 2,
            },
        }

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("chat")
        return {
            "id": f"chatcmpl-scripted-{len(calls)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or "scripted-judge",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    @app.get("/calls")
    async def count() -> dict[str, int]:
        return {"calls": len(calls)}

    return app


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(create_judge_app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
