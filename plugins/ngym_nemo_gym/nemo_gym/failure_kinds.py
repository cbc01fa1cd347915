"""NeMo Gym's shared vocabulary of failure kinds: ngym's own (``ngym.plugin_api.failure_kinds``)."""

from ngym.plugin_api import failure_kinds as _kinds

FAILURE_KINDS = _kinds.FAILURE_KINDS
is_namespaced = _kinds.is_namespaced
is_registered = _kinds.is_registered
check_failure_kind = _kinds.check_failure_kind
#: NeMo Gym's name for ``check_failure_kind``: the kind unchanged, an unknown one logged once.
validate_failure_kind = check_failure_kind


def __getattr__(name: str) -> str:
    """The whole vocabulary under NeMo Gym's module name: every kind constant ngym defines, now and later
    (``from nemo_gym.failure_kinds import JUDGE_FAILED``)."""
    value = getattr(_kinds, name, None) if name.isupper() else None
    if not isinstance(value, str):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return value


__all__ = ["FAILURE_KINDS", "is_namespaced", "is_registered", "validate_failure_kind"]
