"""What ``ngym install nemo-gym:NAME`` installs beside an environment: the environments its code imports, read from
NeMo Gym 0.7.0's wheel. Prose naming another environment (a docstring's "see resources_servers/x/...") is not an
import: taking it for one made installing finance_sec_search clone finance_agent_v2's git requirement."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

from ngym_nemo_gym.catalogue.folder import read_environment
from ngym_nemo_gym.catalogue.wheel import environment_names, nemo_gym_wheel


def test_finance_sec_search_brings_the_environments_it_imports_and_no_other(
    nemo_environment: Callable[[str], Path],
) -> None:
    folder = nemo_environment("finance_sec_search")  # the fixture makes sure the wheel is cached
    with zipfile.ZipFile(nemo_gym_wheel(download=False)) as wheel:
        known = set(environment_names(wheel))
    assert "finance_agent_v2" in known
    assert read_environment(folder, known).siblings == ["math_with_judge", "sec_local_index"]
    # sec_local_index names finance_agent_v2 only in docstrings (its conformance test lives there)
    assert read_environment(nemo_environment("sec_local_index"), known).siblings == []
