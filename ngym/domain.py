"""The Domain enum: what kind of skill an environment trains (NeMo Gym's values)."""

from enum import Enum


class Domain(str, Enum):
    """The domain every resources server declares; values match NeMo Gym's config."""

    MATH = "math"
    CODING = "coding"
    AGENT = "agent"
    KNOWLEDGE = "knowledge"
    INSTRUCTION_FOLLOWING = "instruction_following"
    LONG_CONTEXT = "long_context"
    SAFETY = "safety"
    GAMES = "games"
    TRANSLATION = "translation"
    E2E = "e2e"
    RLHF = "rlhf"
    OTHER = "other"

    @classmethod
    def parse(cls, value: "str | Domain") -> "Domain":
        """Return the member for ``value``; raise ValueError naming every valid value otherwise."""
        if isinstance(value, Domain):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            valid = ", ".join(d.value for d in cls)
            raise ValueError(f"invalid domain {value!r}: must be one of {valid}") from None


def resolve_domain(*declared: "str | Domain | None") -> "Domain | None":
    """The one answer to "what is this environment's domain?", used by every command and the server.

    Every declaration that is given (the registration's, the class's ``domain``, the config's ``domain:``)
    is parsed and they must agree; None when none is given. ``ValueError`` says what is wrong.
    """
    parsed = {Domain.parse(value) for value in declared if value is not None}
    if len(parsed) > 1:
        raise ValueError(f"conflicting domains ({' vs '.join(sorted(d.value for d in parsed))})")
    return parsed.pop() if parsed else None
