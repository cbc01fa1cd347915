"""Signed session cookies: ``<session id>.<signature>``, so a tampered or foreign cookie is no session at all."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from ngym.errors import ConfigError

SESSION_SECRET_ENV = "NGYM_SESSION_SECRET"
#: A file holding the signing secret (a Docker or Kubernetes secret mounted read-only), read when
#: ``NGYM_SESSION_SECRET`` is not set: the secret is then in no process environment (``docker inspect`` shows a
#: container's environment to anyone who may use the Docker daemon).
SESSION_SECRET_FILE_ENV = "NGYM_SESSION_SECRET_FILE"
# RFC 6265 cookie-octets (no control characters, space, '"', ',', ';' or '\\'), less '%', the escape itself:
# these stay as they are in a cookie value, anything else is percent-encoded.
_COOKIE_SAFE = "!#$&'()*+-./:<=>?@[]^_`{|}~"
log = logging.getLogger("ngym.sessions")


def resolve_secret(configured: str | None) -> tuple[str, bool]:
    """The signing secret and whether it was given (config, then ``NGYM_SESSION_SECRET``) or made up.

    A made-up secret is random per process: fine for one worker, wrong for replicas or several workers,
    which must share one secret to accept each other's cookies.
    """
    secret = configured or os.environ.get(SESSION_SECRET_ENV) or _secret_from_file()
    if secret:
        return secret, True
    return secrets.token_urlsafe(32), False


def secret_configured() -> bool:
    """Whether this process's environment gives a signing secret (``NGYM_SESSION_SECRET`` or its file), or gave
    one before ``withhold_secret_from_children`` took it out."""
    return bool(os.environ.get(SESSION_SECRET_ENV) or os.environ.get(SESSION_SECRET_FILE_ENV) or _withheld)


#: the variables ``withhold_secret_from_children`` took out of this process's environment
_withheld: list[str] = []


def withhold_secret_from_children() -> None:
    """Take ``NGYM_SESSION_SECRET`` and ``NGYM_SESSION_SECRET_FILE`` out of this process's environment, once its
    app has read the secret: nothing this process starts from then on (an environment's subprocess running model
    code, a Ray instance it starts, a helper of its ``on_startup``) inherits the key that signs every session's
    cookie, nor the path of its file. Called by a serving process just before it serves; a supervisor keeps them
    for the workers it starts."""
    for name in (SESSION_SECRET_ENV, SESSION_SECRET_FILE_ENV):
        if os.environ.pop(name, None) is not None:
            _withheld.append(name)


def _secret_from_file() -> str | None:
    """The secret in ``NGYM_SESSION_SECRET_FILE`` (surrounding whitespace dropped), None when it is not set;
    ``ConfigError`` naming the variable when the file cannot be read or is empty."""
    path = os.environ.get(SESSION_SECRET_FILE_ENV)
    if not path:
        return None
    try:
        secret = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{SESSION_SECRET_FILE_ENV}={path}: cannot read it ({exc.strerror})") from None
    if not secret:
        raise ConfigError(f"{SESSION_SECRET_FILE_ENV}={path}: the file is empty")
    return secret


class CookieSigner:
    """Signs session ids into cookie values (``<id>.<tag>``) and verifies them.

    The id part is percent-encoded where a cookie value could not carry it as is (``;``, ``,``, ``"``,
    whitespace, control or non-ASCII characters), so even a caller-chosen id never breaks the header; ids
    of letters, digits, ``-`` and ``_`` (every id ngym or NeMo Gym makes) are unchanged.

    The tag is keyed BLAKE2b over the id (a MAC by design, no HMAC construction needed), 128 bits,
    base64url-encoded, with a key derived once from the secret. BLAKE2b rather than HMAC-SHA256: this runs on
    every rollout, and OpenSSL 3's per-call digest lookup made HMAC about 3x slower.

    Verified cookie values are remembered (bounded), and a value this signer just issued counts as verified,
    so a rollout's requests normally compute one tag in all: when its session is created.
    """

    #: How many verified cookie values (and issued ``Set-Cookie`` headers) are remembered.
    CACHE_SIZE = 8192

    def __init__(self, secret: str, cookie_name: str) -> None:
        self._key = hashlib.sha256(b"ngym.session\x00" + secret.encode()).digest()
        self.cookie_name = cookie_name
        self._cookie_prefix = f"{cookie_name}=".encode()
        # OrderedDict for its O(1) popitem(last=False): evicting the oldest entry of a plain dict with
        # next(iter(d)) walks over every slot already deleted at its front (thousands, with one new session each
        # seed once the cache is full: a few microseconds per rollout).
        self._verified: OrderedDict[bytes, str] = OrderedDict()  # cookie value -> session id
        self._headers: OrderedDict[str, bytes] = OrderedDict()  # session id -> Set-Cookie header value

    def _tag(self, session_id: bytes) -> bytes:
        return self.tag(session_id, purpose=b"ngym.session")

    def tag(self, data: bytes, purpose: bytes) -> bytes:
        """A MAC of ``data`` under this server's secret, base64url. ``purpose`` (at most 16 bytes) separates
        uses: a tag made for one purpose (an MCP token, ...) never verifies as another's (a session cookie)."""
        mac = hashlib.blake2b(data, key=self._key, digest_size=16, person=purpose)
        return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=")

    def _remember(self, cache: OrderedDict[Any, Any], key: object, value: object) -> None:
        """Insert into a bounded cache, first evicting its oldest entry."""
        if len(cache) >= self.CACHE_SIZE:
            cache.popitem(last=False)
        cache[key] = value

    def sign(self, session_id: str) -> str:
        raw = session_id.encode()
        # ngym's own ids are hex: nothing to escape (quote() costs about a microsecond per new session)
        encoded = raw if raw.isalnum() else quote(raw, safe=_COOKIE_SAFE).encode()
        value = encoded + b"." + self._tag(raw)
        self._remember(self._verified, value, session_id)
        return value.decode()

    def unsign(self, value: str | bytes) -> str | None:
        """The session id inside a cookie value, or None when the signature does not match."""
        raw = value.encode("latin-1") if isinstance(value, str) else value
        known = self._verified.get(raw)
        if known is not None:
            return known
        encoded, dot, tag = raw.rpartition(b".")
        session_id = unquote_to_bytes(encoded) if b"%" in encoded else encoded
        if not dot or not session_id or not hmac.compare_digest(tag, self._tag(session_id)):
            return None
        try:
            decoded = session_id.decode()
        except UnicodeDecodeError:
            return None
        self._remember(self._verified, raw, decoded)
        return decoded

    def set_cookie_header(self, session_id: str) -> bytes:
        """The ``Set-Cookie`` value for ``session_id`` (sent on every response of its rollout, so remembered)."""
        header = self._headers.get(session_id)
        if header is None:
            # HttpOnly and SameSite keep browsers (the /docs page) sane; agents copy the cookie by hand anyway.
            header = b"%s%s; Path=/; HttpOnly; SameSite=lax" % (self._cookie_prefix, self.sign(session_id).encode())
            self._remember(self._headers, session_id, header)
        return header

    def session_id_from_header(self, cookie_header: bytes) -> str | None:
        """Find our cookie in a raw ``Cookie:`` header and return its verified session id."""
        if b";" not in cookie_header:  # one cookie (what an agent sends back): no list to make
            part = cookie_header.strip()
            return (
                self.unsign(part[len(self._cookie_prefix) :].strip(b'"'))
                if part.startswith(self._cookie_prefix)
                else None
            )
        found = [part.strip() for part in cookie_header.split(b";") if part.strip().startswith(self._cookie_prefix)]
        if len(found) > 1:
            raise DuplicateSessionCookie(
                f"this request carries more than one {self.cookie_name} cookie ({len(found)}); send exactly one (the "
                "one its seed set)"
            )
        return self.unsign(found[0][len(self._cookie_prefix) :].strip(b'"')) if found else None


class DuplicateSessionCookie(ValueError):
    """A request carries the session cookie more than once (HTTP 400): a proxy and a server could otherwise read
    different sessions from it."""
