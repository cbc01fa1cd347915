"""One runner of an environment's own tests (``ngym.envtest``): ``ngym test``, the compat plugin's
``run_environment_tests`` and ``tools/nemo_envs.py`` stage, run and count through it, never a copy of it."""

from __future__ import annotations

from pathlib import Path

from ngym import envtest


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_compat_plugin_and_the_measurement_tool_use_ngyms_runner() -> None:
    from ngym_nemo_gym import envtests

    from tools import nemo_envs

    assert envtests.run_environment_tests is envtest.run_environment_tests
    assert envtests.stage_environment is envtest.stage_environment
    assert envtests.EnvTestResult is envtest.EnvTestResult
    assert nemo_envs.stage_environment is envtest.stage_environment and nemo_envs.read_junit is envtest.read_junit
    assert not hasattr(nemo_envs, "junit_counts")


def test_a_whole_tree_is_staged_with_the_environment_and_its_bases_copied_and_the_rest_linked(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _write(tree / "resources_servers" / "base_env" / "base.py", "X = 1\n")
    _write(tree / "resources_servers" / "game" / "app.py", "from resources_servers.base_env.base import X\n")
    _write(tree / "resources_servers" / "unrelated" / "app.py", "")
    _write(tree / "benchmarks" / "game" / "config.yaml", "")
    _write(tree / "not_shared" / "x.txt", "")
    root = tmp_path / "run"

    folder = envtest.stage_environment(tree / "resources_servers" / "game", root, link_other_environments=True)

    staged = root / "resources_servers"
    assert folder == staged / "game" and (folder / "app.py").is_file() and not folder.is_symlink()
    assert not (staged / "base_env").is_symlink() and (staged / "base_env" / "base.py").is_file()  # copied
    assert (staged / "unrelated").resolve() == (tree / "resources_servers" / "unrelated").resolve()  # linked
    assert (root / "benchmarks").is_symlink() and not (root / "not_shared").exists()
    envtest.stage_environment(tree / "resources_servers" / "game", tmp_path / "alone")
    assert sorted(p.name for p in (tmp_path / "alone" / "resources_servers").iterdir()) == ["base_env", "game"]


def test_junit_counts_every_outcome_and_names_each_failure(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="5" failures="1" errors="1" skipped="1">'
        '<testcase classname="t" name="ok1"/><testcase classname="t" name="ok2"/>'
        '<testcase classname="t" name="bad"><failure message="assert 1 == 2&#10;more">trace</failure></testcase>'
        '<testcase classname="t" name="broken"><error message="fixture boom">trace</error></testcase>'
        '<testcase classname="t" name="later"><skipped message="no gpu"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts = envtest.read_junit(report)
    assert counts.totals() == {"passed": 2, "failed": 1, "errors": 1, "skipped": 1}
    assert counts.failures == ["t::bad: assert 1 == 2", "t::broken: fixture boom"]
    assert envtest.read_junit(tmp_path / "none.xml").totals() == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite")
    assert envtest.read_junit(tmp_path / "cut.xml").passed == 0


def test_pytest_finds_the_folder_before_the_root_and_keeps_the_callers_path(tmp_path: Path) -> None:
    env = envtest.test_environ(tmp_path / "env", tmp_path, {"PYTHONPATH": "/extra", "KEEP": "1"})
    assert env["PYTHONPATH"].split(":") == [str(tmp_path / "env"), str(tmp_path), "/extra"] and env["KEEP"] == "1"


def test_a_run_past_its_timeout_is_a_result_not_an_exception(tmp_path: Path) -> None:
    _write(tmp_path / "resources_servers" / "slow" / "tests" / "test_slow.py", "def test_x():\n    pass\n")
    result = envtest.run_environment_tests(tmp_path / "resources_servers" / "slow", timeout=0.01)
    assert result.returncode == -1 and result.output.startswith("timed out after") and not result.ok
