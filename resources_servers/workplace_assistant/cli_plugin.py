"""Hook plugin: mounts the WorkBench importer as ``ngym workplace-import``.

The command is declared here and imports the importer (and with it the 27 tool models) only when it runs,
so ``ngym --help`` does not pay for them.
"""

from __future__ import annotations

from typing import Any

import click

from ngym import hookimpl
from workplace_assistant.task_domains import DOMAINS


@click.command(
    "workplace-import",
    short_help="Convert WorkBench CSVs into JSONL rows.",
    help="Convert WorkBench queries_and_answers CSVs into NeMo Gym JSONL rows.",
)
@click.option("--data-dir", default=None, help="WorkBench data dir (default: $NGYM_WORKBENCH_DIR or the sample).")
@click.option("--output", "-o", default=None, help="Output JSONL file (default: stdout).")
@click.option("--domain", multiple=True, type=click.Choice(DOMAINS), help="Only these domains.")
def workplace_import(data_dir: str | None, output: str | None, domain: tuple[str, ...]) -> None:
    from ngym.errors import ConfigError
    from workplace_assistant.importer import TaskImportError, import_tasks

    try:
        count = import_tasks(data_dir, output, set(domain) or None)
    except TaskImportError as exc:
        raise ConfigError(str(exc)) from None
    click.echo(f"wrote {count} rows", err=True)


@hookimpl
def ngym_register_commands(cli: Any) -> None:
    cli.add_command(workplace_import, name="workplace-import")
