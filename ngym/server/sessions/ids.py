"""What a caller-chosen session id (NeMo Gym 0.7's ``resources_session_id``) may look like.

The id becomes part of the session cookie, a store key and every log line about the session, so it is
checked before anything is created: at most ``max_length`` characters, all matching ``pattern``. The
defaults accept what NeMo Gym's callers send (``resources-session-<uuid hex>``, uuids, rollout ids such as
``12-3-a1``) and nothing that needs quoting in a header. Whatever the configured rule, the cookie encodes
the id safely (``CookieSigner``), and an id that is not valid Unicode text (a lone surrogate) never passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

#: Letters, digits and ``. _ ~ : @ + = / -``: URL-safe, cookie-safe, covers uuids and rollout ids.
DEFAULT_SESSION_ID_PATTERN = r"[A-Za-z0-9._~:@+=/-]+"
#: NeMo Gym's own ids are 49 characters; 256 leaves room for prefixes without letting an id bloat headers.
DEFAULT_SESSION_ID_MAX_LENGTH = 256


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return pattern


#: A config field holding a session id pattern: refused (422 / one config error) unless it compiles.
SessionIdPattern = Annotated[str, AfterValidator(_compiles)]


@dataclass(frozen=True)
class SessionIdRule:
    """A length limit and an alphabet (a regular expression the whole id must match)."""

    max_length: int = DEFAULT_SESSION_ID_MAX_LENGTH
    pattern: str = DEFAULT_SESSION_ID_PATTERN

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.pattern))

    def describe(self) -> str:
        return (
            f"1 to {self.max_length} characters matching {self.pattern} "
            "(server settings session_id_max_length and session_id_pattern)"
        )

    def problem(self, session_id: str) -> str | None:
        """Why ``session_id`` breaks the rule, or None when it is fine."""
        if not session_id or len(session_id) > self.max_length:
            return f"is {len(session_id)} characters long; it must be {self.describe()}"
        if self._compiled.fullmatch(session_id) is None:  # type: ignore[attr-defined]
            return f"has characters outside the allowed set; it must be {self.describe()}"
        try:
            session_id.encode()
        except UnicodeEncodeError:
            return "is not valid Unicode text (it holds a lone surrogate)"
        return None
