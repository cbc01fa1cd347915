"""Helpers for agents that run inside a sandbox and hand their result to a resources server's verifier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nemo_gym.base_resources_server import BaseRunRequest
from nemo_gym.config_types import ResourcesServerRef
from nemo_gym.failure_kinds import AGENT_RUN_ERROR
from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.server_utils import ServerClient, get_response_json, raise_for_status

__all__ = ["verify_agent_response"]


async def verify_agent_response(
    client: ServerClient,
    server: ResourcesServerRef,
    body: BaseRunRequest,
    response: NeMoGymResponse,
    cookies: Mapping[str, str],
    *,
    force_zero_reward: bool,
) -> dict[str, Any]:
    """POST the rollout to ``server``'s ``/verify`` and return its answer.

    With ``force_zero_reward`` (the agent's run failed) the verifier scores an empty response, so it still owns
    every score field, and must answer an unmasked 0; the answer then carries the real response and
    ``failure_kind`` ``agent_run_error``.
    """
    graded = response.model_copy(update={"output": []}) if force_zero_reward else response
    payload = body.model_dump(mode="json") | {"response": graded.model_dump(mode="json")}
    answer = await client.post(server_name=server.name, url_path="/verify", cookies=cookies, json=payload)
    await raise_for_status(answer)
    result: dict[str, Any] = await get_response_json(answer)
    if force_zero_reward:
        if result.get("reward") != 0 or result.get("mask_sample", False):
            raise ValueError(
                "execution_failure_reward_zero requires a verifier that scores an empty response as unmasked zero"
            )
        result.update(
            response=response.model_dump(mode="json"),
            failure_kind=AGENT_RUN_ERROR,
            failure_reason="Agent execution failed; the reward is the verifier's score of an empty response.",
        )
    return result
