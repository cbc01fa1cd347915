"""``ngym containerize`` without an engine: plugin lookup, build-log parsing, the no-engine message, CLI usage."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from ngym.containerize.build import BuildStep, _consume, _failure_message, connect
from ngym.containerize.errors import ContainerRunError, DockerUnavailable, PluginSourceError
from ngym.containerize.pip import _may_be_the_pins, _pip_error
from ngym.containerize.smoke import ExampleRollout, load_example_rollout
from ngym.containerize.spec import ngym_source, resolve_plugin
from ngym.containerize.wheelhouse import host_constraints, linux_platform_tags

REPO = Path(__file__).resolve().parents[2]


def test_resolve_installed_environment() -> None:
    plugin = resolve_plugin("example_single_tool_call")
    assert plugin.distribution == "ngym-example-single-tool-call"
    assert plugin.domain == "agent"
    assert plugin.source_dir == REPO / "resources_servers" / "example_single_tool_call"  # editable install
    assert plugin.source_url.startswith("pkg:generic/ngym-example-single-tool-call@")


def test_resolve_ngym_itself_from_its_source_tree() -> None:
    source = ngym_source()
    assert source.source_dir == REPO


def test_resolve_unknown_environment_lists_installed_ones() -> None:
    with pytest.raises(PluginSourceError, match="example_single_tool_call"):
        resolve_plugin("no_such_environment")


def test_resolve_source_directory(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "my_env.yaml").write_text(
        "my_env:\n  resources_servers:\n    my_env:\n      entrypoint: app.py\n      domain: math\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "my-env"\nversion = "2.0"\ndependencies = ["ngym"]\n'
        '[project.urls]\nSource = "https://example.invalid/my-env"\n'
        '[project.entry-points."ngym.resources_servers"]\nmy_env = "my_env.app:Server"\n'
    )
    plugin = resolve_plugin(str(tmp_path))
    assert (plugin.name, plugin.distribution, plugin.version, plugin.domain) == ("my_env", "my-env", "2.0", "math")
    assert plugin.source_dir == tmp_path
    assert plugin.source_url == "https://example.invalid/my-env"


def test_source_directory_without_entry_point(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    with pytest.raises(PluginSourceError, match="entry-points"):
        resolve_plugin(str(tmp_path))


def test_example_rollout_of_installed_environment() -> None:
    example = load_example_rollout(resolve_plugin("example_session_state_mgmt"))
    assert example.expected_reward == 1.0
    assert "response" not in example.row and "reward" not in example.row
    names = [name for name, _ in example.tool_calls()]
    assert names and set(names) <= {"increment_counter", "get_counter_value"}


def test_example_rollout_tool_calls_decode_arguments() -> None:
    response = {
        "output": [
            {"type": "function_call", "name": "a", "arguments": '{"x": 1}', "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "{}"},
            {"type": "function_call", "name": "b", "arguments": "", "call_id": "c2"},
        ]
    }
    assert ExampleRollout({}, response, 1.0).tool_calls() == [("a", {"x": 1}), ("b", {})]


def test_missing_example_rollouts(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "1"\n[project.entry-points."ngym.resources_servers"]\nx = "x:S"\n'
    )
    with pytest.raises(ContainerRunError, match="example_rollouts.jsonl"):
        load_example_rollout(resolve_plugin(str(tmp_path)))


def test_build_stream_parsing_tracks_steps_cache_and_id() -> None:
    steps: list[BuildStep] = []
    tail: deque[str] = deque(maxlen=5)
    seen: list[str] = []
    image_id = error = None
    chunks = [
        {"stream": "Step 1/3 : FROM base AS deps\n"},
        {"stream": " ---> 1234\n"},
        {"stream": 'Step 2/3 : RUN ["pip", "install"]\n'},
        {"stream": " ---> Using cache\n ---> 5678\n"},
        {"stream": "Step 3/3 : COPY a b\n"},
        {"aux": {"ID": "sha256:abc"}},
        {"stream": "Successfully built abc\n"},
    ]
    for chunk in chunks:
        image_id, error = _consume(chunk, steps, tail, seen.append, image_id, error)
    assert [(s.number, s.cached) for s in steps] == [(1, False), (2, True), (3, False)]
    assert image_id == "sha256:abc" and error is None
    assert len(tail) == 5 and tail[0].startswith("Step 2/3")
    # progress: the RUN step (where the time goes); the other steps and docker's own lines are indented detail
    assert [line for line in seen if not line.startswith("  ")] == ['step 2/3: RUN ["pip", "install"]']
    assert "  Step 1/3 : FROM base AS deps" in seen and "   ---> Using cache" in seen


def test_build_failure_message_names_the_step_and_shows_the_tail() -> None:
    steps = [BuildStep(1, "FROM base"), BuildStep(7, 'RUN ["pip", "install", "x"]')]
    tail = deque(["Collecting x", "ERROR: No matching distribution found for x"])
    message = _failure_message("The command returned a non-zero code: 1", steps, tail)
    assert message.startswith('docker build failed at step 7 (RUN ["pip", "install", "x"])')
    assert "  | ERROR: No matching distribution found for x" in message
    pull = _failure_message("pull access denied for python, repository does not exist", [], deque())
    assert "make docker-base" in pull


def test_no_engine_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(DockerUnavailable) as info:
        connect(timeout=5)
    message = str(info.value)
    assert "no Docker engine reachable" in message and "dockerd" in message
    assert "\n" not in message


def ngym_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_cli_no_engine_exits_with_one_line(tmp_path: Path) -> None:
    proc = ngym_cli("containerize", "example_single_tool_call", env={"DOCKER_HOST": f"unix://{tmp_path}/x.sock"})
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ngym: error: no Docker engine reachable"), proc.stderr


def test_cli_usage_errors() -> None:
    proc = ngym_cli("containerize", "example_single_tool_call", "--no-build")
    assert proc.returncode == 2 and "--output" in proc.stderr
    proc = ngym_cli("containerize", "example_single_tool_call", "--keep")
    assert proc.returncode == 2 and "--run" in proc.stderr
    proc = ngym_cli("containerize", "no_such_env", "--output", "/tmp/x", "--no-build")
    assert proc.returncode == 2 and proc.stderr.startswith("ngym: error: no environment named 'no_such_env'")
    proc = ngym_cli("containerize", str(REPO / "docs"), "--output", "/tmp/x", "--no-build")
    assert proc.returncode == 2 and "not a plugin source directory (no pyproject.toml in it)" in proc.stderr
    proc = ngym_cli("containerize", "example_single_tool_call", "--tag", "Bad Tag", "--no-build", "-o", "/tmp/x")
    assert proc.returncode == 2 and "invalid image tag" in proc.stderr


def test_cli_is_registered() -> None:
    proc = ngym_cli("containerize", "--help")
    assert proc.returncode == 0 and "--base-image" in proc.stdout, proc.stderr


def test_pip_failures_are_summarised() -> None:
    stderr = "WARNING: Location 'file:///x' is ignored\nERROR: ResolutionImpossible: for help visit ...\n"
    stdout = (
        "Collecting a\n\nThe conflict is caused by:\n    env 1.0 depends on ngym>=999\n"
        "    The user requested ngym 0.1.0\n\nTo fix this you could try to:\n1. loosen the range\n"
    )
    summary = _pip_error(stdout, stderr)
    assert "WARNING" not in summary and "Collecting" not in summary and "loosen" not in summary
    assert "ERROR: ResolutionImpossible" in summary and "env 1.0 depends on ngym>=999" in summary


def test_only_pin_related_failures_are_retried_unpinned() -> None:
    assert not _may_be_the_pins(
        "ERROR: Could not find a version that satisfies the requirement x (from versions: none)"
    )
    assert not _may_be_the_pins("The conflict is caused by:\n    env depends on ngym>=999")
    assert _may_be_the_pins("The user requested (constraint) fastapi==0.165.0")
    assert _may_be_the_pins("requirement fastapi==9.9 (from versions: 0.1.0, 0.2.0)")


def test_host_constraints_pin_index_installs_only() -> None:
    pins = host_constraints(exclude={"click"}).splitlines()
    names = {pin.split("==")[0].lower() for pin in pins}
    assert "pydantic" in names and "click" not in names
    assert "ngym" not in names, "an editable (direct URL) install has no index version to pin"
    assert all("==" in pin for pin in pins)


def test_run_without_example_data_fails_before_any_build(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "1"\n[project.entry-points."ngym.resources_servers"]\nx = "x:S"\n'
    )
    proc = ngym_cli("containerize", str(tmp_path), "--run", env={"DOCKER_HOST": f"unix://{tmp_path}/x.sock"})
    assert proc.returncode == 1
    assert "example_rollouts.jsonl" in proc.stderr and "no Docker engine" not in proc.stderr


def test_linux_platform_tags_cover_every_older_glibc() -> None:
    tags = linux_platform_tags("x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags) and tags[-1] == "linux_x86_64"
    assert "manylinux_2_16_x86_64" not in tags


def test_source_directory_with_an_invalid_domain_is_refused(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "my_env.yaml").write_text(
        "my_env:\n  resources_servers:\n    my_env:\n      entrypoint: app.py\n      domain: mathz\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "my-env"\nversion = "2.0"\n'
        '[project.entry-points."ngym.resources_servers"]\nmy_env = "my_env.app:Server"\n'
    )
    with pytest.raises(PluginSourceError, match="invalid domain 'mathz': must be one of math, coding, agent"):
        resolve_plugin(str(tmp_path))


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of installed-looking distributions on sys.path, with a fresh registry before and after."""
    from ngym.plugins.registry import reset_registry

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "cache"))
    reset_registry()
    yield site
    reset_registry()


def _install_fake(site: Path, env: str, module_source: str) -> None:
    module = f"{env}_mod"
    info = site / f"dist_{env}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dist-{env}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ngym.resources_servers]\n{env} = {module}:Server\n")
    (site / f"{module}.py").write_text(module_source)


BROKEN_DOMAIN_SERVER = """
from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer

class Server(SimpleResourcesServer):
    config: BaseResourcesServerConfig
    domain = "mathz"

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
"""


def test_installed_environment_breaking_a_registration_rule_is_refused(fake_site: Path) -> None:
    """No image of a server ``ngym run`` would refuse: the registry's reason, before any wheel is built."""
    from ngym.errors import PluginError

    env = f"cz_mathz_{uuid.uuid4().hex[:6]}"
    _install_fake(fake_site, env, BROKEN_DOMAIN_SERVER)
    with pytest.raises(PluginError, match=f"dist-{env}.*invalid domain 'mathz': must be one of math, coding"):
        resolve_plugin(env)


def test_installed_environment_that_cannot_be_imported_here_is_still_packaged(fake_site: Path) -> None:
    env = f"cz_noimport_{uuid.uuid4().hex[:6]}"
    _install_fake(fake_site, env, "import ngym_no_such_module_on_this_host\n")
    plugin = resolve_plugin(env)
    assert (plugin.name, plugin.distribution, plugin.domain) == (env, f"dist-{env}", "other")
