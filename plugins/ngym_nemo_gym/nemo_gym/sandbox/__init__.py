"""NeMo Gym's sandbox API on ngym: ``AsyncSandbox`` over a provider (``local``, ``docker``, or one registered or
published under the ``nemo_gym.sandbox_providers`` entry points), ``AsyncSandboxCompose`` (a Compose file's
services as sandboxes, on Docker Compose), its spec and result types, provider config resolution and CPU-cap
helpers."""

from nemo_gym.sandbox.adapters.docker_compose import AsyncSandboxCompose
from nemo_gym.sandbox.api import AsyncSandbox
from nemo_gym.sandbox.config import resolve_provider_config, resolve_provider_metadata
from nemo_gym.sandbox.providers import (
    ConnectableProvider,
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxPtyError,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPauseResume,
    create_provider,
    get_provider_class,
    list_providers,
    register_provider,
)
from nemo_gym.sandbox.utils import CPU_CAP_ENV_VARS, cpu_cap_env, rewrite_image

__all__ = [
    "CPU_CAP_ENV_VARS",
    "AsyncSandbox",
    "AsyncSandboxCompose",
    "ConnectableProvider",
    "ExecResult",
    "SandboxCreateError",
    "SandboxCreateVerificationError",
    "SandboxEndpoint",
    "SandboxExecResult",
    "SandboxHandle",
    "SandboxProvider",
    "SandboxPtyError",
    "SandboxResources",
    "SandboxSpec",
    "SandboxStatus",
    "SupportsSandboxEndpoint",
    "SupportsSandboxPauseResume",
    "cpu_cap_env",
    "create_provider",
    "get_provider_class",
    "list_providers",
    "register_provider",
    "resolve_provider_config",
    "resolve_provider_metadata",
    "rewrite_image",
]
