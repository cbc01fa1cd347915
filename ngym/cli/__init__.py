"""The ``ngym`` command. Each subcommand lives in its own module and is imported only when it runs,
so ``ngym --help`` and ``ngym list`` stay fast however heavy the other commands' dependencies are."""

from __future__ import annotations

import importlib
from typing import Any

import click

from ngym.cli.plugin_commands import plugin_commands
from ngym.errors import run_guarded

#: command name -> "module:attribute" of its click command. Add a line to add a command.
COMMANDS: dict[str, str] = {
    "run": "ngym.cli.run:run",
    "rollout": "ngym.cli.rollout:rollout",
    "replay-model": "ngym.cli.replay_model:replay_model",
    "containerize": "ngym.cli.containerize:containerize",
    "profile": "ngym.cli.profile:profile",
    "list": "ngym.cli.list:list_command",
    "validate": "ngym.cli.validate:validate",
    "init": "ngym.cli.init:init",
    "install": "ngym.cli.install:install",
    "uninstall": "ngym.cli.install:uninstall",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx), *plugin_commands()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS:
            module_name, _, attr = COMMANDS[name].partition(":")
            return getattr(importlib.import_module(module_name), attr)
        command = super().get_command(ctx, name)
        if command is None:
            command = plugin_commands().get(name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Like click's, but never cut a description short with "…": long ones wrap instead."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ngym")
def cli() -> None:
    """ngym: build, serve, validate, containerize and load-test RL environments for LLM agents."""


def main(args: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return run_guarded(lambda: cli.main(args=args, prog_name="ngym"))
