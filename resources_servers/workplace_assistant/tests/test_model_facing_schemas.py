"""What the model sees of the 27 tools stays byte for byte what it was: the Responses-API tool entries
(``tool_schemas()``) and each tool route's OpenAPI operation with its body and output models.

``golden/model_facing_schemas.json`` was written from the code before the record tools became table-driven
(``records.py``); a change to a name, a description, a parameter or its order fails here. Regenerate it only
for a deliberate change of what the model sees: ``python -m workplace_assistant.tests.test_model_facing_schemas``
from ``resources_servers/``.
"""

from __future__ import annotations

import json
from pathlib import Path

from workplace_assistant.app import WorkplaceAssistantResourcesServer
from workplace_assistant.tools import TOOLS, tool_schemas

from ngym.testing import app_for_class

GOLDEN = Path(__file__).parent / "golden" / "model_facing_schemas.json"


def model_facing_schemas() -> str:
    """The tool entries, the tool routes' OpenAPI operations and the models they refer to, as indented JSON."""
    openapi = app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant").openapi()
    paths = {path: operation for path, operation in openapi["paths"].items() if path.strip("/") in TOOLS}
    refs = json.dumps(paths).split('"#/components/schemas/')[1:]
    names = sorted({ref.split('"')[0] for ref in refs} - {"HTTPValidationError"})  # FastAPI's own, not ours
    components = {name: openapi["components"]["schemas"][name] for name in names}
    return json.dumps({"tools": tool_schemas(), "paths": paths, "components": components}, indent=1) + "\n"


def test_the_schemas_the_model_sees_are_unchanged() -> None:
    current = model_facing_schemas()
    assert len(json.loads(current)["paths"]) == len(TOOLS) == 27
    assert current == GOLDEN.read_text(encoding="utf-8")


if __name__ == "__main__":
    GOLDEN.write_text(model_facing_schemas(), encoding="utf-8")
