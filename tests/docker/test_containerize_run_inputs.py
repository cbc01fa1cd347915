"""``ngym containerize NAME --run -e KEY=VALUE -v HOST:CONTAINER:ro``: the smoke container gets both (real engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .conftest import ngym


def test_the_smoke_container_gets_the_variables_and_mounts_given(
    base_image: str, image_tag: str, docker_client: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    (tmp_path / "rows.jsonl").write_text('{"row": 1}\n')
    tmp_path.chmod(0o755)  # the image's user is not root: what it reads must be readable by others
    (tmp_path / "rows.jsonl").chmod(0o644)
    monkeypatch.setenv("E33_FROM_SHELL", "from the shell")
    proc = ngym(
        "containerize", "example_single_tool_call", "--base-image", base_image, "--tag", image_tag, "--run", "--keep",
        "--json", "-e", "E33_GIVEN=given value", "-e", "E33_FROM_SHELL", "-v", f"{tmp_path}:/e33-data:ro",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout)["run"]
    container = docker_client.containers.get(run["container_name"])
    try:
        assert run["rollout"]["reward"] == 1.0  # the smoke rollout still ran
        env = container.exec_run(["printenv", "E33_GIVEN", "E33_FROM_SHELL"]).output.decode().splitlines()
        assert env == ["given value", "from the shell"]
        assert container.exec_run(["cat", "/e33-data/rows.jsonl"]).output.decode() == '{"row": 1}\n'
        written = container.exec_run(["sh", "-c", "echo x > /e33-data/new"])
        assert written.exit_code != 0  # :ro
    finally:
        container.remove(force=True)
