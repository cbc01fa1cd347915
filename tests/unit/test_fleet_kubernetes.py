"""A fleet as Kubernetes manifests: every object valid against the API schema, the global config naming each
environment at its Service's DNS name, affinity and Redis as each environment's state needs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ngym.fleet.kubernetes import HEAD_PORT, render_fleet, write_fleet
from ngym.fleet.spec import load_fleet

K8S_VERSION = "1.30"


def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "blend",
                "engine": "kubernetes",
                "kubernetes": {"namespace": "rl", "images": {"math": "registry.example/math:1"}},
                "environments": {
                    "counter": {"env": "example_session_state_mgmt", "replicas": 3},
                    "math": {"env": "math_with_code", "replicas": 2},
                },
            }
        )
    )
    return path


def documents(files: dict[str, str]) -> dict[str, dict]:
    docs = {}
    for path, text in files.items():
        for doc in yaml.safe_load_all(text):
            docs[f"{path}:{doc['kind']}/{doc['metadata']['name']}"] = doc
    return docs


def test_every_object_of_a_fleet_is_valid_and_the_config_names_services(tmp_path: Path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    spec = load_fleet(fleet(tmp_path))
    docs = documents(render_fleet(spec, {"counter": False, "math": True}, {"counter": "agent", "math": "math"}))
    for name, doc in docs.items():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises with the offending field
        assert doc, name
    kinds = sorted(k.split(":")[1].split("/")[0] for k in docs)
    assert kinds.count("Deployment") == 4  # counter, its Redis, math, the head server
    assert "Ingress" in kinds and "HorizontalPodAutoscaler" in kinds  # math's affinity ingress; autoscaling
    config = yaml.safe_load(docs["head.yaml:ConfigMap/ngym-fleet-blend-config"]["data"]["global_config.yaml"])
    assert config["head_server"] == {"host": "ngym-fleet-blend.rl.svc.cluster.local", "port": HEAD_PORT}
    assert config["counter"]["resources_servers"]["example_session_state_mgmt"] == {
        "host": "ngym-counter.rl.svc.cluster.local",
        "port": 8000,
        "domain": "agent",
    }
    assert "entrypoint" not in yaml.safe_dump(config)
    math = docs["math/k8s/deployment.yaml:Deployment/ngym-math"]
    assert math["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/math:1"
    assert math["spec"]["replicas"] == 2
    # the serialisable counter shares state through Redis; math_with_code keeps its memory store (affinity)
    counter_env = docs["counter/k8s/deployment.yaml:Deployment/ngym-counter"]["spec"]["template"]["spec"]
    assert "redis://" in str(counter_env["containers"][0]["env"])
    assert "memory" in str(math["spec"]["template"]["spec"]["containers"][0]["env"])


def test_ngym_up_writes_the_manifests_of_installed_environments(tmp_path: Path) -> None:
    spec = load_fleet(fleet(tmp_path))
    written = write_fleet(spec, tmp_path / "k8s")
    assert {p.relative_to(tmp_path / "k8s").parts[0] for p in written} == {"counter", "math", "head.yaml"}
    head = list(yaml.safe_load_all((tmp_path / "k8s" / "head.yaml").read_text()))
    config = yaml.safe_load(head[0]["data"]["global_config.yaml"])  # domains read from the installed classes
    assert (
        config["counter"]["resources_servers"]["example_session_state_mgmt"]["domain"],
        config["math"]["resources_servers"]["math_with_code"]["domain"],
    ) == ("agent", "math")
    assert "*id" not in (tmp_path / "k8s" / "head.yaml").read_text()  # no YAML aliases: kubectl-friendly


def test_up_status_and_down_of_a_kubernetes_fleet_ask_the_engine_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ngym up`` writes the manifests and says how to apply them; ``status``/``down`` say who runs the fleet, in
    one line with exit 2; the CLI names no engine (Kubernetes is one of the registered engines)."""
    from ngym.cli import main
    from ngym.fleet.engines import HandOff, engine

    assert isinstance(engine("kubernetes"), HandOff) and not isinstance(engine("local"), HandOff)
    path = fleet(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["up", str(path)])
    assert done.value.code in (0, None)
    out = capsys.readouterr().out
    directory = tmp_path / ".ngym-fleet" / "blend" / "k8s"
    written = len([p for p in directory.rglob("*") if p.is_file()])
    assert f"ngym up: fleet 'blend': wrote {written} Kubernetes manifest file(s) to {directory}" in out
    assert f"kubectl apply -R -f {directory}" in out and (directory / "head.yaml").is_file()
    for command in ("status", "down"):
        with pytest.raises(SystemExit) as refused:
            main([command, str(path)])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and "Traceback" not in err
        assert f"fleet 'blend' runs in your Kubernetes cluster: use kubectl (its manifests: {directory})" in err
    cli_source = (Path(__file__).resolve().parents[2] / "ngym" / "cli" / "fleet.py").read_text()
    assert "kubernetes" not in cli_source.lower()
