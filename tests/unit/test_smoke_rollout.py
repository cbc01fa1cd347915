"""``ngym containerize --run``'s smoke rollout: which recorded row it replays and how it reports the result."""

from __future__ import annotations

from pathlib import Path


def test_the_smoke_rollout_prefers_a_row_recorded_at_one_and_says_what_it_checked(tmp_path: Path) -> None:
    """A first recorded rollout at 0.0 made the smoke test print "reward: 0.0 (expected 0.0)", read as a failure."""
    from ngym.cli.containerize import _smoke_summary
    from ngym.containerize.pipeline import resolve_plugin
    from ngym.containerize.smoke import load_example_rollout
    from ngym.scaffold import scaffold

    folder = scaffold("guess_number", "games", tmp_path)
    recorded = folder / "data" / "example_rollouts.jsonl"
    recorded.write_text("".join(reversed(recorded.read_text().splitlines(keepends=True))))  # the 0.0 row first
    plugin = resolve_plugin(str(folder))
    example = load_example_rollout(plugin)
    assert (example.line, example.expected_reward) == (2, 1.0)
    assert load_example_rollout(plugin, 0).expected_reward == 0.0  # an explicit row is still that row
    said = _smoke_summary({"reward": 1.0, "expected_reward": 1.0, "example_line": 2, "path": "seed → verify"})
    assert said.startswith("smoke rollout: example_rollouts.jsonl line 2 replayed in the container (seed → verify)")
    assert said.endswith(": reward 1.0, as recorded")
    assert "MISMATCH" in _smoke_summary({"reward": 0.0, "expected_reward": 1.0, "example_line": 2, "path": "p"})
