"""``containerize(options)``: resolve the plugin → wheelhouse → build context → docker build → (``--run``).

The one function the CLI calls; tests and scripts call it too. Progress goes to ``log``; the result is data.
Lines indented by two spaces are detail (pip's and docker's own output): the CLI shows them with ``-v`` only.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ngym.containerize.baked_secrets import refuse_baked_secrets
from ngym.containerize.build import BuiltImage, build_image, connect, ensure_base_image, image_python_version
from ngym.containerize.dockerfile import build_context
from ngym.containerize.manifests import deploy_spec, session_store_source, write_manifests
from ngym.containerize.payload import ContainerPayload, ImageLayout
from ngym.containerize.pip import host_python_version
from ngym.containerize.smoke import RunResult, load_example_rollout, run_image
from ngym.containerize.spec import (
    DEFAULT_BASE_IMAGE,
    DistributionSource,
    ImageSpec,
    PluginSource,
    container_payload,
    default_tag,
    local_dependencies,
    ngym_source,
    resolve_plugin,
    split_tag,
)
from ngym.containerize.venv_wheels import VenvWheels, build_venv_wheelhouse
from ngym.containerize.wheelhouse import Wheelhouse, build_wheelhouse

Log = Callable[[str], None]


@dataclass
class ContainerizeOptions:
    """What ``ngym containerize`` was asked to do."""

    target: str  #: installed environment name or plugin source directory
    tag: str | None = None
    base_image: str = DEFAULT_BASE_IMAGE
    output: Path | None = None  #: write the build context here (kept); default: a temporary directory
    build: bool = True
    run: bool = False
    keep: bool = False
    python_version: str | None = None  #: the image's Python (major.minor); default: detected from the base image
    nocache: bool = False
    compose: bool = False  #: also write a Compose project (replicas + Redis + load balancer), see manifests.py
    k8s: bool = False  #: also write Kubernetes manifests
    replicas: int = 3
    manifests_dir: Path | None = None  #: where the manifests go; default: ./ngym-<name>-deploy
    #: with ``run``: the smoke container's environment variables (``-e``) and mounts (``-v``, ``HOST:CONTAINER:MODE``)
    run_environment: dict[str, str] = field(default_factory=dict)
    run_volumes: list[str] = field(default_factory=list)
    #: package a config holding a literal secret anyway (``ngym.containerize.baked_secrets``); default: refuse
    allow_baked_secrets: bool = False


@dataclass
class ContainerizeResult:
    """What was built (and run). ``to_dict()`` is the ``--json`` output."""

    name: str
    distribution: str
    version: str
    domain: str
    tag: str
    base_image: str
    python_version: str
    context_dir: str | None
    wheelhouse_seconds: float
    code_wheels: list[str]
    dependency_wheels: int
    image_id: str | None = None
    image_size: int | None = None
    build_seconds: float | None = None
    steps: int | None = None
    cached_steps: int | None = None
    run: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    manifests: list[str] = field(default_factory=list)
    #: ``docker run`` flags the environment needs (its declared run options), e.g. ``--cap-add SYS_ADMIN``
    docker_run_args: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def image_spec(
    plugin: PluginSource,
    wheelhouse: Wheelhouse,
    base_image: str,
    ngym_version: str,
    venvs: tuple[VenvWheels, ...] = (),
    payload_paths: tuple[str, ...] = (),
) -> ImageSpec:
    """The spec of ``plugin``'s image from a built wheelhouse (and its environment venvs' wheels, its payload)."""
    return ImageSpec(
        env_name=plugin.name,
        distribution=plugin.distribution,
        version=plugin.version,
        domain=plugin.domain,
        source_url=plugin.source_url,
        ngym_version=ngym_version,
        base_image=base_image,
        dependency_wheels=wheelhouse.dependency_wheels,
        code_wheels=wheelhouse.code_wheels,
        installer_wheel=wheelhouse.installer_wheel,
        description=plugin.description,
        run_options=plugin.run_options,
        env_venvs=tuple((v.key, v.wheels) for v in venvs),
        env_venv_code=tuple((v.key, v.code_wheels) for v in venvs if v.code_wheels),
        payload_paths=payload_paths,
    )


def own_wheels(distribution: str, wheelhouse: Wheelhouse, venvs: tuple[VenvWheels, ...]) -> list[Path]:
    """The code wheels of the environment's own distribution (its configs; not its dependencies')."""

    def norm(name: str) -> str:
        return name.lower().replace("-", "_").replace(".", "_")

    ours = norm(distribution)
    found = [wheelhouse.code_dir / name for name in wheelhouse.code_wheels]
    found += [venv.root / "code" / name for venv in venvs for name in venv.code_wheels]
    return [path for path in found if norm(path.name.split("-", 1)[0]) == ours and path.is_file()]


def payload_files(payload: ContainerPayload, layout: ImageLayout) -> dict[str, Path]:
    """Image path → host file or folder: the payload's files and its venvs' loose site-packages modules."""
    files = {image: host for host, image in payload.files}
    for venv in payload.venvs:
        files |= {f"{layout.venv_purelib(venv.key)}/{rel}": host for host, rel in venv.site_files}
    return files


def containerize(options: ContainerizeOptions, log: Log = lambda line: None) -> ContainerizeResult:
    """Build (and optionally run) the image of ``options.target``."""
    plugin = resolve_plugin(options.target)
    tag = options.tag or default_tag(plugin.name, plugin.version)
    split_tag(tag)  # a bad tag fails now, not after the wheelhouse
    notes: list[str] = []
    if options.run:
        load_example_rollout(plugin)  # no example to drive: say so before building
    client = connect() if options.build else None  # no engine: fail before spending time on wheels
    python_version = options.python_version
    if client is not None:
        ensure_base_image(client, options.base_image, log)  # pull (or fail) before any time goes into wheels
        if python_version is None:
            python_version = image_python_version(client, options.base_image)
    if python_version is None:
        python_version = host_python_version()
        notes.append(f"Python version of {options.base_image} unknown; assuming the host's {python_version}")
    log(f"containerize {plugin.name} ({plugin.distribution} {plugin.version}, domain {plugin.domain}) → {tag}")

    ngym = ngym_source()
    tmp_dir = tempfile.TemporaryDirectory(prefix="ngym-containerize-")
    tmp = tmp_dir.name
    layout = ImageLayout(python_version)
    try:
        payload = container_payload(plugin, layout, Path(tmp) / "payload")
    except BaseException:
        tmp_dir.cleanup()
        raise
    sources = [ngym]
    if plugin.distribution.lower() != "ngym":
        # a generated distribution (e.g. an installed OpenEnv environment's) is built from the project its payload
        # wrote: the installed one has no source tree, and its manifest names the host's paths
        sources.append(
            DistributionSource(plugin.distribution, plugin.version, payload.distribution_dir or plugin.source_dir)
        )
        sources += local_dependencies(plugin.distribution, exclude={"ngym", plugin.distribution})
    deploy = None
    if options.compose or options.k8s:
        deploy = deploy_spec(
            plugin.name, tag, replicas=options.replicas, base_image=options.base_image, run_options=plugin.run_options
        )
        if not deploy.affinity:  # the replicas share sessions through Redis: the image needs the store plugin
            sources.append(session_store_source())

    with tmp_dir:
        started = time.monotonic()
        wheelhouse = build_wheelhouse(sources, Path(tmp) / "wheelhouse", python_version=python_version, log=log)
        venvs = tuple(
            build_venv_wheelhouse(venv, Path(tmp) / "envs" / venv.key, python_version=python_version, log=log)
            for venv in payload.venvs
        )
        wheelhouse_seconds = time.monotonic() - started
        if not wheelhouse.pinned_to_host:
            notes.append("dependency versions resolved afresh (the host's versions were not all available)")
        notes += [note for venv in venvs for note in venv.notes]
        files = payload_files(payload, layout)
        if not options.allow_baked_secrets:  # before the context is written or anything built
            refuse_baked_secrets(own_wheels(plugin.distribution, wheelhouse, venvs), sorted(set(files.values())))
        spec = image_spec(plugin, wheelhouse, options.base_image, ngym.version, venvs, tuple(sorted(files)))
        context_dir = build_context(
            spec,
            wheelhouse,
            Path(options.output or Path(tmp) / "context"),
            env_wheels={venv.key: venv.root for venv in venvs},
            payload=files,
        )
        log(f"build context: {context_dir}" if options.output else f"  build context: {context_dir} (temporary)")
        result = ContainerizeResult(
            name=plugin.name,
            distribution=plugin.distribution,
            version=plugin.version,
            domain=plugin.domain,
            tag=tag,
            base_image=options.base_image,
            python_version=python_version,
            context_dir=str(context_dir) if options.output else None,
            wheelhouse_seconds=round(wheelhouse_seconds, 2),
            code_wheels=list(wheelhouse.code_wheels),
            dependency_wheels=len(wheelhouse.dependency_wheels),
            notes=notes,
            docker_run_args=plugin.run_options.docker_args(),
        )
        if deploy is not None:
            where = options.manifests_dir or Path.cwd() / f"{deploy.app}-deploy"
            written = write_manifests(deploy, Path(where), compose=options.compose, k8s=options.k8s)
            result.manifests = [str(path) for path in written]
            log(f"deploy manifests: {where} ({', '.join(p.name for p in written)})")
        if client is None:
            return result
        built: BuiltImage = build_image(client, context_dir, tag, log=log, nocache=options.nocache)
    result.image_id = built.id
    result.image_size = built.size
    result.build_seconds = round(built.seconds, 2)
    result.steps = len(built.steps)
    result.cached_steps = built.cached_steps
    log(f"built {built.tag} ({built.id[:19]}, {built.size / 1e6:.1f} MB) in {built.seconds:.1f}s")
    if options.run:
        run: RunResult = run_image(
            client,
            built.tag,
            plugin,
            keep=options.keep,
            log=log,
            environment=options.run_environment,
            volumes=options.run_volumes,
        )
        result.run = asdict(run)
    return result
