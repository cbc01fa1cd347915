"""The ORS and OpenEnv fronts read an environment's rows from its data folder (``SimpleResourcesServer.data_folder``).

An installed verifiers or ORS environment is served by one class generated in its plugin's package, while the rows
``ngym install`` wrote are in the environment's own folder: the fronts looked beside the class's file, found no
rows, and TRL's ``OpenRewardSpec`` got ``unknown split 'example'; this environment has []`` (an OpenEnv ``reset()``
without a row: "ships no data/example.jsonl").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.testing import app_for_class, serve_in_process

ROWS = [
    {"responses_create_params": {"input": [{"role": "user", "content": "What is a 15% tip on 40?"}]}, "answer": "6"},
    {"responses_create_params": {"input": [{"role": "user", "content": "What is a 20% tip on 80?"}]}, "answer": "16"},
]


class _Installed(SimpleResourcesServer):
    """Like an installed environment's generated class: its rows live in a folder of their own, not beside it."""

    domain = Domain.MATH
    folder: ClassVar[Path]

    @classmethod
    def data_folder(cls) -> Path | None:
        return cls.folder

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def _installed(tmp_path: Path) -> type[_Installed]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "example.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return type("TipCalc", (_Installed,), {"folder": tmp_path})


async def test_ors_front_serves_the_rows_of_the_data_folder(tmp_path: Path) -> None:
    async with serve_in_process(app_for_class(_installed(tmp_path), name="tip_calc")) as http:
        assert (await http.get("/ors/tip_calc/splits")).json() == [{"name": "example", "type": "validation"}]
        counted = await http.post("/ors/tip_calc/num_tasks", json={"split": "example"})
        assert counted.status_code == 200 and counted.json() == {"num_tasks": 2}, counted.text


async def test_openenv_reset_without_a_row_picks_from_the_data_folder(tmp_path: Path) -> None:
    async with serve_in_process(app_for_class(_installed(tmp_path), name="tip_calc")) as http:
        reset = await http.post("/openenv/reset", json={})
        assert reset.status_code == 200, reset.text
        assert "15% tip" in json.dumps(reset.json()["observation"]["prompt"])


def test_default_data_folder_is_the_class_file_folder() -> None:
    assert _Installed.data_folder is not SimpleResourcesServer.data_folder
    assert SimpleResourcesServer.data_folder.__func__(_Installed) == Path(__file__).resolve().parent  # type: ignore[attr-defined]
