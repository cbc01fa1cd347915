"""``ngym scripted-judge``: serve a judge model that answers every request with one fixed text."""

from __future__ import annotations

import socket

import click
import uvicorn

from ngym.rollout.fixed_judge import create_judge_app


@click.command("scripted-judge", short_help="Serve a judge model that always answers TEXT.")
@click.argument("text")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8011, show_default=True, help="0 picks a free port.")
def scripted_judge(text: str, host: str, port: int) -> None:
    """An OpenAI-compatible judge (POST /v1/responses, /v1/chat/completions) answering every request with TEXT.

    Stands in for a judge model offline: the environment runs its whole verify path against it. TEXT is the
    verdict the environment parses (NeMo Gym's equivalence judges: "[[A=B]]" equal, "[[A!=B]]" not equal).

    \b
    Example:
      ngym scripted-judge "[[A=B]]" --port 8011
      ngym run math_with_judge should_use_judge=true --model-url policy_model=http://127.0.0.1:8011/v1
    """
    with socket.socket() as sock:  # bound here so the printed URL is the real one, also for --port 0
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        port = sock.getsockname()[1]
        click.echo(f"ngym scripted-judge: answering {text!r}; base URL http://{host}:{port}/v1", err=True)
        config = uvicorn.Config(create_judge_app(text), log_level="warning")
        uvicorn.Server(config).run(sockets=[sock])
