"""The reference for bench_core.py: a bare FastAPI app with the weather server's three endpoints.

Same body models as ngym's weather example (so both validate the same OpenAI Responses types), no
sessions, no middleware: what an environment costs when written straight on FastAPI. Its seed reads the
dataset row like every resources server does (NeMo Gym's weather server parses it as BaseSeedSessionRequest).
"""

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
async def seed_session(body: BaseSeedSessionRequest) -> dict:
    return {}


@app.post("/get_weather")
async def get_weather(body: GetWeatherRequest) -> GetWeatherResponse:
    return GetWeatherResponse(city=body.city, weather_description=f"The weather in {body.city} is cold.")


@app.post("/verify")
async def verify(body: BaseVerifyRequest) -> BaseVerifyResponse:
    return BaseVerifyResponse(**body.model_dump(), reward=1.0)
