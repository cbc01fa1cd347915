"""The venv cache: one venv per requirement set wherever the environment's folder lies, pruning of unused ones,
and a refusal to serve code another install replaced (no real venv is made: folders stand in for them)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest
from ngym_verifiers import venvs
from ngym_verifiers.install import parse_source
from ngym_verifiers.records import Record
from ngym_verifiers.server import ReplacedError, installed_as_recorded

FIXTURES = Path(__file__).with_name("fixtures")
DAY = 86400.0


@pytest.fixture(autouse=True)
def scratch_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(venvs.DAYS_ENV, raising=False)
    return tmp_path / "cache"


def test_the_same_project_from_two_paths_gets_one_venv(tmp_path: Path) -> None:
    """Keyed by the folder's path, every clone, worktree or test copy of vf_notes made a venv of its own
    (nine of ~570 MB in a day here); keyed by what pip brings from the index, they share one."""
    first, second = tmp_path / "a" / "vf_notes", tmp_path / "b" / "vf_notes"
    shutil.copytree(FIXTURES / "vf_notes", first)
    shutil.copytree(FIXTURES / "vf_notes", second)
    one, two = parse_source(f"verifiers:{first}"), parse_source(f"verifiers:{second}")
    assert one.requirements != two.requirements  # pip still installs each copy's own code
    assert venvs.venv_for(one.index_requirements) == venvs.venv_for(two.index_requirements)
    # ... which is the venv of anything else asking verifiers 0.4.0 and nothing more
    assert venvs.venv_for(one.index_requirements) == venvs.venv_for(["verifiers==0.4.0"])


def test_other_dependencies_or_pins_get_another_venv(tmp_path: Path) -> None:
    folder = tmp_path / "vf_notes"
    shutil.copytree(FIXTURES / "vf_notes", folder)
    before = venvs.venv_for(parse_source(f"verifiers:{folder}").index_requirements)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('["verifiers==0.4.0"]', '["verifiers==0.4.0", "pillow"]'))
    assert venvs.venv_for(parse_source(f"verifiers:{folder}").index_requirements) != before
    assert venvs.venv_for(["verifiers==0.3.1"]) != venvs.venv_for(["verifiers==0.4.0"])


def test_a_project_that_leaves_verifiers_out_gets_it_added(tmp_path: Path) -> None:
    """verifiers' own example environments (gsm8k, reverse_text) are workspace members that name only
    ``datasets``: installed alone they would not import verifiers."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "gsm8k"\ndependencies = ["datasets"]\n')
    source = parse_source(f"verifiers:{tmp_path}")
    assert source.added == ("verifiers",)
    assert sorted(source.index_requirements) == ["datasets", "verifiers"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["Verifiers[ta]>=0.4"]\n')
    assert parse_source(f"verifiers:{tmp_path}").added == ()


def fake_venv(name: str, idle_days: float, *, made: bool = True) -> Path:
    venv = venvs.venvs_dir() / name
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr\n")
    if made:
        (venv / "bin" / "python").write_text("")
    (venv / "lib").mkdir()
    (venv / "lib" / "big").write_bytes(b"x" * 4096)
    venvs.mark_used(venv)
    then = time.time() - idle_days * DAY
    for path in (venv / venvs.STAMP, venv / "pyvenv.cfg", venv):
        os.utime(path, (then, then))
    return venv


def test_prune_removes_unused_idle_venvs_only() -> None:
    idle = fake_venv("idle-1", 20)
    named = fake_venv("named-2", 20)  # an installed environment's: kept however old
    recent = fake_venv("recent-3", 2)
    half = fake_venv("half-4", 0.5, made=False)  # a make that was interrupted
    lines: list[str] = []
    removed = venvs.prune([named], lines.append)
    assert removed == [half, idle]
    assert not idle.exists() and not half.exists() and named.exists() and recent.exists()
    assert len(lines) == 1 and "removed 2 virtualenv(s)" in lines[0] and venvs.DAYS_ENV in lines[0]


def test_prune_days_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    recent = fake_venv("recent-1", 2)
    monkeypatch.setenv(venvs.DAYS_ENV, "1")
    assert venvs.prune([], lambda _: None) == [recent]


def test_a_venv_a_worker_runs_in_is_never_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = fake_venv("busy-1", 30)
    hold = venvs.hold_for_use(busy / "bin" / "python")
    assert hold is not None
    os.utime(busy / venvs.STAMP, (0, 0))  # as if a long-running server had started it weeks ago
    os.utime(busy / "pyvenv.cfg", (0, 0))
    os.utime(busy, (0, 0))
    assert venvs.prune([], lambda _: None) == []
    hold.close()
    assert venvs.prune([], lambda _: None) == [busy]


def test_an_install_in_progress_is_never_pruned() -> None:
    venv = fake_venv("making-1", 30, made=False)
    with venvs.installing(venv, lambda _: None):
        os.utime(venv / venvs.STAMP, (0, 0))
        assert venvs.prune([], lambda _: None) == []
    assert (venv / venvs.STAMP).stat().st_mtime > time.time() - 60  # the install stamped it


def site_packages(venv: Path) -> Path:
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    return site


def installed_dist(venv: Path, code: str, source: str) -> None:
    site = site_packages(venv)
    info = site / "vf_notes-0.1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "direct_url.json").write_text(f'{{"url": "file://{source}"}}')
    digest = hashlib.sha256(code.encode()).hexdigest()
    (info / "RECORD").write_text(
        f"vf_notes/__init__.py,sha256={digest},{len(code)}\n"
        f"vf_notes/__pycache__/__init__.cpython-311.pyc,,\n"
        f"vf_notes-0.1.0.dist-info/direct_url.json,sha256={hashlib.sha256(source.encode()).hexdigest()},9\n"
        "vf_notes-0.1.0.dist-info/RECORD,,\n"
    )


def record_for(venv: Path, fingerprint: str, **fields: str | None) -> Record:
    base: dict[str, str | None] = {"module": "vf_notes", "distribution": "vf-notes", "source": "verifiers:/a/vf_notes"}
    base.update(fields)
    return Record(
        name="vf_notes",
        module=str(base["module"]),
        python=str(venv / "bin" / "python"),
        source=str(base["source"]),
        distribution=base["distribution"],
        domain="agent",
        api="v1",
        fingerprint=fingerprint,
    )


def test_the_same_code_from_another_path_is_the_same_install() -> None:
    venv = fake_venv("verifiers_0_4_0-1", 0)
    installed_dist(venv, "A = 1\n", "/a/vf_notes")
    first = venvs.fingerprint(venv / "bin" / "python", distribution="vf-notes")
    installed_dist(venv, "A = 1\n", "/b/vf_notes")
    assert first and venvs.fingerprint(venv / "bin" / "python", distribution="vf_notes") == first
    installed_as_recorded(record_for(venv, first))  # serves


def test_a_server_refuses_code_another_install_replaced() -> None:
    """Two folders named vf_notes with the same requirements share a venv; the second install replaces the
    first one's code, whose record (tools, rewards, example rewards) would then be served by other code."""
    venv = fake_venv("verifiers_0_4_0-1", 0)
    installed_dist(venv, "A = 1\n", "/a/vf_notes")
    record = record_for(venv, venvs.fingerprint(venv / "bin" / "python", distribution="vf-notes"))
    installed_dist(venv, "A = 2\n", "/b/vf_notes")
    with pytest.raises(
        ReplacedError, match=r"vf_notes: its code in .* was replaced .*\(ngym install verifiers:/a/vf_notes\)"
    ):
        installed_as_recorded(record)
    shutil.rmtree(site_packages(venv) / "vf_notes-0.1.0.dist-info")
    with pytest.raises(ReplacedError, match="is no longer installed"):
        installed_as_recorded(record)


def test_a_single_module_is_fingerprinted_by_its_file() -> None:
    venv = fake_venv("verifiers_0_3_1-1", 0)
    (site_packages(venv) / "vf_ledger.py").write_text("X = 1\n")
    fingerprint = venvs.fingerprint(venv / "bin" / "python", module="vf_ledger")
    record = record_for(venv, fingerprint, module="vf_ledger", distribution=None)
    installed_as_recorded(record)
    (site_packages(venv) / "vf_ledger.py").write_text("X = 2\n")
    with pytest.raises(ReplacedError, match="was replaced"):
        installed_as_recorded(record)
    installed_as_recorded(record_for(venv, "", module="vf_ledger", distribution=None))  # an older record: served


def test_uninstall_keeps_a_venv_a_running_server_uses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Venvs are shared by requirement set across ngym installs (another prefix's records are not seen here):
    uninstalling the last environment here that names one must not pull it from under a running worker."""
    from ngym_verifiers import records
    from ngym_verifiers.install import uninstall

    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path / "records"))
    venv = fake_venv("verifiers-1", 0)
    hold = venvs.hold_for_use(venv / "bin" / "python")
    records.write(record_for(venv, ""))
    lines: list[str] = []
    assert uninstall("vf_notes", echo=lines.append)
    assert venv.exists() and "kept: in use" in lines[-1]
    assert hold is not None
    hold.close()
    records.write(record_for(venv, ""))
    assert uninstall("vf_notes", echo=lines.append)
    assert not venv.exists() and lines[-1].endswith(" removed)")
