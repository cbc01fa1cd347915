"""The tools of an environment, named as a user names it: an installed name, a folder or config, or a running URL.

:func:`environment_tools` answers with OpenAI function schemas (:mod:`ngym.train.tool_schemas`): from the running
server's ``GET /openapi.json`` for a URL, from the app built in this process (nothing served) otherwise; the rows
(``--data``, or the environment's ``data/example.jsonl``) lend their tool descriptions. This module imports the
server stack only for a target that is not a URL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from ngym.errors import ConfigError
from ngym.train.tool_schemas import declared_tools, tools_from_openapi, with_declarations


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (``ConfigError`` naming the line that is not one)."""
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
        if isinstance(row, dict):
            rows.append(row)
    return rows


def openapi_of_url(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """A running server's OpenAPI document (``ConfigError`` when it cannot be had)."""
    where = f"{url.rstrip('/')}/openapi.json"
    try:
        answer = httpx.get(where, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach {where}: {exc!r}") from None
    if answer.status_code != 200:
        raise ConfigError(f"{where} answered HTTP {answer.status_code}: is this an ngym server?")
    try:
        document = answer.json()
    except ValueError:
        raise ConfigError(f"{where} did not answer JSON: is this an ngym server?") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{where} did not answer an OpenAPI document")
    return document


def openapi_of_target(target: str) -> tuple[dict[str, Any], Path | None]:
    """The OpenAPI document of an environment built in this process, and its ``data/example.jsonl`` (if any)."""
    from ngym.server.pipeline.app import create_app, in_working_directory
    from ngym.targets import resolve

    environment = resolve(target)
    spec = environment.serve_spec()
    with in_working_directory(spec.target):
        app = create_app(spec)
        document = app.openapi()
    return document, environment.data_file("example.jsonl")


def environment_tools(target: str, data: Path | None = None) -> list[dict[str, Any]]:
    """The environment's tools as OpenAI function schemas (``ConfigError`` when it has none)."""
    if target.startswith(("http://", "https://")):
        document, examples = openapi_of_url(target), None
    else:
        document, examples = openapi_of_target(target)
    rows_file = data or examples
    rows = read_rows(rows_file) if rows_file is not None else []
    tools = with_declarations(tools_from_openapi(document), declared_tools(rows))
    if not tools:
        raise ConfigError(f"{target}: no tool routes (an environment that only verifies a final answer has no tools)")
    return tools
