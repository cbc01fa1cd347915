"""What an installed OpenEnv environment's image carries (``ngym containerize``; ``ngym.containerize.payload``).

- its own virtualenv (the interpreter its OpenEnv server runs in), re-created in the image from the host's;
- its copied folder (a folder install's ``app_dir``), at the same place under the image's ngym prefix as under
  the host's (``<prefix>/share/ngym/openenv/<name>/src/...``);
- its generated distribution rebuilt with the manifest naming the image's interpreter and folder, and the
  example data the install recorded (so ``ngym validate`` and ``containerize --run`` work in the image).

An environment installed by URL carries no venv: its image fronts the same URL (``openenv_url=...`` overrides).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ngym.plugin_api import ContainerPayload, EnvironmentVenv, ImageLayout
from ngym_openenv.manifest import Manifest
from ngym_openenv.project import installed_data_dir, write_project


def container_payload(manifest: Manifest, layout: ImageLayout, workdir: Path) -> ContainerPayload:
    """The payload of ``manifest``'s environment for an image laid out as ``layout``."""
    venvs: tuple[EnvironmentVenv, ...] = ()
    files: list[tuple[Path, str]] = []
    relocated = manifest.model_copy()
    if not manifest.url and manifest.python:
        key = f"openenv-{manifest.name}"
        venvs = (EnvironmentVenv(key, Path(manifest.python)),)
        relocated.python = layout.venv_python(key)
    if not manifest.url and manifest.app_dir:
        host = Path(manifest.app_dir)
        image = _image_app_dir(host, manifest.name, layout)
        files.append((host, image))
        relocated.app_dir = image
    project = write_project(relocated, workdir / "project", data_from=installed_data_dir(manifest.name))
    return ContainerPayload(venvs=venvs, files=tuple(files), distribution_dir=project)


def _image_app_dir(host: Path, name: str, layout: ImageLayout) -> str:
    """Where a folder install's ``app_dir`` goes: the host's place under ngym's prefix, under the image's."""
    home = Path(sys.prefix) / "share" / "ngym" / "openenv"  # ngym_openenv.environment_venv.environments_home()
    try:
        return f"{layout.prefix}/share/ngym/openenv/{host.resolve().relative_to(home.resolve()).as_posix()}"
    except ValueError:  # put elsewhere (an older install): a place of its own
        return f"{layout.prefix}/share/ngym/openenv/{name}/src/{host.name}"
