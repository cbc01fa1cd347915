"""Docs and tests keep up with the code: every hook has a test, every command is in the README."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from ngym.cli import COMMANDS
from ngym.plugins import hookspecs

ROOT = Path(__file__).resolve().parents[2]


def hook_names() -> list[str]:
    return [
        name
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("ngym_") and hasattr(fn, "ngym_spec")
    ]


def test_every_hook_has_a_test() -> None:
    test_files = [
        *ROOT.glob("tests/**/test_*.py"),
        *ROOT.glob("plugins/*/tests/**/test_*.py"),
        *ROOT.glob("resources_servers/*/tests/**/test_*.py"),
    ]
    sources = "\n".join(p.read_text() for p in test_files if p.resolve() != Path(__file__).resolve())
    hooks = hook_names()
    assert "ngym_register_resources_servers" in hooks and "ngym_register_commands" in hooks
    untested = [h for h in hooks if not re.search(rf"\bdef {h}\b", sources)]
    assert not untested, f"hooks without a test implementing them: {untested}"


def test_every_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [c for c in COMMANDS if not re.search(rf"`ngym {re.escape(c)}\b", readme)]
    assert not missing, f"commands missing from README.md (add a line under '## Commands'): {missing}"


def test_every_hook_is_in_the_authoring_guide() -> None:
    guide = (ROOT / "docs" / "authoring.md").read_text()
    missing = [h for h in hook_names() if h not in guide]
    assert not missing, f"hooks missing from docs/authoring.md: {missing}"


def test_the_short_help_of_every_command_is_its_own() -> None:
    """``ngym --help`` describes ngym's commands from SHORT_HELP (so it imports none): it must not drift."""
    import click

    from ngym.cli import SHORT_HELP, cli

    ctx = click.Context(cli)
    assert set(SHORT_HELP) == set(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and SHORT_HELP[name] == command.get_short_help_str(limit=1000), name


def test_help_lists_every_command_without_importing_them() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from ngym.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('fastapi', 'uvicorn', 'ngym.cli.run', 'ngym.server.pipeline.resources')"
        " if m in sys.modules]\n"
        "print('IMPORTED', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert all(f"  {name}" in out for name in COMMANDS)
    assert "IMPORTED []" in out
