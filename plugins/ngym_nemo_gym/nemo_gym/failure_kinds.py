"""NeMo Gym's shared vocabulary of failure kinds: ngym's own (``ngym.protocol.failure_kinds``)."""

from ngym.server.protocol.failure_kinds import *  # noqa: F403 - the whole vocabulary, under NeMo Gym's module name
from ngym.server.protocol.failure_kinds import FAILURE_KINDS, check_failure_kind, is_namespaced, is_registered

#: NeMo Gym's name for ``check_failure_kind``: the kind unchanged, an unknown one logged once.
validate_failure_kind = check_failure_kind

__all__ = ["FAILURE_KINDS", "is_namespaced", "is_registered", "validate_failure_kind"]
