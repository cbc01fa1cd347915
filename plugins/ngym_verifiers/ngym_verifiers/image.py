"""What an installed verifiers environment's image carries (``ngym containerize``; ``ngym.containerize.payload``).

- its own virtualenv (the verifiers version it pins, its dependencies, the environment itself), re-created in
  the image from the host's; a single-module environment (``verifiers:<module.py>``) is copied into that venv's
  site-packages at install, and so it is in the image;
- its record, naming the image's interpreter instead of the host's, and its example data, where the plugin reads
  them in the image: ``<prefix>/share/ngym/verifiers/`` of the image's ngym interpreter (``records_dir()``), so
  ``ngym validate`` and ``containerize --run`` work there.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from ngym.plugin_api import ContainerPayload, EnvironmentVenv, ImageLayout, PluginSourceError
from ngym_verifiers import records
from ngym_verifiers.records import Record


def container_payload(record: Record, layout: ImageLayout, workdir: Path) -> ContainerPayload:
    """The payload of ``record``'s environment for an image laid out as ``layout``."""
    key = f"verifiers-{record.name}"
    python = Path(record.python)
    if not python.exists():  # before any wheel is built: the image could not hold its environment
        raise PluginSourceError(
            f"{record.name}: its interpreter {python} is missing, so its virtualenv cannot go into an image;"
            " install the environment again (ngym install verifiers:...)"
        )
    site_files: tuple[tuple[Path, str], ...] = ()
    if record.source.removeprefix("verifiers:").strip().endswith(".py"):
        module = _purelib(python) / f"{record.module}.py"
        if not module.is_file():
            raise PluginSourceError(f"{record.name}: its module {module} is gone from its venv; install it again")
        site_files = ((module, module.name),)
    relocated = dataclasses.replace(record, python=layout.venv_python(key))
    written = workdir / f"{record.name}.json"
    written.write_text(json.dumps(dataclasses.asdict(relocated), indent=2), encoding="utf-8")
    image_records = f"{layout.prefix}/share/ngym/verifiers"
    files = [(written, f"{image_records}/{record.name}.json")]
    data = records.folder_of(record.name)
    if data.is_dir():
        files.append((data, f"{image_records}/{record.name}"))
    required = (record.distribution,) if record.distribution else ()  # a folder environment: its own project
    return ContainerPayload(venvs=(EnvironmentVenv(key, python, site_files, required),), files=tuple(files))


def _purelib(python: Path) -> Path:
    """The site-packages folder of the venv of ``python``."""
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(found.stdout.strip())
