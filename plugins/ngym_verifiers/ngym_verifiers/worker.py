"""The worker: one verifiers environment, served over JSON lines, inside that environment's own interpreter.

Process model: ngym's server starts ``<env venv>/bin/python worker.py SOURCE`` and talks to it over a pipe
(one JSON object per line each way, answered in order). This file runs in the environment's virtualenv,
where verifiers (any version the environment pins, 0.3.x or 0.4.x) and the environment are installed and
ngym is not: it imports only the standard library and verifiers. The environment's own ``print``s go to
stderr, so they cannot corrupt the protocol on stdout.

Requests: ``describe``, ``seed`` (session, row), ``tool`` (session, name, arguments), ``verify`` (session,
messages in chat form), ``close`` (session). Each answer is ``{"ok": true, ...}`` or ``{"ok": false,
"error": "...", "kind": "refused" | "bad_request" | "failed"}``.

Two APIs are served, each with the environment's own code doing the work:

- verifiers 0.4 (``verifiers.v1``): a package exporting a ``Taskset``. Seed builds the task (by ``idx`` from
  the taskset's ``load()``, or from ``task`` data), a ``Trace`` with the task's ``State``, and runs
  ``task.setup``; a tool is a ``@vf.tool`` method of one of the task's ``Toolset``s, run with the rollout's
  state pulled in and pushed back exactly as verifiers' state channel does around each call; verify builds
  the trace's messages and runs ``task.score`` (every ``@vf.reward`` with its weight; the reward is the
  weighted sum, ``trace.reward``).
- verifiers <= 0.3 (``load_environment(**kwargs) -> vf.Environment``): seed runs ``init_state`` and
  ``setup_state`` on the row; a tool call is the environment's own ``env_response`` on an assistant message
  carrying that one call (so a ``StatefulToolEnv``'s ``update_tool_args`` injects state as it would);
  verify sets the completion and runs ``rubric.score_rollout`` (``worker_legacy``).

What both share (errors, sessions, local datasets) is ``worker_base``; a 0.4 rollout's runtime (verifiers' subprocess
runtime in a folder of its own) is ``vf_runtime``; the four files run side by side.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import traceback
import types
from typing import Any

if not __package__:  # run as a script in the environment's venv, where ngym is not installed (``python worker.py``):
    # its folder alone becomes the package ``ngym_verifiers``, so the imports below read the same either way
    _package = types.ModuleType("ngym_verifiers")
    _package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules.setdefault("ngym_verifiers", _package)
    __package__ = "ngym_verifiers"

from .worker_base import (  # noqa: E402 - after the script-mode package above
    DATASETS_ENV,
    EXAMPLES,
    BadRequest,
    Refused,
    Sessions,
    _answer,
    _import_source,
    _plain,
    local_datasets,
    unreachable,
)
from .worker_legacy import LegacyEnvironment  # noqa: E402

# ---- verifiers 0.4: a Taskset ----------------------------------------------------------------------------


class TasksetEnvironment(Sessions):
    api = "v1"

    def __init__(self, taskset_id: str, args: dict[str, Any]) -> None:
        import verifiers.v1 as vf

        self.vf = vf
        # verifiers' own loader, by id (the module that exports one Taskset), as vf-eval loads it
        config_class = vf.taskset_config_type(taskset_id)
        self.taskset = vf.load_taskset(config_class.model_validate({**args, "id": taskset_id}))
        _refuse_own_env(taskset_id)
        self.taskset_class = type(self.taskset)
        self.task_class = self.taskset_class.task_type()
        # Taskset-wide toolsets: one server per environment worker shared by every rollout, set up once and never
        # given a task (verifiers' own rule); each call still sees the calling rollout's state as `self.state`.
        self.shared = list(self.taskset_class.toolsets(self.taskset.config))
        self._shared_ready = False
        self.mcp_tools: dict[tuple[str, int], Any] = {}
        self.tasks: list[Any] | None = None
        super().__init__()

    def _all_tasks(self) -> list[Any]:
        if self.tasks is None:
            if not self.taskset.bounded:
                raise Refused(f"{self.taskset_class.__name__} is infinite: seed with task data, not an idx")
            self.tasks = list(self.taskset)
        return self.tasks

    def _toolsets(self, task: Any) -> list[Any]:
        return list(type(task).toolsets(task.config))

    def _tools(self, toolset: Any) -> dict[str, Any]:
        from verifiers.v1.utils.decorators import discover_decorated

        prefix = toolset.server_name
        tools = {}
        for fn in discover_decorated(toolset, "tool"):
            bare = getattr(fn, "tool_name", None) or fn.__name__
            tools[f"{prefix}_{bare}" if prefix else bare] = fn
        return tools

    def describe(self) -> dict[str, Any]:
        tasks = self._all_tasks()
        sample = tasks[0] if tasks else None
        tools: list[dict[str, Any]] = []
        rewards: list[dict[str, Any]] = []
        if sample is not None:
            for toolset in [*self._toolsets(sample), *self.shared]:
                url = getattr(getattr(toolset, "config", None), "url", None)
                if url:  # its tools live on that server: ngym would serve none of them
                    raise Refused(
                        f"{type(toolset).__name__}'s tools are served by a remote MCP server ({url}), which ngym does"
                        " not front: it serves a toolset's own @vf.tool methods (and that server needs the network)"
                    )
                for name, fn in self._tools(toolset).items():
                    tools.append({"name": name, "description": (fn.__doc__ or "").strip(), "parameters": _schema(fn)})
            for fn in sample.hooks("reward"):
                rewards.append({"name": fn.__name__, "weight": getattr(fn, "_vf_weight", 1.0)})
            if sample.plugged_judges():
                raise Refused("judges (LLM-as-judge rewards) need a model client: not served yet")
            _refuse_what_a_server_cannot_play(sample)
        examples = [_v1_example(task, tools) for task in tasks[:EXAMPLES]]
        return {"api": self.api, "tools": tools, "rewards": rewards, "num_tasks": len(tasks), "examples": examples}

    async def seed(self, session: str, row: dict[str, Any]) -> dict[str, Any]:
        vf = self.vf
        from verifiers.v1.state import state_cls
        from verifiers.v1.utils.decorators import invoke

        if "idx" in row:
            tasks = self._all_tasks()
            idx = row["idx"]
            if not isinstance(idx, int) or not 0 <= idx < len(tasks):
                raise BadRequest(f"idx {idx!r} is not a task of this taskset (0..{len(tasks) - 1})")
            task = tasks[idx]
        elif isinstance(row.get("task"), dict):
            data = self.task_class.data_type().model_validate(row["task"])
            config = getattr(self.taskset.config, "task", None)
            task = self.task_class(data, config) if config is not None else self.task_class(data)
        else:
            raise BadRequest("seed with the task's idx ({'idx': N}) or its data ({'task': {...}})")
        trace = vf.Trace(
            task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            state=state_cls(type(task))(),
            agent=vf.AgentInfo(config=vf.AgentConfig(), name="ngym", trainable=False),
        )
        # A runtime per rollout, as verifiers' runner gives one (its subprocess kind, in a folder of the rollout's
        # own: vf_runtime), set up with the task's runtime_env() before the task's setup runs in it.
        runtime = await _runtime_module().provision(session, dict(task.runtime_env()))
        trace.agent.runtime = runtime.info
        try:
            await invoke(task.setup, {"trace": trace, "runtime": runtime})
            toolsets = await self._seed_toolsets(task)
        except BaseException:
            await runtime.stop()
            raise
        await self.close(session)  # a seed again under the same id: the earlier rollout's runtime goes first
        self.sessions[session] = {"task": task, "trace": trace, "tools": toolsets, "runtime": runtime}
        return {"prompt": _plain(_v1_prompt(task))}

    async def _seed_toolsets(self, task: Any) -> dict[str, tuple[Any, Any]]:
        """The rollout's tools by name: its task's toolsets set up for it, then the taskset-wide ones (set up once)."""
        toolsets = {}
        for toolset in self._toolsets(task):
            await toolset.setup()
            await toolset.setup_task(task.data)
            for name, fn in self._tools(toolset).items():
                toolsets[name] = (toolset, fn)
        if not self._shared_ready:
            for toolset in self.shared:
                await toolset.setup()
            self._shared_ready = True
        for toolset in self.shared:
            for name, fn in self._tools(toolset).items():
                toolsets.setdefault(name, (toolset, fn))
        return toolsets

    async def tool(self, session: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        live = self._session(session)
        if name not in live["tools"]:
            raise BadRequest(f"no tool {name!r} (tools: {', '.join(sorted(live['tools'])) or 'none'})")
        toolset, fn = live["tools"][name]
        trace = live["trace"]
        # Exactly verifiers' state channel around a call: the tool server pulls the rollout's state (as JSON,
        # validated into its own State class), runs the tool with it as `self.state`, and pushes it back
        # when it changed (validated into the trace's State class). Its context variable is private to
        # verifiers.v1.mcp.server; the pin to verifiers 0.4.x is checked at describe.
        from verifiers.v1.mcp import server as mcp_server

        state = toolset._state_adapter.validate_json(type(trace.state).__pydantic_serializer__.to_json(trace.state))
        before = toolset._state_adapter.dump_json(state)
        token = mcp_server._call_state.set(state)
        try:
            output, is_error = await _call_as_verifiers_serves(self.mcp_tool(name, fn), arguments)
        finally:
            mcp_server._call_state.reset(token)
        after = toolset._state_adapter.dump_json(state)
        if after != before:
            trace.state = type(trace.state).model_validate_json(after)
        return {"output": output, **({"is_error": True} if is_error else {})}

    def mcp_tool(self, name: str, fn: Any) -> Any:
        """The tool as verifiers' MCP server registers it (``MCPServer.add_tool``): its argument model is built
        once per tool, from the signature, as the server builds it."""
        key = (name, id(getattr(fn, "__func__", fn)))
        if key not in self.mcp_tools:
            from mcp.server.mcpserver.tools.base import Tool

            # named as the toolset's own server names it (unprefixed): its error texts name the tool so
            bare = getattr(fn, "tool_name", None) or fn.__name__
            self.mcp_tools[key] = Tool.from_function(fn, name=bare, description=(fn.__doc__ or "").strip() or None)
        return self.mcp_tools[key]

    async def verify(self, session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        from pydantic import TypeAdapter

        live = self._session(session)
        task, trace = live["task"], live["trace"]
        adapter = TypeAdapter(self.vf.Message)
        prompt = [adapter.validate_python(m) for m in _v1_prompt_dicts(task)]
        completion = [adapter.validate_python(m) for m in messages]
        nodes = []
        for i, message in enumerate([*prompt, *completion]):
            sampled = i >= len(prompt) and message.role == "assistant"
            nodes.append(self.vf.MessageNode(parent=i - 1 if i else None, message=message, sampled=sampled))
        trace.nodes = nodes
        runtime = live["runtime"]
        if not live.get("finalized"):  # verifiers' order: the task's finalize, then its scoring, in the runtime
            live["finalized"] = True
            from verifiers.v1.utils.decorators import invoke

            await invoke(task.finalize, {"trace": trace, "runtime": runtime})
        await task.score(trace, runtime)
        rewards = {
            name: (None if r is None else {"score": r.score, "weight": r.weight}) for name, r in trace.rewards.items()
        }
        missing = [name for name, r in rewards.items() if r is None]
        if missing:
            raise Refused(f"reward functions did not score: {', '.join(missing)}")
        return {"reward": trace.reward, "rewards": rewards, "metrics": dict(trace.metrics)}


def _refuse_own_env(taskset_id: str) -> None:
    """Refuse a taskset whose package exports its own ``Env`` (as vf-eval pairs them): its ``run`` drives the
    rollout, e.g. a scripted user revealing a clue after each model turn (color_codeword). A resources server
    only answers tool calls, so serving the taskset without it would score conversations its Env never had."""
    import verifiers.v1 as vf
    from verifiers.v1.utils.loaders import environment_class  # how vf-eval finds a taskset's Env

    env_class = environment_class(taskset_id)
    if env_class is not vf.SingleAgentEnv:
        raise Refused(
            f"{taskset_id} exports its own Env ({env_class.__name__}) whose run() drives the rollout (it can speak"
            " between model turns): a resources server only answers tool calls, so this taskset is not served"
        )


def _refuse_what_a_server_cannot_play(task: Any) -> None:
    """Refuse, at install, a 0.4 task whose rollouts ngym could not score as verifiers would: one that rewrites
    the conversation at the model/tool boundary, or stops on what only the model's requests carry."""
    from verifiers.v1.utils.decorators import discover_decorated

    name = type(task).__name__
    intercepts = [fn.__name__ for fn in discover_decorated(task, "intercept")]
    if intercepts:
        raise Refused(
            f"{name} rewrites the conversation between the model and its tools (@vf.intercept:"
            f" {', '.join(intercepts)}), which a resources server never sees: the rollouts it would score are not"
            " the ones verifiers plays"
        )
    at_boundary = [fn.__name__ for fn in task.hooks("stop") if _at_model_boundary(fn)]
    if at_boundary:
        raise Refused(
            f"{name} stops its rollouts on what the model's responses or requests carry (@vf.stop:"
            f" {', '.join(at_boundary)}), which a resources server never sees: the stop, and any reward that reads"
            " it, would never happen"
        )


def _at_model_boundary(fn: Any) -> bool:
    """A hook that inspects a typed model ``Request`` or ``Response`` (not the trace ngym hands to /verify)."""
    for param in inspect.signature(fn).parameters.values():
        annotation = (
            param.annotation if isinstance(param.annotation, str) else getattr(param.annotation, "__name__", "")
        )
        if param.name in ("request", "response") or annotation.rsplit(".", 1)[-1] in ("Request", "Response"):
            return True
    return False


def _runtime_module() -> Any:
    """``vf_runtime`` (beside this file), loaded by path when a 0.4 rollout first needs a runtime: it imports
    verifiers.v1, which a <= 0.3 environment's venv does not have."""
    if "ngym_vf_runtime" not in sys.modules:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vf_runtime.py")
        spec = importlib.util.spec_from_file_location("ngym_vf_runtime", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["ngym_vf_runtime"] = module
        spec.loader.exec_module(module)
    return sys.modules["ngym_vf_runtime"]


def _v1_prompt_dicts(task: Any) -> list[dict[str, Any]]:
    data = task.data
    messages: list[dict[str, Any]] = []
    if data.system_prompt:
        messages.append({"role": "system", "content": data.system_prompt})
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    elif data.prompt:
        messages.extend(_plain(m) for m in data.prompt)
    return messages


def _v1_prompt(task: Any) -> list[dict[str, Any]]:
    return _v1_prompt_dicts(task)


def _v1_example(task: Any, tools: list[dict[str, Any]]) -> dict[str, Any]:
    answer = getattr(task.data, "answer", None)  # a TaskData subclass's field, when the taskset has one
    return {"seed": {"idx": task.data.idx}, "prompt": _v1_prompt_dicts(task), "tools": tools, "answer": _answer(answer)}


def _schema(fn: Any) -> dict[str, Any]:
    """A tool's JSON schema from its signature, as the MCP server verifiers uses advertises it."""
    from pydantic import BaseModel, create_model

    fields: dict[str, Any] = {}
    hints = _hints(fn)
    for name, param in inspect.signature(fn).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (hints.get(name, Any), default)
    # named as the MCP server verifiers runs names it, so the schema is the one its model sees, titles included
    model: type[BaseModel] = create_model(f"{fn.__name__}Arguments", **fields)
    return model.model_json_schema()


def _hints(fn: Any) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(fn)
    except Exception:  # an unresolvable annotation: the parameter is then untyped in the schema
        return {}


async def _call_as_verifiers_serves(tool: Any, arguments: dict[str, Any]) -> tuple[Any, bool]:
    """Run a verifiers 0.4 tool exactly as its MCP tool server does, and render what the model is shown.

    The arguments are validated against the tool's signature by the MCP SDK's own argument model (lax pydantic:
    ``"3"`` is 3 for an ``int``, ``3.0`` is 3, ``3.7`` is an ``int_from_float`` error), the result converted to
    MCP content, and that content turned into chat content by verifiers' own client function. A failing call
    (bad arguments, an exception in the tool) is what MCP calls an error result: its text is shown to the model,
    as verifiers shows it. Returns (content, is_error).
    """
    from mcp.server.mcpserver.exceptions import ToolError
    from verifiers.v1.harnesses.utils.mcp import mcp_content_to_chat_content

    try:
        result = await tool.run(arguments, context=None, convert_result=True)
    except ToolError as exc:
        return str(exc), True
    return _plain(mcp_content_to_chat_content(result.content)), bool(getattr(result, "is_error", False))


# ---- the loop ---------------------------------------------------------------------------------------------


def load(source: str, args: dict[str, Any]) -> LegacyEnvironment | TasksetEnvironment:
    module = _import_source(source)
    if hasattr(module, "load_environment") and callable(module.load_environment):
        return LegacyEnvironment(module, args)
    try:
        return TasksetEnvironment(module.__name__, args)
    except (TypeError, ImportError, AttributeError) as exc:
        if "Taskset" not in str(exc) and "verifiers.v1" not in str(exc):
            raise
        exported = ", ".join(map(str, getattr(module, "__all__", []))) or "nothing in __all__"
        raise Refused(
            f"{module.__name__} is not a verifiers environment: it has no load_environment() (verifiers <= 0.3) and"
            f" exports no Taskset (0.4; it exports {exported}): a harness or a library, perhaps ({exc})"
        ) from exc


async def handle(env: LegacyEnvironment | TasksetEnvironment, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    session = str(request.get("session", ""))
    if op == "describe":
        return env.describe()
    if op == "seed":
        return await env.seed(session, request.get("row") or {})
    if op == "tool":
        arguments = request.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise BadRequest("a tool's arguments are a JSON object")
        return await env.tool(session, str(request.get("name")), arguments)
    if op == "verify":
        return await env.verify(session, request.get("messages") or [])
    if op == "close":
        return await env.close(session)
    raise BadRequest(f"unknown op {op!r}")


async def serve(source: str, args: dict[str, Any], out: Any) -> None:
    def answer(payload: dict[str, Any]) -> None:
        out.write(json.dumps(payload, default=str) + "\n")
        out.flush()

    try:
        local_datasets(json.loads(os.environ.get(DATASETS_ENV) or "{}"))
        env = load(source, args)
    except Refused as exc:
        answer({"ok": False, "kind": "refused", "error": str(exc)})
        return
    except Exception as exc:
        if reason := unreachable(exc):
            answer({"ok": False, "kind": "refused", "error": reason, "trace": traceback.format_exc()})
            return
        answer(
            {
                "ok": False,
                "kind": "failed",
                "error": f"loading {source}: {type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(),
            }
        )
        return
    answer({"ok": True, "api": env.api})
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:  # ngym closed the pipe: every rollout's runtime (folder, processes) goes with the worker
            await env.close_all()
            if "ngym_vf_runtime" in sys.modules:
                sys.modules["ngym_vf_runtime"].remove_root()
            return
        try:
            request = json.loads(line)
            result = await handle(env, request)
            answer({"ok": True, **result})
        except Refused as exc:
            answer({"ok": False, "kind": "refused", "error": str(exc)})
        except BadRequest as exc:
            answer({"ok": False, "kind": "bad_request", "error": str(exc)})
        except Exception as exc:  # the environment's own failure: reported, never a reward
            if reason := unreachable(exc):
                answer({"ok": False, "kind": "refused", "error": reason, "trace": traceback.format_exc()})
                continue
            answer(
                {
                    "ok": False,
                    "kind": "failed",
                    "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc(),
                }
            )


def main() -> None:
    source = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the environment's prints go to stderr
    sys.stdout = sys.stderr
    asyncio.run(serve(source, args, out))


if __name__ == "__main__":
    main()
