"""The profile's readable output (issue 16): one number format, a rollout section, a sweep label off the target."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from ngym.profiling.report import EndpointStats, ProfileResult, render_summary
from ngym.profiling.rollout_report import (
    failure_classes,
    render_rollout_section,
    reward_histogram,
    rollouts_per_second,
)
from ngym.profiling.sweep import SweepResult, SweepStep, sweep_figure


def _endpoint(name: str, p50: float, p95: float, p99: float) -> EndpointStats:
    return EndpointStats("POST", name, 100, 0, 10.0, p50, p95, p99, p50, p99)


def _result(rollouts_per_s: float = 10.0, p99: float = 11.0) -> ProfileResult:
    total = _endpoint("Aggregated", 4.0, 9.0, p99)
    return ProfileResult(
        target="http://127.0.0.1:1", environment="env", users=4, spawn_rate=4.0, duration_s=10.0,
        rollouts_finished=int(rollouts_per_s * 10), rollouts_failed=2, rollout_p50_ms=9.0, rollout_p95_ms=11.0,
        rollout_p99_ms=12.5, mean_reward=0.75, reward_mismatches=0, judge_failures=1,
        endpoints=[_endpoint("/seed_session", 4.0, 9.0, 11.0)], total=total, errors=[], max_fail_ratio=0.05,
    )  # fmt: skip


def test_latency_columns_use_one_format() -> None:
    text = render_summary(_result())
    row = next(line for line in text.splitlines() if "/seed_session" in line)
    assert row.split()[-3:] == ["4.0", "9.0", "11.0"]  # not "9.0" beside "11"
    assert "p50 9.0 ms  p95 11.0 ms  p99 12.5 ms" in text


def _tracker() -> SimpleNamespace:
    return SimpleNamespace(
        finished_at_s=[0.1, 0.5, 1.2, 1.3, 1.9, 2.5],
        failed_at_s=[1.5, 2.2],
        durations_ms=[5.0, 6.0, 7.0, 8.0, 30.0, 9.0],
        rewards=[1.0, 1.0, 0.0, 0.5, 1.0, 0.0],
        failure_reasons=Counter({"POST /verify: HTTP 500: flaky verify: injected failure": 2}),
        verify_failure_classes=Counter({"judge_failed": 1}),
    )


def test_rollout_figures() -> None:
    assert rollouts_per_second([0.1, 0.5, 1.2, 2.9], 3.0) == ([0.5, 1.5, 2.5], [2, 1, 1])
    assert rollouts_per_second([0.1, 0.5, 1.2, 2.05], 2.1) == ([0.5, 1.5], [2, 1])  # no 0.1 s bin: no fake drop
    assert rollouts_per_second([0.1, 2.1, 2.2], 2.5) == ([0.5, 1.5, 2.25], [1, 0, 4.0])  # per second of its length
    assert reward_histogram([0.0, 0.05, 0.5, 1.0, 1.0]) == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    assert failure_classes(_tracker()) == [
        ("failed: POST /verify → HTTP 500", 2),
        ("scored 0.0: verify said judge_failed", 1),
    ]


def test_rollout_section_has_its_charts_and_a_plain_summary() -> None:
    section = render_rollout_section(_result(), _tracker(), "profile.html")
    assert '<section id="rollouts">' in section and '<p class="summary">100 rollouts finished (10.0/s)' in section
    assert 'href="#rollouts"' not in section  # the summary sentence was one big link to the section it sits in
    assert section.count("<svg") == 3  # rollouts/s over time, latency percentiles, reward histogram
    for caption in ("Rollouts per second", "Rollout latency", "Reward histogram", "Failure classes"):
        assert f"<figcaption>{caption}" in section
    assert "failed: POST /verify → HTTP 500" in section and 'href="profile.html"' in section


def _sweep(target_ms: float, points: list[tuple[int, float, float]]) -> SweepResult:
    sweep = SweepResult(p99_target_ms=target_ms, max_fail_ratio=0.01)
    for users, rollouts_per_s, p99 in points:
        result = _result(rollouts_per_s=rollouts_per_s, p99=p99)
        result.rollouts_failed = 0
        sweep.steps.append(SweepStep(users, result, p99, p99 <= target_ms, True))
    return sweep


def test_the_capacity_label_never_sits_on_the_target_line() -> None:
    import matplotlib.pyplot as plt

    # the shape that put the label on the line: capacity at the last met step, target just above its p99
    cases = [
        _sweep(200.0, [(1, 50.0, 20.0), (2, 90.0, 60.0), (4, 120.0, 190.0), (8, 118.0, 400.0)]),
        _sweep(100.0, [(1, 50.0, 99.0), (2, 80.0, 100.0)]),
        _sweep(1000.0, [(1, 500.0, 5.0), (2, 900.0, 8.0), (4, 1000.0, 9.0)]),
    ]
    for sweep in cases:
        fig, label, target = sweep_figure(sweep, "t")
        fig.canvas.draw()
        box = label.get_window_extent()
        line_y = target.get_transform().transform((0, sweep.p99_target_ms))[1]
        assert not box.y0 - 2 <= line_y <= box.y1 + 2, (box, line_y)
        for line in label.axes.get_lines() + target.axes.get_lines():  # nor on a curve's points
            xy = line.get_transform().transform(line.get_xydata())
            inside = [(x, y) for x, y in xy if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1]
            assert not inside or line is target, (line.get_label(), inside)
        plt.close(fig)
