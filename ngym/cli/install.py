"""``ngym install`` and ``ngym uninstall``: pip inside ngym's own environment, or an ecosystem's install source.

``<prefix>:<what>`` (``nemo-gym:``, ``openenv:``, ``verifiers:``, …) goes to the plugin that registered that
prefix (``ngym.plugins.sources``); anything else is a pip package."""

from __future__ import annotations

import re
import sys
from importlib import metadata

import click

from ngym import installer
from ngym.cli.progress import Ticker
from ngym.errors import ConfigError, NgymError
from ngym.plugins.entrypoints import ENVIRONMENT_GROUP, installed_entry_points
from ngym.plugins.registry import reset_registry
from ngym.plugins.sources import InstallSource, install_sources
from ngym.suggest import did_you_mean


@click.command(short_help="Install environment packages where ngym finds them.")
@click.argument("packages", nargs=-1, required=True)
@click.option("-e", "--editable", is_flag=True, help="Install each PACKAGE (a local folder) in editable mode.")
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade the packages to their newest versions.")
@click.option("--as", "as_name", metavar="NAME", help="PREFIX:SOURCE installs: register it under NAME instead.")
@click.option("--domain", metavar="DOMAIN", help="PREFIX:SOURCE installs: the domain, when the source names none.")
@click.option(
    "-o",
    "--option",
    "options",
    metavar="KEY=VALUE",
    multiple=True,
    help="An option of the install source (see `ngym list --available PREFIX` for each source's options).",
)
@click.option("--replace", is_flag=True, help="PREFIX:SOURCE installs: uninstall whatever holds the name first.")
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
    """Install plugins (PyPI names, folders, wheels) or NeMo Gym, OpenEnv, verifiers and ORS environments where ngym
    will find them.

    \b
    Examples:
      ngym install ngym-redis
      ngym install -e ./my_tool
      ngym install nemo-gym:math_with_judge          (from the nemo-gym 0.7.0 wheel)
      ngym install ./resources_servers/my_nemo_env   (a NeMo Gym environment folder)
      ngym install nemo-gym:example_single_tool_call --as nemo_weather
      ngym install openenv:openenv-dipg-safety       (an OpenEnv environment: distribution, folder or URL)
      ngym install verifiers:./my_env                (a verifiers environment: folder, module.py or distribution)
      ngym install ors:./my_env                      (an Open Reward Standard environment: folder or distribution)
    """
    sources = install_sources()
    adapted = [(p, source) for p in packages if (source := sources.for_source(p)) is not None]
    unknown = [p for p in packages if _looks_prefixed(p) and sources.for_source(p) is None]
    if unknown:
        sources.named(unknown[0].partition(":")[0])  # raises: no plugin installs that prefix
    if adapted:
        _install_adapted(adapted, packages, as_name, domain, options, replace, verbose)
        return
    if domain or options or as_name or replace:
        raise click.UsageError(
            f"--as, --domain, --option and --replace apply to PREFIX:SOURCE installs ({', '.join(sources.prefixes())})"
        )
    args = installer.pip_install_args(packages, editable=editable, upgrade=upgrade)
    if verbose:
        code = installer.run_pip(args)
        if code:
            sys.exit(code)
        return
    _install_quietly(args, " ".join(packages))


def _looks_prefixed(package: str) -> bool:
    """``name:rest`` where ``name`` is a plain word: an install-source prefix, not a path or a URL (``https://``),
    nor a pip requirement with an extra marker."""
    prefix, colon, rest = package.partition(":")
    return bool(colon) and prefix.replace("-", "").replace("_", "").isalnum() and not rest.startswith("//")


def _install_adapted(
    adapted: list[tuple[str, InstallSource]],
    packages: tuple[str, ...],
    as_name: str | None,
    domain: str | None,
    options: tuple[str, ...],
    replace: bool,
    verbose: bool,
) -> None:
    """``PREFIX:SOURCE`` installs (or sources an install source claims), each by the plugin that registered it."""
    if len(adapted) != len(packages):
        raise click.UsageError(f"install {adapted[0][0]} and other packages in separate commands")
    if as_name and len(adapted) > 1:
        raise click.UsageError("--as names one environment: install them one at a time")
    pairs = dict(_key_value(o) for o in options)
    for text, source in adapted:
        source.install(
            text, as_name=as_name, domain=domain, options=pairs, replace=replace, verbose=verbose, echo=click.echo
        )


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
    from ngym.plugins.registry import get_registry
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
    sources = [s for s in install_sources() if s.uninstall is not None]
    remaining = list(dict.fromkeys(packages))
    if not yes and not sys.stdin.isatty():
        # pip would ask anyway and die with an EOFError traceback on the closed input
        raise click.UsageError(
            f"standard input is not a terminal to confirm on: add -y to uninstall {' '.join(remaining)}"
        )
    remaining = _offer_to_sources(remaining, sources, yes)  # as typed: nemo-gym:NAME, a verifiers environment
    if not remaining:
        return
    names = list(dict.fromkeys(distribution_to_uninstall(p) for p in remaining))
    names = _offer_to_sources(names, sources, yes)  # as distributions: ngym-nemo-NAME
    if not names:
        return
    code = installer.run_pip(installer.pip_uninstall_args(names, yes=yes))
    reset_registry()
    if code:
        sys.exit(code)


def _offer_to_sources(names: list[str], sources: list[InstallSource], yes: bool) -> list[str]:
    """Let each install source uninstall what is its own among ``names``; what no source took."""
    for source in sources:
        if not names:
            break
        assert source.uninstall is not None
        taken = set(source.uninstall(names, yes=yes, echo=click.echo))
        names = [n for n in names if n not in taken]
    return names


def distribution_to_uninstall(package: str) -> str:
    """The installed distribution ``package`` names: itself, the one providing that environment, or an error
    (pip would only warn "not installed" and exit 0, which reads as success)."""
    try:
        return metadata.distribution(package).metadata["Name"]
    except metadata.PackageNotFoundError:
        pass
    providers = [ep.dist.name for ep in installed_entry_points(ENVIRONMENT_GROUP) if ep.name == package and ep.dist]
    if providers:
        return providers[0]
    environments = sorted(ep.name for ep in installed_entry_points(ENVIRONMENT_GROUP))
    hint = did_you_mean(package.partition(":")[2] or package.replace("-", "_"), environments)
    raise ConfigError(  # the `ngym: error:` line, exit 2 (not click's usage block: the arguments were well formed)
        f"{package!r} is neither an installed distribution nor an installed environment{hint}"
        f" (environments: {', '.join(environments) or 'none'})"
    )
