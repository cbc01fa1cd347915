"""The same ORS requests sent to two servers, their answers put side by side.

``probe(base)`` sends a fixed request set (good ones and every kind of bad one a client can send) to the ORS
server at ``base`` (``http://HOST:PORT`` for ``openreward.environments.Server``, ``http://HOST:PORT/ors`` for
ngym) and gives each answer as ``{"label", "status", "body"}``: session ids and task ids replaced by ``<sid>`` and
``<task>``, an event stream as its list of ``[event, data]`` (keep-alive comments dropped), a JSON body parsed.
Redirects are followed, as the ``openreward`` SDK's HTTP client (aiohttp) follows them.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

#: the environment's ORS name (``Environment.name().lower()``)
ENV = "ledgerenvironment"


def _events(text: str) -> list[list[str]]:
    out: list[list[str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        kind, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data or kind != "message":
            out.append([kind, "\n".join(data)])
    return out


class Prober:
    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.http = httpx.Client(timeout=30, follow_redirects=True)
        self.seen: list[dict[str, Any]] = []
        self.ids: dict[str, str] = {}

    def close(self) -> None:
        self.http.close()

    def _clean(self, text: str) -> str:
        for real, alias in self.ids.items():
            text = text.replace(real, alias)
        return text

    def send(
        self,
        label: str,
        method: str,
        path: str,
        *,
        sid: str | None = None,
        body: Any = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        headers = {} if sid is None else {"X-Session-ID": sid}
        if raw is not None:
            headers["content-type"] = "application/json"
            answer = self.http.request(method, self.base + path, headers=headers, content=raw)
        elif body is not None:
            answer = self.http.request(method, self.base + path, headers=headers, json=body)
        else:
            answer = self.http.request(method, self.base + path, headers=headers)
        text = answer.text
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            events = _events(text)
            for kind, data in events:
                if kind == "task_id" and data not in self.ids:
                    self.ids[data] = "<task>"
            shown: Any = [[kind, self._clean(data)] for kind, data in events]
        else:
            try:
                shown = json.loads(self._clean(text))
            except ValueError:
                shown = self._clean(text)
        self.seen.append({"label": label, "status": answer.status_code, "body": shown})
        return answer

    def new_session(self, label: str) -> str:
        answer = self.send(label, "POST", "/create_session")
        sid = next(data for kind, data in _events(answer.text) if kind == "task_id")
        self.ids[sid] = f"<sid{len([a for a in self.ids.values() if a.startswith('<sid')])}>"
        self.seen[-1]["body"] = [[kind, self._clean(data)] for kind, data in _events(answer.text)]
        return sid


def probe(base: str) -> list[dict[str, Any]]:
    """Every answer of the request set at ``base``, in order."""
    p = Prober(base)
    try:
        _environment_level(p)
        _sessions(p)
    finally:
        p.close()
    return p.seen


def _environment_level(p: Prober) -> None:
    p.send("health", "GET", "/health")
    p.send("list_environments", "GET", "/list_environments")
    p.send("tools bare", "GET", "/tools")
    p.send("tools named", "GET", f"/{ENV}/tools")
    p.send("tools unknown environment", "GET", "/nosuchenv/tools")
    p.send("splits", "GET", "/splits")
    p.send("tasks", "POST", "/tasks", body={"split": "train"})
    p.send("tasks unknown split", "POST", "/tasks", body={"split": "nope"})
    p.send("tasks body not JSON", "POST", "/tasks", raw=b"{not json")
    p.send("tasks no body", "POST", "/tasks")
    p.send("tasks extra field", "POST", "/tasks", body={"split": "train", "zzz": 1})
    p.send("tasks split wrong type", "POST", "/tasks", body={"split": 3})
    p.send("num_tasks", "POST", "/num_tasks", body={"split": "test"})
    p.send("num_tasks unknown split", "POST", "/num_tasks", body={"split": "nope"})
    p.send("task", "POST", "/task", body={"split": "train", "index": 1})
    p.send("task index out of range", "POST", "/task", body={"split": "train", "index": 99})
    p.send("task negative index", "POST", "/task", body={"split": "train", "index": -1})
    p.send("task unknown split", "POST", "/task", body={"split": "nope", "index": 0})
    p.send("task index missing", "POST", "/task", body={"split": "train"})
    p.send("task_range", "POST", "/task_range", body={"split": "train", "start": 1, "stop": 3})
    p.send("task_range open", "POST", "/task_range", body={"split": "train"})
    p.send("task_range past the end", "POST", "/task_range", body={"split": "train", "start": 5, "stop": 9})
    p.send("task_range unknown split", "POST", "/task_range", body={"split": "nope"})
    p.send("tasks unknown environment", "POST", "/nosuchenv/tasks", body={"split": "train"})
    p.send("no such route", "GET", "/nosuchroute")
    p.send("wrong method", "GET", "/create")


def _sessions(p: Prober) -> None:
    sid = p.new_session("create_session")
    p.send("create no X-Session-ID", "POST", "/create", body={"split": "train", "index": 0})
    p.send("create unknown split", "POST", "/create", sid=sid, body={"split": "nope", "index": 0})
    p.send("create index out of range", "POST", "/create", sid=sid, body={"split": "train", "index": 99})
    p.send("create neither task nor index", "POST", "/create", sid=sid, body={"split": "train"})
    p.send("create body not JSON", "POST", "/create", sid=sid, raw=b"nope")
    p.send(
        "create unknown environment",
        "POST",
        "/create",
        sid=sid,
        body={"env_name": "nosuch", "split": "train", "index": 0},
    )
    p.send("create", "POST", "/create", sid=sid, body={"split": "train", "index": 0})
    p.send("create again", "POST", "/create", sid=sid, body={"split": "train", "index": 0})
    p.send("ping", "POST", "/ping", sid=sid)
    p.send("ping no X-Session-ID", "POST", "/ping")
    p.send("ping unknown session", "POST", "/ping", sid="no-such-session")
    p.send("prompt", "GET", "/prompt", sid=sid)
    p.send("prompt no X-Session-ID", "GET", "/prompt")
    p.send("prompt unknown session", "GET", "/prompt", sid="no-such-session")
    p.send("task_tools", "GET", "/task_tools", sid=sid)
    p.send("call unknown tool", "POST", "/call", sid=sid, body={"name": "nosuch", "input": {}})
    p.send("call wrong type", "POST", "/call", sid=sid, body={"name": "deposit", "input": {"amount": "two"}})
    p.send("call missing argument", "POST", "/call", sid=sid, body={"name": "deposit", "input": {}})
    p.send("call extra argument", "POST", "/call", sid=sid, body={"name": "deposit", "input": {"amount": 1, "zzz": 2}})
    p.send("call string number", "POST", "/call", sid=sid, body={"name": "deposit", "input": {"amount": "1"}})
    p.send("call step reward", "POST", "/call", sid=sid, body={"name": "balance", "input": {}})
    p.send("call body not JSON", "POST", "/call", sid=sid, raw=b"{")
    p.send("call input missing", "POST", "/call", sid=sid, body={"name": "deposit"})
    p.send("call input not an object", "POST", "/call", sid=sid, body={"name": "deposit", "input": [1]})
    p.send("call no X-Session-ID", "POST", "/call", body={"name": "balance", "input": {}})
    p.send("call unknown session", "POST", "/call", sid="no-such-session", body={"name": "balance", "input": {}})
    p.send("call finishing", "POST", "/call", sid=sid, body={"name": "close", "input": {}})
    p.send("call after finished", "POST", "/call", sid=sid, body={"name": "deposit", "input": {"amount": 1}})
    p.send("delete", "POST", "/delete", sid=sid)
    p.send("delete again", "POST", "/delete", sid=sid)
    p.send("delete no X-Session-ID", "POST", "/delete")
    p.send("call after delete", "POST", "/call", sid=sid, body={"name": "balance", "input": {}})
    p.send("prompt after delete", "GET", "/prompt", sid=sid)
    p.send("ping after delete", "POST", "/ping", sid=sid)
    p.send("delete_session", "POST", "/delete_session", sid=sid)
    raised = p.new_session("create_session 2")
    p.send("create 2", "POST", "/create", sid=raised, body={"split": "test", "index": 0})
    p.send("call raising tool", "POST", "/call", sid=raised, body={"name": "explode", "input": {}})
    p.send("call after raise", "POST", "/call", sid=raised, body={"name": "balance", "input": {}})
    p.send("delete 2", "POST", "/delete", sid=raised)
    spec = p.new_session("create_session 3")
    p.send("create task_spec", "POST", "/create", sid=spec, body={"task_spec": {"id": "x", "target": 1}})
    p.send("prompt of task_spec", "GET", "/prompt", sid=spec)
    p.send("call on task_spec", "POST", "/call", sid=spec, body={"name": "deposit", "input": {"amount": 1}})
    p.send("close on task_spec", "POST", "/call", sid=spec, body={"name": "close", "input": {}})
    p.send("delete 3", "POST", "/delete", sid=spec)
