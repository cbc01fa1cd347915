"""Commands contributed by plugins through ``ngym_register_commands(cli)``.

Called by the CLI (``ngym/cli/__init__.py``) only when it lists commands or meets a name that is not one
of ngym's own, so ``ngym run ...`` never pays for it. Each plugin is called on its own: one that raises is
reported (strict mode: an error) and the others' commands still appear.
"""

from __future__ import annotations

import functools

import click

from ngym.plugins.manager import PluginProblem, describe_exception, get_plugin_manager, make_plugin_manager


@functools.cache
def plugin_commands() -> dict[str, click.Command]:
    """Every plugin command by name (a plugin cannot replace one of ngym's own; see ``ngym.cli.COMMANDS``)."""
    from ngym.cli import COMMANDS

    if get_plugin_manager.cache_info().currsize:
        pm = get_plugin_manager()
    else:  # `ngym --help`: import only the hook plugins that add commands
        pm = make_plugin_manager(only_hooks=frozenset({"ngym_register_commands"}))
    commands: dict[str, click.Command] = {}
    for impl in pm.hook.ngym_register_commands.get_hookimpls():
        group = click.Group()
        try:
            impl.function(*[{"cli": group}[arg] for arg in impl.argnames])
        except Exception as exc:
            origin = pm.origin(impl.plugin_name)
            reason = f"ngym_register_commands failed: {describe_exception(exc)}"
            pm.report(PluginProblem(impl.plugin_name, origin.distribution, origin.version, reason))
            continue
        for name, command in group.commands.items():
            if name not in COMMANDS:
                commands.setdefault(name, command)
    return commands
