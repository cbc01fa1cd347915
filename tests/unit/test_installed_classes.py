"""``ngym.plugin_api.installed_classes``: an ecosystem plugin's ``installed`` module, one class per environment."""

from __future__ import annotations

import pytest

from ngym.plugin_api import installed_classes


def test_each_installed_name_is_one_class_named_after_it_and_others_are_missing() -> None:
    records = {"tally": {"reward": 1.0}}
    made: list[str] = []

    def make(record: dict[str, float]) -> type:
        made.append(str(record))
        return type("Made", (), dict(record))

    lookup = installed_classes("plugin.installed", "ORS", records.__getitem__, make)
    tally = lookup("tally")
    assert lookup("tally") is tally and len(made) == 1  # made once
    assert (tally.__module__, tally.__qualname__, tally.reward) == ("plugin.installed", "tally", 1.0)
    with pytest.raises(AttributeError, match=r"no ORS environment 'other' is installed \(ngym list\)"):
        lookup("other")
    with pytest.raises(AttributeError):
        lookup("__path__")  # import machinery's probes are not environment names
