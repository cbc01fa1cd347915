"""NeMo Gym's MCP auto-exposure entry point: ngym serves an environment's tools over MCP itself
(``ngym.server.fronts.mcp``) when its config says ``expose_tools_over_mcp: true``; this maps NeMo's name onto it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from ngym.plugin_api import MCP_PATH, SEED_METADATA_KEY, TOKEN_HEADER
from ngym.plugin_api import install_mcp as install

__all__ = ["MCP_URL_PATH", "NEMO_GYM_MCP_METADATA_KEY", "NEMO_GYM_MCP_SESSION_TOKEN_HEADER", "maybe_auto_expose"]

MCP_URL_PATH = MCP_PATH
NEMO_GYM_MCP_SESSION_TOKEN_HEADER = TOKEN_HEADER
NEMO_GYM_MCP_METADATA_KEY = SEED_METADATA_KEY


def maybe_auto_expose(server: Any, app: FastAPI) -> Any:
    """Mount ``/mcp`` on ``app`` when ``server``'s config opts in; ``None`` otherwise. Returns ngym's exposure
    (its ``tools`` are the harvested tool routes)."""
    if not getattr(getattr(server, "config", None), "expose_tools_over_mcp", False):
        return None
    return install(server, app)
