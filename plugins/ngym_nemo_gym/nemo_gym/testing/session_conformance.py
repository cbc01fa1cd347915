"""The Environment Server session contract, checked through a server's real routes (NeMo Gym's test helper).

Typed seed and a repeated seed answer the same id; close and a repeated close succeed; closing an id never seeded
succeeds; and, for a server that keeps state, a seed after the close (of a seeded or a never-seeded id) is refused.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from nemo_gym.base_resources_server import (
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
)

__all__ = ["check_resources_session_contract"]


def _close_body(seed: ResourcesSeedSessionRequest, session_id: str) -> dict[str, object]:
    return ResourcesCloseSessionRequest(resources_session_id=session_id, episode_id=seed.episode_id).model_dump(
        mode="json"
    )


def check_resources_session_contract(app: FastAPI, seed: ResourcesSeedSessionRequest, *, keeps_state: bool) -> None:
    """Drive ``app`` in process; AssertionError names the step that broke the contract.

    ``seed`` must carry a ``resources_session_id`` the app has not seen.
    """
    client = TestClient(app, raise_server_exceptions=False)
    session_id = seed.resources_session_id
    for step in ("seed", "repeated seed"):
        answer = client.post("/seed_session", json=seed.model_dump(mode="json"))
        assert answer.status_code == 200, f"{step} failed: {answer.status_code} {answer.text}"
        seeded = ResourcesSeedSessionResponse.model_validate(answer.json())
        assert seeded.resources_session_id == session_id, f"{step} returned another session"
    for step in ("close", "repeated close"):
        answer = client.post("/close_session", json=_close_body(seed, session_id))
        assert answer.status_code == 200, f"{step} failed: {answer.status_code} {answer.text}"
        closed = ResourcesCloseSessionResponse.model_validate(answer.json())
        assert closed.resources_session_id == session_id, f"{step} named another session"
    never_seeded = seed.model_copy(update={"resources_session_id": f"{session_id}-never-seeded"})
    answer = client.post("/close_session", json=_close_body(seed, never_seeded.resources_session_id))
    assert answer.status_code == 200, f"close of a never-seeded session failed: {answer.status_code}"
    if keeps_state:
        for late in (seed, never_seeded):
            answer = client.post("/seed_session", json=late.model_dump(mode="json"))
            assert answer.status_code >= 400, (
                f"seed after close recreated {late.resources_session_id}: {answer.status_code}"
            )
