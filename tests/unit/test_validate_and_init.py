"""``ngym init`` (scaffold) and ``ngym validate``, in-process; the scaffold is validated without installing it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from ngym.errors import ConfigError
from ngym.plugins.manager import STRICT_ENV
from ngym.plugins.registry import reset_registry
from ngym.scaffold import parse_nemo_args, scaffold
from ngym.validation import validate_async

VALID_DOMAINS = "math, coding, agent"


@pytest.fixture(autouse=True)
def lenient(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "cache"))
    reset_registry()


def fresh_name() -> str:
    return f"tool_{uuid.uuid4().hex[:8]}"


def test_scaffold_writes_the_flat_layout(tmp_path: Path) -> None:
    name = fresh_name()
    path = scaffold(name, domain="games", parent=tmp_path, description='Says "hi" \\ politely.')
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    assert files == sorted(
        [
            "README.md",
            "__init__.py",
            "app.py",
            f"configs/{name}.yaml",
            "data/example.jsonl",
            "data/example_rollouts.jsonl",
            "pyproject.toml",
            "tests/test_app.py",
        ]
    )
    pyproject = (path / "pyproject.toml").read_text()
    assert f'{name} = "{name}.app:' in pyproject and f'package-dir = {{ "{name}" = "." }}' in pyproject
    assert "domain = Domain.GAMES" in (path / "app.py").read_text()
    rows = (path / "data" / "example.jsonl").read_text().splitlines()
    rollouts = [json.loads(line) for line in (path / "data" / "example_rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == len(rollouts) == 5 and all("response" in r and "reward" in r for r in rollouts)
    import tomllib

    assert tomllib.loads(pyproject)["project"]["description"] == 'Says "hi" \\ politely.'
    compile((path / "app.py").read_text(), "app.py", "exec")


@pytest.mark.parametrize("name", ["My-Tool", "1tool", "json", "class", "ngym", ""])
def test_scaffold_rejects_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="invalid name"):
        scaffold(name, parent=tmp_path)


def test_scaffold_rejects_bad_domain_and_existing_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"mathz.*{VALID_DOMAINS}"):
        scaffold("my_tool", domain="mathz", parent=tmp_path)
    (tmp_path / "my_tool").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        scaffold("my_tool", parent=tmp_path)


def test_ngym_init_cli_errors_are_one_line(tmp_path: Path) -> None:
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["init", "my_tool", "--domain", "mathz", "--dir", str(tmp_path)])
    assert exited.value.code == 2


def test_nemo_form_arguments() -> None:
    assert parse_nemo_args(["+entrypoint=resources_servers/my_tool", "+domain=math"]) == {
        "name": "my_tool",
        "parent": "resources_servers",
        "domain": "math",
    }
    with pytest.raises(ConfigError, match="entrypoint"):
        parse_nemo_args(["+domain=math"])


def test_ng_init_resources_server_alias(tmp_path: Path) -> None:
    alias = Path(sys.executable).parent / "ng_init_resources_server"
    done = subprocess.run(
        [str(alias), "+entrypoint=resources_servers/my_tool"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "resources_servers" / "my_tool" / "configs" / "my_tool.yaml").is_file()


async def test_scaffolded_package_validates_by_path(tmp_path: Path) -> None:
    path = scaffold(fresh_name(), parent=tmp_path)
    report = await validate_async(str(path))
    assert report.ok, report.render()
    assert [c.name for c in report.checks][:3] == ["registration", "app", "examples"]
    assert sum(c.name.startswith("soundness") for c in report.checks) == 4


async def test_weather_builtin_is_sound_without_exemption() -> None:
    report = await validate_async("example_single_tool_call")
    assert report.ok, report.render()
    soundness = [c for c in report.checks if c.name.startswith("soundness")]
    assert soundness and not any("always_full_reward" in c.detail for c in soundness)


async def test_always_full_reward_exempts_from_the_not_one_checks(tmp_path: Path) -> None:
    path = scaffold(fresh_name(), parent=tmp_path)
    _rewrite_verify(
        path,
        "    always_full_reward = True\n\n"
        "    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:\n"
        "        return BaseVerifyResponse(**body.model_dump(), reward=1.0)\n",
    )
    report = await validate_async(str(path))
    failed = {c.name for c in report.checks if not c.ok}
    assert not any(name.startswith("soundness") for name in failed), report.render()
    assert any("always_full_reward" in c.detail for c in report.checks if c.name.startswith("soundness"))


@pytest.mark.parametrize("declared", ["", "    reward_range = (-10.0, 10.0)\n\n", "    reward_range = None\n\n"])
async def test_reward_range_is_the_servers(tmp_path: Path, declared: str) -> None:
    """[0, 1] by default; a server passing on another scale (OpenEnv's) declares its range, or None for any."""
    path = scaffold(fresh_name(), parent=tmp_path)
    _rewrite_verify(
        path,
        declared + "    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:\n"
        "        return BaseVerifyResponse(**body.model_dump(), reward=-5.0)\n",
    )
    report = await validate_async(str(path))
    failed = {c.name: c.detail for c in report.checks if not c.ok}
    if not declared:
        assert "reward -5.0 is not a number in [0, 1]" in failed["examples"]
        assert "not a number in [0, 1]" in failed["soundness: empty response"]
    else:  # in range: only the recorded reward disagrees
        assert "reward -5.0 != recorded" in failed["examples"]
        assert not any(name.startswith("soundness") for name in failed), report.render()


def _rewrite_verify(path: Path, body: str) -> None:
    app = path / "app.py"
    source = app.read_text()
    start = source.index("    async def verify(")
    end = source.index("\n\ndef final_text")
    app.write_text(source[:start] + body + source[end:])


async def test_a_verifier_that_always_scores_one_fails_soundness(tmp_path: Path) -> None:
    path = scaffold(fresh_name(), parent=tmp_path)
    _rewrite_verify(
        path,
        "    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:\n"
        "        return BaseVerifyResponse(**body.model_dump(), reward=1.0)\n",
    )
    report = await validate_async(str(path))
    assert not report.ok
    failed = {c.name: c.detail for c in report.checks if not c.ok}
    assert "scored 1.0 on every example row" in failed["soundness: empty response"]
    assert "reward 1.0 != recorded 0.0" in failed["examples"]
    assert "INVALID" in report.render()


async def test_a_verifier_that_crashes_on_odd_output_fails_soundness(tmp_path: Path) -> None:
    path = scaffold(fresh_name(), parent=tmp_path)
    _rewrite_verify(
        path,
        "    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:\n"
        "        text = body.response.output[-1].content[0].text\n"
        "        return BaseVerifyResponse(**body.model_dump(), reward=float('Paris' in text))\n",
    )
    report = await validate_async(str(path))
    failed = {c.name: c.detail for c in report.checks if not c.ok}
    assert "→ 500" in failed["soundness: empty response"]
    assert "soundness: echo of the prompt" not in failed


def test_ngym_validate_cli_json_and_exit_code(tmp_path: Path) -> None:
    from ngym.cli import cli

    good = CliRunner().invoke(cli, ["validate", "example_single_tool_call", "--json"])
    assert good.exit_code == 0 and json.loads(good.output)["ok"] is True
    bad = CliRunner().invoke(cli, ["validate", "no_such_env_anywhere"])
    assert bad.exit_code != 0
    path = scaffold(fresh_name(), parent=tmp_path)
    (path / "data" / "example_rollouts.jsonl").unlink()
    missing = CliRunner().invoke(cli, ["validate", str(path)])
    assert missing.exit_code == 1 and "no rollouts to replay" in missing.output
