"""The ``ngym`` command. Each subcommand lives in its own module and is imported only when it runs (``ngym --help``
shows ``SHORT_HELP`` instead of importing them), so ``ngym --help`` and ``ngym list`` stay fast however heavy the
other commands' dependencies are (serving imports FastAPI and uvicorn: ~0.5 s here)."""

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
    "scripted-judge": "ngym.cli.scripted_judge:scripted_judge",
    "containerize": "ngym.cli.containerize:containerize",
    "profile": "ngym.cli.profile:profile",
    "list": "ngym.cli.list:list_command",
    "validate": "ngym.cli.validate:validate",
    "init": "ngym.cli.init:init",
    "install": "ngym.cli.install:install",
    "uninstall": "ngym.cli.install:uninstall",
    "test": "ngym.cli.test:test",
    "prepare": "ngym.cli.prepare:prepare_command",
    "up": "ngym.cli.fleet:up",
    "status": "ngym.cli.fleet:status",
    "down": "ngym.cli.fleet:down",
    "train": "ngym.cli.train:train",
}

#: What ``ngym --help`` shows for each command, so that listing them imports none (tests/unit/test_meta.py
#: keeps it equal to each command's own short help). A command missing here is imported to ask it.
SHORT_HELP: dict[str, str] = {
    "run": "Serve environments (names or config files).",
    "rollout": "Roll out a dataset through an environment and a model.",
    "replay-model": "Serve the offline replay model (OpenAI Responses API).",
    "scripted-judge": "Serve a judge model that always answers TEXT.",
    "containerize": "Build a Docker image of an environment.",
    "profile": "Load-test an environment with Locust.",
    "list": "List installed environments.",
    "validate": "Check an environment: config, routes, example rewards.",
    "init": "Scaffold a new environment package.",
    "install": "Install environment packages where ngym finds them.",
    "uninstall": "Uninstall environment packages.",
    "test": "Run an environment's own tests (pytest).",
    "prepare": "Run an environment's data-preparation step.",
    "up": "Bring up a fleet of environments from a file.",
    "status": "Health, sessions, rollouts/s and errors of a fleet.",
    "down": "Stop every server of a fleet.",
    "train": "Configs for trainers (verl) on an environment.",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx), *plugin_commands()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS:
            module_name, _, attr = COMMANDS[name].partition(":")
            command: click.Command = getattr(importlib.import_module(module_name), attr)
            return command
        found = super().get_command(ctx, name)
        return found if found is not None else plugin_commands().get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, with ngym's own commands described from ``SHORT_HELP`` (nothing imported).

        A description is never cut short with "…": a long one wraps under its column instead."""
        limit = 1000
        rows = []
        for name in self.list_commands(ctx):
            if name in SHORT_HELP:
                rows.append((name, click.Command(name, help=SHORT_HELP[name]).get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ngym")
def cli() -> None:
    """ngym: build, serve, validate, scale out and containerize the RL environments LLM agents train in, and train
    on them with TRL, verl or SkyRL (docs/training.md)."""


def main(args: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return run_guarded(lambda: cli.main(args=args, prog_name="ngym"))
