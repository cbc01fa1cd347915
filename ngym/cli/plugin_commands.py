"""Commands contributed by plugins through ``ngym_register_commands(cli)``.

Called by the CLI (``ngym/cli/__init__.py``) only when it lists commands or meets a name that is not one
of ngym's own, so ``ngym run ...`` never pays for it. Each plugin is called on its own: one that raises is
reported (strict mode: an error) and the others' commands still appear.
"""

from __future__ import annotations

import functools

import click

from ngym.plugins import manager as plugin_manager
from ngym.plugins.manager import NgymPluginManager, PluginProblem, describe_exception


def plugin_commands() -> dict[str, click.Command]:
    """Every plugin command by name, from the process-wide plugin manager (computed once per manager)."""
    return commands_of(plugin_manager.get_plugin_manager())


@functools.cache
def commands_of(pm: NgymPluginManager) -> dict[str, click.Command]:
    """The commands the plugins of ``pm`` add (the CLI never lets one replace one of ngym's own)."""
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
            commands.setdefault(name, command)
    return commands
