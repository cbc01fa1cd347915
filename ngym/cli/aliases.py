"""NeMo Gym's command names, installed as aliases so its documented forms work as written."""

from __future__ import annotations

import sys

from ngym.cli import main
from ngym.errors import run_guarded
from ngym.scaffold import parse_nemo_args, scaffold


def ng_run() -> None:
    """``ng_run "+config_paths=[a.yaml,b.yaml]" +key=value`` → ``ngym run ...``."""
    main(["run", *sys.argv[1:]])


def ng_init_resources_server() -> None:
    """``ng_init_resources_server +entrypoint=resources_servers/my_tool [+domain=agent]`` → ``ngym init``."""

    def scaffold_from_args() -> None:

        values = parse_nemo_args(sys.argv[1:])
        path = scaffold(
            values["name"],
            domain=values.get("domain", "agent"),
            parent=values["parent"],
            description=values.get("description"),
        )
        print(f"created {path}/")

    run_guarded(scaffold_from_args)
