"""Serve an environment's tool routes over MCP (streamable HTTP at ``/mcp``), inside each rollout's session.

With ``expose_tools_over_mcp: true`` in its config, every tool route of an environment (each ``POST /<tool>``
besides the standard routes) is also an MCP tool, as NeMo Gym 0.7.0 does it:

- the seed response tells the agent where and how: ``"mcp": {server_name, url_path: "/mcp", transport: "http",
  headers: {"X-NeMo-Gym-Session-Token": <token>}}`` for a dataset-row seed, ``"resources_tools": {...}`` (the
  same object) for NeMo Gym 0.7's typed seed;
- the token is signed with the server's session secret and names the rollout's session and, when the
  environment's ``mcp_allowed_tools_for_session(seed_body)`` narrows it, the tools this rollout may see and call;
- ``tools/list`` lists the (allowed) tools with their body's JSON schema; ``tools/call`` runs the tool route
  exactly as an HTTP call carrying the rollout's session cookie would (same validation, same session state, same
  errors), by calling the app in process; an HTTP error becomes an MCP error result naming the status;
- ``/verify`` maps MCP-namespaced tool names (``mcp__<server>__<tool>``, how MCP clients record them) back
  to the bare names, so a rollout scores the same on both transports.

The ``mcp`` SDK (its low-level server and ``StreamableHTTPSessionManager``, stateless, JSON responses) is
imported only when an environment turns exposure on, so servers that do not start as fast as before.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import inspect
import json
import re
import typing
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from ngym.errors import ConfigError
from ngym.server.fronts.inprocess import RolloutSession
from ngym.server.pipeline.intake import parse_json
from ngym.server.protocol.bodies import MCPServerMetadata

if TYPE_CHECKING:
    from ngym.server.pipeline.resources import SimpleResourcesServer

MCP_PATH = "/mcp"
TOKEN_HEADER = "X-NeMo-Gym-Session-Token"  # NeMo Gym's header name: its agents read it from the seed metadata
SEED_METADATA_KEY = "mcp"
# Routes that are the protocol, not tools; advertising them would let a model call /verify on itself.
RESERVED_NAMES = frozenset({"verify", "seed_session", "close_session", "aggregate_metrics", "mcp"})
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN_PURPOSE = b"ngym.mcp-token"
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_PERMISSIVE_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}


@dataclass(frozen=True)
class MCPTool:
    """One tool route as MCP advertises it."""

    name: str
    description: str
    input_schema: dict[str, Any]


def harvest_tools(app: FastAPI) -> dict[str, MCPTool]:
    """The app's tool routes (``POST /<name>``, not a standard route) with their body schemas."""
    tools: dict[str, MCPTool] = {}
    for route in app.router.routes:
        if not isinstance(route, APIRoute) or not route.methods or "POST" not in route.methods:
            continue
        name = route.path.lstrip("/")
        if name in RESERVED_NAMES or not _TOOL_NAME.fullmatch(name):
            continue
        doc = inspect.getdoc(route.endpoint) or route.description or route.summary or name.replace("_", " ")
        tools[name] = MCPTool(name=name, description=doc.strip().splitlines()[0], input_schema=_body_schema(route))
    return tools


def _body_schema(route: APIRoute) -> dict[str, Any]:
    # A route whose body is a plain dict but documents its schema for /docs (OpenEnv's and verifiers' tools, built
    # from the environment's own tool specs): that schema is the tool's.
    declared = ((route.openapi_extra or {}).get("requestBody") or {}).get("content", {}).get("application/json", {})
    if isinstance(declared.get("schema"), dict) and declared["schema"]:
        schema: dict[str, Any] = declared["schema"]
        return schema
    try:
        hints = typing.get_type_hints(route.endpoint)
    except Exception:  # an annotation that does not resolve: accept any object, the route still validates
        return _PERMISSIVE_SCHEMA
    hints.pop("return", None)
    # ``BaseModel`` itself (a route taking any object, as workplace_assistant's do) has no schema of its own.
    models = [t for t in hints.values() if isinstance(t, type) and issubclass(t, BaseModel) and t is not BaseModel]
    if not models and any(t is BaseModel for t in hints.values()):
        return _PERMISSIVE_SCHEMA
    if not models:
        return _EMPTY_SCHEMA
    return models[0].model_json_schema() if len(models) == 1 else _PERMISSIVE_SCHEMA


class MCPExposure:
    """The ``/mcp`` endpoint of one server: its tools, its session tokens, and in-process dispatch."""

    def __init__(self, server: SimpleResourcesServer, app: FastAPI) -> None:
        try:
            import mcp.types as mcp_types
            from mcp.server.lowlevel import Server
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
            from mcp.server.transport_security import TransportSecuritySettings
        except ImportError as exc:  # pragma: no cover - mcp is a dependency; a broken install is still readable
            hint = "pip install 'mcp>=1.28,<2'"
            raise ConfigError(f"expose_tools_over_mcp needs the mcp package ({exc}): {hint}") from None
        self.server = server
        self.app = app
        self.server_name = server.config.name or type(server).__name__
        harvested = harvest_tools(app)
        chosen = server.mcp_tools(list(harvested.values()), None)
        self.tools = {tool.name: tool for tool in chosen or []}
        self._types = mcp_types

        mcp_server: Any = Server(self.server_name)
        self._mcp_server = mcp_server
        mcp_server.list_tools()(self._list_tools)
        mcp_server.call_tool(validate_input=False)(self._call_tool)
        self._manager = StreamableHTTPSessionManager(
            app=mcp_server,
            event_store=None,
            json_response=True,
            stateless=True,
            # Agents reach the server by whatever host name routes to it; DNS-rebinding protection guards
            # browsers, which never talk to this endpoint, and would need every such host listed.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    # ---- tokens ------------------------------------------------------------------------------------

    def token(self, session_id: str, allowed: list[str] | None) -> str:
        payload = base64.urlsafe_b64encode(json.dumps({"sid": session_id, "tools": allowed}).encode()).rstrip(b"=")
        tag: bytes = self._signer().tag(payload, _TOKEN_PURPOSE)
        return (payload + b"." + tag).decode()

    def claims(self, token: str | None) -> tuple[str, frozenset[str] | None] | None:
        """(session id, allowed tools or None for all) of a valid token; None for a missing or forged one."""
        if not token:
            return None
        payload, dot, tag = token.encode().rpartition(b".")
        if not dot or not hmac.compare_digest(tag, self._signer().tag(payload, _TOKEN_PURPOSE)):
            return None
        data = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
        allowed = data.get("tools")
        return str(data["sid"]), None if allowed is None else frozenset(allowed)

    def seed_metadata(self, session_id: str, seed_body: dict[str, Any]) -> dict[str, Any]:
        """What the seed response advertises: the endpoint and this rollout's token."""
        allowed = self.server.mcp_allowed_tools_for_session(seed_body)
        return MCPServerMetadata(
            server_name=self.server_name,
            url_path=MCP_PATH,
            transport="http",
            headers={TOKEN_HEADER: self.token(session_id, None if allowed is None else list(allowed))},
        ).model_dump()

    def _signer(self) -> Any:
        return self.server.sessions.signer

    # ---- MCP handlers ------------------------------------------------------------------------------

    def _request_claims(self) -> tuple[str, frozenset[str] | None] | None:
        request = self._mcp_server.request_context.request
        return self.claims(request.headers.get(TOKEN_HEADER) if request is not None else None)

    async def _list_tools(self) -> list[Any]:
        claims = self._request_claims()
        allowed = claims[1] if claims else None
        return [
            self._types.Tool(name=t.name, description=t.description, inputSchema=t.input_schema)
            for t in self.tools.values()
            if allowed is None or t.name in allowed
        ]

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        types = self._types
        claims = self._request_claims()
        if name not in self.tools:
            # Models invent tool names: answer with an error result the model can read, not a protocol error.
            # It lists what this rollout may call (as tools/list does), never tools outside its allow-list.
            allowed_here = claims[1] if claims else None
            available = sorted(t for t in self.tools if allowed_here is None or t in allowed_here)
            text = f"Unknown tool: {name!r}. Available tools: {available}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)
        if claims is None:
            raise ValueError(f"missing or invalid {TOKEN_HEADER} header: use the one the seed response gave")
        session_id, allowed = claims
        if allowed is not None and name not in allowed:
            raise ValueError(f"tool {name!r} is not allowed for this session")
        signer = self._signer()
        # The tool route runs through the whole app (middleware, session binding, validation), in process.
        session = RolloutSession(self.app, signer.cookie_name, signer.sign(session_id))
        response = await session.call(name, arguments or {})
        if response.status >= 400:
            raise ValueError(f"HTTP {response.status} from POST /{name}: {response.text}")
        payload = response.json() if response.body else None
        text = response.text if not isinstance(payload, str) else payload
        content = [types.TextContent(type="text", text=text)]
        # Only a JSON object can be structured content; the text stays for clients that read only text.
        return (content, payload) if isinstance(payload, dict) else content

    # ---- wiring ------------------------------------------------------------------------------------

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("method") == "POST":
            # The SDK parses with json.loads, whose RecursionError on deep nesting it answers as a 500. Read the
            # body (already bounded by the request limits) with the parser every other route uses, which
            # refuses nesting deeper than 200 levels, and answer what the SDK answers for invalid JSON: HTTP 400
            # with a JSON-RPC parse error. Then hand the same bytes on.
            body = await _read_body(receive)
            try:
                parse_json(body)
            except ValueError as exc:
                await _parse_error(str(exc))(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self._manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._manager.run():
            yield


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # a disconnect: the SDK reads it again and gives up
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that gives ``body`` once, then defers to the connection's (for its disconnect)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: dict[str, Any] = await receive()
        return message

    return replayed


def _parse_error(reason: str) -> Any:
    """The MCP SDK's own answer to a body that is not JSON: HTTP 400, JSON-RPC error -32700."""
    from starlette.responses import JSONResponse

    error = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32700, "message": f"Parse error: {reason}"}}
    return JSONResponse(error, status_code=400)


def install(server: SimpleResourcesServer, app: FastAPI) -> MCPExposure:
    """Mount ``/mcp`` on a built app and start its session manager with the app's lifespan."""
    from starlette.routing import Mount, Route

    if any(getattr(route, "path", None) == MCP_PATH for route in app.router.routes):
        raise ConfigError(
            f"{server.config.name}: the app already serves {MCP_PATH}; expose_tools_over_mcp would hide it"
        )
    exposure = MCPExposure(server, app)
    # First, so a catch-all tool route cannot shadow it; both the exact path and sub-paths (no 307 redirect).
    app.router.routes.insert(0, Route(MCP_PATH, exposure, include_in_schema=False))
    app.router.routes.insert(1, Mount(MCP_PATH, app=exposure))
    app_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        async with exposure.running(), app_lifespan(app_) as state:
            yield state

    app.router.lifespan_context = lifespan
    server.mcp_exposure = exposure
    return exposure
