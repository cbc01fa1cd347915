"""``ngym install`` and ``ngym uninstall``: pip inside ngym's own environment (plugins are never loaded)."""

from __future__ import annotations

import re
import sys
from importlib import metadata

import click

from ngym import installer
from ngym.cli.progress import Ticker
from ngym.errors import NgymError
from ngym.nemo.install import install_nemo_environment, is_nemo_source
from ngym.nemo.uninstall import PREFIX, nemo_distribution, uninstall_packages
from ngym.plugins.entrypoints import ENVIRONMENT_GROUP, installed_entry_points
from ngym.suggest import did_you_mean


@click.command(short_help="Install environment packages where ngym finds them.")
@click.argument("packages", nargs=-1, required=True)
@click.option("-e", "--editable", is_flag=True, help="Install each PACKAGE (a local folder) in editable mode.")
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade the packages to their newest versions.")
@click.option("--as", "as_name", metavar="NAME", help="NeMo Gym/OpenEnv environments: register it under NAME instead.")
@click.option(
    "--domain", metavar="DOMAIN", help="openenv:/verifiers: sources: the domain, when the package metadata names none."
)
@click.option(
    "-o",
    "--option",
    "options",
    metavar="KEY=VALUE",
    multiple=True,
    help="An option of a plugin source (openenv: reward_rule=last|sum|state:FIELD, app=module:attr, python=PATH;"
    " verifiers: an argument of the environment's load_environment, its value read as JSON when it parses).",
)
@click.option("--replace", is_flag=True, help="NeMo Gym environments: uninstall whatever holds the name first.")
@click.option("-v", "--verbose", is_flag=True, help="Show pip's own output.")
def install(
    packages: tuple[str, ...],
    editable: bool,
    upgrade: bool,
    as_name: str | None,
    domain: str | None,
    options: tuple[str, ...],
    replace: bool,
    verbose: bool,
) -> None:
    """Install plugins (PyPI names, folders, wheels) or NeMo Gym environments where ngym will find them.

    \b
    Examples:
      ngym install ngym-redis
      ngym install -e ./my_tool
      ngym install nemo-gym:math_with_judge          (from the nemo-gym 0.7.0 wheel)
      ngym install ./resources_servers/my_nemo_env   (a NeMo Gym environment folder)
      ngym install nemo-gym:example_single_tool_call --as nemo_weather
      ngym install openenv:openenv-dipg-safety       (an OpenEnv environment: distribution, folder or URL)
      ngym install verifiers:./my_env                (a verifiers environment: folder, module.py or distribution)
    """
    adapted = [p for p in packages if installer.adapter_prefix(p)]
    if adapted:
        _install_adapted(adapted, packages, as_name, domain, options, verbose)
        return
    if domain or options:
        raise click.UsageError(
            "--domain and --option apply to environments of another ecosystem (openenv:, verifiers:)"
        )
    nemo = [p for p in packages if is_nemo_source(p)]
    if nemo:
        _install_nemo(nemo, [p for p in packages if p not in nemo], as_name=as_name, replace=replace, verbose=verbose)
        return
    if as_name or replace:
        raise click.UsageError("--as and --replace apply to NeMo Gym environments (nemo-gym:NAME or a folder)")
    args = installer.pip_install_args(packages, editable=editable, upgrade=upgrade)
    if verbose:
        code = installer.run_pip(args)
        if code:
            sys.exit(code)
        return
    _install_quietly(args, " ".join(packages))


def _install_adapted(
    sources: list[str],
    packages: tuple[str, ...],
    as_name: str | None,
    domain: str | None,
    options: tuple[str, ...],
    verbose: bool,
) -> None:
    """``PREFIX:SOURCE`` installs, each by the adapter plugin ``installer.SOURCE_ADAPTERS`` names for its prefix."""
    if len(sources) != len(packages):
        raise click.UsageError(f"install {sources[0]} and other packages in separate commands")
    if as_name and len(sources) > 1:
        raise click.UsageError("--as names one environment: install them one at a time")
    pairs = dict(_key_value(o) for o in options)
    for source in sources:
        prefix = installer.adapter_prefix(source)
        assert prefix is not None
        install = installer.adapter_function(prefix, "install")
        assert install is not None  # every adapter installs
        install(source, as_name=as_name, domain=domain, options=pairs, verbose=verbose, echo=click.echo)


def _key_value(option: str) -> tuple[str, str]:
    key, equals, value = option.partition("=")
    if not equals or not key.strip():
        raise click.UsageError(f"--option {option!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


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
        for line in unset_variables_of(installed):
            click.echo(f"ngym: before it serves a rollout: {line}")
    else:
        click.echo(f"{what}: already installed (nothing to do; -U upgrades)")


def unset_variables_of(installed: list[str]) -> list[str]:
    """For each environment of the distributions pip installed (``name-version``), the variables it declares it
    needs and this shell lacks, as one line each (an environment that does not load is left to ``ngym list``)."""
    from ngym.plugins.registry import get_registry, reset_registry
    from ngym.required_env import declared_env, missing_env, missing_line
    from ngym.targets import installed as installed_environment

    def canonical(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    distributions = {canonical(item.rsplit("-", 1)[0]) for item in installed}
    reset_registry()  # the registry was read before pip ran
    lines = []
    for name, entry in sorted(get_registry().entries.items()):
        if entry.clash is None and entry.distribution and canonical(entry.distribution) in distributions:
            try:
                unset = missing_env(declared_env(installed_environment(name)))
            except NgymError:
                continue
            if unset:
                lines.append(missing_line(name, unset, "set it in the shell that runs it"))
    return lines


def _install_nemo(sources: list[str], others: list[str], *, as_name: str | None, replace: bool, verbose: bool) -> None:
    if others:
        raise click.UsageError(f"install NeMo Gym environments and other packages in separate commands ({others[0]})")
    if as_name and len(sources) > 1:
        raise click.UsageError("--as names one environment: install them one at a time")
    for source in sources:
        install_nemo_environment(source, as_name=as_name, replace=replace, verbose=verbose, echo=click.echo)


@click.command(short_help="Uninstall environment packages.")
@click.argument("packages", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(packages: tuple[str, ...], yes: bool) -> None:
    """Uninstall plugins from ngym's environment (works even when a plugin is broken).

    PACKAGES are distribution names or environment names (as `ngym list` shows them); a NeMo Gym environment
    installed by ngym is the distribution ngym-nemo-<name> (nemo-gym:<name> works too). One that another
    installed environment imports keeps its code; siblings installed as code only go when nothing imports them
    any more.
    """
    adapted = [p for p in packages if _uninstall_adapted(p)]
    packages = tuple(p for p in packages if p not in adapted)
    if not packages:
        return
    names = [distribution_to_uninstall(p) for p in packages]
    if not yes and not sys.stdin.isatty():
        # pip would ask anyway and die with an EOFError traceback on the closed input
        raise click.UsageError(f"standard input is not a terminal to confirm on: add -y to uninstall {' '.join(names)}")
    code = uninstall_packages(list(dict.fromkeys(names)), yes=yes, echo=click.echo)  # re-reads what is installed
    if code:
        sys.exit(code)


def _uninstall_adapted(name: str) -> bool:
    """Uninstall ``name`` when an adapter plugin (verifiers, ...) installed it; False when none did."""
    for prefix in installer.SOURCE_ADAPTERS:
        try:
            uninstall = installer.adapter_function(prefix, "uninstall")
        except NgymError:
            continue  # that adapter is not installed, so nothing of it is
        if uninstall is not None and uninstall(name.removeprefix(f"{prefix}:"), echo=click.echo):
            return True
    return False


def distribution_to_uninstall(package: str) -> str:
    """The installed distribution ``package`` names: itself, the one providing that environment, or an error
    (pip would only warn "not installed" and exit 0, which reads as success)."""
    package = nemo_distribution(package)
    try:
        return metadata.distribution(package).metadata["Name"]
    except metadata.PackageNotFoundError:
        pass
    providers = [ep.dist.name for ep in installed_entry_points(ENVIRONMENT_GROUP) if ep.name == package and ep.dist]
    if providers:
        return providers[0]
    environments = sorted(ep.name for ep in installed_entry_points(ENVIRONMENT_GROUP))
    wanted = package.removeprefix(PREFIX) if package.startswith(PREFIX) else package
    hint = did_you_mean(wanted.replace("-", "_"), environments)
    raise click.UsageError(
        f"{package!r} is neither an installed distribution nor an installed environment{hint}"
        f" (environments: {', '.join(environments) or 'none'})"
    )
