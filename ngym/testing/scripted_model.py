"""A scripted OpenAI-compatible model (``POST /v1/chat/completions``, streamed or not) on a loopback port: the
model's side of a rollout fixed in advance, for tests whose subject is everything but the model.

Each script is keyed by a word of the task's prompt and holds the assistant turns in order: a turn is a
list of tool calls ``(name, arguments)`` or a final text. The turn answered is the number of assistant
messages the request already carries, so the same script plays the same rollout whoever drives it (another
framework's own rollout loop, or ngym's tool routes). Every tool message the model is sent is recorded, keyed by
the script (``tool_outputs``)::

    with ScriptedModel({"weather": [[("get_weather", {"city": "Paris"})], "It is sunny."]}) as model:
        run_an_agent(base_url=model.base_url)     # http://127.0.0.1:<port>/v1
        model.tool_outputs["weather"]             # the tool outputs the agent sent back
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Turn = str | list[tuple[str, dict[str, Any]]]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class ScriptedModel:
    """The scripted model's server (see the module's docstring); started and stopped as a context manager."""

    def __init__(self, scripts: dict[str, list[Turn]]) -> None:
        self.scripts = scripts
        self.tool_outputs: dict[str, list[str]] = {key: [] for key in scripts}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def key_of(self, messages: list[dict[str, Any]]) -> str:
        prompt = " ".join(_text(m.get("content")) for m in messages if m.get("role") in ("user", "system"))
        for key in self.scripts:
            if key in prompt:
                return key
        raise KeyError(f"no script for prompt {prompt[:200]!r}")

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages", [])
        key = self.key_of(messages)
        turn_index = sum(1 for m in messages if m.get("role") == "assistant")
        tool_messages = [m for m in messages if m.get("role") == "tool"]
        recorded = self.tool_outputs[key]
        if len(tool_messages) > len(recorded):
            recorded.extend(_text(m.get("content")) for m in tool_messages[len(recorded) :])
        turns = self.scripts[key]
        turn = turns[min(turn_index, len(turns) - 1)]
        if isinstance(turn, str):
            message: dict[str, Any] = {"role": "assistant", "content": turn}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{turn_index}_{i}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}
                    for i, (name, args) in enumerate(turn)
                ],
            }  # fmt: skip
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{key}-{turn_index}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                try:
                    answer = model.answer(request)
                    status = 200
                except Exception as exc:  # a script error: a 400 the driver reports
                    answer, status = {"error": {"message": str(exc)}}, 400
                if status == 200 and request.get("stream"):
                    body = stream_events(answer)
                    content_type = "text/event-stream"
                else:
                    body, content_type = json.dumps(answer).encode(), "application/json"
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def stream_events(answer: dict[str, Any]) -> bytes:
    """A chat completion as the server-sent events of a streamed one (``stream: true``)."""
    choice = answer["choices"][0]
    message = choice["message"]
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    chunks = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        base | {"choices": [], "usage": answer["usage"]},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
