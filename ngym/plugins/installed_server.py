"""``InstalledServer``: the server class of one environment an ecosystem plugin installed outside pip (``ngym-ors``,
``ngym-verifiers``; their registrations are ``ngym.plugins.ecosystem.Ecosystem``).

``record`` (a class attribute) says what it serves; each of the record's tools is a ``POST /<tool>`` route with the
tool's JSON Schema on ``/docs``, answered by ``call_tool``; ``image_payload`` (``"module:function"``) is what its
image carries; ``for_record`` makes the class of one record; ``masked`` is a verify answer without a reward.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fastapi import Body, FastAPI, Request

from ngym.domain import Domain
from ngym.plugins.ecosystem import InstalledRecord
from ngym.server.pipeline.resources import BaseResourcesServerConfig, SimpleResourcesServer
from ngym.server.protocol.bodies import BaseVerifyResponse

if TYPE_CHECKING:
    from ngym.containerize.payload import ContainerPayload, ImageLayout

V = TypeVar("V", bound=BaseVerifyResponse)
S = TypeVar("S", bound="InstalledServer")


class InstalledServer(SimpleResourcesServer):
    """The server of one installed environment (``record``); a subclass per ecosystem answers ``call_tool``.

    Its state lives in a process of its own (a worker, an inner server), so it needs session affinity; rewards are
    at the environment's own scale (no ``reward_range``)."""

    config: BaseResourcesServerConfig
    record: ClassVar[Any]
    session_affinity_required = True
    reward_range = None
    #: the key of a tool's JSON Schema in the record's tool entries
    tool_schema_key: ClassVar[str] = "parameters"
    #: ``"module:function"``: ``function(record, layout, workdir)`` is what the image carries beyond the wheels
    #: (imported by ``ngym containerize`` alone, never by a running server)
    image_payload: ClassVar[str]

    @classmethod
    def for_record(cls: type[S], record: InstalledRecord) -> type[S]:
        """A server class for one installed environment (its tools, domain and description from the record)."""
        return type(
            record.name,
            (cls,),
            {"record": record, "domain": Domain.parse(record.domain), "__doc__": record.description},
        )

    @classmethod
    def container_payload(cls, layout: ImageLayout, workdir: Path) -> ContainerPayload:
        """What its image carries beyond the wheels (read by ``ngym containerize``)."""
        module, _, function = cls.image_payload.partition(":")
        payload: ContainerPayload = getattr(importlib.import_module(module), function)(cls.record, layout, workdir)
        return payload

    @classmethod
    def describe(cls) -> str:
        return str(cls.record.description)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        for tool in self.record.tools:
            app.post(
                f"/{tool['name']}",
                summary=(tool.get("description") or tool["name"]).splitlines()[0],
                openapi_extra={
                    "requestBody": {"content": {"application/json": {"schema": tool.get(self.tool_schema_key) or {}}}}
                },
            )(self._tool_route(tool["name"]))
        return app

    def _tool_route(self, name: str) -> Any:
        async def tool_route(request: Request, body: dict[str, Any] = Body(default_factory=dict)) -> dict[str, Any]:  # noqa: B008 - FastAPI's idiom
            return await self.call_tool(request, name, body)

        tool_route.__name__ = name
        return tool_route

    async def call_tool(self, request: Request, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Tool ``name`` called with ``arguments`` on the request's rollout: the answer's body."""
        raise NotImplementedError

    @staticmethod
    def masked(response: type[V], echoed: dict[str, Any], kind: str, reason: str, **fields: Any) -> V:
        """A masked ``/verify`` answer (``mask_sample``, the failure's kind and reason): no reward, never 0.0 scored."""
        return response(
            **echoed, reward=0.0, mask_sample=True, failure_kind=kind, failure_reason=reason[:2000], **fields
        )
