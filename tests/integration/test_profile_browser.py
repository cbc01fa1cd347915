"""The profile's HTML report, opened in a real browser (headless Chromium) and looked at as pixels (issue 16).

Runs wherever Chromium is installed; under CI=true it must run (``.ci/run`` installs Debian's ``chromium``).
The screenshots are kept in the test's tmp folder (``--basetemp`` to find them) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FLAKY_CONFIG = Path(__file__).parent / "profile_envs/flaky_verify/configs/flaky_verify.yaml"
BLUE, RED, GREEN = (31, 119, 180), (214, 39, 40), (44, 160, 44)  # matplotlib's tab:blue, tab:red, tab:green


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: the report is checked in Chromium; .ci/run installs it (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install -y chromium); CI installs it")
    return found


def screenshot(page: Path, png: Path, height: int) -> None:
    browser = chromium()
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        f"--user-data-dir={png.parent / 'chromium'}", f"--window-size=1400,{height}", "--virtual-time-budget=5000",
        f"--screenshot={png}", page.as_uri(),
    ]  # fmt: skip
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    assert png.is_file() and png.stat().st_size > 10_000


def pixels(png: Path):  # noqa: ANN201 - a numpy array of RGB bytes
    import matplotlib.image

    image = matplotlib.image.imread(png)
    return (image[:, :, :3] * 255).round().astype(int)


def share(region, color: tuple[int, int, int], tolerance: int = 12) -> float:  # noqa: ANN001
    """The fraction of ``region``'s pixels within ``tolerance`` of ``color``."""
    import numpy

    return float((numpy.abs(region - numpy.array(color)).max(axis=2) <= tolerance).mean())


def test_the_report_shows_rollouts_at_the_top_and_locusts_report_below(tmp_path: Path) -> None:
    chromium()
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "profile", str(FLAKY_CONFIG), "--users", "3", "--duration", "3s",
         "--max-fail-ratio", "0.9", "--report", str(report)],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    whole = tmp_path / "profile.png"
    screenshot(report / "profile.html", whole, 1600)
    image = pixels(whole)
    top, below = image[:480], image[520:]
    assert share(top, BLUE) > 0.005  # rollouts/s line and latency bars
    assert share(top, RED) > 0.0002  # the failed rollouts' line (the flaky verify fails some)
    assert share(top, GREEN) > 0.0005  # the reward histogram
    assert (below < 200).any(axis=2).mean() > 0.01  # Locust's own report still renders under the section

    alone = tmp_path / "rollouts.png"
    screenshot(report / "profile_rollouts.html", alone, 900)
    assert share(pixels(alone), BLUE) > 0.005
