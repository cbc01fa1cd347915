"""Error handling: handler exceptions → 500 repr (server keeps serving), judge failures → reward 0."""

from __future__ import annotations

from typing import ClassVar

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, JudgeError, SimpleResourcesServer
from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

RESPONSE = make_response(text="the answer", response_id="resp_1")
ROW = {"responses_create_params": {"input": "question?"}}


class Boom(BaseModel):
    kind: str


class FlakyServer(SimpleResourcesServer):
    """A server whose handlers fail on request."""

    domain = Domain.OTHER
    closed: ClassVar[list[str]] = []

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/boom")(self.boom)
        return app

    async def boom(self, body: Boom) -> dict:
        if body.kind == "http":
            raise HTTPException(418, "teapot")
        if body.kind == "value":
            raise ValueError("bad thing 'quoted'")
        if body.kind == "object":
            raise TypeError(f"cannot use {object()!r}")
        return {"ok": True}

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        text = body.response.final_text()
        if "judge" in text:
            raise JudgeError("judge endpoint returned 502")
        if "crash" in text:
            raise RuntimeError("verify crashed")
        return BaseVerifyResponse(**body.model_dump(), reward=0.5)

    async def on_session_closed(self, session_id: str, state: object) -> None:
        self.closed.append(session_id)


def response_saying(text: str) -> dict:
    return make_response(text=text, response_id="resp_1")


async def test_handler_exception_is_500_with_repr_and_server_keeps_serving() -> None:
    async with serve_in_process(app_for_class(FlakyServer)) as http:
        failed = await http.post("/boom", json={"kind": "value"})
        assert failed.status_code == 500
        assert failed.json() == repr(ValueError("bad thing 'quoted'"))
        assert (await http.post("/boom", json={"kind": "fine"})).json() == {"ok": True}
        teapot = await http.post("/boom", json={"kind": "http"})
        assert teapot.status_code == 418 and teapot.json() == {"detail": "teapot"}


async def test_a_500_body_carries_no_heap_address() -> None:
    async with serve_in_process(app_for_class(FlakyServer)) as http:
        failed = await http.post("/boom", json={"kind": "object"})
    assert failed.status_code == 500
    assert failed.json() == "TypeError('cannot use <object object>')"  # was '... object at 0x7f...>'


async def test_judge_failure_is_reward_zero_with_failure_class() -> None:
    async with serve_in_process(app_for_class(FlakyServer)) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", ROW)
        verified = await rollout.post("/verify", {**ROW, "response": response_saying("ask the judge")})
        assert verified.status_code == 200
        body = verified.json()
        assert body["reward"] == 0.0
        assert body["_ng_failure_class"] == "judge_failed"
        assert "502" in body["_ng_failure_judge_error"]
        assert body["response"]["id"] == "resp_1"


async def test_verify_echoes_the_request_and_closes_the_session() -> None:
    FlakyServer.closed.clear()
    async with serve_in_process(app_for_class(FlakyServer)) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", ROW)
        body = await rollout.call("/verify", {**ROW, "response": RESPONSE})
        assert body["reward"] == 0.5
        assert body["responses_create_params"]["input"] == "question?"
        assert body["response"]["output"][0]["content"][0]["text"] == "the answer"
        assert len(FlakyServer.closed) == 1


async def test_a_crashed_verify_keeps_the_session_for_a_retry() -> None:
    FlakyServer.closed.clear()
    async with serve_in_process(app_for_class(FlakyServer)) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", ROW)
        crashed = await rollout.post("/verify", {**ROW, "response": response_saying("crash")})
        assert crashed.status_code == 500 and "verify crashed" in crashed.json()
        assert FlakyServer.closed == [] and (await http.get("/health")).json()["live_sessions"] == 1
        assert (await rollout.call("/verify", {**ROW, "response": RESPONSE}))["reward"] == 0.5
        assert len(FlakyServer.closed) == 1


async def test_shutdown_closes_live_sessions() -> None:
    FlakyServer.closed.clear()
    async with serve_in_process(app_for_class(FlakyServer)) as http:
        for _ in range(3):
            await RolloutClient(http).call("/seed_session", ROW)
        assert FlakyServer.closed == []
    assert len(FlakyServer.closed) == 3


async def test_liveness_health_and_reverify_routes() -> None:
    async with serve_in_process(app_for_class(FlakyServer, name="flaky")) as http:
        for path in ("/", "/healthz", "/livez", "/readyz"):
            assert (await http.get(path)).json() == {"status": "ok"}
        health = (await http.get("/health")).json()
        assert health["name"] == "flaky" and health["domain"] == "other" and health["live_sessions"] == 0
        assert (await http.get("/reverify_mode")).json() == "unknown"
        docs = (await http.get("/openapi.json")).json()
        assert "/boom" in docs["paths"] and "/seed_session" in docs["paths"]


class ScoredResponse(BaseVerifyResponse):
    extracted: str = "42"


class SubclassVerify(SimpleResourcesServer):
    """verify returns more than it declares (or exactly what it declares)."""

    domain = Domain.OTHER

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        cls = ScoredResponse if "more" in body.response.final_text() else BaseVerifyResponse
        return cls(**body.model_dump(), reward=1.0)


async def test_verify_sends_what_its_declared_response_model_holds() -> None:
    """The declared response model decides the fields, as FastAPI's response_model does (NeMo Gym's wire),
    whether or not ngym's one-step serialisation is taken."""
    async with serve_in_process(app_for_class(SubclassVerify)) as http:
        sent = {}
        for text in ("more", "exact"):
            rollout = RolloutClient(http)
            await rollout.call("/seed_session", ROW)
            reply = await rollout.post("/verify", {**ROW, "response": response_saying(text)})
            assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
            sent[text] = reply.json()
    assert "extracted" not in sent["more"]
    assert sent["more"].keys() == sent["exact"].keys()
    assert sent["exact"]["reward"] == 1.0 and sent["exact"]["response"]["id"] == "resp_1"
