"""ngym.train.trl without TRL: the slots' shapes, the tool methods built from JSON Schema, the trajectory sent to
/verify, and one rollout's session over real HTTP (a masked verify is None, never 0.0)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ngym.rollout.thread_server import serve_app_in_thread
from ngym.testing import app_for
from ngym.train import trl as ngym_trl
from ngym.train.rows import load_rows, prompt_messages, responses_output
from ngym.train.tools import tool_function
from ngym.train.wire import WireError, reward_of

DATA = Path(__file__).resolve().parents[2] / "resources_servers"
COUNTER_ROWS = DATA / "example_session_state_mgmt" / "data" / "example_rollouts.jsonl"
WEATHER_ROWS = DATA / "example_single_tool_call" / "data" / "example.jsonl"


@pytest.fixture
def counter_url() -> Iterator[str]:
    with serve_app_in_thread(app_for("example_session_state_mgmt")) as url:
        yield url


def live_sessions(url: str) -> int:
    return int(httpx.get(f"{url}/health").json()["live_sessions"])


def test_tool_method_has_typed_signature_and_docstring() -> None:
    spec = {
        "type": "function",
        "name": "search",
        "description": "Find   emails\n by query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer"},
                "folders": {"type": "array", "items": {"type": "string"}, "enum": None},
            },
            "required": ["query"],
        },
    }
    function = tool_function(spec)
    assert function is not None
    signature = inspect.signature(function)
    assert list(signature.parameters) == ["self", "query", "limit", "folders"]
    assert signature.parameters["query"].annotation is str
    assert signature.parameters["limit"].annotation == int | None
    assert signature.parameters["folders"].annotation == list[str] | None
    assert (
        function.__doc__
        == "Find emails by query.\n\nArgs:\n    query: What to look for.\n    limit: limit\n    folders: folders\n"
    )

    class Env:
        calls: list[tuple[str, dict[str, Any]]] = []

        def _call(self, name: str, arguments: dict[str, Any]) -> str:
            self.calls.append((name, arguments))
            return "ok"

    assert function(Env(), query="a", limit=None) == "ok"  # an optional left out is not sent
    assert Env.calls == [("search", {"query": "a"})]


@pytest.mark.parametrize("name", ["reset", "get_reward", "_hidden", "class", "has-dash"])
def test_tools_that_cannot_be_methods_are_not_offered(name: str) -> None:
    assert tool_function({"type": "function", "name": name, "parameters": {"type": "object"}}) is None


def test_environment_class_has_only_reset_and_tools_public() -> None:
    slots = ngym_trl.environment("http://127.0.0.1:1", COUNTER_ROWS, name="counter")
    cls = slots.environment_factory
    assert isinstance(cls, type)
    public = sorted(n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_"))
    assert public == ["get_counter_value", "increment_counter", "reset"]
    example = slots.examples[0]
    assert example["prompt"] == [{"role": "user", "content": "The counter starts at 3. Add 3, then tell me its value."}]
    assert json.loads(example["ngym_row"])["expected_count"] == 6
    assert "response" not in json.loads(example["ngym_row"])  # a recorded rollout line is reduced to its row
    assert slots.reward_funcs == [ngym_trl.ngym_verify]


def test_blend_routes_each_example_to_its_environment() -> None:
    slots = ngym_trl.blend({"counter": ("http://a", COUNTER_ROWS), "weather": ("http://b", WEATHER_ROWS)})
    assert isinstance(slots.environment_factory, dict)
    assert sorted(slots.environment_factory) == ["counter", "weather"]
    assert {e["environment"] for e in slots.examples} == {"counter", "weather"}
    assert hasattr(slots.environment_factory["weather"], "get_weather")
    assert not hasattr(slots.environment_factory["counter"], "get_weather")


def test_prompt_of_a_developer_message_and_content_parts() -> None:
    row = {
        "responses_create_params": {
            "input": [
                {"role": "developer", "content": "Be brief."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            ]
        }
    }
    assert prompt_messages(row) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_bad_rows_are_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"responses_create_params": {"input": "x"}}\nnot json\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: not a JSON line"):
        load_rows(path)
    with pytest.raises(ValueError, match="row 0 is not a dataset row"):
        load_rows([{"input": "x"}])


def test_trl_completion_becomes_the_responses_output_nemo_would_send() -> None:
    completion = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "increment_counter", "arguments": {"count": 2}}},
                {"type": "function", "function": {"name": "increment_counter", "arguments": {"count": 5}}},
            ],
        },
        {"role": "tool", "name": "increment_counter", "content": '{"success":true}'},
        {"role": "tool", "name": "increment_counter", "content": '{"success":true}'},
        {"role": "assistant", "content": "It is 7."},
    ]
    output = responses_output(completion)
    assert [(i["type"], i.get("call_id")) for i in output] == [
        ("function_call", "call_0"),
        ("function_call", "call_1"),
        ("function_call_output", "call_0"),
        ("function_call_output", "call_1"),
        ("message", None),
    ]
    assert output[1]["arguments"] == '{"count": 5}'
    assert output[4]["content"][0]["text"] == "It is 7."


def test_reward_of_masked_or_missing_is_none_never_zero() -> None:
    assert reward_of({"reward": 0.0, "mask_sample": True, "failure_kind": "session_lost"}) is None
    assert reward_of(None) is None
    assert reward_of({"mask_sample": False}) is None
    assert reward_of({"reward": 0.0, "mask_sample": False}) == 0.0
    assert reward_of({"reward": 1, "mask_sample": False}) == 1.0


def counter_completion(*counts: int, final: str = "Done.") -> list[dict[str, Any]]:
    calls = [{"type": "function", "function": {"name": "increment_counter", "arguments": {"count": c}}} for c in counts]
    return [{"role": "assistant", "content": "", "tool_calls": calls}]


def test_rollouts_over_http_are_sessions_of_their_own(counter_url: str) -> None:
    slots = ngym_trl.environment(counter_url, COUNTER_ROWS)
    cls = slots.environment_factory
    assert isinstance(cls, type)
    envs: list[Any] = [cls() for _ in range(3)]
    for env in envs:
        env.reset(**slots.examples[0])  # starts at 3, expects 6
    assert live_sessions(counter_url) == 3
    assert len({env._rollout.cookies["ngym_session"] for env in envs}) == 3
    completions = []
    for env, count in zip(envs, [3, 1, 3], strict=True):
        output = env.increment_counter(count=count)
        completions.append(
            counter_completion(count) + [{"role": "tool", "name": "increment_counter", "content": output}]
        )
    # the third rollout's session is lost before it is scored: no reward, not 0.0
    lost = envs[2]
    httpx.post(
        f"{counter_url}/close_session",
        json={},
        headers={"cookie": f"ngym_session={lost._rollout.cookies['ngym_session']}"},
    )
    rewards = ngym_trl.ngym_verify(prompts=[None] * 3, completions=completions, environments=envs)
    assert rewards == [1.0, 0.0, None]
    assert live_sessions(counter_url) == 0


def test_reset_closes_a_rollout_left_unscored(counter_url: str) -> None:
    slots = ngym_trl.environment(counter_url, COUNTER_ROWS)
    env: Any = slots.environment_factory()  # type: ignore[operator]
    env.reset(**slots.examples[0])
    env.reset(**slots.examples[1])
    assert live_sessions(counter_url) == 1
    assert ngym_trl.ngym_verify([None], [counter_completion()], environments=[env]) == [0.0]
    assert live_sessions(counter_url) == 0


def test_reward_function_without_environments_says_what_to_do() -> None:
    with pytest.raises(ValueError, match="pass environment_factory"):
        ngym_trl.ngym_verify(prompts=[], completions=[])


def test_the_helpers_need_only_httpx_and_each_other() -> None:
    """ngym.train.trl runs in a trainer's venv: no ngym module outside ngym.train, no third-party package but httpx."""
    import ast
    import sys

    folder = Path(ngym_trl.__file__).parent
    for path in (folder / f"{name}.py" for name in ("trl", "wire", "rows", "tools")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "httpx" or name.startswith("ngym.train"), (path, name)


def test_rows_without_tools_get_the_servers_tool_routes(counter_url: str) -> None:
    rows = [{k: v for k, v in row.items() if k != "response"} for row in load_rows(COUNTER_ROWS)]
    for row in rows:
        row["responses_create_params"] = {"input": row["responses_create_params"]["input"]}  # no tools declared
    slots = ngym_trl.environment(counter_url, rows)
    cls: Any = slots.environment_factory
    public = sorted(n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_"))
    assert public == ["get_counter_value", "increment_counter", "reset"]
    assert inspect.signature(cls.increment_counter).parameters["count"].annotation is int
    env = cls()
    env.reset(**slots.examples[0])
    assert json.loads(env.increment_counter(count=2)) == {"success": True}
    assert ngym_trl.ngym_verify([None], [counter_completion()], environments=[env]) == [0.0]


def test_rows_without_tools_and_no_server_is_one_clear_error() -> None:
    rows = [{"responses_create_params": {"input": "hi"}}]
    with pytest.raises(ValueError, match="declare no tools and http://127.0.0.1:9/openapi.json cannot be read"):
        ngym_trl.environment("http://127.0.0.1:9", rows)


def test_fleet_names_resolve_through_the_head_server(tmp_path: Path) -> None:
    from ngym.fleet.head import create_head_app

    instances = [
        {"name": "weather", "kind": "environment", "host": "0.0.0.0", "port": 8001},
        {"name": "counter", "kind": "environment", "host": "10.0.0.7", "port": 8002},
        {"name": "policy_model", "kind": "server", "host": "127.0.0.1", "port": 8003},
    ]
    (tmp_path / "instances.json").write_text(json.dumps(instances))
    (tmp_path / "config.yaml").write_text("{}\n")
    with serve_app_in_thread(create_head_app(tmp_path / "config.yaml", tmp_path / "instances.json")) as head:
        # a server listening on every interface is dialled at the head server's host; other servers are not envs
        assert ngym_trl.fleet_urls(head) == {"weather": "http://127.0.0.1:8001", "counter": "http://10.0.0.7:8002"}
        with pytest.raises(ValueError, match=r"has no environment workplace \(it has: counter, weather\)"):
            ngym_trl.fleet(head, {"workplace": WEATHER_ROWS})
        slots = ngym_trl.fleet(head, {"weather": WEATHER_ROWS})
        assert isinstance(slots.environment_factory, dict) and list(slots.environment_factory) == ["weather"]
    with pytest.raises(ValueError, match="no fleet head server answers at http://127.0.0.1:9"):
        ngym_trl.fleet_urls("http://127.0.0.1:9")


def test_an_environment_gone_before_verify_is_no_reward() -> None:
    with serve_app_in_thread(app_for("example_session_state_mgmt")) as url:
        slots = ngym_trl.environment(url, COUNTER_ROWS)
        env: Any = slots.environment_factory()  # type: ignore[operator]
        env.reset(**slots.examples[0])
        env.increment_counter(count=3)
    # the server is gone: its verify cannot be had, so there is no reward (never 0.0), and nothing raises
    assert ngym_trl.ngym_verify([None], [counter_completion(3)], environments=[env]) == [None]


def test_a_full_environment_is_no_reward_not_a_crash_nor_a_score() -> None:
    """A server at its session limit refuses a seed (503): ``reset`` goes on (TRL would stop training on a raise),
    the rollout's tool is not run, and its trajectory is never verified: the weather's verify, which reads only the
    trajectory, would have scored the call 1.0. A row the environment refuses (4xx) still raises."""
    with serve_app_in_thread(app_for("example_single_tool_call", max_sessions=1)) as url:
        slots = ngym_trl.environment(url, WEATHER_ROWS)
        cls: Any = slots.environment_factory
        taken, refused = cls(), cls()
        taken.reset(**slots.examples[0])
        refused.reset(**slots.examples[0])  # the server is full
        assert refused._rollout.failed and "503" in refused._rollout.failed
        with pytest.raises(WireError, match="not run"):
            refused.get_weather(city="Paris")
        call = {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        }
        completion = [call, {"role": "tool", "name": "get_weather", "content": '{"error": "not run"}'}]
        assert ngym_trl.ngym_verify([None] * 2, [completion, completion], environments=[refused, taken]) == [None, 1.0]
        assert live_sessions(url) == 0
    with serve_app_in_thread(app_for("example_session_state_mgmt")) as url:
        counter: Any = ngym_trl.environment(url, COUNTER_ROWS).environment_factory()  # type: ignore[operator]
        with pytest.raises(WireError, match="HTTP 422"):
            counter.reset(ngym_row=json.dumps({"responses_create_params": {"input": []}, "initial_count": "x"}))
