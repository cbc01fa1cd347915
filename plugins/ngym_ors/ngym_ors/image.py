"""What an installed ORS environment's image carries (``ngym containerize``; ``ngym.containerize.payload``):
its own virtualenv, re-created in the image from the host's; its record (naming the image's interpreter and
folder) and its folder (the copy of a folder environment's code, its example data), where the plugin reads them in
the image: ``<prefix>/share/ngym/ors/``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ngym.plugin_api import ContainerPayload, EnvironmentVenv, ImageLayout, PluginSourceError
from ngym_ors import records
from ngym_ors.records import Record


def container_payload(record: Record, layout: ImageLayout, workdir: Path) -> ContainerPayload:
    """The payload of ``record``'s environment for an image laid out as ``layout``."""
    key = f"ors-{record.name}"
    python = Path(record.python)
    if not python.exists():
        raise PluginSourceError(
            f"{record.name}: its interpreter {python} is missing, so its virtualenv cannot go into an image;"
            " install the environment again (ngym install ors:...)"
        )
    image_records = f"{layout.prefix}/share/ngym/ors"
    path = f"{image_records}/{record.name}/source" if record.path else None
    relocated = dataclasses.replace(record, python=layout.venv_python(key), path=path)
    written = workdir / f"{record.name}.json"
    written.write_text(json.dumps(dataclasses.asdict(relocated), indent=2), encoding="utf-8")
    files = [(written, f"{image_records}/{record.name}.json")]
    folder = records.folder_of(record.name)
    if folder.is_dir():
        files.append((folder, f"{image_records}/{record.name}"))
    required = (record.distribution,) if record.distribution else ("openreward",)
    return ContainerPayload(venvs=(EnvironmentVenv(key, python, (), required),), files=tuple(files))
