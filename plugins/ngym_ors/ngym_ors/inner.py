"""Runs inside an ORS environment's own virtualenv, never in ngym's: it imports only the standard library and
``openreward`` (and the environment's own code).

``python inner.py describe SPEC_JSON``: prints what the environment is, as JSON: its class and ORS name, its tools
(``list_tools()``, JSON Schema included), its splits and, for each split, its first ``max_tasks`` tasks with the
prompt of each (the environment is made for the task, ``setup()`` run, ``get_prompt()`` read, ``teardown()`` run,
as ``openreward.environments.Server`` does for a session). An error is ``{"ok": false, "error": ...}``, exit 3.

``python inner.py serve SPEC_JSON SOCKET [DESCRIBED]``: serves the environment with
``openreward.environments.Server``, the SDK's own reference server, on the unix socket ``SOCKET`` (only the ngym
server in front of it reaches it); with ``DESCRIBED``, it first writes what ``describe`` prints to that file.

``SPEC_JSON``: ``{"path": folder to put first on sys.path or null, "module": "server", "environment": class name
or null, "max_tasks": 1000}``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import traceback
from typing import Any


def load(spec: dict[str, Any]) -> Any:
    """The ``Environment`` subclass the spec names (or the only one its module defines)."""
    if spec.get("path"):
        sys.path.insert(0, spec["path"])
    import importlib

    from openreward.environments import Environment

    module = importlib.import_module(spec["module"])
    wanted = spec.get("environment")
    if wanted:
        cls = getattr(module, wanted, None)
        if not (inspect.isclass(cls) and issubclass(cls, Environment)):
            raise LookupError(f"{spec['module']} has no Environment subclass named {wanted!r}")
        return cls
    found = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Environment)
        and obj is not Environment
        and obj.__module__ == module.__name__
        and not inspect.isabstract(obj)
    ]
    if not found:
        raise LookupError(f"{spec['module']} defines no openreward Environment subclass")
    if len(found) > 1:
        names = ", ".join(sorted(c.__name__ for c in found))
        raise LookupError(f"{spec['module']} defines several environments ({names}): name one with -o environment=NAME")
    return found[0]


def _text(blocks: Any) -> str:
    return "\n".join(str(getattr(b, "text", "")) for b in blocks if getattr(b, "type", "text") == "text")


async def _call(fn: Any, *args: Any) -> Any:
    result = fn(*args)
    return await result if inspect.isawaitable(result) else result


async def describe(spec: dict[str, Any]) -> dict[str, Any]:
    from importlib import metadata

    from openreward.environments import Split

    cls = load(spec)
    listed = cls.list_tools()
    limit = int(spec.get("max_tasks") or 1000)
    splits = []
    for split in cls.list_splits():
        if isinstance(split, Split):
            splits.append({"name": split.name, "type": split.type})
        else:
            kind = split if split in ("train", "validation", "test") else "validation"
            splits.append({"name": str(split), "type": kind})
    tasks: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int] = {}
    for split in splits:
        name = split["name"]
        counts[name] = int(await cls.num_tasks(name))
        rows = []
        for index, task in enumerate(await cls.get_task_range(name, 0, min(limit, counts[name]))):
            env = cls(task_spec=task, secrets={})
            await _call(env.setup)
            try:
                prompt = _text(await _call(env.get_prompt))
            finally:
                await _call(env.teardown)
            rows.append({"index": index, "task_spec": json.loads(json.dumps(task, default=str)), "prompt": prompt})
        tasks[name] = rows
    return {
        "ok": True,
        "class": cls.__name__,
        "env_name": cls.name().lower(),
        "doc": (cls.__doc__ or "").strip(),
        "openreward": metadata.version("openreward"),
        "tools": listed.model_dump(mode="json"),
        "splits": splits,
        "num_tasks": counts,
        "tasks": tasks,
    }


def serve(spec: dict[str, Any], socket: str) -> None:
    import uvicorn
    from openreward.environments import Server

    cls = load(spec)
    uvicorn.run(Server([cls]).app, uds=socket, log_level="warning", timeout_keep_alive=60)


def described(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        return asyncio.run(describe(spec))
    except Exception as exc:  # the environment's own error: reported to ngym, which says it in one line
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}


def main(argv: list[str]) -> int:
    command, spec = argv[1], json.loads(argv[2])
    if command == "serve":
        if len(argv) > 4:  # describe first, into that file, then serve (ngym install: one start, not two)
            said = described(spec)
            with open(argv[4], "w", encoding="utf-8") as fh:
                json.dump(said, fh)
            if not said["ok"]:
                return 3
        serve(spec, argv[3])
        return 0
    said = described(spec)
    print(json.dumps(said))
    return 0 if said["ok"] else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
