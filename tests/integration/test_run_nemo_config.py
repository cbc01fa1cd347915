"""`ngym run` serving a NeMo Gym-shaped config over HTTP, as NeMo Gym 0.7.0 would: top-level values that are not
instances, `${...}` and `${oc.env:VAR,default}` resolved into the served config class, overrides of top-level
values, and the run's global config reaching the environment's `ServerClient` (as xstest reads its judge)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ngym.child_server import free_port
from tests.integration.conftest import VENV_BIN, HandCookieClient

APP = """
from helpers import LABEL  # a sibling module, as NeMo Gym runs app.py from its folder
from resources_servers.show_env.helpers import LABEL as SAME_LABEL  # the checkout's root is importable too
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer,
)
from nemo_gym.config_types import ModelServerRef
from nemo_gym.global_config import get_first_server_config_dict


class ShowConfig(BaseResourcesServerConfig):
    sandbox_port: int
    float_rel_tol: float
    judge_base_url: str | None = None
    policy_url: str
    judge_model_server: ModelServerRef


class ShowServer(SimpleResourcesServer):
    config: ShowConfig

    def setup_webserver(self):
        app = super().setup_webserver()
        app.post("/show_config")(self.show_config)
        return app

    async def show_config(self) -> dict:
        tree = self.server_client.global_config_dict
        judge = get_first_server_config_dict(tree, self.config.judge_model_server.name)
        return {
            "sandbox_port": self.config.sandbox_port,
            "float_rel_tol": self.config.float_rel_tol,
            "judge_base_url": self.config.judge_base_url,
            "policy_url": self.config.policy_url,
            "judge_url": self.server_client._build_server_base_url(judge),
            "temperature": tree.responses_create_params.temperature,
            "labels": [LABEL, SAME_LABEL],
        }

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)
"""

CONFIG = """
show_env:
  resources_servers:
    show_env:
      entrypoint: app.py
      domain: knowledge
      sandbox_port: ${oc.env:NGYM_TEST_SANDBOX_PORT,6000}
      float_rel_tol: ${oc.env:NGYM_TEST_FLOAT_REL_TOL,1e-6}
      judge_base_url: ${judge_base_url}
      policy_url: ${policy_base_url}
      judge_model_server:
        type: responses_api_models
        name: judge_model
judge_model:
  responses_api_models:
    openai_model:
      entrypoint: app.py
      openai_base_url: ${judge_base_url}
responses_create_params:
  temperature: 0.7
simulator_model:
  _copy: policy_model
judge_base_url: null
"""


def test_a_nemo_config_with_interpolation_served_over_http(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "resources_servers" / "show_env"
    (folder / "configs").mkdir(parents=True)
    (folder / "app.py").write_text(APP)
    (folder / "helpers.py").write_text("LABEL = 'sibling'\n")
    config = folder / "configs" / "show_env.yaml"
    config.write_text(CONFIG)
    port, judge_port = free_port(), free_port()
    env = {**os.environ, "NGYM_TEST_FLOAT_REL_TOL": "0.25"}
    env.pop("NGYM_TEST_SANDBOX_PORT", None)
    env.pop("NGYM_NEMO_GLOBAL_CONFIG", None)
    command = [
        str(VENV_BIN / "ngym"),
        "run",
        str(config),
        "--port",
        str(port),
        "--model-url",
        f"judge_model=http://127.0.0.1:{judge_port}/v1",
        "judge_base_url=http://judge.example/v1",  # a top-level value, as NeMo Gym's ++judge_base_url=...
        "policy_base_url=http://policy.example/v1",  # one no file sets, only a ${...} reads
    ]
    served = serve(command, port, env)
    client = HandCookieClient(served.url)
    shown = client.post("/show_config")
    assert shown.status_code == 200, shown.text
    assert shown.json() == {
        "sandbox_port": 6000,  # oc.env's default, parsed by the config class
        "float_rel_tol": 0.25,  # from the environment
        "judge_base_url": "http://judge.example/v1",
        "policy_url": "http://policy.example/v1",
        "judge_url": f"http://127.0.0.1:{judge_port}",  # the global config, with --model-url's address
        "temperature": 0.7,
        "labels": ["sibling", "sibling"],
    }
    code, out = served.stop(signal.SIGTERM)
    assert code == 0
    assert "skipping judge_model" in out and "simulator_model" not in out
