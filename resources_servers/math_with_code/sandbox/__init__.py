"""Sandboxed, persistent, per-session Python workers forked from a preloaded forkserver."""

from .limits import Enforcement, SandboxLimits
from .pool import ExecutionResult, PoolExhausted, SandboxError, SandboxSession, WeakSandboxError, WorkerPool

__all__ = [
    "Enforcement",
    "ExecutionResult",
    "PoolExhausted",
    "SandboxError",
    "SandboxLimits",
    "SandboxSession",
    "WeakSandboxError",
    "WorkerPool",
]
