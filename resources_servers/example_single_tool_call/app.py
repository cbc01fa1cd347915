"""The weather example: one ``get_weather`` tool; reward 1.0 when the model called it, else 0.0 (as NeMo Gym 0.7.0's).

The seed's original form (verify always 1.0) stays in ``tests/fixtures/seed_weather`` as documentation.
"""

from fastapi import FastAPI
from pydantic import BaseModel

from ngym import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    SimpleResourcesServer,
)


class WeatherResourcesServerConfig(BaseResourcesServerConfig):
    pass


class GetWeatherRequest(BaseModel):
    city: str


class GetWeatherResponse(BaseModel):
    city: str
    weather_description: str


class WeatherResourcesServer(SimpleResourcesServer):
    """Weather: a single get_weather tool; reward 1.0 when the response calls it."""

    config: WeatherResourcesServerConfig
    domain = Domain.AGENT

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/get_weather")(self.get_weather)
        return app

    async def get_weather(self, body: GetWeatherRequest) -> GetWeatherResponse:
        return GetWeatherResponse(city=body.city, weather_description=f"The weather in {body.city} is cold.")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        called = any(call.name == "get_weather" for call in body.response.function_calls())
        return BaseVerifyResponse(**body.model_dump(), reward=1.0 if called else 0.0)


if __name__ == "__main__":
    WeatherResourcesServer.run_webserver()
