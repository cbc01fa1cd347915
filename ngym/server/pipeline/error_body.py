"""The body of the 500 a request's exception is answered with, on every path that answers one (ngym's middleware,
the requests run from the HTTP parser's callbacks)."""

from __future__ import annotations

import json
import re

_HEAP_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def error_json(exc: BaseException) -> bytes:
    """``repr(exc)`` as a JSON string, as the protocol says, less any heap address an object's repr put in it (it
    tells a client about the server's memory layout and nothing about the error)."""
    return json.dumps(_HEAP_ADDRESS.sub("", repr(exc))).encode()


__all__ = ["error_json"]
