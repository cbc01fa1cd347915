"""The wheelhouse holds what the image's *earliest* micro version needs, not only what the host's does.

pip evaluates ``Requires-Dist`` markers with the host interpreter (3.11.7 here) even with ``--python-version``;
Debian bookworm's python3 in the base image is 3.11.2, and redis needs ``async-timeout; python_full_version <
"3.11.3"`` there. Without it the image's ``pip install --no-index`` failed for every ``--compose`` build.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from ngym.containerize.wheelhouse import _marker_environment, _missing_marker_requirements


def fake_wheel(directory: Path, name: str, version: str, requires: list[str]) -> Path:
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    metadata = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}\n\nbody\n".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)
    )
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return wheel


def test_marker_environment_is_the_earliest_micro_version() -> None:
    assert _marker_environment("3.11") == {"python_version": "3.11", "python_full_version": "3.11.0", "extra": ""}


def test_requirements_of_older_micro_versions_are_missing_until_their_wheel_is_there(tmp_path: Path) -> None:
    fake_wheel(
        tmp_path,
        "redis",
        "8.1.0",
        [
            'async-timeout>=4.0.3; python_full_version < "3.11.3"',  # the image's 3.11.2 needs it
            'tomli; python_version < "3.11"',  # not for any 3.11
            'hiredis>=3.2.0; extra == "hiredis"',  # an extra nobody asked for
            "packaging>=20",  # no marker: pip resolved it already
            'typing-extensions[foo]>=4; python_full_version < "3.11.5"',
        ],
    )
    assert _missing_marker_requirements(tmp_path, "3.11") == ["async-timeout>=4.0.3", "typing-extensions[foo]>=4"]
    fake_wheel(tmp_path, "async_timeout", "5.0.1", [])
    fake_wheel(tmp_path, "typing_extensions", "4.16.0", [])
    assert _missing_marker_requirements(tmp_path, "3.11") == []
    assert _missing_marker_requirements(tmp_path, "3.12") == []
