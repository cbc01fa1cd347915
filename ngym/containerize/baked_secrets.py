"""Secrets written into an environment's packaged config are refused before they are baked into an image.

What ``ngym containerize`` packages of the environment itself (its own distribution's code wheel, built here, also
from an environment venv; the payload files an installed environment adds) is read before the build context is
written: every YAML or ``.env`` file, and every JSON file named or placed as config (``configs/``, ``*config*``,
``*settings*``). A literal value under a key ``ngym.redact`` treats as a secret (``api_key``, ``openai_api_key``,
``session_secret``, ``hf_token``, ``password``...; same words, same rule: a non-empty text) stops the command
with one line naming the file and the key. Its dependencies' wheels (ngym's, NeMo Gym's) are not read: their
configs are not the environment's to fix. An image's layers and a wheel are readable by anyone who can pull
them; a secret belongs in the environment at run time (``docker run -e``, ``NGYM_SESSION_SECRET_FILE``) or in a
reference the config resolves when the server starts (``${oc.env:OPENAI_API_KEY}``, any ``${...}``).
``--allow-baked-secrets`` packages them anyway.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ngym.containerize.errors import ContainerizeError
from ngym.redact import is_secret_key

#: files read as config (larger ones are data, not config: a dataset's JSON is not scanned)
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_MAX_CONFIG_BYTES = 1 << 20
#: a secret-named key whose last word is one of these names where the secret is, not the secret
#: (``auth_token_env: OSWORLD_TOKEN``, ``api_key_file``, ``session_cookie_name``)
_POINTER_WORDS = frozenset({"env", "var", "variable", "file", "path", "name", "prefix"})
_LAST_WORD = re.compile(r"([A-Za-z][a-z0-9]*|[0-9]+)$")
#: text with ``${...}`` in it (``${oc.env:NAME}``, ``${oc.select:a,${oc.env:B,null}}``) or ``???`` (OmegaConf's
#: "must be given"): a reference, resolved when the server starts
_REFERENCE = re.compile(r"\$\{|^\s*\?\?\?\s*$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*?)\s*$")


class BakedSecret(ContainerizeError):
    """A packaged config holds a literal secret (exit 2: fix the config, or opt in)."""

    exit_code = 2


@dataclass(frozen=True)
class Finding:
    """One literal secret: where (``wheel!member`` or a path) and its key path (``a.b.api_key``)."""

    where: str
    key: str


def _names_where(key: object) -> bool:
    last = _LAST_WORD.search(str(key))
    return last is not None and last[1].lower() in _POINTER_WORDS


def secret_keys(config: Any) -> Iterator[str]:
    """The dotted key paths of ``config`` whose value is a literal secret (a reference is not)."""

    def walk(value: Any, path: str, hidden: bool) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                secret = is_secret_key(key) and not _names_where(key)
                yield from walk(item, f"{path}.{key}" if path else str(key), hidden or secret)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from walk(item, f"{path}[{index}]", hidden)
        elif hidden and isinstance(value, str) and value.strip() and not _REFERENCE.search(value):
            yield path

    yield from walk(config, "", False)


def _parse(name: str, data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace")
    if name.endswith(".env") or name.rsplit("/", 1)[-1] == ".env":
        pairs = (_ENV_LINE.match(line) for line in text.splitlines() if not line.lstrip().startswith("#"))
        return {m["key"]: m["value"].strip("'\"") for m in pairs if m is not None}
    try:
        return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None  # not config this check can read; the server reports it if it is its config


#: a JSON file is read as config only when its name or folder says so (else it is data: a dataset row's ``"key"``
#: field, a tool schema's ``"token"`` property, is no secret)
_CONFIG_JSON = re.compile(r"(^|/)configs?/|config|settings|secret|credential", re.IGNORECASE)


def _is_config(name: str, size: int) -> bool:
    base = name.rsplit("/", 1)[-1]
    if size > _MAX_CONFIG_BYTES:
        return False
    if base.endswith(".json"):
        return _CONFIG_JSON.search(name) is not None
    return base.endswith(CONFIG_SUFFIXES) or base == ".env" or base.endswith(".env")


def findings_in_wheel(wheel: Path) -> list[Finding]:
    """The literal secrets in a wheel's config files."""
    found = []
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if _is_config(info.filename, info.file_size) and ".dist-info/" not in info.filename:
                config = _parse(info.filename, archive.read(info))
                found += [Finding(f"{wheel.name}!{info.filename}", key) for key in secret_keys(config)]
    return found


def findings_in_files(root: Path) -> list[Finding]:
    """The literal secrets in the config files of ``root`` (a file, or a folder walked whole)."""
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    found = []
    for path in paths:
        if _is_config(path.name, path.stat().st_size):
            found += [Finding(str(path), key) for key in secret_keys(_parse(path.name, path.read_bytes()))]
    return found


def refuse_baked_secrets(wheels: list[Path], files: list[Path]) -> None:
    """Raise ``BakedSecret`` (one line: the file, the key, the fix) when anything packaged holds a literal secret."""
    found = [f for wheel in wheels for f in findings_in_wheel(wheel)]
    found += [f for root in files if root.exists() for f in findings_in_files(root)]
    if not found:
        return
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise BakedSecret(
        f"{first.where} holds a literal secret under `{first.key}`{more}: it would be baked into the image, "
        "readable by anyone who can pull it. Write it as a reference resolved at start-up "
        f"(`{first.key.rsplit('.', 1)[-1]}: ${{oc.env:YOUR_VARIABLE}}`) and pass the value at run time "
        "(docker run -e, or NGYM_SESSION_SECRET_FILE for the session secret), or pass --allow-baked-secrets"
    )


__all__ = ["BakedSecret", "Finding", "findings_in_files", "findings_in_wheel", "refuse_baked_secrets", "secret_keys"]
