"""The one boundary to the Docker engine for building: connect, inspect the base image, build, tag.

Builds go through the docker SDK's low-level API so every progress line can be streamed as it comes. The image is
built untagged and tagged only after the build succeeded, so a failed build never leaves an image under the
requested tag; intermediate containers are removed either way (``forcerm``).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngym.containerize.errors import BaseImageUnavailable, DockerUnavailable, ImageBuildError
from ngym.containerize.spec import LABEL_PREFIX, split_tag

if TYPE_CHECKING:
    import docker

# The docker SDK is an optional dependency (``ngym[docker]``): it is imported in the functions that talk to the
# engine, so rendering a build context (``--output DIR --no-build``) works without it.

HOW_TO_START = (
    "start one (as root: `dockerd > /tmp/dockerd.log 2>&1 &`, or `systemctl start docker`; "
    "`bash docker/ci-setup.sh` installs and starts one) or point DOCKER_HOST at one"
)
_STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_PY_TAG_RE = re.compile(r"^(?:.*/)?python:(\d+\.\d+)")

Log = Callable[[str], None]


@dataclass
class BuildStep:
    """One Dockerfile instruction as the engine ran it."""

    number: int
    instruction: str
    cached: bool = False


@dataclass
class BuiltImage:
    """A successfully built and tagged image."""

    id: str
    tag: str
    size: int
    seconds: float
    steps: list[BuildStep] = field(default_factory=list)

    @property
    def cached_steps(self) -> int:
        return sum(step.cached for step in self.steps)


def connect(timeout: int = 120) -> docker.DockerClient:
    """A client for the local engine (``DOCKER_HOST`` and friends respected); one clear error if there is none."""
    try:
        from docker.errors import DockerException

        import docker
    except ImportError:
        raise DockerUnavailable("the docker package is not installed: pip install 'docker>=7.1'") from None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        reason = str(exc).split("(")[0].strip() or type(exc).__name__
        raise DockerUnavailable(f"no Docker engine reachable ({reason}): {HOW_TO_START}") from None
    except Exception as exc:  # requests' connection errors surface from ping()
        raise DockerUnavailable(f"no Docker engine reachable ({type(exc).__name__}): {HOW_TO_START}") from None
    return client


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True


def ensure_base_image(client: docker.DockerClient, ref: str, log: Log = lambda line: None) -> None:
    """Make sure ``ref`` is local: pull it if needed, before any time is spent on wheels."""
    from docker.errors import APIError, DockerException

    if image_exists(client, ref):
        return
    repository, tag = split_tag(ref)
    log(f"base image {ref} is not local: pulling it")
    try:
        for chunk in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise BaseImageUnavailable(_pull_failure(ref, str(chunk["error"])))
            if "status" in chunk and "progress" not in chunk:
                log(f"  {chunk['status']} {chunk.get('id', '')}".rstrip())
    except (APIError, DockerException) as exc:
        raise BaseImageUnavailable(_pull_failure(ref, getattr(exc, "explanation", None) or str(exc))) from None
    if not image_exists(client, ref):
        raise BaseImageUnavailable(_pull_failure(ref, "the pull finished without the image"))


def _pull_failure(ref: str, reason: str) -> str:
    return (
        f"base image {ref} is not local and cannot be pulled ({reason.strip()}); without a registry, build a "
        "local one with `make docker-base` (docker/build-base-image.sh) and pass --base-image ngym-base:bookworm"
    )


def image_python_version(client: docker.DockerClient, base_image: str) -> str | None:
    """The ``major.minor`` of ``python3`` in ``base_image``, if it can be known without pulling.

    In order: the ``dev.ngym.python.version`` label (``docker/build-base-image.sh`` sets it), the tag of an
    official ``python:X.Y...`` image, running ``python3`` in a local image; None when the image is not local.
    """
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(base_image)
    except ImageNotFound:
        match = _PY_TAG_RE.match(base_image)
        return match.group(1) if match else None
    label = (image.labels or {}).get(f"{LABEL_PREFIX}.python.version")
    if label:
        return str(label)
    match = _PY_TAG_RE.match(base_image)
    if match:
        return match.group(1)
    try:
        out = client.containers.run(
            base_image,
            ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            remove=True,
            entrypoint=[],
            network_disabled=True,
        )
    except Exception:
        return None
    return out.decode().strip() or None


def build_image(
    client: docker.DockerClient,
    context_dir: Path,
    tag: str,
    *,
    log: Log = lambda line: None,
    nocache: bool = False,
    tail_lines: int = 30,
) -> BuiltImage:
    """Build ``context_dir`` and tag the result ``tag``. Streams progress to ``log``.

    Raises ``ImageBuildError`` naming the failing step with the tail of the build log; nothing is tagged then.
    """
    from docker.errors import APIError, DockerException

    repository, name = split_tag(tag)
    previous = _image_id(client, f"{repository}:{name}")
    tail: deque[str] = deque(maxlen=tail_lines)
    steps: list[BuildStep] = []
    error: str | None = None
    image_id: str | None = None
    started = time.monotonic()
    try:
        stream = client.api.build(
            path=str(context_dir), rm=True, forcerm=True, pull=False, nocache=nocache, decode=True
        )
        for chunk in stream:
            image_id, error = _consume(chunk, steps, tail, log, image_id, error)
    except (APIError, DockerException) as exc:
        error = getattr(exc, "explanation", None) or str(exc)
    if error is None and image_id is None:
        error = "the engine reported no image id"
    if error is not None or image_id is None:
        raise ImageBuildError(_failure_message(error or "the engine reported no image id", steps, tail))
    client.api.tag(image_id, repository, name)
    if previous is not None and previous != image_id:
        _remove_replaced(client, previous, log)
    image = client.images.get(image_id)
    return BuiltImage(
        id=image_id,
        tag=f"{repository}:{name}",
        size=int(image.attrs.get("Size", 0)),
        seconds=time.monotonic() - started,
        steps=steps,
    )


def _image_id(client: docker.DockerClient, tag: str) -> str | None:
    """The id of the image ``tag`` names now, or None."""
    from docker.errors import DockerException

    try:
        return str(client.images.get(tag).id)
    except DockerException:
        return None


def _remove_replaced(client: docker.DockerClient, image_id: str, log: Log) -> None:
    """Remove the image the tag named before this build, now untagged: each rebuild left one behind (hundreds of
    MB each). The engine refuses, and it is kept, when anything still uses it (another tag, a container, a
    child image); intermediate stage images stay too, as they are the build cache of the next build."""
    from docker.errors import DockerException

    try:
        client.images.remove(image_id, noprune=False)
    except DockerException:
        return
    log(f"  removed the image this tag named before ({image_id[:19]}), untagged by this build")


def _consume(
    chunk: dict[str, Any],
    steps: list[BuildStep],
    tail: deque[str],
    log: Log,
    image_id: str | None,
    error: str | None,
) -> tuple[str | None, str | None]:
    if "stream" in chunk:
        for line in str(chunk["stream"]).splitlines():
            if not line.strip():
                continue
            tail.append(line)
            match = _STEP_RE.match(line)
            # Docker's own lines (steps, pip inside the build, layer ids) are detail: indented, which the CLI shows
            # only with -v (a failure's message carries the log's tail either way). A RUN step, where the time
            # goes, is also progress: one short line.
            log(f"  {line}")
            if match and match.group(3).startswith("RUN"):
                log(f"step {match.group(1)}/{match.group(2)}: {_short(match.group(3))}")
            if match:
                steps.append(BuildStep(int(match.group(1)), match.group(3)))
            elif "Using cache" in line and steps:
                steps[-1].cached = True
            elif line.startswith("Successfully built ") and image_id is None:
                image_id = line.split()[-1]
    elif "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
        image_id = chunk["aux"]["ID"]
    elif "error" in chunk:
        error = str(chunk["error"]).strip()
        tail.append(error)
    elif "status" in chunk:  # pulling a base image
        line = f"{chunk['status']} {chunk.get('progress', '')}".strip()
        if "progress" not in chunk:
            log(f"  {line}")
    return image_id, error


def _short(instruction: str, width: int = 90) -> str:
    """A Dockerfile instruction on one short line (a RUN can be a screenful)."""
    flat = " ".join(instruction.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _failure_message(error: str, steps: list[BuildStep], tail: deque[str]) -> str:
    where = f"step {steps[-1].number} ({steps[-1].instruction})" if steps else "before the first step"
    hint = ""
    lowered = error.lower()
    if (
        "pull access denied" in lowered
        or "dial tcp" in lowered
        or "manifest unknown" in lowered
        or ("not found" in lowered and not steps)
    ):
        hint = (
            "\nhint: the base image cannot be pulled here; build a local one with `make docker-base` "
            "(docker/build-base-image.sh) and pass --base-image ngym-base:bookworm"
        )
    log_tail = "\n".join(f"  | {line}" for line in tail)
    return f"docker build failed at {where}: {error}\n--- last lines of the build log ---\n{log_tail}{hint}"
