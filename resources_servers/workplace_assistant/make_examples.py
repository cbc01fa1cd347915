"""Regenerate data/example.jsonl and data/example_rollouts.jsonl from the bundled sample tasks.

Run: ``python -m workplace_assistant.make_examples``. Each rollout's function calls are the task's ground truth,
its outputs are what the tools return on the sample databases, and its expected reward is 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .app import WorkplaceAssistantConfig, WorkplaceAssistantResourcesServer
from .importer import iter_rows
from .workspace import SAMPLE_DIR, WorkBenchData

DATA = Path(__file__).resolve().parent / "data"


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    server = WorkplaceAssistantResourcesServer(config=WorkplaceAssistantConfig(name="workplace_assistant"))
    data = WorkBenchData.sample()
    rows, rollouts = [], []
    for i, row in enumerate(iter_rows(SAMPLE_DIR)):
        workspace = data.new_workspace()
        output: list[dict[str, Any]] = []
        for j, call in enumerate(row["ground_truth"]):
            result = server.run_tool(workspace, call["name"], json.loads(call["arguments"]))
            cid = f"call_{i}_{j}"
            output.append(
                {
                    "type": "function_call",
                    "name": call["name"],
                    "arguments": call["arguments"],
                    "call_id": cid,
                    "id": f"fc_{i}_{j}",
                    "status": "completed",
                }  # fmt: skip
            )
            output.append({"type": "function_call_output", "call_id": cid, "output": json.dumps({"output": result})})
        text = "Done." if row["ground_truth"] else "Nothing needs to change."
        output.append(
            {
                "type": "message",
                "id": f"msg_{i}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }  # fmt: skip
        )
        response = {
            "id": f"resp_workplace_{i}", "created_at": 1732233600.0, "model": "recorded-example",
            "object": "response", "output": output, "parallel_tool_calls": False, "tool_choice": "auto",
            "tools": row["responses_create_params"]["tools"],
        }  # fmt: skip
        rows.append(row)
        rollouts.append({**row, "response": response, "reward": 1.0})
    return rows, rollouts


def main() -> None:
    rows, rollouts = build()
    for name, items in (("example.jsonl", rows), ("example_rollouts.jsonl", rollouts)):
        (DATA / name).write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items))
    print(f"wrote {len(rows)} rows")


if __name__ == "__main__":
    main()
