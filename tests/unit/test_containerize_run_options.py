"""Run options an environment declares for its container (math_with_code: root with a few capabilities) reach the
Dockerfile's USER, a label, the printed `docker run` flags, the Compose service and the Kubernetes securityContext."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from math_with_code.app import CONTAINER_CAPABILITIES, MathWithCodeResourcesServer

from ngym.containerize.deploy import DeploySpec
from ngym.containerize.dockerfile import render_dockerfile
from ngym.containerize.errors import PluginSourceError
from ngym.containerize.k8s import render_k8s
from ngym.containerize.manifests import compose_document
from ngym.containerize.spec import RunOptions, resolve_plugin
from tests.unit.test_containerize_render import make_spec

MATH = RunOptions.declared_by(MathWithCodeResourcesServer)
HARDENED = DeploySpec(
    env_name="math_with_code", image="ngym-math_with_code:0.1.0", replicas=2, affinity=True, run_options=MATH
)


def test_math_with_code_declares_root_with_only_the_capabilities_its_sandbox_needs() -> None:
    expected = RunOptions(
        user="root", cap_add=tuple(CONTAINER_CAPABILITIES), cap_drop=("ALL",), security_opt=("no-new-privileges",)
    )
    assert expected == MATH
    assert resolve_plugin("math_with_code").run_options == MATH  # found through the entry point
    assert resolve_plugin("example_single_tool_call").run_options == RunOptions()
    args = MATH.docker_args()
    assert args[:4] == ["--user", "root", "--cap-drop", "ALL"] and args[-2:] == ["--security-opt", "no-new-privileges"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--cap-add"] == CONTAINER_CAPABILITIES


def test_a_malformed_declaration_is_a_clear_error() -> None:
    class Odd:
        container_run_options = {"privileged": True}

    with pytest.raises(PluginSourceError, match="container_run_options must be a dict with keys"):
        RunOptions.declared_by(Odd)


def test_dockerfile_runs_as_the_declared_user_and_labels_the_options() -> None:
    spec = make_spec(env_name="math_with_code", run_options=MATH)
    text = render_dockerfile(spec)
    assert "\nUSER root\n" in text and "USER 10001" not in text
    assert spec.labels()["dev.ngym.run.options"] == " ".join(MATH.docker_args())
    plain = make_spec(env_name="math_with_code")
    assert "\nUSER 10001:10001\n" in render_dockerfile(plain) and "dev.ngym.run.options" not in plain.labels()


def test_compose_and_k8s_carry_the_options() -> None:
    service = compose_document(HARDENED)["services"]["env"]
    assert (service["user"], service["cap_drop"], service["cap_add"]) == ("root", ["ALL"], CONTAINER_CAPABILITIES)
    assert service["security_opt"] == ["no-new-privileges"]
    shared = compose_document(replace(HARDENED, affinity=False))["services"]["env"]  # replicas sharing Redis
    assert {key: shared[key] for key in MATH.settings()} == MATH.settings()
    plain = compose_document(replace(HARDENED, run_options=RunOptions()))["services"]["env"]
    assert not {"user", "cap_drop", "cap_add", "security_opt"} & set(plain) and RunOptions().settings() == {}
    docs = [doc for text in render_k8s(HARDENED).values() for doc in yaml.safe_load_all(text)]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": False,
        "runAsUser": 0,
        "capabilities": {"drop": ["ALL"], "add": CONTAINER_CAPABILITIES},
    }
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_a_server_that_says_it_cannot_be_packaged_is_refused_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from ngym.targets import installed

    class Unpackable(MathWithCodeResourcesServer):
        not_containerizable = "its server runs in a virtualenv of its own on this host"

    env = installed("math_with_code")
    env.server_class = Unpackable  # what the cached property would give for such a class
    monkeypatch.setattr("ngym.containerize.spec.installed", lambda name: env)
    with pytest.raises(PluginSourceError, match="'math_with_code' cannot be containerized: its server runs in"):
        resolve_plugin("math_with_code")
