"""The reference for bench_core.py: a bare FastAPI app with the weather server's three endpoints.

Same body models as ngym's weather example (so both validate the same OpenAI Responses types), no
sessions, no middleware: what an environment costs when written straight on FastAPI. Its seed reads the
dataset row like every resources server does (NeMo Gym's weather server parses it as BaseSeedSessionRequest),
and its verify scores as the weather example does (1.0 only with a get_weather call, NeMo Gym 0.7.0's rule).
"""

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from ngym.server.protocol import BaseSeedSessionRequest, BaseVerifyRequest, BaseVerifyResponse

app = FastAPI()


class GetWeatherRequest(BaseModel):
    city: str


class GetWeatherResponse(BaseModel):
    city: str
    weather_description: str


@app.post("/seed_session")
async def seed_session(body: BaseSeedSessionRequest) -> dict[str, Any]:
    return {}


@app.post("/get_weather")
async def get_weather(body: GetWeatherRequest) -> GetWeatherResponse:
    return GetWeatherResponse(city=body.city, weather_description=f"The weather in {body.city} is cold.")


@app.post("/verify")
async def verify(body: BaseVerifyRequest) -> BaseVerifyResponse:
    called = any(call.name == "get_weather" for call in body.response.function_calls())
    return BaseVerifyResponse(**body.model_dump(), reward=1.0 if called else 0.0)
