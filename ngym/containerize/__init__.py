"""``ngym containerize``: a production Docker image of any environment, built offline with the real engine.

Pure parts (golden-tested): ``render_dockerfile(spec)``, ``context_files(spec)``, ``build_context(spec, ...)``.
Impure parts: ``build_wheelhouse`` (pip on the host), ``ngym.containerize.build`` (the docker SDK boundary),
``ngym.containerize.smoke`` (``--run``). ``containerize(options)`` ties them together for the CLI.
"""

from ngym.containerize.dockerfile import build_context, context_files, render_dockerfile, render_requirements
from ngym.containerize.spec import (
    DEFAULT_BASE_IMAGE,
    LOCAL_BASE_IMAGE,
    DistributionSource,
    ImageSpec,
    PluginSource,
    RunOptions,
    resolve_plugin,
)
from ngym.containerize.wheelhouse import Wheelhouse, build_wheelhouse

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "LOCAL_BASE_IMAGE",
    "DistributionSource",
    "ImageSpec",
    "PluginSource",
    "RunOptions",
    "Wheelhouse",
    "build_context",
    "build_wheelhouse",
    "context_files",
    "render_dockerfile",
    "render_requirements",
    "resolve_plugin",
]
