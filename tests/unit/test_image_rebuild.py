"""``ngym containerize`` of a changed environment replaces its image: the one its tag named before is removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class _Images:
    """The part of docker's ImageCollection build_image uses, over a dict of tag -> image id."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags = tags
        self.removed: list[str] = []

    def get(self, ref: str) -> Any:
        from types import SimpleNamespace

        from docker.errors import ImageNotFound

        image_id = self.tags.get(ref, ref if ref.startswith("sha256:") else None)
        if image_id is None:
            raise ImageNotFound(ref)
        return SimpleNamespace(id=image_id, attrs={"Size": 1})

    def remove(self, image_id: str, noprune: bool = False) -> None:
        self.removed.append(image_id)


class _Api:
    def __init__(self, images: _Images, built: str) -> None:
        self.images, self.built = images, built

    def build(self, **kwargs: Any) -> Any:
        yield {"stream": "Step 1/1 : FROM scratch\n"}
        yield {"aux": {"ID": self.built}}

    def tag(self, image_id: str, repository: str, name: str) -> None:
        self.images.tags[f"{repository}:{name}"] = image_id


def test_a_rebuild_removes_the_image_its_tag_named_before(tmp_path: Path) -> None:
    """Every ngym containerize of a changed environment left the previous image behind, untagged."""
    from types import SimpleNamespace

    from ngym.containerize.build import build_image

    images = _Images({"ngym-env:latest": "sha256:old"})
    client: Any = SimpleNamespace(images=images, api=_Api(images, "sha256:new"))
    built = build_image(client, tmp_path, "ngym-env:latest")
    assert built.id == "sha256:new" and images.tags["ngym-env:latest"] == "sha256:new"
    assert images.removed == ["sha256:old"]
    again = build_image(client, tmp_path, "ngym-env:latest")  # unchanged (all cached): the same image, kept
    assert again.id == "sha256:new" and images.removed == ["sha256:old"]
