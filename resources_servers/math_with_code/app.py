"""math_with_code: math problems solved with a persistent, sandboxed Python tool; reward by boxed-answer match.

`POST /execute_python {code}` runs code in this session's own worker process (forked from a forkserver that has
numpy, scipy, pandas and sympy imported); variables, imports and functions persist across the session's calls.
`POST /verify` grades the last `\\boxed{...}` of the final assistant message (falling back to tool outputs) against
the row's `expected_result` with math-verify. Limits and isolation: docs/math_with_code.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, PrivateAttr, field_validator

from ngym import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    SimpleResourcesServer,
)

from .answer import find_answer
from .checker import AnswerChecker
from .sandbox import PoolExhausted, SandboxError, SandboxLimits, SandboxSession, WeakSandboxError, WorkerPool
from .sandbox.pool import DEFAULT_PRELOAD, DEFAULT_UID_BASE


class MathWithCodeConfig(BaseResourcesServerConfig):
    """Settings (YAML fields or key=value overrides). Every limit is per session's worker; see the docs."""

    max_execution_time: float = Field(
        10.0,
        gt=0,
        description="Wall-clock seconds per execute_python call (NeMo "
        "Gym's name); past it the worker is killed and replaced, state lost.",
    )
    cpu_time_s: int = Field(120, ge=1, description="CPU seconds per worker process (RLIMIT_CPU).")
    memory_mb: int = Field(2048, ge=256, description="Address space per process (RLIMIT_AS), and memory cgroup.")
    max_processes: int = Field(
        16, ge=1, description="Processes+threads per worker (per-slot uid RLIMIT_NPROC, cgroup pids.max)."
    )
    max_output_chars: int = Field(
        16_384, ge=256, le=1_000_000, description="Kept characters of stdout, stderr and result."
    )
    max_code_chars: int = Field(
        1_000_000, ge=1, le=8_000_000, description="Longest code one execute_python call may send."
    )
    disk_mb: int = Field(64, ge=1, description="Size of the private tmpfs working directory.")
    max_open_files: int = Field(256, ge=16, description="RLIMIT_NOFILE.")
    allow_network: bool = Field(False, description="False: an empty network namespace and sockets refused.")
    kill_background_processes: bool = Field(True, description="Kill processes a call leaves running.")
    max_workers: int = Field(256, ge=1, description="Concurrent workers at most; a seed beyond gets 503.")
    worker_uid_base: int = Field(DEFAULT_UID_BASE, ge=1000, description="Worker slot i runs as uid base+i.")
    work_root: str | None = Field(None, description="Where working directories are made (default: system temp).")
    preload_modules: list[str] = Field(default_factory=lambda: list(DEFAULT_PRELOAD))
    start_worker_at_seed: bool = Field(True, description="Fork the worker at /seed_session (else at first call).")
    verify_timeout_s: float = Field(5.0, gt=0, description="Time limit of one answer comparison.")
    verify_processes: int = Field(2, ge=1, description="Answer checker processes.")
    allow_weak_sandbox: bool = Field(
        False,
        description="Serve even when the machine does not allow the sandbox's uid, namespaces and private /proc "
        "(not root, a container without the documented capabilities): for trusted code only.",
    )

    def sandbox_limits(self) -> SandboxLimits:
        return SandboxLimits(
            wall_time_s=self.max_execution_time,
            cpu_time_s=self.cpu_time_s,
            memory_mb=self.memory_mb,
            max_processes=self.max_processes,
            max_output_chars=self.max_output_chars,
            max_code_chars=self.max_code_chars,
            disk_mb=self.disk_mb,
            max_open_files=self.max_open_files,
            allow_network=self.allow_network,
            kill_background_processes=self.kill_background_processes,
        )


#: What the sandbox needs in a container: uid switching (SETUID, SETGID), namespaces and mounts (SYS_ADMIN),
#: signalling and cleaning up other uids' processes and directories (KILL, DAC_OVERRIDE, FOWNER, CHOWN).
CONTAINER_CAPABILITIES = ["SETUID", "SETGID", "SYS_ADMIN", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER"]


def weak_sandbox_message(missing: list[str]) -> str:
    """Why the server refuses to run untrusted code here, what to change, and the explicit opt-out."""
    caps = " ".join(f"--cap-add {cap}" for cap in CONTAINER_CAPABILITIES)
    return (
        "math_with_code refuses to run untrusted code: this machine does not give its Python workers "
        + "; ".join(missing)
        + f". Run the server as root; in a container: docker run --user root --cap-drop ALL {caps} --security-opt "
        "no-new-privileges ... (ngym containerize math_with_code --run does it; docs/math_with_code.md). To run "
        "trusted code with rlimits and time limits only, set allow_weak_sandbox: true (override "
        "allow_weak_sandbox=true)."
    )


class ExecutePythonRequest(BaseModel):
    code: str = Field(description="Python source. The value of a trailing expression is returned as `result`.")


class ExecutePythonResponse(BaseModel):
    success: bool
    stdout: str
    stderr: str
    error_message: str | None = None
    result: str | None = None


def _as_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class MathWithCodeSeedSessionRequest(BaseSeedSessionRequest):
    pass


class MathWithCodeVerifyRequest(BaseVerifyRequest):
    expected_result: str
    expected_code_contains: str = ""

    _coerce = field_validator("expected_result", mode="before")(_as_str)


class MathWithCodeVerifyResponse(BaseVerifyResponse):
    expected_result: str
    expected_code_contains: str = ""
    extracted_answer: str | None = None
    accuracy: bool = False
    answer_source: str | None = None
    verify_error: str | None = None


class MathWithCodeResourcesServer(SimpleResourcesServer):
    """Math with a Python tool: execute_python in a sandboxed per-session process; boxed answer vs expected."""

    config: MathWithCodeConfig
    domain = Domain.MATH
    session_affinity_required = True  # the state is a live process
    # Inside its container the sandbox needs what it has as root on a host: uid switching for a uid per slot,
    # and CAP_SYS_ADMIN for the mount, PID and network namespaces (Docker's default seccomp profile allows
    # unshare/mount/setns once SYS_ADMIN is granted); nothing else. `ngym containerize` carries this into the
    # image's USER, `--run`, the printed `docker run` line and the Compose/Kubernetes manifests.
    container_run_options: ClassVar[dict[str, Any]] = {
        "user": "root",
        "cap_drop": ["ALL"],
        "cap_add": CONTAINER_CAPABILITIES,
        "security_opt": ["no-new-privileges"],
    }

    _pool: WorkerPool | None = PrivateAttr(default=None)
    _checker: AnswerChecker | None = PrivateAttr(default=None)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/execute_python")(self.execute_python)
        app.get("/sandbox")(self.sandbox_info)
        app.state.math_with_code = self  # lets tests and benchmarks reach the pool
        return app

    async def on_startup(self) -> None:
        c = self.config
        self._pool = WorkerPool(
            c.sandbox_limits(),
            max_workers=c.max_workers,
            uid_base=c.worker_uid_base,
            work_root=c.work_root,
            preload=c.preload_modules,
        )
        await self._pool.start()
        missing = self._pool.missing_isolation()
        if missing and not c.allow_weak_sandbox:
            await self._pool.shutdown()
            self._pool = None
            raise WeakSandboxError(weak_sandbox_message(missing))
        self._checker = AnswerChecker(processes=c.verify_processes, timeout_s=c.verify_timeout_s)
        await self._checker.start()

    async def on_shutdown(self) -> None:
        if self._pool is not None:
            await self._pool.shutdown()
        if self._checker is not None:
            await self._checker.close()

    @property
    def pool(self) -> WorkerPool:
        if self._pool is None:
            raise HTTPException(503, "the Python worker pool is not running", headers={"Retry-After": "5"})
        return self._pool

    async def seed_session(self, request: Request, body: MathWithCodeSeedSessionRequest) -> BaseSeedSessionResponse:
        try:
            sandbox = await self.pool.open_session(start=self.config.start_worker_at_seed)
        except PoolExhausted as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
        except (SandboxError, OSError) as exc:
            raise HTTPException(503, f"could not start a Python worker: {exc}", headers={"Retry-After": "5"}) from None
        self.set_session_state(request, sandbox)
        return BaseSeedSessionResponse()

    async def execute_python(self, request: Request, body: ExecutePythonRequest) -> ExecutePythonResponse:
        """Execute Python code in this session's persistent Python process (numpy, scipy, pandas, sympy available;
        variables persist across calls). Returns stdout, stderr, and the value of a trailing expression."""
        sandbox: SandboxSession = self.session_state(request)
        outcome = await sandbox.execute(body.code)
        return ExecutePythonResponse(
            success=outcome.success,
            stdout=outcome.stdout,
            stderr=outcome.stderr,
            error_message=outcome.error_message,
            result=outcome.result,
        )

    async def sandbox_info(self) -> dict[str, Any]:
        """What isolation this machine enforces (probed at start-up), the limits, and the pool's occupancy."""
        pool = self.pool
        return {"enforcement": pool.enforcement, "limits": self.config.sandbox_limits().__dict__, **pool.stats()}

    async def verify(self, request: Request, body: MathWithCodeVerifyRequest) -> MathWithCodeVerifyResponse:
        extracted, source = find_answer(body.response.output)
        if self._checker is None:
            raise HTTPException(503, "the answer checker is not running", headers={"Retry-After": "5"})
        accuracy, error = await self._checker.check(extracted, body.expected_result)
        return MathWithCodeVerifyResponse(
            **body.model_dump(),
            reward=1.0 if accuracy else 0.0,
            extracted_answer=extracted,
            accuracy=accuracy,
            answer_source=source,
            verify_error=error,
        )

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        if isinstance(state, SandboxSession):
            await state.close()


if __name__ == "__main__":
    MathWithCodeResourcesServer.run_webserver()
