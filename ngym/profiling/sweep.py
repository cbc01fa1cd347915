"""The capacity finder: step the user count up until p99 latency or failures cross their limits.

Each step is a whole load run at one user count (the same server, fresh statistics). A step *meets* the
targets when the aggregate request p99 is at most ``p99_ms`` and its failure ratio at most ``max_fail_ratio``.
The sweep stops at the first step that misses either (more users only make both worse), and the
**capacity** is the highest rollouts/s among the steps that met both. The plot shows rollouts/s and p99
against users, with the p99 target and the capacity marked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngym.errors import ConfigError
from ngym.profiling.report import ProfileFailed, ProfileResult


@dataclass
class SweepStep:
    users: int
    result: ProfileResult
    p99_ms: float
    met_p99: bool
    met_failures: bool

    @property
    def met(self) -> bool:
        return self.met_p99 and self.met_failures and self.result.rollouts_finished > 0

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "users": self.users,
            "rollouts_per_s": round(r.rollouts_per_s, 3),
            "requests_per_s": round(r.total.requests_per_s, 3),
            "p99_ms": self.p99_ms,
            "p50_ms": r.total.p50_ms,
            "rollout_p99_ms": r.rollout_p99_ms,
            "failure_ratio": round(r.failure_ratio, 6),
            "load_generator_cpu_percent": round(r.load_generator_cpu_percent, 1),
            "met_p99": self.met_p99,
            "met_failures": self.met_failures,
            "met": self.met,
        }


@dataclass
class SweepResult:
    p99_target_ms: float
    max_fail_ratio: float
    steps: list[SweepStep] = field(default_factory=list)
    stopped_because: str = ""
    plot: str | None = None

    @property
    def best(self) -> SweepStep | None:
        met = [s for s in self.steps if s.met]
        return max(met, key=lambda s: s.result.rollouts_per_s) if met else None

    @property
    def capacity_rollouts_per_s(self) -> float | None:
        best = self.best
        return best.result.rollouts_per_s if best else None

    @property
    def found_limit(self) -> bool:
        """Whether a step missed a limit. If none did, the capacity is only a lower bound."""
        return any(not s.met for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            "p99_target_ms": self.p99_target_ms,
            "max_fail_ratio": self.max_fail_ratio,
            "capacity_rollouts_per_s": round(best.result.rollouts_per_s, 3) if best else None,
            "capacity_users": best.users if best else None,
            "capacity_is_lower_bound": best is not None and not self.found_limit,
            "stopped_because": self.stopped_because,
            "steps": [s.to_dict() for s in self.steps],
            "plot": self.plot,
        }


def user_steps(max_users: int, start: int = 1) -> list[int]:
    """Doubling user counts from ``start`` up to ``max_users`` (which is always the last step)."""
    if max_users < 1 or start < 1:
        raise ConfigError("--users must be at least 1")
    steps: list[int] = []
    users = start
    while users < max_users:
        steps.append(users)
        users *= 2
    steps.append(max_users)
    return steps


def parse_user_steps(text: str) -> list[int]:
    """``"1,2,4,8"`` → [1, 2, 4, 8] (strictly increasing, each ≥ 1)."""
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--sweep-users {text!r}: give comma-separated user counts, e.g. 1,2,4,8") from None
    if not steps or any(s < 1 for s in steps) or steps != sorted(set(steps)):
        raise ConfigError(f"--sweep-users {text!r}: user counts must be ≥ 1 and increasing")
    return steps


def run_sweep(
    run_step: Callable[[int], ProfileResult],
    steps: list[int],
    p99_ms: float,
    max_fail_ratio: float,
    on_step: Callable[[SweepStep], None] | None = None,
) -> SweepResult:
    """Run ``run_step(users)`` for each user count until a step misses the p99 target or the failure ratio."""
    sweep = SweepResult(p99_target_ms=p99_ms, max_fail_ratio=max_fail_ratio)
    for users in steps:
        result = run_step(users)
        p99 = result.total.p99_ms
        step = SweepStep(
            users=users,
            result=result,
            p99_ms=p99,
            met_p99=p99 <= p99_ms,
            met_failures=result.rollouts_attempted > 0 and result.failure_ratio <= max_fail_ratio,
        )
        sweep.steps.append(step)
        if on_step is not None:
            on_step(step)
        if not step.met:
            reasons = []
            if not step.met_p99:
                reasons.append(f"p99 {p99:.0f} ms > {p99_ms:.0f} ms")
            if not step.met_failures:
                reasons.append(f"failure ratio {result.failure_ratio:.1%} > {max_fail_ratio:.1%}")
            if result.rollouts_finished == 0:
                reasons.append("no rollout finished")
            sweep.stopped_because = f"at {users} users: " + ", ".join(reasons)
            break
    else:
        sweep.stopped_because = f"reached the last step ({steps[-1]} users) within both limits"
    return sweep


def write_plot(sweep: SweepResult, path: Path, title: str) -> Path:
    """A PNG of rollouts/s (left axis) and p99 latency (right axis) against users."""
    fig, _label, _target = sweep_figure(sweep, title)
    import matplotlib.pyplot as plt  # optional (see sweep_figure), and sweep_figure has just imported it

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def sweep_figure(sweep: SweepResult, title: str) -> tuple[Any, Any, Any]:
    """The sweep's figure, its capacity label (or None) and the p99 target line (tests check they do not meet)."""
    try:  # here, not at the top: matplotlib is optional (ngym[profile]) and only --sweep plots (~0.5 s to import)
        import matplotlib
    except ImportError:
        raise ConfigError("the sweep's plot needs matplotlib: pip install 'ngym[profile]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = [s.users for s in sweep.steps]
    throughput = [s.result.rollouts_per_s for s in sweep.steps]
    p99 = [s.p99_ms for s in sweep.steps]
    fig, left = plt.subplots(figsize=(8, 4.5), dpi=110)
    left.plot(users, throughput, "o-", color="tab:blue", label="rollouts/s")
    left.set_xlabel("concurrent users (rollouts in flight)")
    left.set_ylabel("rollouts/s", color="tab:blue")
    left.tick_params(axis="y", labelcolor="tab:blue")
    # Both curves stay in the lower ~80% of the plot: the top band is kept for the capacity label.
    left.set_ylim(0, max(throughput + [1.0]) * 1.3)
    if len(users) > 1 and users[-1] / users[0] >= 8:
        left.set_xscale("log", base=2)
    left.set_xticks(users, [str(u) for u in users])
    left.minorticks_off()
    right = left.twinx()
    right.plot(users, p99, "s--", color="tab:red", label="p99 request latency (ms)")
    target = right.axhline(sweep.p99_target_ms, color="tab:red", alpha=0.5, linestyle=":", label="p99 target")
    right.set_ylabel("p99 latency (ms)", color="tab:red")
    right.tick_params(axis="y", labelcolor="tab:red")
    right.set_ylim(0, max(p99 + [sweep.p99_target_ms]) * 1.3)
    best = sweep.best
    label = None
    if best is not None:
        left.plot([best.users], [best.result.rollouts_per_s], "*", color="gold", markersize=16, markeredgecolor="k")
        # In the top band (axes coordinates), boxed: never on the target line or a curve, whatever the data.
        label = left.text(
            0.02,
            0.97,
            f"★ capacity {best.result.rollouts_per_s:.0f} rollouts/s @ {best.users} users",
            transform=left.transAxes,
            ha="left",
            va="top",
            fontsize=9,
            bbox={"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": "0.7"},
        )
    for step in sweep.steps:
        if not step.met:
            left.axvline(step.users, color="grey", alpha=0.4, linewidth=6)
    lines = [line for line in left.get_lines() + right.get_lines() if not str(line.get_label()).startswith("_")]
    left.legend(lines, [str(line.get_label()) for line in lines], loc="lower right", fontsize=8)
    left.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig, label, target


def render_sweep(sweep: SweepResult) -> str:
    lines = [
        f"ngym profile --sweep: p99 target {sweep.p99_target_ms:.0f} ms, max failure ratio {sweep.max_fail_ratio:.1%}",
        f"  {'users':>5}  {'rollouts/s':>10}  {'req/s':>8}  {'p50':>6}  {'p99':>6}  {'fail':>6}  {'gen CPU':>7}  met",
    ]
    for s in sweep.steps:
        r = s.result
        lines.append(
            f"  {s.users:>5}  {r.rollouts_per_s:>10.1f}  {r.total.requests_per_s:>8.1f}  {r.total.p50_ms:>6.0f}  "
            f"{s.p99_ms:>6.0f}  {r.failure_ratio:>6.1%}  {r.load_generator_cpu_percent:>6.0f}%  "
            f"{'yes' if s.met else 'no'}"
        )
    lines.append(f"  stopped: {sweep.stopped_because}")
    best = sweep.best
    if best is not None:
        lines.append(
            f"  capacity: {best.result.rollouts_per_s:.1f} rollouts/s at {best.users} users "
            f"(p99 {best.p99_ms:.0f} ms, failures {best.result.failure_ratio:.1%})"
        )
        if not sweep.found_limit:
            lines.append(
                f"  (a lower bound: no step reached a limit; raise --users above {sweep.steps[-1].users} "
                "to find where it breaks)"
            )
    else:
        lines.append("  capacity: none: no step met both limits")
    if sweep.plot:
        lines.append(f"  plot  {sweep.plot}")
    return "\n".join(lines)


def check_sweep(sweep: SweepResult) -> None:
    if sweep.best is None:
        raise ProfileFailed(
            f"no step met p99 ≤ {sweep.p99_target_ms:.0f} ms and failures ≤ "
            f"{sweep.max_fail_ratio:.1%}: {sweep.stopped_because}"
        )


def write_json(sweep: SweepResult, path: Path) -> None:
    path.write_text(json.dumps(sweep.to_dict(), indent=2))
