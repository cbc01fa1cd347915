"""What an ecosystem plugin that installs environments outside pip shares (``ngym-ors``, ``ngym-verifiers``).

Such a plugin keeps one record per installed environment (``RecordShelf``), serves each through a server class
made from its record, and registers two things with ngym; ``Ecosystem`` makes both hooks. The plugin's hook
module (its ``ngym`` entry point) is::

    ngym_register_resources_servers, ngym_register_install_sources = Ecosystem(
        prefix="ors",  # ngym install ors:...
        package="ngym_ors",  # ngym_ors.install:install_source / :uninstall, ngym_ors.installed:<name>
        shelf=records.SHELF,
        description="Open Reward Standard environments: ...",
    ).hooks()

``ngym_register_resources_servers`` registers every record as ``<package>.installed:<name>`` with its own folder;
``ngym_register_install_sources`` registers ``ngym install`` / ``uninstall`` / ``list --available <prefix>:``.

``InstalledServer`` is the server class of one installed environment: ``record`` (a class attribute), each of the
record's tools a ``POST /<tool>`` route with the tool's JSON Schema on ``/docs`` (answered by ``call_tool``), the
image payload (``image_payload``, ``"module:function"``), ``describe``, and ``for_record`` to make the class.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from fastapi import Body, FastAPI, Request

from ngym.domain import Domain
from ngym.plugins import hookimpl
from ngym.plugins.sources import Echo, InstallSource, InstallSources
from ngym.server.pipeline.resources import BaseResourcesServerConfig, SimpleResourcesServer
from ngym.server.protocol.bodies import BaseVerifyResponse

if TYPE_CHECKING:
    from ngym.containerize.payload import ContainerPayload, ImageLayout
    from ngym.plugins.record_shelf import RecordShelf
    from ngym.plugins.registry import Register


class InstalledRecord(Protocol):
    """What ngym reads of an installed environment's record (a plugin's dataclass has more)."""

    name: str
    domain: str
    description: str
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class Ecosystem:
    """An ecosystem plugin's registrations: its installed environments and its install source.

    ``<package>.install`` defines ``install_source`` (an ``InstallFunction``) and ``uninstall(name, *, echo) ->
    bool``; ``<package>.installed`` resolves ``<name>`` to the server class (``installed_classes``)."""

    prefix: str
    package: str
    shelf: RecordShelf[Any]
    description: str = ""
    options: str = ""
    available: str | None = None  # "module:function" for ``ngym list --available <prefix>``

    def hooks(self) -> tuple[Callable[[Register], None], Callable[[InstallSources], None]]:
        """The plugin's two hook implementations (``ngym_register_resources_servers``,
        ``ngym_register_install_sources``), to assign under those names in its hook module."""

        @hookimpl
        def ngym_register_resources_servers(register: Register) -> None:
            self.register_servers(register)

        @hookimpl
        def ngym_register_install_sources(register: InstallSources) -> None:
            self.register_source(register)

        return ngym_register_resources_servers, ngym_register_install_sources

    def register_servers(self, register: Register) -> None:
        """Every installed record a resources server, registered lazily by target (``ngym list`` starts
        nothing), with its own folder (``<records>/<name>``, whose ``data/`` ``ngym install`` wrote)."""
        for record in self.shelf.all():
            register.add(
                f"{self.package}.installed:{record.name}",
                name=record.name,
                domain=record.domain,
                description=record.description,
                folder=self.shelf.folder_of(record.name),
            )

    def register_source(self, register: InstallSources) -> None:
        """``ngym install <prefix>:...`` (``<package>.install:install_source``), its uninstall and listing."""
        register.add(
            InstallSource.lazy(
                self.prefix,
                f"{self.package}.install:install_source",
                available=self.available,
                uninstall=self._uninstall,
                description=self.description,
                options=self.options,
            )
        )

    def _uninstall(self, names: list[str], *, yes: bool, echo: Echo) -> list[str]:
        """The installed environments among ``names`` (``name`` or ``<prefix>:name``), removed; the others are left
        to the other sources and pip."""
        remove = importlib.import_module(f"{self.package}.install").uninstall
        return [name for name in names if remove(name.removeprefix(f"{self.prefix}:"), echo=echo)]


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
