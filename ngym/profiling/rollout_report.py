"""The rollout section of a load run's HTML report: what a trainer cares about, beside Locust's per-request view.

Locust's report counts requests; a training loop counts rollouts. This section shows, from the run's
``RolloutTracker``: rollouts per second over time (finished and failed), rollout latency percentiles, the reward
histogram, and the failure classes (failed rollouts by endpoint and status, and verify answers that carried an
``_ng_failure_class``). Charts are drawn with matplotlib as inline SVG, so the page needs no script and no network.

``write_rollout_report`` writes ``<prefix>_rollouts.html`` and puts the same section at the top of Locust's
``<prefix>.html`` (before its app root), under the anchor ``#rollouts``.
"""

from __future__ import annotations

import html
import io
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ngym.profiling.report import ProfileResult, percentile

if TYPE_CHECKING:
    from ngym.profiling.user import RolloutTracker

ANCHOR = "rollouts"
LATENCY_PERCENTILES = (0.50, 0.90, 0.95, 0.99, 1.0)
_STATUS = re.compile(r"^(POST \S+): (HTTP \d+|connection error)")

_STYLE = """
#rollouts { font-family: system-ui, sans-serif; color: #1b1b1b; background: #fff; padding: 16px 24px;
  border-bottom: 2px solid #d0d7de; }
#rollouts h2 { margin: 0 0 4px; font-size: 20px; }
#rollouts .summary { margin: 0 0 12px; font-size: 14px; }
#rollouts .grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 12px; }
#rollouts figure { margin: 0; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px; }
#rollouts figcaption { font-weight: 600; font-size: 14px; margin-bottom: 4px; }
#rollouts svg { width: 100%; height: auto; }
#rollouts table { border-collapse: collapse; font-size: 13px; width: 100%; }
#rollouts td, #rollouts th { border-bottom: 1px solid #eaeef2; padding: 3px 6px; text-align: left; }
#rollouts td.n { text-align: right; font-variant-numeric: tabular-nums; }
"""


def failure_classes(tracker: RolloutTracker) -> list[tuple[str, int]]:
    """Failed rollouts grouped by endpoint and status, then verify answers by ``_ng_failure_class``."""
    classes: Counter[str] = Counter()
    for reason, count in tracker.failure_reasons.items():
        match = _STATUS.match(reason)
        classes[f"failed: {match.group(1)} → {match.group(2)}" if match else f"failed: {reason[:80]}"] += count
    for name, count in tracker.verify_failure_classes.items():
        classes[f"scored 0.0: verify said {name}"] += count
    return classes.most_common()


def rollouts_per_second(times_s: list[float], duration_s: float) -> tuple[list[float], list[float]]:
    """Rollouts ended per second, in one-second bins: (bin midpoints in seconds since the start, rates).

    A last partial bin counts per second of its own length, and is left out under half a second (a run's
    final 0.1 s would otherwise draw a drop to zero that never happened).
    """
    full = int(duration_s)
    rest = duration_s - full
    widths = [1.0] * full + ([rest] if rest >= 0.5 or full == 0 else [])
    counts = [0] * len(widths)
    for t in times_s:
        index = int(t)
        if 0 <= index < len(counts):
            counts[index] += 1
    middles = [i + width / 2 for i, width in enumerate(widths)]
    return middles, [count / width if width else 0.0 for count, width in zip(counts, widths, strict=True)]


def reward_histogram(rewards: list[float], bins: int = 10) -> list[int]:
    """Counts of rewards in ``bins`` equal bins over [0, 1] (1.0 falls in the last)."""
    counts = [0] * bins
    for reward in rewards:
        counts[min(bins - 1, max(0, int(reward * bins)))] += 1
    return counts


def _svg(fig: object) -> str:
    import matplotlib.pyplot as plt  # optional (ngym[profile]); _charts has imported it already

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _charts(tracker: RolloutTracker, duration_s: float) -> dict[str, str]:
    import matplotlib  # here, not at the top: matplotlib is optional (ngym[profile]), ~0.5 s to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts: dict[str, str] = {}
    seconds, finished = rollouts_per_second(tracker.finished_at_s, duration_s)
    _, failed = rollouts_per_second(tracker.failed_at_s, duration_s)
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=100)
    ax.plot(seconds, finished, "-o", markersize=3, color="tab:blue", label="finished")
    if any(failed):
        ax.plot(seconds, failed, "-o", markersize=3, color="tab:red", label="failed")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("rollouts/s")
    ax.set_ylim(0, max([*finished, *failed, 1]) * 1.15)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    charts["Rollouts per second"] = _svg(fig)

    labels = ["p50", "p90", "p95", "p99", "max"]
    values = [percentile(tracker.durations_ms, p) for p in LATENCY_PERCENTILES]
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=100)
    bars = ax.bar(labels, values, color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=8, padding=2)
    ax.set_ylabel("rollout latency (ms)")
    ax.set_ylim(0, max([*values, 1]) * 1.2)
    charts["Rollout latency (seed → close)"] = _svg(fig)

    counts = reward_histogram(tracker.rewards)
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=100)
    edges = [i / 10 for i in range(10)]
    bars = ax.bar(edges, counts, width=0.1, align="edge", color="tab:green", edgecolor="white")
    ax.bar_label(bars, labels=[str(c) if c else "" for c in counts], fontsize=8, padding=2)
    ax.set_xlim(0, 1)
    ax.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_xlabel("reward")
    ax.set_ylabel("rollouts")
    ax.set_ylim(0, max([*counts, 1]) * 1.2)
    charts["Reward histogram"] = _svg(fig)
    return charts


def render_rollout_section(result: ProfileResult, tracker: RolloutTracker, request_report: str | None) -> str:
    """The ``<section id="rollouts">`` (with its style) for the HTML report."""
    mean = "n/a" if result.mean_reward is None else f"{result.mean_reward:.3f}"
    summary = (
        f"{result.rollouts_finished} rollouts finished ({result.rollouts_per_s:.1f}/s), "
        f"{result.rollouts_failed} failed ({result.failure_ratio:.2%}); mean reward {mean}; "
        f"rollout latency p50 {result.rollout_p50_ms:.1f} ms, p99 {result.rollout_p99_ms:.1f} ms"
    )
    link = f' · <a href="{html.escape(request_report)}">per-request report (Locust)</a>' if request_report else ""
    figures = [
        f"<figure><figcaption>{html.escape(title)}</figcaption>{svg}</figure>"
        for title, svg in _charts(tracker, result.duration_s).items()
    ]
    classes = failure_classes(tracker)
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td class='n'>{count}</td></tr>" for name, count in classes)
    table = (
        f"<table><tr><th>failure class</th><th>rollouts</th></tr>{rows}</table>"
        if classes
        else "<p>none: every rollout finished and every verify scored</p>"
    )
    figures.append(f"<figure><figcaption>Failure classes</figcaption>{table}</figure>")
    return (
        f"<style>{_STYLE}</style>"
        f'<section id="{ANCHOR}"><h2>Rollouts: {html.escape(result.environment or result.target)}</h2>'
        # the summary is text to read, not a link (one to the section it sits in went nowhere, and read as a button)
        f'<p class="summary">{html.escape(summary)}{link}</p>'
        f'<div class="grid">{"".join(figures)}</div></section>'
    )


def write_rollout_report(result: ProfileResult, tracker: RolloutTracker, report_dir: Path, prefix: str) -> Path:
    """Write ``<prefix>_rollouts.html`` and put the section at the top of Locust's ``<prefix>.html``."""
    locust_html = report_dir / f"{prefix}.html"
    has_locust = locust_html.is_file()
    page = report_dir / f"{prefix}_rollouts.html"
    title = html.escape(f"ngym profile: rollouts of {result.environment or result.target}")
    section = render_rollout_section(result, tracker, locust_html.name if has_locust else None)
    page.write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body style='margin:0'>{section}</body></html>",
        encoding="utf-8",
    )
    if has_locust:
        text = locust_html.read_text(encoding="utf-8")
        at = text.rfind('<div id="root">')  # the last one: the bundled script contains the string too
        if at != -1:
            inline = render_rollout_section(result, tracker, None)
            locust_html.write_text(text[:at] + inline + text[at:], encoding="utf-8")
    return page
