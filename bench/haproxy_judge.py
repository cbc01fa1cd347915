"""A scripted judge that is never the bottleneck: HAProxy answering every judge request with one fixed verdict.

The benchmarks of LLM-judge environments need a judge both servers call. ``ngym scripted-judge`` (one uvicorn
process, ``ngym.rollout.fixed_judge``) parses every request and builds every answer in Python: at ~120 judged
rollouts/s (two judge calls each) it saturated before either server did, so the bench measured the judge.
Here HAProxy (Debian's ``haproxy``, the engine ``ngym run --workers`` already uses) answers from memory with
``http-request return``: the same bodies as ``ngym.rollout.fixed_judge`` (built by its functions, frozen once:
fixed ids and timestamps, which no environment reads), at a small fraction of the CPU.

    with haproxy_judge("[[A=B]]", log_path) as (url, pid):  # url: http://127.0.0.1:PORT, pid: HAProxy's
        ...

    python bench/haproxy_judge.py "[[A=B]]"   # serve until Ctrl-C, printing the URL
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from ngym.child_server import free_port
from ngym.rollout.fixed_judge import MODELS_ANSWER, chat_answer, responses_answer

CONFIG = """\
global
    nbthread {threads}
    # a request is answered once its whole body is in one buffer (below): room for long judge prompts
    tune.bufsize 262144
defaults
    mode http
    timeout client 120s
    timeout connect 5s
    timeout server 120s
    timeout http-keep-alive 120s
    # read the whole request body before answering, so the connection stays reusable (keep-alive)
    option http-buffer-request
frontend judge
    bind 127.0.0.1:{port}
    acl responses path_end /v1/responses
    acl chat path_end /v1/chat/completions
    acl models path_end /v1/models
    http-request return status 200 content-type application/json file {folder}/responses.json if responses
    http-request return status 200 content-type application/json file {folder}/chat.json if chat
    http-request return status 200 content-type application/json file {folder}/models.json if models
    http-request return status 404 content-type application/json string '{{"detail":"Not Found"}}'
"""


def write_config(text: str, folder: Path, port: int, threads: int) -> Path:
    """The answer files and haproxy.cfg for a judge answering ``text`` on ``port``; the config's path."""
    (folder / "responses.json").write_text(json.dumps(responses_answer(text, 1)))
    (folder / "chat.json").write_text(json.dumps(chat_answer(text, 1)))
    (folder / "models.json").write_text(json.dumps(MODELS_ANSWER))
    config = folder / "haproxy.cfg"
    config.write_text(CONFIG.format(threads=threads, port=port, folder=folder))
    return config


@contextlib.contextmanager
def haproxy_judge(text: str, log: Path, threads: int = 1) -> Iterator[tuple[str, int]]:
    """HAProxy answering ``text`` on a free port: ``(base URL, HAProxy's pid)``; stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="ngym-haproxy-judge-") as scratch:
        port = free_port()
        config = write_config(text, Path(scratch), port, threads)
        with run_haproxy(config, f"http://127.0.0.1:{port}", "/v1/models", log) as pid:
            yield f"http://127.0.0.1:{port}", pid


@contextlib.contextmanager
def run_haproxy(config: Path, url: str, probe: str, log: Path) -> Iterator[int]:
    """HAProxy serving ``config`` until the block ends, once ``url + probe`` answers 200: its pid."""
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        raise SystemExit("this bench needs haproxy (Debian package 'haproxy'): apt-get install -y haproxy")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            [haproxy, "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise SystemExit(f"haproxy exited with {process.returncode}: see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + probe, timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"haproxy not up after 30 s: see {log}")
            time.sleep(0.1)
        yield process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    # SIGTERM (timeout, kill) exits through the context manager, so HAProxy (its own session) is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with haproxy_judge(sys.argv[1] if len(sys.argv) > 1 else "[[A=B]]", Path("/dev/stderr")) as (judge_url, _):
        print(judge_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
