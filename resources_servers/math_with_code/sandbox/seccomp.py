"""A seccomp filter that refuses user namespaces to the sandboxed worker and everything it starts.

A user namespace would hand user code a full set of capabilities over new namespaces of its own (mount, network,
...): kernel attack surface it has no use for. The filter is installed in the worker after it dropped root and set
no_new_privs, so it holds whatever `/proc/sys/user/max_user_namespaces` says and is inherited by every process the
worker starts. It answers:
  unshare(flags) and clone(flags, ...) with CLONE_NEWUSER in flags  -> EPERM
  clone3(...)                                                        -> ENOSYS (its flags sit in memory a filter
                                                                        cannot read; glibc then falls back to clone)
  any syscall of another ABI (i386 `int 0x80`, x32 on x86_64)        -> EPERM (their numbers differ)
and allows everything else.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

from .limits import libc

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CLONE_NEWUSER = 0x10000000

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000

#: machine -> (AUDIT_ARCH value, unshare, clone, clone3, lowest number of a foreign ABI sharing this arch or None)
_ARCHES: dict[str, tuple[int, int, int, int, int | None]] = {
    "x86_64": (0xC000003E, 272, 56, 435, 0x40000000),
    "aarch64": (0xC00000B7, 97, 220, 435, None),
}


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The BPF program for `machine` (default: this one) as (code, jt, jf, k) instructions."""
    arch, unshare_nr, clone_nr, clone3_nr, foreign = _ARCHES[machine or platform.machine()]
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    arg0_low = 16 if struct.pack("=I", 1)[0] == 1 else 20  # seccomp_data.args[0], its low 32 bits
    prog: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, eperm),  # another ABI
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if foreign is not None:
        prog += [(_JGE, 0, 1, foreign), (_RET, 0, 0, eperm)]
    prog += [
        (_JEQ, 2, 0, unshare_nr),
        (_JEQ, 1, 0, clone_nr),
        (_JEQ, 4, 5, clone3_nr),
        (_LD_W_ABS, 0, 0, arg0_low),  # unshare / clone: the flags
        (_JSET, 0, 1, CLONE_NEWUSER),
        (_RET, 0, 0, eperm),
        (_RET, 0, 0, _ALLOW),
        (_RET, 0, 0, enosys),  # clone3
        (_RET, 0, 0, _ALLOW),
    ]
    return prog


def supported() -> bool:
    return platform.machine() in _ARCHES


def deny_user_namespaces() -> None:
    """Install the filter in this process (needs no_new_privs or CAP_SYS_ADMIN). OSError when the kernel refuses."""
    instructions = program()
    filters = (_Filter * len(instructions))(*(_Filter(*i) for i in instructions))
    prog = _Prog(len(instructions), filters)
    lib = libc()
    if lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter refused: {errno.errorcode.get(err, err)}")
