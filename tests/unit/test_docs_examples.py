"""The test examples docs/authoring.md shows run as written, against a fresh ``ngym init`` environment."""

from __future__ import annotations

import inspect
import re
import uuid
from pathlib import Path
from typing import Any

from ngym.scaffold import scaffold

ROOT = Path(__file__).resolve().parents[2]


def _testing_block() -> str:
    """The Python block under "Testing a plugin with `ngym.testing`"."""
    guide = (ROOT / "docs" / "authoring.md").read_text()
    section = guide[guide.index("## Testing a plugin with `ngym.testing`") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no python block under 'Testing a plugin'"
    return match.group(1)


async def test_the_authoring_guides_test_examples_pass_as_written(tmp_path: Path) -> None:
    """Its verify example once left out responses_create_params, which /verify requires (a 422 as written)."""
    folder = scaffold(f"tool_{uuid.uuid4().hex[:8]}", parent=tmp_path)
    code = _testing_block().replace('"my_tool"', repr(str(folder)))
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/authoring.md", "exec"), namespace)  # noqa: S102 - the guide's own example
    tests = {name: value for name, value in namespace.items() if name.startswith("test_") and callable(value)}
    assert "test_verify" in tests, "the guide shows no verify test"
    for name, test in tests.items():
        assert inspect.iscoroutinefunction(test), name
        await test()
