"""``ngym install`` and ``ngym uninstall``: pip inside ngym's own environment (plugins are never loaded)."""

from __future__ import annotations

import sys

import click

from ngym import installer


@click.command()
@click.argument("packages", nargs=-1, required=True)
@click.option("-e", "--editable", is_flag=True, help="Install each PACKAGE (a local folder) in editable mode.")
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade the packages to their newest versions.")
def install(packages: tuple[str, ...], editable: bool, upgrade: bool) -> None:
    """Install plugins (PyPI names, folders, wheels) where ngym will find them.

    \b
    Examples:
      ngym install ngym-redis
      ngym install -e ./my_tool
    """
    code = installer.run_pip(installer.pip_install_args(packages, editable=editable, upgrade=upgrade))
    if code:
        sys.exit(code)


@click.command()
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall plugins from ngym's environment (works even when a plugin is broken)."""
    code = installer.run_pip(installer.pip_uninstall_args(packages, yes=yes))
    if code:
        sys.exit(code)
