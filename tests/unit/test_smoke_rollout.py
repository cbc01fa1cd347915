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


def test_the_smoke_container_gets_a_made_up_secret_only_when_none_is_given() -> None:
    """A secret file named with ``NGYM_SESSION_SECRET_FILE`` is the container's secret: a made-up
    ``NGYM_SESSION_SECRET`` beside it would win over it (and show in ``docker inspect``)."""
    from types import SimpleNamespace
    from typing import Any

    from ngym.containerize.smoke import start_container

    runs: list[dict[str, Any]] = []
    client: Any = SimpleNamespace(containers=SimpleNamespace(run=lambda *a, **kw: runs.append(kw["environment"])))
    start_container(client, "img")
    start_container(client, "img", environment={"NGYM_SESSION_SECRET_FILE": "/run/secrets/s"})
    start_container(client, "img", environment={"NGYM_SESSION_SECRET": "mine"})
    made, from_file, given = runs
    assert set(made) == {"NGYM_SESSION_SECRET"} and len(made["NGYM_SESSION_SECRET"]) >= 32
    assert from_file == {"NGYM_SESSION_SECRET_FILE": "/run/secrets/s"}
    assert given == {"NGYM_SESSION_SECRET": "mine"}
