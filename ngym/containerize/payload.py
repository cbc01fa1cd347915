"""What an image carries beyond ngym's and the environment's wheels: the seam a server class fills in.

Most environments are their distribution's wheels and its dependencies. Some run code in an interpreter of its
own (an OpenEnv environment's server, a verifiers environment's worker, each in a virtualenv with pins ngym's
interpreter must not meet). Their server class declares a classmethod::

    @classmethod
    def container_payload(cls, layout: ImageLayout, workdir: Path) -> ContainerPayload: ...

``ngym containerize`` calls it (only while building an image, never in the server runtime) with where things go
in the image (``layout``) and a scratch folder (``workdir``) for files it generates, e.g. its manifest with the
image's paths in place of the host's. The answer is plain data:

- ``venvs``: each host interpreter whose installed distributions the image re-creates as a virtualenv of its own
  at ``layout.venv(key)``, installed offline from a wheelhouse built on the host
  (``ngym.containerize.venv_wheels``);
- ``files``: host files or folders copied to absolute paths of the image (records, example data, sources);
- ``distribution_dir``: a project to build the environment's own distribution from, instead of the installed
  one (a generated distribution installed from a temporary folder has no source tree to build from).

A class that cannot be imaged raises ``PluginSourceError`` from it with the reason; one that never can sets
``not_containerizable`` (see ``ngym.containerize.spec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Where the environments' own virtualenvs live in an image (one folder each, by key).
ENV_VENVS = "/opt/ngym/envs"
#: Where each environment venv's wheels built from local folders are installed (``--target``; a ``.pth`` in the
#: venv names it), so a change of the environment's own code re-runs a small layer, not the whole venv.
ENV_CODE = "/opt/ngym/envs-code"
#: ngym's own interpreter in the image (``sys.prefix`` there); see ``ngym.containerize.dockerfile``.
NGYM_PREFIX = "/opt/ngym/venv"


@dataclass(frozen=True)
class ImageLayout:
    """Where things are inside the image being built."""

    python_version: str  #: the image's Python, ``major.minor``
    prefix: str = NGYM_PREFIX  #: ``sys.prefix`` of ngym's interpreter in the image
    venvs: str = ENV_VENVS

    def venv(self, key: str) -> str:
        """The folder of environment venv ``key``."""
        return f"{self.venvs}/{key}"

    def venv_python(self, key: str) -> str:
        return f"{self.venv(key)}/bin/python"

    def venv_purelib(self, key: str) -> str:
        return f"{self.venv(key)}/lib/python{self.python_version}/site-packages"


@dataclass(frozen=True)
class EnvironmentVenv:
    """A host interpreter whose installed distributions the image gets as its own virtualenv."""

    key: str  #: its folder under ``ImageLayout.venvs`` (letters, digits, ``_ . -``)
    python: Path  #: the host interpreter (``<venv>/bin/python``)
    #: loose modules copied into its site-packages at install (host file, path relative to site-packages)
    site_files: tuple[tuple[Path, str], ...] = ()
    #: distributions the environment cannot run without: one that cannot be packaged stops the build
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerPayload:
    """What a server class needs in its image besides the wheels (see the module docstring)."""

    venvs: tuple[EnvironmentVenv, ...] = ()
    files: tuple[tuple[Path, str], ...] = ()  #: (host file or folder, absolute path in the image)
    distribution_dir: Path | None = None


__all__ = ["ENV_CODE", "ENV_VENVS", "NGYM_PREFIX", "ContainerPayload", "EnvironmentVenv", "ImageLayout"]
