"""``ngym init``: scaffold a pip-installable environment package in NeMo Gym's flat layout.

``scaffold(name, domain=..., parent=...)`` renders ``templates/`` into ``parent/name/`` and writes the
example data. What it writes installs with ``pip install -e``, passes its own ``pytest`` and
``ngym validate``, and serves with ``ngym run`` unchanged.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from pathlib import Path
from typing import Any

from ngym.domain import Domain
from ngym.errors import ConfigError

TEMPLATES = Path(__file__).parent / "templates"
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED = {"ngym", "test", "tests", "app", "configs", "data", "setuptools", "pip"}

#: (country, capital, question wording) for the five example rows; the last recorded rollout is wrong on purpose.
EXAMPLES = [
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
    ("Canada", "Ottawa"),
]
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "name": "get_capital",
    "description": "Look up the capital city of a country.",
    "parameters": {
        "type": "object",
        "properties": {"country": {"type": "string", "description": "Country name"}},
        "required": ["country"],
        "additionalProperties": False,
    },
    "strict": True,
}


def check_name(name: str) -> str:
    """A package name ngym can scaffold: lower-case Python identifier, not a keyword or stdlib module."""
    if not NAME_RE.match(name):
        raise ConfigError(
            f"invalid name {name!r}: use lower-case letters, digits and '_', starting with a letter (e.g. my_tool)"
        )
    if keyword.iskeyword(name) or name in sys.stdlib_module_names or name in RESERVED:
        raise ConfigError(f"invalid name {name!r}: it would shadow a Python keyword or module; pick another")
    return name


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) + "ResourcesServer"


def _row(country: str, capital: str) -> dict[str, Any]:
    return {
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "Answer with the city's name. Use the get_capital tool."},
                {"role": "user", "content": f"What is the capital of {country}?"},
            ],
            "tools": [TOOL_SCHEMA],
        },
        "expected_answer": capital,
    }


def _rollout(index: int, country: str, capital: str, answer: str) -> dict[str, Any]:
    output = [
        {
            "type": "function_call",
            "id": f"fc_{index}",
            "call_id": f"call_{index}",
            "name": "get_capital",
            "arguments": json.dumps({"country": country}),
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{index}",
            "output": json.dumps({"country": country, "capital": capital}),
        },
        {
            "type": "message",
            "id": f"msg_{index}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": answer, "annotations": []}],
        },
    ]
    response = {
        "id": f"resp_{index}",
        "created_at": 1732233600.0,
        "model": "recorded-example",
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [TOOL_SCHEMA],
        "status": "completed",
    }
    return {**_row(country, capital), "response": response, "reward": 1.0 if capital in answer else 0.0}


def example_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(dataset rows, recorded rollouts): four right answers and one wrong one (reward 0.0)."""
    rows = [_row(country, capital) for country, capital in EXAMPLES]
    rollouts = []
    for index, (country, capital) in enumerate(EXAMPLES):
        answer = f"The capital of {country} is {capital}." if index < 4 else f"I think it is Toronto, {country}."
        rollouts.append(_rollout(index, country, capital, answer))
    return rows, rollouts


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def render(template: str, values: dict[str, str]) -> str:
    for key in sorted(values, key=len, reverse=True):
        template = template.replace(key, values[key])
    return template


def scaffold(name: str, domain: str = "agent", parent: Path | str = ".", description: str | None = None) -> Path:
    """Write the package ``parent/name/``; return its path. ``ConfigError`` for a bad name/domain or an existing dir."""
    check_name(name)
    try:
        parsed = Domain.parse(domain)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    target = Path(parent) / name
    if target.exists():
        raise ConfigError(f"{target} already exists: choose another name or --dir, or remove it")
    text = " ".join((description or f"{name}: look up capitals with one tool; reward 1.0 for the right city.").split())
    values = {
        "__NAME__": name,
        "__CLASS__": class_name(name),
        "__DIST__": name.replace("_", "-"),
        "__DOMAIN__": parsed.value,
        "__DOMAIN_MEMBER__": parsed.name,
        "__DESCRIPTION_TOML__": json.dumps(text),
        "__DESCRIPTION_YAML__": json.dumps(text),
        "__DESCRIPTION__": text.replace("\\", "\\\\").replace('"""', "'''"),
        # the README's first sentence: a description given without a full stop ("… higher/lower hints") would
        # run on into the next one
        "__DESCRIPTION_SENTENCE__": text if text.endswith((".", "!", "?")) else f"{text}.",
    }
    files = {
        "pyproject.toml": "pyproject.toml.tmpl",
        "__init__.py": "__init__.py.tmpl",
        "app.py": "app.py.tmpl",
        f"configs/{name}.yaml": "configs/config.yaml.tmpl",
        "tests/test_app.py": "tests/test_app.py.tmpl",
        "README.md": "README.md.tmpl",
    }
    rows, rollouts = example_rows()
    target.mkdir(parents=True)
    for relative, template in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render((TEMPLATES / template).read_text(), values))
    (target / "data").mkdir()
    (target / "data" / "example.jsonl").write_text(_jsonl(rows))
    (target / "data" / "example_rollouts.jsonl").write_text(_jsonl(rollouts))
    return target


def parse_nemo_args(args: list[str]) -> dict[str, str]:
    """``+entrypoint=resources_servers/my_tool [+domain=agent] [+description=...]`` → scaffold()'s arguments."""
    values: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep:
            raise ConfigError(f"expected +key=value, got {arg!r} (e.g. +entrypoint=resources_servers/my_tool)")
        values[key] = value
    if "entrypoint" not in values:
        raise ConfigError("missing +entrypoint=PATH (e.g. +entrypoint=resources_servers/my_tool)")
    path = Path(values.pop("entrypoint").rstrip("/"))
    unknown = set(values) - {"domain", "description"}
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))} (known: entrypoint, domain, description)")
    return {"name": path.name, "parent": str(path.parent), **values}
