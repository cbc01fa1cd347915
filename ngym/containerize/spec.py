"""What an image is made of: the plugin being packaged (``PluginSource``) and the full ``ImageSpec``.

``resolve_plugin`` finds an installed environment by name through ``ngym.targets`` (or reads a plugin source
directory) and records which distribution provides it, its version, domain and where its source tree lives (editable and
directory installs are found through the distribution's ``direct_url.json``). ``ImageSpec`` is the pure input of
the renderers: every value in it is plain data, so the same spec always renders the same Dockerfile.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement

from ngym.config import environment_config_fields
from ngym.containerize.errors import PluginSourceError
from ngym.containerize.payload import ContainerPayload, ImageLayout
from ngym.domain import resolve_domain
from ngym.errors import EnvironmentNotFound, PluginError
from ngym.plugins.entrypoints import ENVIRONMENT_GROUP
from ngym.suggest import did_you_mean
from ngym.targets import Environment, installed, installed_names, is_path_shaped

#: The default base image: the official Python slim image users expect. Offline: ``--base-image ngym-base:bookworm``.
DEFAULT_BASE_IMAGE = "python:3.11-slim"
#: The local base image built by ``docker/build-base-image.sh`` (``make docker-base``).
LOCAL_BASE_IMAGE = "ngym-base:bookworm"
#: Port the server listens on inside the container.
CONTAINER_PORT = 8000
#: Label namespace for ngym's own image labels.
LABEL_PREFIX = "dev.ngym"

_TAG_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_HOST_RE = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]+)?$")
_TAG_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class RunOptions:
    """What a container of the environment must be started with, as the server class declares it.

    An environment sets ``container_run_options = {"user": "root", "cap_drop": ["ALL"], "cap_add": [...],
    "security_opt": [...]}`` on its server class (plain data: the server runtime imports nothing from here), e.g.
    math_with_code, whose sandbox needs root's uid switching and namespaces inside the container. The image's
    ``USER``, ``--run``, the printed ``docker run`` line and the Compose/Kubernetes manifests all follow it.
    """

    user: str | None = None  #: the container's user instead of the image's unprivileged one (``root``)
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()

    @classmethod
    def declared_by(cls, server_class: object) -> RunOptions:
        """The options ``server_class.container_run_options`` declares (none: the defaults)."""
        declared = getattr(server_class, "container_run_options", None) or {}
        if not isinstance(declared, dict) or not set(declared) <= {"user", "cap_add", "cap_drop", "security_opt"}:
            raise PluginSourceError(
                f"{getattr(server_class, '__name__', server_class)}.container_run_options must be a dict with keys "
                f"user, cap_add, cap_drop, security_opt; got {declared!r}"
            )
        lists = {k: tuple(str(v) for v in declared.get(k, ())) for k in ("cap_add", "cap_drop", "security_opt")}
        return cls(user=declared.get("user"), **lists)

    def settings(self) -> dict[str, Any]:
        """The options it sets, under the names the docker SDK's ``containers.run`` and a Compose service share
        (``user``, ``cap_drop``, ``cap_add``, ``security_opt``)."""
        values: dict[str, Any] = {
            "user": self.user,
            "cap_drop": list(self.cap_drop),
            "cap_add": list(self.cap_add),
            "security_opt": list(self.security_opt),
        }
        return {key: value for key, value in values.items() if value}

    def docker_args(self) -> list[str]:
        """The ``docker run`` flags, e.g. ``--user root --cap-drop ALL --cap-add SYS_ADMIN``."""
        args = ["--user", self.user] if self.user else []
        args += [a for cap in self.cap_drop for a in ("--cap-drop", cap)]
        args += [a for cap in self.cap_add for a in ("--cap-add", cap)]
        return args + [a for opt in self.security_opt for a in ("--security-opt", opt)]


@dataclass(frozen=True)
class PluginSource:
    """An environment to package, and where its distribution comes from."""

    name: str  #: environment name (the entry-point name), e.g. ``example_single_tool_call``
    distribution: str  #: distribution that provides it, e.g. ``ngym-example-single-tool-call``
    version: str
    domain: str
    source_dir: Path | None  #: local source tree (editable / directory install, or the given directory)
    source_url: str  #: for the ``org.opencontainers.image.source`` label
    description: str = ""
    run_options: RunOptions = RunOptions()


@dataclass(frozen=True)
class DistributionSource:
    """A distribution whose wheel goes into the code layer (ngym itself, the plugin)."""

    distribution: str
    version: str
    source_dir: Path | None  #: build the wheel from here; None: fetch ``distribution==version`` from the index


@dataclass(frozen=True)
class ImageSpec:
    """Everything the Dockerfile and the build context are rendered from. Plain data; hashable."""

    env_name: str
    distribution: str
    version: str
    domain: str
    source_url: str
    ngym_version: str
    base_image: str = DEFAULT_BASE_IMAGE
    #: wheel file names of the dependencies (the cached layer); sorted
    dependency_wheels: tuple[str, ...] = ()
    #: wheel file names of ngym and the plugin (the code layer); sorted
    code_wheels: tuple[str, ...] = ()
    #: the pip wheel that installs everything (run from the wheel, never installed into the image)
    installer_wheel: str = ""
    description: str = ""
    port: int = CONTAINER_PORT
    uid: int = 10001
    user: str = "ngym"
    extra_labels: tuple[tuple[str, str], ...] = field(default=())
    run_options: RunOptions = RunOptions()
    #: the environment's own virtualenvs (``ngym.containerize.payload``): (key, its index wheels), by key
    env_venvs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: (key, wheels built from local folders) of those venvs: their own layer, like the code layer
    env_venv_code: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: absolute image paths of the files a server class's payload adds (copied from the context's ``payload/``)
    payload_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.env_name):
            raise PluginSourceError(f"invalid environment name {self.env_name!r}")
        if not {key for key, _ in self.env_venv_code} <= {key for key, _ in self.env_venvs}:
            raise PluginSourceError("env_venv_code names a venv env_venvs does not")
        for key, _ in self.env_venvs:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", key):
                raise PluginSourceError(f"invalid environment venv key {key!r}")
        for path in self.payload_paths:
            if not path.startswith("/") or ".." in path.split("/"):
                raise PluginSourceError(f"a payload path must be absolute, without '..': {path!r}")
        for wheel in (
            *self.dependency_wheels,
            *self.code_wheels,
            *([self.installer_wheel] * bool(self.installer_wheel)),
            *(w for _, wheels in (*self.env_venvs, *self.env_venv_code) for w in wheels),
        ):
            if not wheel.endswith(".whl") or "/" in wheel or wheel.startswith("."):
                raise ValueError(f"not a wheel file name: {wheel!r}")

    @property
    def requirements(self) -> tuple[str, ...]:
        """``name==version`` pins of the dependency wheels, sorted: the cached layer's requirements file."""
        return tuple(sorted({_pin(w) for w in self.dependency_wheels}, key=str.lower))

    def venv_requirements(self, key: str) -> tuple[str, ...]:
        """``name==version`` pins of environment venv ``key``'s wheels, sorted."""
        wheels = dict(self.env_venvs)[key]
        return tuple(sorted({_pin(w) for w in wheels}, key=str.lower))

    def labels(self) -> dict[str, str]:
        """OCI labels plus ngym's own (plugin name, domain, distribution, ngym version)."""
        labels = {
            "org.opencontainers.image.title": self.distribution,
            "org.opencontainers.image.version": self.version,
            "org.opencontainers.image.source": self.source_url,
            "org.opencontainers.image.description": self.description or f"ngym environment {self.env_name}",
            "org.opencontainers.image.base.name": self.base_image,
            f"{LABEL_PREFIX}.plugin.name": self.env_name,
            f"{LABEL_PREFIX}.plugin.domain": self.domain,
            f"{LABEL_PREFIX}.plugin.distribution": self.distribution,
            f"{LABEL_PREFIX}.version": self.ngym_version,
        }
        if self.run_options != RunOptions():
            labels[f"{LABEL_PREFIX}.run.options"] = " ".join(self.run_options.docker_args())
        labels.update(dict(self.extra_labels))
        return labels


def _pin(wheel: str) -> str:
    """``fastapi-0.115.0-py3-none-any.whl`` → ``fastapi==0.115.0``."""
    parts = wheel[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise ValueError(f"not a wheel file name: {wheel!r}")
    return f"{parts[0]}=={parts[1]}"


def default_tag(env_name: str, version: str) -> str:
    """``ngym-<env name>:<version>`` (lower case; docker repository names allow ``_``)."""
    return f"ngym-{env_name.lower()}:{version}"


def split_tag(tag: str) -> tuple[str, str]:
    """``repo[:tag]`` → (repo, tag); validates the reference so a typo fails before any work is done."""
    repo, _, name = tag.rpartition(":")
    if not repo or "/" in name:  # no tag part, or the colon belongs to a registry host:port
        repo, name = tag, "latest"
    first, _, rest = repo.partition("/")
    path = rest if rest and ("." in first or ":" in first or first == "localhost") else repo
    host_ok = path == repo or _HOST_RE.match(first)
    if not (host_ok and _TAG_RE.match(path) and _TAG_PART_RE.match(name)):
        raise PluginSourceError(f"invalid image tag {tag!r} (expected repository[:tag], lower-case repository)")
    return repo, name


def resolve_plugin(name_or_path: str) -> PluginSource:
    """The environment to package: an installed one (by name, hook-registered ones included; see
    ``ngym.targets``) or a plugin source directory (a folder with a ``pyproject.toml``)."""
    path = Path(name_or_path).expanduser()
    if (path / "pyproject.toml").is_file():
        return _from_source_dir(path.resolve())
    if is_path_shaped(name_or_path) and not path.exists():  # a path never means the installed one of that name
        raise PluginSourceError(f"{name_or_path}: no such folder ({path.absolute()})")
    try:
        env = installed(name_or_path)
    except EnvironmentNotFound:
        if path.is_dir():
            raise PluginSourceError(
                f"{name_or_path}: not a plugin source directory (no pyproject.toml in it) and no installed "
                "environment has that name"
            ) from None
        known = installed_names()
        hint = did_you_mean(name_or_path, known)
        hint += f" (installed: {', '.join(known)})" if known else "; no environment is installed"
        raise PluginSourceError(
            f"no environment named {name_or_path!r}{hint}; or pass a plugin source directory"
        ) from None
    if env.distribution is None:
        raise PluginSourceError(f"environment {name_or_path!r}: cannot tell which distribution provides it")
    refusal = _container_refusal(env)
    if refusal:
        raise PluginSourceError(f"environment {env.name!r} cannot be containerized: {refusal}")
    dist = metadata.distribution(env.distribution)
    source_dir = distribution_source_dir(dist)
    return PluginSource(
        name=env.name,
        distribution=dist.metadata["Name"],
        version=dist.version,
        domain=_domain_of(env),
        source_dir=source_dir,
        source_url=_source_url(dist.metadata, source_dir, dist.metadata["Name"], dist.version),
        description=dist.metadata["Summary"] or "",
        run_options=_run_options_of(env),
    )


def ngym_source() -> DistributionSource:
    """ngym's own distribution (built from its source tree when installed editable or from a directory)."""
    dists = list(metadata.distributions(name="ngym"))
    if not dists:
        raise PluginSourceError("the ngym distribution is not installed (pip install -e . in the ngym tree)")
    # A stale ngym.egg-info in the working directory can shadow the installed metadata: prefer one with a source.
    for dist in dists:
        source_dir = distribution_source_dir(dist)
        if source_dir is not None:
            return DistributionSource("ngym", dist.version, source_dir)
    return DistributionSource("ngym", dists[0].version, None)


def local_dependencies(distribution: str, exclude: set[str]) -> list[DistributionSource]:
    """The requirements of ``distribution`` (transitively) installed from a local tree: no index has them, so
    they go into the code layer too (an installed NeMo Gym environment needs ``ngym-nemo-gym`` and the sibling
    environments it imports). Requirements behind extras or markers that do not apply are skipped."""

    def key(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    seen = {key(n) for n in exclude}
    found: list[DistributionSource] = []
    pending = [distribution]
    while pending:
        try:
            requires = metadata.distribution(pending.pop()).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            if key(requirement.name) in seen:
                continue
            seen.add(key(requirement.name))
            try:
                dist = metadata.distribution(requirement.name)
            except metadata.PackageNotFoundError:
                continue
            source_dir = distribution_source_dir(dist)
            if source_dir is not None:
                found.append(DistributionSource(dist.metadata["Name"], dist.version, source_dir))
                pending.append(requirement.name)
    return found


def distribution_source_dir(dist: metadata.Distribution) -> Path | None:
    """The local directory a distribution was installed from, else None.

    PEP 610 ``direct_url.json`` (editable and directory installs); else, for ``*.egg-info`` metadata sitting in a
    source tree (``setup.py develop``, or a build's leftovers on ``sys.path``), the tree holding it.
    """
    raw = dist.read_text("direct_url.json")
    if raw:
        try:
            return source_dir_from_direct_url(json.loads(raw))
        except json.JSONDecodeError:
            return None
    path = getattr(dist, "_path", None)
    if isinstance(path, Path) and path.suffix == ".egg-info" and (path.parent / "pyproject.toml").is_file():
        return path.parent.resolve()
    return None


def source_dir_from_direct_url(info: dict[str, Any]) -> Path | None:
    """The directory of a ``file://`` URL with ``dir_info`` (editable or not); None for archives and VCS URLs."""
    url = info.get("url", "")
    parsed = urlparse(url)
    if parsed.scheme != "file" or "dir_info" not in info:
        return None
    path = Path(unquote(parsed.path)).resolve()
    return path if (path / "pyproject.toml").is_file() or (path / "setup.py").is_file() else None


def _from_source_dir(path: Path) -> PluginSource:
    try:
        project = tomllib.loads((path / "pyproject.toml").read_text())["project"]
    except (KeyError, tomllib.TOMLDecodeError) as exc:
        raise PluginSourceError(f"{path / 'pyproject.toml'}: no readable [project] table ({exc})") from None
    eps = project.get("entry-points", {}).get(ENVIRONMENT_GROUP, {})
    if not eps:
        raise PluginSourceError(f"{path}: pyproject.toml declares no [project.entry-points.{ENVIRONMENT_GROUP!r}]")
    name = path.name if path.name in eps else sorted(eps)[0]
    config = path / "configs" / f"{name}.yaml"
    version = project.get("version")
    if not version:
        raise PluginSourceError(f"{path}: pyproject.toml must give a static [project] version")
    urls = project.get("urls", {})
    source_url = _pick_url(urls) or f"pkg:generic/{project['name']}@{version}"
    return PluginSource(
        name=name,
        distribution=project["name"],
        version=str(version),
        domain=_config_domain(config, environment_config_fields(config, resolve=False) if config.is_file() else {}),
        source_dir=path,
        source_url=source_url,
        description=project.get("description", ""),
    )


def _domain_of(env: Environment) -> str:
    """The registered server's domain, after the registration rules (``PluginError`` saying why it breaks one).

    A class that cannot be imported on this host (e.g. it needs a library only the image has) is still packaged:
    its domain then comes from its config.
    """
    try:
        env.server_class  # noqa: B018 - imports it
    except PluginError:
        return _config_domain(env.config, env.fields)
    return env.domain.value  # an invalid domain, no verify, ...: no image of it


def _container_refusal(env: Environment) -> str | None:
    """Why the server class says an image would not serve it (``not_containerizable``, plain text), else None.

    A server that needs more than its distribution's wheels to run (an OpenEnv or verifiers environment's own
    virtualenv outside ngym's interpreter) declares it, so ``ngym containerize`` stops with the reason before any
    work instead of building an image that fails when it starts.
    """
    try:
        server_class = env.server_class
    except PluginError:  # not importable here: packaged as before
        return None
    refusal = getattr(server_class, "not_containerizable", None)
    return str(refusal) if refusal else None


def container_payload(plugin: PluginSource, layout: ImageLayout, workdir: Path) -> ContainerPayload:
    """What the installed environment's server class adds to its image (``ngym.containerize.payload``): its
    ``container_payload(layout, workdir)``, else nothing (most environments are their wheels alone)."""
    try:
        server_class = installed(plugin.name).server_class
    except (EnvironmentNotFound, PluginError):  # a source directory, or not importable here: its wheels alone
        return ContainerPayload()
    make = getattr(server_class, "container_payload", None)
    if make is None:
        return ContainerPayload()
    workdir.mkdir(parents=True, exist_ok=True)
    payload = make(layout, workdir)
    if not isinstance(payload, ContainerPayload):
        raise PluginSourceError(
            f"{server_class.__name__}.container_payload returned {type(payload).__name__}, not a ContainerPayload"
        )
    return payload


def _run_options_of(env: Environment) -> RunOptions:
    """The container run options the server class declares (a class that cannot be imported here: none)."""
    try:
        server_class = env.server_class
    except PluginError:  # as for its domain: still packaged, with no options declared
        return RunOptions()
    return RunOptions.declared_by(server_class)


def _config_domain(config: Path | None, fields: dict[str, Any]) -> str:
    """The domain a config declares, checked against ``Domain`` ("other" when it declares none)."""
    try:
        domain = resolve_domain(fields.get("domain"))
    except ValueError as exc:
        raise PluginSourceError(f"{config}: {exc}") from None
    return domain.value if domain is not None else "other"


def _pick_url(urls: dict[str, str]) -> str | None:
    lowered = {k.lower(): v for k, v in urls.items()}
    for key in ("source", "repository", "source code", "homepage"):
        if key in lowered:
            return lowered[key]
    return None


def _source_url(meta: metadata.PackageMetadata, source_dir: Path | None, name: str, version: str) -> str:
    urls = {}
    for entry in meta.get_all("Project-URL") or []:
        key, _, value = entry.partition(",")
        urls[key.strip()] = value.strip()
    if meta["Home-page"]:
        urls.setdefault("Homepage", meta["Home-page"])
    # no URL declared: a package URL, never a host path (labels are public)
    return _pick_url(urls) or (f"pkg:generic/{name}@{version}" if source_dir else f"pkg:pypi/{name}@{version}")
