"""Tools an agent is granted for one episode (NeMo Gym's ``nemo_gym.tool_access``).

An agent server is told, per session or in its config, which tool endpoints it may call: a plain HTTP base URL
(with the cookies and headers that bind the calls to the episode's resources-server session) or an MCP server
over streamable HTTP. Names identify a grant within a session.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

#: A grant's name: a letter or digit, then letters, digits, ``.``, ``_`` or ``-``.
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class _Grant(BaseModel):
    """What every grant has: a session-unique ``name`` and whether seeding fails without it (``required``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=_NAME)
    required: bool


class DirectHTTPToolAccess(_Grant):
    """Tools served over plain HTTP at ``base_url`` (a resources server's ``/<tool>`` routes)."""

    kind: Literal["direct_http"] = "direct_http"
    base_url: AnyHttpUrl
    cookies: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)


class MCPStreamableHTTPConnection(BaseModel):
    """Where an MCP server listens (an absolute streamable-HTTP endpoint) and the headers to send it."""

    model_config = ConfigDict(extra="forbid")

    transport: Literal["streamable_http"] = "streamable_http"
    url: AnyHttpUrl
    headers: dict[str, str] = Field(default_factory=dict)


class MCPToolAccess(_Grant):
    """Tools of one MCP server. A required one that cannot be reached fails the agent session's seeding."""

    kind: Literal["mcp"] = "mcp"
    connection: MCPStreamableHTTPConnection


ToolAccess = Annotated[DirectHTTPToolAccess | MCPToolAccess, Field(discriminator="kind")]
