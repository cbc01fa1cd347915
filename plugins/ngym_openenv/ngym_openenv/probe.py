"""Run by the environment's own interpreter at install (``python probe.py JSON``): what ngym needs to know.

Imports nothing of ngym (it runs in the environment's virtualenv). Given ``{"distribution": ..., "app": ...,
"app_dir": ...}`` it prints one JSON object: the distribution's summary and keywords, the app (found among the
distribution's modules when not given: the module-level object OpenEnv's ``create_app`` built), and what the
app's ``HTTPEnvServer`` says of the environment (``SUPPORTS_CONCURRENT_SESSIONS``,
``REQUIRES_SINGLE_THREAD_EXECUTOR``, ``max_concurrent_envs``).
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import json
import sys
import traceback
from typing import Any


def _distribution_facts(name: str) -> dict[str, Any]:
    meta = importlib.metadata.distribution(name).metadata
    keywords = ",".join(meta.get_all("Keywords") or [])
    return {
        "summary": meta["Summary"] or "",
        "keywords": [k.strip() for k in keywords.replace(";", ",").split(",") if k.strip()],
        "version": meta["Version"],
    }


def _candidate_modules(name: str) -> list[str]:
    """The distribution's modules that call ``create_app``, those named ``app`` first."""
    found = []
    for file in importlib.metadata.distribution(name).files or []:
        path = str(file)
        if not path.endswith(".py") or "/tests/" in f"/{path}" or path.startswith("tests/"):
            continue
        try:
            text = file.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if "create_app(" in text or "create_fastapi_app(" in text:
            found.append(path[:-3].replace("/", ".").removesuffix(".__init__"))
    return sorted(found, key=lambda m: (not m.endswith((".app", "server.app")), m))


def _env_server_of(module_name: str) -> tuple[str, Any] | None:
    """``(attribute, HTTPEnvServer)`` when importing the module builds an OpenEnv app at module level."""
    from openenv.core.env_server.http_server import HTTPEnvServer

    before = {id(o) for o in gc.get_objects() if isinstance(o, HTTPEnvServer)}
    module = importlib.import_module(module_name)
    servers = [o for o in gc.get_objects() if isinstance(o, HTTPEnvServer) and id(o) not in before]
    for attribute in ("app", *sorted(vars(module))):
        value = getattr(module, attribute, None)
        if value is not None and type(value).__name__ == "FastAPI" and servers:
            return attribute, servers[-1]
    return None


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line: the message's lines joined, banner lines (``*****``) dropped, cut."""
    lines = [line.strip() for line in str(exc).splitlines()]
    text = " ".join(line for line in lines if line and line.strip("*=-") != "")
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("app_dir"):
        sys.path.insert(0, request["app_dir"])
    out: dict[str, Any] = {}
    if request.get("distribution"):
        out.update(_distribution_facts(request["distribution"]))
    server = None
    app = request.get("app")
    if app:
        module_name, _, attribute = app.partition(":")
        try:
            found = _env_server_of(module_name)
        except Exception as exc:  # said in one line by the install; the whole traceback kept beside it
            out["import_error"] = one_line(exc)
            out["traceback"] = traceback.format_exc()
            return out
        server = found[1] if found else None
    else:
        errors = []
        for module_name in _candidate_modules(request["distribution"]):
            try:
                found = _env_server_of(module_name)
            except Exception as exc:  # a module that fails to import is not the app; say why at the end
                errors.append(f"{module_name}: {type(exc).__name__}: {exc}")
                continue
            if found:
                app, server = f"{module_name}:{found[0]}", found[1]
                break
        if not app:
            out["error"] = "no module of the distribution builds an OpenEnv app with create_app" + (
                f" ({'; '.join(errors)})" if errors else ""
            )
            return out
    out["app"] = app
    if server is not None:
        factory = getattr(server, "_env_factory", None)
        out["max_concurrent_envs"] = getattr(server, "max_concurrent_envs", None)
        try:
            out["supports_concurrent_sessions"] = bool(server.is_concurrency_safe)
        except Exception:
            out["supports_concurrent_sessions"] = None
        out["requires_single_thread_executor"] = bool(getattr(factory, "REQUIRES_SINGLE_THREAD_EXECUTOR", False))
        out["env_class"] = getattr(factory, "__qualname__", None)
    try:
        out["openenv_version"] = importlib.metadata.version("openenv")
    except importlib.metadata.PackageNotFoundError:
        out["openenv_version"] = importlib.metadata.version("openenv-core")
    return out


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\nNGYM-PROBE " + json.dumps(result, default=str) + "\n")
