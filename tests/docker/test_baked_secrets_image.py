"""``ngym containerize`` refuses to bake a literal secret of an environment's config into an image, and a real
image built from the same environment with the secret as a reference holds none of the secrets planted in the
packaging shell: not in ``docker history``, ``docker inspect`` nor any byte of its saved layers.

An ``ngym init`` scaffold is the environment (a plugin source directory, as a user packages one); its config
first holds ``openai_api_key: <literal>`` (refused, exit 2, one line, before anything is built), then
``${oc.env:OPENAI_API_KEY}`` while ``OPENAI_API_KEY``, ``HF_TOKEN`` and ``NGYM_SESSION_SECRET`` hold planted values
in the environment of ``ngym containerize`` (built, then scanned).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

PLANTED = {
    "OPENAI_API_KEY": "sk-planted-openai-5a1f0c9e7d",
    "HF_TOKEN": "hf_planted_token_3b8e2d41c7",
    "NGYM_SESSION_SECRET": "planted-session-secret-91c4e7",
}
LITERAL = "sk-planted-literal-77e0b3f2a1"


def ngym(*args: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def layer_bytes(docker_client: Any, tag: str) -> bytes:
    """Every byte of the image as ``docker save`` writes it (each layer's tar, the config, the manifest)."""
    saved = b"".join(docker_client.images.get(tag).save(named=True))
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        for member in outer.getmembers():
            data = outer.extractfile(member)
            if data is None:
                continue
            blob = data.read()
            out.write(blob)
            try:  # a layer: its files' contents, uncompressed
                with tarfile.open(fileobj=io.BytesIO(blob)) as layer:
                    for inner in layer.getmembers():
                        handle = layer.extractfile(inner) if inner.isfile() else None
                        if handle is not None:
                            out.write(handle.read())
            except tarfile.TarError:
                pass
    return out.getvalue()


def test_a_literal_secret_is_refused_and_a_real_image_holds_no_planted_secret(
    tmp_path: Path, base_image: str, image_tag: str, docker_client: Any
) -> None:
    env = {**os.environ, **PLANTED}
    assert ngym("init", "planted_env", cwd=tmp_path, env=env).returncode == 0
    source = tmp_path / "planted_env"
    config = source / "configs" / "planted_env.yaml"
    original = config.read_text()
    config.write_text(original.replace("      domain:", f"      openai_api_key: {LITERAL}\n      domain:", 1))

    refused = ngym("containerize", str(source), "--base-image", base_image, "--tag", image_tag, cwd=tmp_path, env=env)
    assert refused.returncode == 2, refused.stderr[-2000:]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("ngym: error:")]
    assert len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "planted_env.resources_servers.planted_env.openai_api_key" in errors[0]
    assert "${oc.env:" in errors[0] and "--allow-baked-secrets" in errors[0] and LITERAL not in errors[0]
    assert not docker_client.images.list(name=image_tag)  # refused before anything was built

    # opted in, the context is written (a dry run: the wheels hold the literal, as asked)
    context = tmp_path / "context"
    allowed = ngym("containerize", str(source), "--output", str(context), "--no-build", "--allow-baked-secrets",
                   cwd=tmp_path, env=env)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr[-2000:]

    # the fix the line names: a reference; the secrets planted in the shell reach no layer
    config.write_text(
        original.replace("      domain:", "      openai_api_key: ${oc.env:OPENAI_API_KEY}\n      domain:", 1)
    )
    built = ngym("containerize", str(source), "--base-image", base_image, "--tag", image_tag, cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    image = docker_client.images.get(image_tag)
    history = repr(image.history())
    inspected = repr(image.attrs)
    saved = layer_bytes(docker_client, image_tag)
    assert b"${oc.env:OPENAI_API_KEY}" in saved  # the scan reads the packaged config itself
    for name, value in PLANTED.items():
        assert value not in history and value not in inspected, name
        assert value.encode() not in saved, f"{name}'s value is in the image's layers"
