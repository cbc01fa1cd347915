"""``ngym install`` and ``ngym uninstall``: pip inside ngym's own environment (plugins are never loaded)."""

from __future__ import annotations

import sys

import click

from ngym import installer
from ngym.cli.progress import Ticker


@click.command(short_help="Install environment packages where ngym finds them.")
@click.argument("packages", nargs=-1, required=True)
@click.option("-e", "--editable", is_flag=True, help="Install each PACKAGE (a local folder) in editable mode.")
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade the packages to their newest versions.")
@click.option("-v", "--verbose", is_flag=True, help="Show pip's own output.")
def install(packages: tuple[str, ...], editable: bool, upgrade: bool, verbose: bool) -> None:
    """Install plugins (PyPI names, folders, wheels) where ngym will find them.

    \b
    Examples:
      ngym install ngym-redis
      ngym install -e ./my_tool
    """
    args = installer.pip_install_args(packages, editable=editable, upgrade=upgrade)
    if verbose:
        code = installer.run_pip(args)
        if code:
            sys.exit(code)
        return
    _install_quietly(args, " ".join(packages))


def _install_quietly(args: list[str], what: str) -> None:
    """pip with its output kept back: a progress line while it runs, then what was installed (or pip's error)."""
    step = ["starting pip"]
    with Ticker(f"installing {what}", lambda: step[0]):
        result = installer.run_pip_captured(args, on_step=lambda line: step.__setitem__(0, line))
    if result.returncode:
        click.echo(f"ngym: error: pip could not install {what} (exit {result.returncode}):", err=True)
        for line in result.problems():
            click.echo(f"  {line}", err=True)
        click.echo("  (ngym install -v shows pip's full output)", err=True)
        sys.exit(result.returncode)
    installed = result.installed()
    if installed:
        click.echo(f"installed {', '.join(installed)}")
    else:
        click.echo(f"{what}: already installed (nothing to do; -U upgrades)")


@click.command(short_help="Uninstall environment packages.")
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall plugins from ngym's environment (works even when a plugin is broken)."""
    code = installer.run_pip(installer.pip_uninstall_args(packages, yes=yes))
    if code:
        sys.exit(code)
