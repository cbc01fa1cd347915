"""The server class's private state (its session manager, its MCP exposure) is read and written by the class
alone: routes, the host, the MCP exposure and the plugins go through ``server.sessions`` and
``server.mcp_exposure``. An AST scan, so a new ``server._mcp = ...`` elsewhere fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import ngym
from ngym.server.pipeline.resources import SimpleResourcesServer

ROOT = Path(ngym.__file__).resolve().parent
OWNER = ROOT / "server" / "pipeline" / "resources.py"


def _private_attributes() -> set[str]:
    hints = SimpleResourcesServer.__annotations__
    return {name for name in hints if name.startswith("_") and not name.startswith("__")}


def test_the_private_attributes_are_known() -> None:
    assert {"_ngym_sessions", "_mcp"} <= _private_attributes()


def test_no_module_but_the_class_touches_its_private_state() -> None:
    private = _private_attributes()
    offenders = []
    for path in [*ROOT.rglob("*.py"), *(ROOT.parent / "plugins").rglob("*.py")]:
        if path == OWNER or ".venv" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private:
                offenders.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: .{node.attr}")
    assert offenders == []
