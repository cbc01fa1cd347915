"""tools/nemo_envs.py's replay and table rules: a slow row never discards an environment's results, and an
environment NeMo Gym itself scores differently from one replay to the next is reported as such, not compared."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from ngym.rollout.thread_server import serve_app_in_thread
from tools import nemo_envs
from tools.nemo_envs_table import replay_agreement


def _slow_second_row_app() -> FastAPI:
    app = FastAPI()

    @app.post("/seed_session")
    async def seed() -> dict[str, Any]:
        return {}

    @app.post("/verify")
    async def verify(body: dict[str, Any]) -> dict[str, Any]:
        if body["row"] == 2:
            await asyncio.sleep(3)  # a verify waiting on something that never comes (a batch, a sandbox)
        if body["row"] == 4:
            return {"detail": "no reward"}
        if body["row"] == 5:  # what ngym answers for an environment missing a file its README says to download
            error = FileNotFoundError("data/db.json not found. Download it from Hugging Face first.")
            return JSONResponse(repr(error), status_code=500)
        if body["row"] == 6:
            return JSONResponse({"detail": "row does not fit"}, status_code=422)
        return {"reward": float(body["row"])}

    return app


def test_a_row_that_times_out_scores_none_and_the_rows_after_it_are_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nemo_envs, "ROW_TIMEOUT", 1)
    monkeypatch.setattr(nemo_envs, "SLOW_FAILURE", 0.5)
    with serve_app_in_thread(_slow_second_row_app()) as url:
        result = nemo_envs.replay_rows(url, [{"row": 1}, {"row": 2}, {"row": 3}])
    assert result["rewards"] == [1.0, None, None]
    assert result["errors"] == [None, "timed out after 1s", "not replayed: an earlier row failed after 1s"]


def test_no_row_answering_is_a_failed_replay_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nemo_envs, "ROW_TIMEOUT", 1)
    with serve_app_in_thread(_slow_second_row_app()) as url:
        result = nemo_envs.replay_rows(url, [{"row": 2}, {"row": 3}])
        rejected = nemo_envs.replay_rows(url, [{"row": 4}])  # an HTTP answer without a reward is an answer
    assert result["rewards"] == [] and result["reason"] == "replay failed: timed out after 1s"
    assert rejected["rewards"] == [None] and rejected["errors"][0].startswith("HTTP 200")


def test_a_5xx_on_every_row_is_a_failed_replay_but_a_4xx_is_an_answer() -> None:
    with serve_app_in_thread(_slow_second_row_app()) as url:
        failed = nemo_envs.replay_rows(url, [{"row": 5}, {"row": 5}])
        rejected = nemo_envs.replay_rows(url, [{"row": 6}])
    assert failed["rewards"] == [] and failed["reason"].startswith("replay failed (needs prepared data): HTTP 500")
    assert rejected["rewards"] == [None] and rejected["errors"][0].startswith("HTTP 422")


def test_rows_nemo_scored_and_ngym_could_not_replay_are_a_disagreement() -> None:
    def result(ngym_reason: str, nemo: list[float | None]) -> dict[str, Any]:
        ngym = {"replay": {"rewards": [], "reason": ngym_reason}}
        return {"has_rollouts": True, "nemo": {"replay": {"rewards": nemo}}, "ngym": ngym}

    text, ok = replay_agreement(result("replay failed: HTTP 500 on /verify: KeyError('x')", [1.0, None]))
    assert ok is False and "NeMo Gym scored 1 rows" in text
    # this machine's limits, or NeMo failing alike, leave the environment out of the count
    assert replay_agreement(result("serve failed (needs internet): gaierror", [1.0, 0.0]))[1] is None
    assert replay_agreement(result("replay failed: HTTP 500 on /reset", [None, None]))[1] is None


def _result(nemo: list[float], nemo_again: list[float] | None, ngym: list[float]) -> dict[str, Any]:
    replay: dict[str, Any] = {"rewards": nemo}
    if nemo_again is not None:
        replay["rewards_again"] = nemo_again
    return {"has_rollouts": True, "nemo": {"replay": replay}, "ngym": {"replay": {"rewards": ngym}}}


def test_an_environment_nemo_scores_differently_twice_is_nondeterministic_not_a_disagreement() -> None:
    text, ok = replay_agreement(_result([-1.0, 1.0, 0.0], [0.0, 1.0, -1.0], [1.0, 1.0, 0.0]))
    assert ok is None
    assert "2/3 vs NeMo" in text and "nondeterministic under NeMo Gym itself" in text and "agree on 1/3" in text


def test_a_deterministic_environment_is_compared_row_by_row() -> None:
    assert replay_agreement(_result([1.0, 0.0], [1.0, 0.0], [1.0, 0.0])) == ("2/2 vs NeMo", True)
    assert replay_agreement(_result([1.0, 0.0], [1.0, 0.0], [1.0, 1.0]))[1] is False
    assert replay_agreement(_result([1.0, 0.0], None, [1.0, 0.0])) == ("2/2 vs NeMo", True)  # replayed once only


def _episode_app(steps: list[dict[str, Any]]) -> FastAPI:
    """A Gymnasium-style server (no /verify): /step rewards each action by its name, ends on "stop"."""
    app = FastAPI()

    @app.post("/reset")
    async def reset() -> dict[str, Any]:
        return {"observation": "go", "info": {}}

    @app.post("/step")
    async def step(body: dict[str, Any]) -> dict[str, Any]:
        names = [item["name"] for item in body["response"]["output"] if item.get("type") == "function_call"]
        steps.append(body["response"]["output"])
        return {"reward": float(len(names)), "terminated": "stop" in names, "truncated": False, "info": {}}

    return app


def test_a_gymnasium_episode_is_replayed_one_model_turn_per_step_as_nemo_gyms_agent_runs_it() -> None:
    import httpx

    from tools.nemo_replay_inprocess import replay_row

    call = {"type": "function_call", "call_id": "c", "arguments": "{}"}
    output = [
        {"type": "reasoning", "summary": []},
        {**call, "name": "a"},
        {**call, "name": "b"},  # two calls in one model turn: one step
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"type": "message", "role": "user", "content": "next"},
        {**call, "name": "stop"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {**call, "name": "after_the_end"},  # past terminated: the agent had stopped
    ]
    steps: list[list[dict[str, Any]]] = []
    with serve_app_in_thread(_episode_app(steps)) as url, httpx.Client(base_url=url) as client:
        reward, error = replay_row(client, {"responses_create_params": {"input": "x"}, "response": {"output": output}})
    assert (reward, error) == (3.0, None)  # 2 + 1, summed as the agent sums step rewards
    assert [[item.get("name") for item in turn] for turn in steps] == [[None, "a", "b"], ["stop"]]


def test_nemos_side_installs_the_environments_own_requirements_without_what_stands_for_nemo_gym(tmp_path: Any) -> None:
    from ngym_nemo_gym.catalogue.folder import (
        COMPAT_DISTRIBUTION,
        DEV_REQUIREMENTS,
        SANDBOX_REQUIREMENTS,
        NemoEnvironment,
    )

    env = NemoEnvironment(
        folder=tmp_path,
        name="cvdp",
        config=None,
        domain="coding",
        description="",
        entry_module="app",
        server_class="CVDPServer",
        requirements=[COMPAT_DISTRIBUTION, *DEV_REQUIREMENTS, *SANDBOX_REQUIREMENTS, "numpy==2.2.3"],
        pip_lines=["--extra-index-url https://example.invalid/simple"],
    )
    assert nemo_envs.Env(env, tmp_path).extra_requirements() == [
        "numpy==2.2.3",
        "--extra-index-url https://example.invalid/simple",
    ]


@pytest.mark.parametrize(
    ("error", "category"),
    [
        (
            "critpt: config class CritPtResourcesServerConfig does not validate with its config: api_key.str: "
            "Input should be a valid string; api_key.list[str]: Input should be a valid list",
            "needs credentials",
        ),
        (
            "terminal_bench_4: config class TerminalBench4Config does not validate with its config: environment: "
            "Field required",
            "needs a config value",
        ),
        ("cvdp: cvdp.x refers to 'cvdp_sim_image', which no config sets", "needs a config value"),
        ("KeyError: 'reward'", "test failure"),
    ],
)
def test_a_serve_failure_is_classified_by_what_the_user_must_supply(error: str, category: str) -> None:
    assert nemo_envs.classify(error) == category


def test_nemo_failing_its_own_replay_is_not_a_disagreement() -> None:
    nemo = {"rewards": [None, None], "errors": ["HTTP 500: Internal Server Error"] * 2}
    judged = {"has_rollouts": True, "model_refs": ["judge"], "recorded": [0.85, 0.6]}
    judged |= {"nemo": {"replay": nemo}, "ngym": {"replay": {"rewards": [0.0, 0.0]}}}
    text, ok = replay_agreement(judged)
    assert ok is None and "NeMo Gym's own replay failed" in text and "nothing to compare" in text
    # without a judge, the recorded rewards stand in for NeMo's
    plain = {"has_rollouts": True, "recorded": [1.0, 0.0], "nemo": {"replay": nemo}}
    assert replay_agreement({**plain, "ngym": {"replay": {"rewards": [1.0, 0.0]}}}) == ("2/2 vs recorded", True)
    # both sides rejecting a row (a 4xx) still agree
    rejected = {"rewards": [None], "errors": ["HTTP 422 on /verify: extra inputs"]}
    both = {"has_rollouts": True, "nemo": {"replay": rejected}, "ngym": {"replay": {"rewards": [None]}}}
    assert replay_agreement(both)[1] is True


# ------------------------------------------------------------------ which dataset row a recorded rollout is replayed on
_PROMPT = {"input": [{"role": "user", "content": "Guess the word."}]}


def _recorded(task_index: int, reward: float) -> dict[str, Any]:
    """A NeMo Gym recording: the prompt with NeMo's message types, the row index, no task fields."""
    prompt = {"input": [{**_PROMPT["input"][0], "type": "message"}], "tool_choice": None}
    return {
        "responses_create_params": prompt,
        "_ng_task_index": task_index,
        "response": {"id": task_index},
        "reward": reward,
    }


def test_rollouts_sharing_a_prompt_are_replayed_on_their_own_rows_not_the_first() -> None:
    """NeMo Gym's wordle: every row has the same prompt and its own ``custom_target``; the recordings name their
    row by ``_ng_task_index``, in completion order. Pairing by prompt verified all of them on row 0's target."""
    rows = [{"responses_create_params": _PROMPT, "custom_target": word} for word in ("chump", "virus", "booby")]
    payloads = nemo_envs.verify_payloads(rows, [_recorded(2, 1.0), _recorded(0, 1.0), _recorded(1, 0.0)])
    assert [p["custom_target"] for p in payloads] == ["booby", "chump", "virus"]
    assert [p["response"] for p in payloads] == [{"id": 2}, {"id": 0}, {"id": 1}]
    assert all("reward" not in p and p["responses_create_params"] == _PROMPT for p in payloads)


def test_a_rollout_no_row_agrees_with_is_replayed_as_recorded_not_on_the_row_at_its_position() -> None:
    """NeMo Gym's gpqa_diamond: example.jsonl holds other questions than the recordings; pairing by position
    verified each recorded answer against another question's expected answer."""
    rows = [{"responses_create_params": {"input": "question A"}, "expected_answer": "C"}]
    line = {"responses_create_params": {"input": "question B"}, "expected_answer": "D", "reward": 1.0, "response": {}}
    [payload] = nemo_envs.verify_payloads(rows, [line])
    assert payload == {"responses_create_params": {"input": "question B"}, "expected_answer": "D", "response": {}}


def test_a_rollout_two_rows_could_be_is_not_replayed_and_says_why(tmp_path: Any) -> None:
    rows = [{"responses_create_params": _PROMPT, "custom_target": word} for word in ("chump", "virus")]
    line = {**_recorded(0, 1.0)}
    del line["_ng_task_index"]
    with pytest.raises(nemo_envs.ConfigError, match="rows 1, 2"):
        nemo_envs.verify_payloads(rows, [line])

    class Ambiguous:
        def payloads(self) -> list[dict[str, Any]]:
            return nemo_envs.verify_payloads(rows, [line])

    outcome = nemo_envs.replay_ngym(Ambiguous(), tmp_path / "python", {}, tmp_path)  # type: ignore[arg-type]
    assert outcome["rewards"] == [] and outcome["reason"].startswith("not replayed: example_rollouts.jsonl:1")
