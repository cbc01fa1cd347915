"""nemo_gym.sandbox: AsyncSandbox over the local provider, and over the docker provider on the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from nemo_gym.sandbox import (
    AsyncSandbox,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
    cpu_cap_env,
    create_provider,
    resolve_provider_config,
    resolve_provider_metadata,
)


async def test_local_sandbox_runs_commands_with_files_env_and_timeouts(tmp_path: Path) -> None:
    spec = SandboxSpec(files={"task/input.txt": "42"}, env={"ANSWER": "yes"})
    async with AsyncSandbox({"local": {"workspace_root": str(tmp_path)}}, spec) as sandbox:
        await sandbox.start()
        result = await sandbox.exec('cat task/input.txt; echo " $ANSWER"; exit 3')
        assert (result.stdout, result.return_code, result.error_type) == ("42 yes\n", 3, None)
        slow = await sandbox.exec("sleep 10", timeout_s=0.2)
        assert (slow.return_code, slow.error_type) == (125, "timeout")
        await sandbox.download("task/input.txt", tmp_path / "copy.txt")
        assert (tmp_path / "copy.txt").read_text() == "42"
        assert await sandbox.status() == SandboxStatus.RUNNING
    assert await sandbox.status() == SandboxStatus.STOPPED
    assert list(tmp_path.iterdir()) == [tmp_path / "copy.txt"]  # the workspace it made is gone


async def test_local_commands_do_not_inherit_the_session_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NGYM_SESSION_SECRET", "planted-session-secret-1234")
    monkeypatch.setenv("NGYM_SESSION_SECRET_FILE", "/run/secrets/planted-session-secret-file")
    monkeypatch.setenv("NGYM_SANDBOX_PROBE", "kept")
    async with AsyncSandbox({"local": {"workspace_root": str(tmp_path)}}, SandboxSpec()) as sandbox:
        await sandbox.start()
        result = await sandbox.exec('echo "[$NGYM_SESSION_SECRET][$NGYM_SANDBOX_PROBE]"; cat /proc/self/environ')
    assert result.stdout.splitlines()[0] == "[][kept]"
    assert "planted-session-secret" not in result.stdout


async def test_a_sandbox_must_be_started_before_use() -> None:
    sandbox = AsyncSandbox({"local": {}})
    with pytest.raises(RuntimeError, match="not been started"):
        await sandbox.exec("true")
    with pytest.raises(ValueError, match="requires a SandboxSpec"):
        await sandbox.start()


def test_spec_and_provider_config_validation() -> None:
    assert SandboxSpec(resources={"cpu": 2, "memory_mib": "512"}).resources == SandboxResources(cpu=2.0, memory_mib=512)
    with pytest.raises(ValueError, match="Unknown sandbox resource keys: cores"):
        SandboxSpec(resources={"cores": 2})
    with pytest.raises(ValueError, match="Duplicate sandbox TCP port: 80"):
        SandboxSpec(ports=[80, "80"])
    named = {"sandbox": {"docker": {"network": "none"}, "default_metadata": {"team": "rl"}}}
    assert resolve_provider_config("sandbox", named) == {"docker": {"network": "none"}}
    assert resolve_provider_metadata("sandbox", named) == {"team": "rl"}
    with pytest.raises(ValueError, match="Available sandbox configs: 'sandbox'"):
        resolve_provider_config("missing", named)
    with pytest.raises(ValueError, match="Unknown sandbox provider 'nope'"):
        create_provider({"nope": {}})
    assert cpu_cap_env(2.7)["OMP_NUM_THREADS"] == "2" and cpu_cap_env(None) == {}


async def test_docker_sandbox_on_the_real_engine(tmp_path: Path, docker_base_image: str) -> None:
    (tmp_path / "patch.diff").write_text("diff")
    spec = SandboxSpec(
        image=docker_base_image, workdir="/work", env={"MODE": "eval"}, resources={"cpu": 1, "memory_mib": 256}
    )
    async with AsyncSandbox({"docker": {}}, spec) as sandbox:
        await sandbox.start()
        await sandbox.upload(tmp_path / "patch.diff", "/work/in/patch.diff")
        result = await sandbox.exec('pwd; cat in/patch.diff; echo " $MODE"')
        assert (result.stdout, result.return_code) == ("/work\ndiff eval\n", 0)
        assert (await sandbox.exec("exit 7")).return_code == 7
        await sandbox.download("/work/in/patch.diff", tmp_path / "back.diff")
        assert (tmp_path / "back.diff").read_text() == "diff"
        assert await sandbox.status() == SandboxStatus.RUNNING
        container_id = sandbox.handle.sandbox_id if sandbox.handle else ""
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get(container_id)  # removed at stop
