"""Secrets kept out of what ngym prints, serves or puts on a command line.

A config value is a secret when its key names one (``api_key``, ``openai_api_key``, ``session_secret``,
``hf_token``, ``password``, ``Authorization``, ...: any key one of whose words is ``key``, ``token``, ``secret``,
``password``, ``passwd``, ``passphrase``, ``credential``, ``apikey``, ``auth``, ``authorization`` or ``cookie``, as
NeMo Gym's own ``recursively_hide_secrets`` hides keys holding ``key`` or ``token``; ``max_tokens`` or
``tokenizer`` are not secrets). Within any other text, :func:`redact` masks the value of a secret-looking
environment variable (``OPENAI_API_KEY``, ``HF_TOKEN``, ...: ``Bearer $MY_TOKEN`` becomes ``Bearer ****``), a
URL's password (``https://user:****@host``) and a URL query parameter named like a secret (``?api_key=****``).
The mask is ``****``, NeMo Gym's.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

MASK = "****"
#: a key (or an environment variable's name) one of whose words (split at ``_ - .`` and case changes) is one of
#: these names a secret
SECRET_WORDS = frozenset(
    {
        "key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd", "passphrase", "credential",
        "credentials", "auth", "authorization", "cookie", "cookies",
    }
)  # fmt: skip
#: ``scheme://user:PASSWORD@host``: the password of a URL
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<password>[^/\s@]+)@")
#: ``?name=value`` / ``&name=value``: a URL query parameter (masked when its name names a secret)
_QUERY_PARAMETER = re.compile(r"(?P<head>[?&](?P<name>[^=&#\s]+)=)(?P<value>[^&#\s]*)")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
#: environment values shorter than this are not treated as secrets (``KEY_COUNT=1`` would mask every 1)
_MIN_SECRET_LENGTH = 8


def is_secret_key(key: object) -> bool:
    """Whether a config key names a secret (``api_key``, ``session_secret``, ``hf_token``, ``password``...)."""
    return isinstance(key, str) and any(w.lower() in SECRET_WORDS for w in _WORD.findall(key))


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """The values of the environment variables whose names look secret (``OPENAI_API_KEY``...), 8+ characters."""
    environ = os.environ if environ is None else environ
    return {v for k, v in environ.items() if is_secret_key(k) and len(v) >= _MIN_SECRET_LENGTH}


def redact_text(text: str, secrets: set[str]) -> str:
    """``text`` with every occurrence of ``secrets`` (values of secret environment variables), a URL's password
    and a secret-named URL query parameter's value masked."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)
    if "=" in text:
        text = _QUERY_PARAMETER.sub(
            lambda m: f"{m['head']}{MASK}" if m["value"] and is_secret_key(m["name"]) else m[0], text
        )
    return text


def holds_secret(key: str, text: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a ``key=text`` setting holds a secret: its key names one, or its text has something
    :func:`redact_text` masks (e.g. a URL with a password): such a setting never goes on a command line."""
    return is_secret_key(key) or redact_text(text, environment_secrets(environ)) != text


def redact(config: Any, environ: Mapping[str, str] | None = None) -> Any:
    """A copy of ``config`` (dicts, lists, scalars) with every secret masked: values under secret-named keys
    (a list of them: each item), and within any other string a secret environment variable's value, a URL's
    password and a secret-named query parameter (:func:`redact_text`)."""
    secrets = environment_secrets(environ)

    def walk(value: Any, hidden: bool) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, hidden or is_secret_key(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, hidden) for v in value]
        if hidden and isinstance(value, str) and value != "":  # a secret is text (``max_tokens: 10`` is not)
            return MASK
        if isinstance(value, str):
            return redact_text(value, secrets)
        return value

    return walk(config, False)


def secret_values(config: Any) -> set[str]:
    """Every secret string of ``config`` (values under secret-named keys), e.g. to keep them out of a log."""
    found: set[str] = set()

    def walk(value: Any, hidden: bool) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, hidden or is_secret_key(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, hidden)
        elif hidden and isinstance(value, str) and value:
            found.add(value)

    walk(config, False)
    return found


#: ``ngym run``'s ``key=value`` overrides that hold secrets, as a JSON list, when a parent (``ngym up``) starts it:
#: a command line is readable by every local user (``ps``), a process's environment only by its owner
OVERRIDES_ENV = "NGYM_RUN_SECRET_OVERRIDES"


def secret_overrides_env(overrides: list[str]) -> dict[str, str]:
    """The environment that hands ``ngym run`` these ``key=value`` overrides (empty when there are none)."""
    return {OVERRIDES_ENV: json.dumps(overrides)} if overrides else {}


def take_secret_overrides(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """The overrides a parent handed over in :data:`OVERRIDES_ENV` (removed from the environment: the worker
    processes ``ngym run`` starts get their config another way)."""
    environ = os.environ if environ is None else environ
    text = environ.pop(OVERRIDES_ENV, "")
    try:
        items = json.loads(text) if text else []
    except ValueError:
        return []
    return [str(item) for item in items] if isinstance(items, list) else []
