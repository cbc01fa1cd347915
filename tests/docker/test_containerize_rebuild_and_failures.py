"""A code-only change rebuilds from the dependency cache; failures are readable and leave no image tagged."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from ngym.containerize.build import build_image, image_exists
from ngym.containerize.errors import ImageBuildError
from ngym.containerize.pipeline import ContainerizeOptions, containerize

from .conftest import REPO, ngym

WEATHER = REPO / "resources_servers" / "example_single_tool_call"


def copy_plugin(dest: Path) -> Path:
    shutil.copytree(WEATHER, dest, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    return dest


def step(result_steps: list[Any], needle: str) -> Any:
    (found,) = [s for s in result_steps if needle in s.instruction]
    return found


def test_code_change_rebuilds_from_the_dependency_cache(
    tmp_path: Path, base_image: str, image_tag: str, docker_client: Any
) -> None:
    source = copy_plugin(tmp_path / "example_single_tool_call")
    options = ContainerizeOptions(target=str(source), tag=image_tag, base_image=base_image)
    lines: list[str] = []
    first = containerize(options, log=lines.append)
    assert first.image_id and image_exists(docker_client, image_tag)

    app = source / "app.py"
    # Unique per run: wheels are byte-reproducible, so a fixed edit would hit the layer cache of an earlier run
    # of this very test on the same engine, and the code layer would (rightly) come from cache.
    app.write_text(app.read_text() + f"\n# touched: one line of plugin code changed ({uuid.uuid4().hex})\n")
    lines.clear()
    second = containerize(options, log=lines.append)

    steps = _steps_from_log(lines)
    assert step(steps, "--requirement").cached, "the dependency layer must come from cache"
    assert step(steps, "COPY wheelhouse/deps/").cached
    assert not step(steps, "--target").cached, "the code layer must be rebuilt"
    assert second.image_id != first.image_id
    assert docker_client.images.get(image_tag).id == second.image_id
    from docker.errors import ImageNotFound

    # the image the tag named before: removed, not left behind untagged (an identical image another tag names, e.g.
    # an earlier build of the same plugin, is the same image id and stays, tagged)
    try:
        before = docker_client.images.get(first.image_id)
    except ImageNotFound:
        return
    assert before.tags and image_tag not in before.tags, before.tags


def _steps_from_log(lines: list[str]) -> list[Any]:
    from collections import deque

    from ngym.containerize.build import BuildStep, _consume

    steps: list[BuildStep] = []
    for line in lines:
        if line.startswith("  "):  # docker's own lines are logged as (indented) detail
            _consume({"stream": line[2:] + "\n"}, steps, deque(maxlen=1), lambda _: None, None, None)
    return steps


def test_unresolvable_dependency_is_a_readable_error_and_tags_nothing(
    tmp_path: Path, base_image: str, image_tag: str, docker_client: Any
) -> None:
    source = copy_plugin(tmp_path / "example_single_tool_call")
    pyproject = source / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('dependencies = ["ngym>=0.1"]', 'dependencies = ["ngym>=0.1", "ngym>=999"]')
    )
    proc = ngym("containerize", str(source), "--base-image", base_image, "--tag", image_tag)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("ngym: error:")]
    assert error and "could not resolve the dependencies" in error[0], proc.stderr[-2000:]
    assert "ngym>=999" in proc.stderr
    assert not image_exists(docker_client, image_tag)


def test_failed_docker_build_names_the_step_and_tags_nothing(
    tmp_path: Path, base_image: str, image_tag: str, docker_client: Any
) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\n"
        'RUN ["python3", "-c", "print(\'about to fail\')"]\n'
        'RUN ["python3", "-c", "import sys; print(\'no such dependency: frobnicate\'); sys.exit(3)"]\n'
        'CMD ["python3"]\n'
    )
    lines: list[str] = []
    with pytest.raises(ImageBuildError) as info:
        build_image(docker_client, tmp_path, image_tag, log=lines.append, nocache=True)
    message = str(info.value)
    assert message.startswith("docker build failed at step 3 (RUN")
    assert "non-zero code: 3" in message
    assert "no such dependency: frobnicate" in message  # the tail of the build log
    assert any(line.startswith("step 2/4: RUN") for line in lines)  # progress was streamed
    assert not image_exists(docker_client, image_tag)


def test_missing_base_image_says_how_to_get_one(tmp_path: Path, image_tag: str, docker_client: Any) -> None:
    (tmp_path / "Dockerfile").write_text('FROM ngym-no-such-base-image:never\nCMD ["true"]\n')
    with pytest.raises(ImageBuildError, match="make docker-base"):
        build_image(docker_client, tmp_path, image_tag)
    assert not image_exists(docker_client, image_tag)


def test_unpullable_base_image_fails_fast_with_a_hint(image_tag: str, docker_client: Any) -> None:
    proc = ngym(
        "containerize", "example_single_tool_call", "--base-image", "ngym-no-such-base:never", "--tag", image_tag
    )
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("ngym: error: base image ngym-no-such-base:never is not local and cannot be pulled")
    assert "make docker-base" in error
    assert "wheelhouse:" not in proc.stderr, "no time is spent on wheels before the base image is known"
    assert not image_exists(docker_client, image_tag)
