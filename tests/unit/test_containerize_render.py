"""Golden and property tests of the pure parts of ``ngym containerize``: the Dockerfile renderer and the context.

Regenerate the golden files after an intended change with ``NGYM_UPDATE_GOLDEN=1 pytest tests/unit -k containerize``
and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ngym.containerize import ImageSpec, Wheelhouse, build_context, context_files, render_dockerfile
from ngym.containerize.dockerfile import entrypoint
from ngym.containerize.entrypoint import command_line
from ngym.containerize.errors import PluginSourceError, WheelhouseError
from ngym.containerize.spec import default_tag, source_dir_from_direct_url, split_tag

GOLDEN = Path(__file__).parent / "golden" / "containerize"
DEPS = (
    "annotated_types-0.7.0-py3-none-any.whl",
    "fastapi-0.115.0-py3-none-any.whl",
    "pydantic_core-2.23.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
)
CODE = ("ngym-0.1.0-py3-none-any.whl", "ngym_example_single_tool_call-0.1.0-py3-none-any.whl")
PIP = "pip-24.2-py3-none-any.whl"


def make_spec(**changes: object) -> ImageSpec:
    fields: dict[str, object] = dict(
        env_name="example_single_tool_call",
        distribution="ngym-example-single-tool-call",
        version="0.1.0",
        domain="agent",
        source_url="https://example.invalid/ngym",
        ngym_version="0.1.0",
        base_image="python:3.11-slim",
        dependency_wheels=DEPS,
        code_wheels=CODE,
        installer_wheel=PIP,
        description="ngym example environment: a single get_weather tool.",
    )
    fields.update(changes)
    return ImageSpec(**fields)  # type: ignore[arg-type]


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("NGYM_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}: run with NGYM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file (NGYM_UPDATE_GOLDEN=1 to accept)"


def runtime_stage(dockerfile: str) -> list[str]:
    """The instructions after the last FROM (continuation lines joined)."""
    joined = dockerfile.replace("\\\n", " ")
    lines = [ln for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]
    last_from = max(i for i, ln in enumerate(lines) if ln.startswith("FROM "))
    return lines[last_from:]


def test_dockerfile_matches_golden() -> None:
    check_golden("Dockerfile", render_dockerfile(make_spec()))


def test_local_base_image_dockerfile_matches_golden() -> None:
    check_golden("Dockerfile.local-base", render_dockerfile(make_spec(base_image="ngym-base:bookworm")))


def test_render_is_pure() -> None:
    assert render_dockerfile(make_spec()) == render_dockerfile(make_spec())
    assert context_files(make_spec()) == context_files(make_spec())


def test_runtime_stage_is_non_root_exec_form_and_has_no_wheelhouse() -> None:
    stage = runtime_stage(render_dockerfile(make_spec()))
    user = [ln for ln in stage if ln.startswith("USER ")]
    assert user == ["USER 10001:10001"]
    assert not any("/wheelhouse" in ln for ln in stage), "the wheelhouse must not reach the final image"
    assert not any(ln.startswith(("ADD ", "COPY wheelhouse", "COPY requirements")) for ln in stage)
    (entry,) = [ln for ln in stage if ln.startswith("ENTRYPOINT ")]
    argv = json.loads(entry.removeprefix("ENTRYPOINT "))
    assert argv == entrypoint(make_spec())
    assert argv[-6:] == ["run", "example_single_tool_call", "--host", "0.0.0.0", "--port", "8000"]
    assert "EXPOSE 8000" in stage
    (health,) = [ln for ln in stage if ln.startswith("HEALTHCHECK ")]
    health_argv = json.loads(health.split(" CMD ", 1)[1])
    assert health_argv[0].endswith("/python") and "/health" in health_argv[-1]
    # every RUN/ENTRYPOINT/CMD is exec form (a JSON array)
    for ln in render_dockerfile(make_spec()).splitlines():
        if ln.startswith(("RUN ", "ENTRYPOINT ", "CMD ")):
            json.loads(ln.split(" ", 1)[1])


def test_no_secrets_in_env() -> None:
    text = render_dockerfile(make_spec()).replace("\\\n", " ")
    env_lines = [ln for ln in text.splitlines() if ln.startswith("ENV ")]
    assert env_lines
    for ln in env_lines:
        assert not re.search(r"SECRET|TOKEN|PASSWORD|KEY", ln, re.I), ln


def test_labels_are_oci_plus_plugin_name_and_domain() -> None:
    labels = make_spec().labels()
    assert labels["org.opencontainers.image.title"] == "ngym-example-single-tool-call"
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.source"] == "https://example.invalid/ngym"
    assert labels["dev.ngym.plugin.name"] == "example_single_tool_call"
    assert labels["dev.ngym.plugin.domain"] == "agent"
    label_line = next(ln for ln in render_dockerfile(make_spec()).splitlines() if ln.startswith("LABEL "))
    assert '"org.opencontainers.image.title"="ngym-example-single-tool-call"' in label_line


def test_dependency_layer_comes_before_code_and_depends_only_on_requirements() -> None:
    text = render_dockerfile(make_spec())
    deps_install = text.index("--requirement")
    code_copy = text.index("COPY wheelhouse/code/")
    assert text.index("COPY requirements.txt") < text.index("COPY wheelhouse/deps/") < deps_install < code_copy
    # nothing from the code wheels appears before the dependency install: a code change cannot bust it
    assert "ngym_example_single_tool_call" not in text[:deps_install]


def test_requirements_are_exact_pins_of_the_dependency_wheels() -> None:
    files = context_files(make_spec())
    pins = [ln for ln in files["requirements.txt"].splitlines() if not ln.startswith("#")]
    assert pins == ["annotated_types==0.7.0", "fastapi==0.115.0", "pydantic_core==2.23.4", "PyYAML==6.0.2"]


def test_pip_runs_from_its_wheel_and_is_never_installed() -> None:
    text = render_dockerfile(make_spec())
    runs = [json.loads(ln.removeprefix("RUN ")) for ln in text.splitlines() if ln.startswith("RUN ")]
    installs = [argv for argv in runs if "install" in argv]
    assert len(installs) == 2
    for argv in installs:
        assert argv[:2] == ["/opt/ngym/venv/bin/python", f"/wheelhouse/tools/{PIP}/pip"]
        assert "--no-index" in argv
    assert ["python3", "-m", "venv", "--without-pip", "/opt/ngym/venv"] in runs
    with pytest.raises(ValueError, match="installer_wheel"):
        render_dockerfile(make_spec(installer_wheel=""))


def test_spec_rejects_bad_names() -> None:
    with pytest.raises(PluginSourceError):
        make_spec(env_name="bad name; rm -rf /")
    with pytest.raises(ValueError):
        make_spec(code_wheels=("../evil.whl",))


def fake_wheelhouse(root: Path) -> Wheelhouse:
    for sub, names in (("deps", DEPS), ("code", CODE), ("tools", (PIP,))):
        (root / sub).mkdir(parents=True)
        for name in names:
            (root / sub / name).write_bytes(f"wheel {name}".encode())
    (root / "deps" / "unrelated-1.0-py3-none-any.whl").write_bytes(b"not in the spec")
    return Wheelhouse(root, CODE, DEPS, PIP)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_context_layout_matches_golden(tmp_path: Path) -> None:
    wheelhouse = fake_wheelhouse(tmp_path / "wh")
    context = build_context(make_spec(), wheelhouse, tmp_path / "ctx")
    files = tree(context)
    check_golden("context-listing.txt", "".join(f"{name}\n" for name in files))
    check_golden("requirements.txt", files["requirements.txt"].decode())
    assert files["Dockerfile"].decode() == render_dockerfile(make_spec())
    assert "wheelhouse/deps/unrelated-1.0-py3-none-any.whl" not in files


def test_build_context_is_repeatable_and_overwrites_only_a_context(tmp_path: Path) -> None:
    wheelhouse = fake_wheelhouse(tmp_path / "wh")
    first = tree(build_context(make_spec(), wheelhouse, tmp_path / "ctx"))
    second = tree(build_context(make_spec(), wheelhouse, tmp_path / "ctx"))
    assert first == second
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(WheelhouseError, match="refusing"):
        build_context(make_spec(), wheelhouse, precious)
    assert (precious / "notes.txt").read_text() == "keep me"


def test_build_context_extra_files_for_later_manifests(tmp_path: Path) -> None:
    context = build_context(
        make_spec(), fake_wheelhouse(tmp_path / "wh"), tmp_path / "ctx", {"deploy/compose.yaml": "services: {}\n"}
    )
    assert (context / "deploy" / "compose.yaml").read_text() == "services: {}\n"


def test_build_context_needs_every_wheel(tmp_path: Path) -> None:
    wheelhouse = fake_wheelhouse(tmp_path / "wh")
    (wheelhouse.code_dir / CODE[0]).unlink()
    with pytest.raises(WheelhouseError, match=CODE[0]):
        build_context(make_spec(), wheelhouse, tmp_path / "ctx")


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("ngym-example:0.1.0", ("ngym-example", "0.1.0")),
        ("ngym-example", ("ngym-example", "latest")),
        ("localhost:5000/team/env:dev", ("localhost:5000/team/env", "dev")),
        ("registry.example.invalid/env", ("registry.example.invalid/env", "latest")),
    ],
)
def test_split_tag(tag: str, expected: tuple[str, str]) -> None:
    assert split_tag(tag) == expected


@pytest.mark.parametrize("tag", ["UPPER:1", "a b:1", "env:bad tag", "env:", ":1"])
def test_split_tag_rejects(tag: str) -> None:
    with pytest.raises(PluginSourceError):
        split_tag(tag)


def test_default_tag() -> None:
    assert default_tag("Example_Env", "1.2.3") == "ngym-example_env:1.2.3"
    split_tag(default_tag("Example_Env", "1.2.3"))


def test_source_dir_from_direct_url(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    editable = {"url": tmp_path.as_uri(), "dir_info": {"editable": True}}
    assert source_dir_from_direct_url(editable) == tmp_path
    assert source_dir_from_direct_url({"url": tmp_path.as_uri(), "dir_info": {}}) == tmp_path
    archive = {"url": "https://example.invalid/x-1.0.tar.gz", "archive_info": {}}
    assert source_dir_from_direct_url(archive) is None
    gone = {"url": (tmp_path / "gone").as_uri(), "dir_info": {}}
    assert source_dir_from_direct_url(gone) is None


def test_entrypoint_appends_overrides_from_the_environment() -> None:
    base = ["run", "env", "--host", "0.0.0.0", "--port", "8000"]
    assert command_line(base, {}) == base
    env = {"NGYM_OVERRIDES": "data_dir=/data 'greeting=hello world'"}
    # after `run NAME`, before the arguments of `docker run IMAGE ...` (which therefore win)
    assert command_line([*base, "x=1"], env) == [
        "run", "env", "data_dir=/data", "greeting=hello world", "--host", "0.0.0.0", "--port", "8000", "x=1"
    ]  # fmt: skip
    with pytest.raises(SystemExit, match="key=value"):
        command_line(base, {"NGYM_OVERRIDES": "--reload"})


def test_an_environment_venv_gets_its_own_cached_stage_and_the_payload_is_copied_readable(tmp_path: Path) -> None:
    venv_wheels = ("verifiers-0.3.1-py3-none-any.whl", "datasets-3.0.0-py3-none-any.whl")
    record = "/opt/ngym/venv/share/ngym/verifiers/vf_x.json"
    code = ("vf_x-0.1.0-py3-none-any.whl",)
    spec = make_spec(
        env_venvs=(("verifiers-vf_x", venv_wheels),), env_venv_code=(("verifiers-vf_x", code),), payload_paths=(record,)
    )
    dockerfile = render_dockerfile(spec)
    assert "FROM python:3.11-slim AS venv-verifiers-vf_x" in dockerfile
    assert '"/opt/ngym/envs/verifiers-vf_x/bin/python", "/wheelhouse/tools/pip-24.2-py3-none-any.whl/pip"' in dockerfile
    assert "COPY --from=venv-verifiers-vf_x /opt/ngym/envs/verifiers-vf_x /opt/ngym/envs/verifiers-vf_x" in dockerfile
    # the environment's own code in a layer of its own, on the venv's path through a .pth: a change of it re-runs
    # that small step, not the venv's hundreds of MB
    assert '"--target", "/opt/ngym/envs-code/verifiers-vf_x", "/wheelhouse/envcode/verifiers-vf_x/vf_x' in dockerfile
    assert "ngym-env-code.pth').write_text('/opt/ngym/envs-code/verifiers-vf_x" in dockerfile
    assert dockerfile.rstrip().endswith("COPY payload/ /")  # last: a record changes more often than code
    assert "COPY payload/" not in render_dockerfile(make_spec())  # no payload, no step

    folder = tmp_path / "venv-wheels"
    folder.mkdir()
    (folder / "code").mkdir()
    for wheel in venv_wheels:
        (folder / wheel).write_bytes(b"wheel")
    (folder / "code" / code[0]).write_bytes(b"wheel")
    host_record = tmp_path / "vf_x.json"
    host_record.write_text("{}")
    host_record.chmod(0o600)  # as records.write leaves it: unreadable by the image's user if copied as is
    context = build_context(
        spec, fake_wheelhouse(tmp_path / "wh"), tmp_path / "ctx", env_wheels={"verifiers-vf_x": folder},
        payload={record: host_record},
    )  # fmt: skip
    copied = context / "payload" / record.lstrip("/")
    assert copied.read_text() == "{}" and copied.stat().st_mode & 0o777 == 0o644
    pins = (context / "wheelhouse" / "envs" / "verifiers-vf_x" / "requirements.txt").read_text().splitlines()[1:]
    assert pins == ["datasets==3.0.0", "verifiers==0.3.1"]
    assert sorted(p.name for p in (context / "wheelhouse" / "envs" / "verifiers-vf_x").glob("*.whl")) == sorted(
        venv_wheels
    )
    assert (context / "wheelhouse" / "envcode" / "verifiers-vf_x" / code[0]).is_file()
    with pytest.raises(Exception, match="payload given does not match"):
        build_context(spec, fake_wheelhouse(tmp_path / "wh2"), tmp_path / "ctx2", env_wheels={"verifiers-vf_x": folder})
