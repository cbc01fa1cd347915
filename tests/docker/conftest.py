"""Fixtures for the Docker tests: the real local engine and the local base image.

With ``CI=true`` a missing engine is a failure (``docker/ci-setup.sh`` must have started one); elsewhere the tests
skip with the reason. The base image (``ngym-base:bookworm``, or ``$NGYM_BASE_IMAGE``) is built by
``docker/build-base-image.sh`` when it is not there yet (about a minute, once).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("NGYM_BASE_IMAGE", "ngym-base:bookworm")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="session")
def docker_client() -> Any:
    from ngym.containerize.build import connect
    from ngym.containerize.errors import DockerUnavailable

    try:
        return connect()
    except DockerUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true and the Docker tests must run, but: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    from ngym.containerize.build import image_exists

    if not image_exists(docker_client, BASE_IMAGE):
        proc = subprocess.run(
            ["bash", str(REPO / "docker" / "build-base-image.sh"), BASE_IMAGE],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"could not build the base image {BASE_IMAGE}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return BASE_IMAGE


@pytest.fixture
def image_tag(docker_client: Any) -> Iterator[str]:
    """A unique tag for one test; removed afterwards (its layers stay as build cache)."""
    from docker.errors import ImageNotFound

    tag = f"ngym-pytest-{uuid.uuid4().hex[:8]}:test"
    yield tag
    with contextlib.suppress(ImageNotFound):
        docker_client.images.remove(tag, noprune=True)


def ngym(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real ``ngym`` CLI in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Each Docker test says when it starts (``make test`` runs them quietly, minutes each: no progress was shown)."""
    import time

    del location
    print(f"\n[docker {time.strftime('%H:%M:%S')}] {nodeid} …", flush=True, file=sys.__stderr__)
