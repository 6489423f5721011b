"""The kernel layer of the sandbox, applied inside the worker after it has
opened its input and imported everything it needs.

Each layer is feature-detected and applied independently: what the kernel or
the privileges at hand do not allow is reported as missing (with the reason)
and the others still apply. Order matters: the network namespace needs root,
so it comes before the uid drop; Landlock and seccomp need no-new-privs; the
seccomp filter comes last because it denies syscalls the earlier steps use.

Standard library only (ctypes for prctl, unshare, Landlock and seccomp).
Over 400 lines: each layer is small, but their order matters and is read in one place.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import signal
import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CpuTimeExceeded",
    "OsLimitsReport",
    "apply_os_limits",
    "arm_cpu_timer",
    "disarm_cpu_timer",
]

NOBODY_UID = 65534

# prctl / seccomp / Landlock constants (linux/prctl.h, linux/seccomp.h, linux/landlock.h)
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_THREAD = 0x00010000
_TIOCSTI = 0x5412
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_X32_SYSCALL_BIT = 0x40000000

# BPF opcodes (linux/filter.h)
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06

# seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little-endian: low word first)
_OFF_NR = 0
_OFF_ARCH = 4


def _arg_low(i: int) -> int:
    return 16 + 8 * i


def _arg_high(i: int) -> int:
    return 16 + 8 * i + 4


@dataclass(frozen=True)
class _Arch:
    audit_arch: int
    nr: dict[str, int]
    x32_bit: bool


# Syscall numbers from asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64).
_DENIED_NAMES = (
    "socket socketpair connect bind listen accept accept4 sendto sendmsg sendmmsg "
    "execve execveat fork vfork ptrace rt_sigqueueinfo rt_tgsigqueueinfo "
    "mount umount2 pivot_root chroot unshare setns bpf keyctl add_key request_key personality "
    "process_vm_readv process_vm_writev perf_event_open init_module finit_module delete_module "
    "kexec_load kexec_file_load reboot swapon swapoff userfaultfd io_uring_setup io_uring_enter "
    "io_uring_register open_by_handle_at name_to_handle_at pidfd_open pidfd_send_signal pidfd_getfd "
    "kcmp acct iopl ioperm modify_ldt fanotify_init open_tree move_mount fsopen fsconfig fsmount "
    "fspick mount_setattr sethostname setdomainname syslog quotactl lookup_dcookie"
).split()

_X86_64 = _Arch(
    audit_arch=0xC000003E,
    x32_bit=True,
    nr={
        "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43,
        "accept4": 288, "sendto": 44, "sendmsg": 46, "sendmmsg": 307, "execve": 59, "execveat": 322,
        "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "ptrace": 101, "kill": 62, "tkill": 200,
        "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "bpf": 321, "keyctl": 250,
        "add_key": 248, "request_key": 249, "personality": 135, "process_vm_readv": 310,
        "process_vm_writev": 311, "perf_event_open": 298, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167,
        "swapoff": 168, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_by_handle_at": 304, "name_to_handle_at": 303, "pidfd_open": 434,
        "pidfd_send_signal": 424, "pidfd_getfd": 438, "kcmp": 312, "acct": 163, "iopl": 172,
        "ioperm": 173, "modify_ldt": 154, "fanotify_init": 300, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "ioctl": 16, "seccomp": 317, "sethostname": 170, "setdomainname": 171, "syslog": 103,
        "quotactl": 179, "lookup_dcookie": 212, "landlock_create_ruleset": 444,
        "landlock_add_rule": 445, "landlock_restrict_self": 446,
    },
)  # fmt: skip

_AARCH64 = _Arch(
    audit_arch=0xC00000B7,
    x32_bit=False,
    nr={
        "socket": 198, "socketpair": 199, "connect": 203, "bind": 200, "listen": 201, "accept": 202,
        "accept4": 242, "sendto": 206, "sendmsg": 211, "sendmmsg": 269, "execve": 221, "execveat": 281,
        "clone": 220, "clone3": 435, "ptrace": 117, "kill": 129, "tkill": 130, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "mount": 40, "umount2": 39, "pivot_root": 41,
        "chroot": 51, "unshare": 97, "setns": 268, "bpf": 280, "keyctl": 219, "add_key": 217,
        "request_key": 218, "personality": 92, "process_vm_readv": 270, "process_vm_writev": 271,
        "perf_event_open": 241, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "kcmp": 272, "acct": 89, "fanotify_init": 262, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "ioctl": 29, "seccomp": 277, "sethostname": 161, "setdomainname": 162,
        "syslog": 116, "quotactl": 60, "lookup_dcookie": 18, "landlock_create_ruleset": 444,
        "landlock_add_rule": 445, "landlock_restrict_self": 446,
    },
)  # fmt: skip

_ARCHES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}


@dataclass
class OsLimitsReport:
    """Which kernel layers are in force, and which are not (with the reason)."""

    active: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)

    def add(self, layer: str, why_missing: str | None) -> None:
        if why_missing is None:
            self.active.append(layer)
        else:
            self.missing.append((layer, why_missing))


# ---------------------------------------------------------------------------
# libc access
# ---------------------------------------------------------------------------


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _errno_text() -> str:
    err = ctypes.get_errno()
    return f"{os.strerror(err)} (errno {err})"


def _prctl(libc: ctypes.CDLL, option: int, arg2: int | ctypes.c_void_p | ctypes.c_ulong = 0) -> str | None:
    rc = libc.prctl(ctypes.c_int(option), arg2, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    return None if rc == 0 else _errno_text()


# ---------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------


def _rlimit(res: int, value: int) -> str | None:
    try:
        soft, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY and value > hard:
            value = hard
        resource.setrlimit(res, (value, value))
    except (ValueError, OSError) as exc:
        return str(exc)
    return None


def _current_address_space() -> int:
    try:
        # binary: decoding could need a codec import, and imports may no longer work here
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _apply_rlimits(report: OsLimitsReport, memory_bytes: int, open_files: int) -> None:
    if memory_bytes > 0:
        # The limit is headroom over what the worker already maps (interpreter,
        # libraries, the mapped input): below that, nothing could be allocated.
        limit = _current_address_space() + memory_bytes
        report.add(f"rlimit-as({limit >> 20} MiB)", _rlimit(resource.RLIMIT_AS, limit))
    else:
        report.add("rlimit-as", "no memory limit was requested")
    # Writing to a file past the limit raises SIGXFSZ, which would kill the worker;
    # ignored, the write fails with EFBIG (a clean OSError) instead.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    report.add("rlimit-fsize(0)", _rlimit(resource.RLIMIT_FSIZE, 0))
    report.add(f"rlimit-nofile({open_files})", _rlimit(resource.RLIMIT_NOFILE, open_files))
    report.add("rlimit-core(0)", _rlimit(resource.RLIMIT_CORE, 0))
    report.add("rlimit-memlock(0)", _rlimit(resource.RLIMIT_MEMLOCK, 0))


def _no_new_processes() -> str | None:
    """RLIMIT_NPROC 0: no fork and no thread (the worker is single-threaded).
    Applied after the uid drop, because the kernel ignores it for root."""
    why = _rlimit(resource.RLIMIT_NPROC, 0)
    if why is None and os.geteuid() == 0:
        return "set, but the kernel ignores RLIMIT_NPROC for root"
    return why


def _private_network(libc: ctypes.CDLL) -> tuple[str, str | None]:
    if libc.unshare(ctypes.c_int(_CLONE_NEWNET)) == 0:
        return "netns", None
    first = _errno_text()
    if os.geteuid() != 0 and libc.unshare(ctypes.c_int(_CLONE_NEWUSER | _CLONE_NEWNET)) == 0:
        return "netns(user namespace)", None
    return "netns", f"unshare(CLONE_NEWNET) failed: {first}"


def _drop_privileges(drop_to_uid: int | None) -> tuple[str, str | None]:
    if os.geteuid() != 0:
        return "unprivileged-uid", None  # already unprivileged: nothing to drop
    uid = NOBODY_UID if drop_to_uid is None else drop_to_uid
    if uid == 0:
        return "unprivileged-uid", "running as root and told not to drop privileges"
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        return "unprivileged-uid", f"could not switch to uid {uid}: {exc}"
    if os.getuid() == 0 or os.geteuid() == 0:
        return "unprivileged-uid", "still root after setresuid"
    return f"unprivileged-uid({uid})", None


def _die_with_parent_again(libc: ctypes.CDLL, parent: int) -> None:
    """Re-arm the parent-death signal: the kernel clears it when the uid changes, so a worker
    that dropped root would outlive a killed rlm, spinning on as an orphan. A parent gone during
    the drop is seen by the pid: the worker then ends at once."""
    _prctl(libc, _PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
    if os.getppid() != parent:
        os._exit(1)


_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2


def _landlock(libc: ctypes.CDLL, readable_dir: str | None = None) -> tuple[str, str | None]:
    arch = _ARCHES.get(platform.machine().lower())
    if arch is None:
        return "landlock", f"unknown architecture {platform.machine()!r}"
    nr = arch.nr
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(
        ctypes.c_long(nr["landlock_create_ruleset"]),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 1:
        return "landlock", f"not supported by this kernel: {_errno_text()}"
    # Every filesystem right the ABI knows, and no rule granting any: no path
    # can be opened, created, executed or renamed afterwards; with `readable_dir`, one rule:
    # a file beneath that folder may be opened for reading (the input's table, placed there
    # once built: rlm.sandbox.client), nothing else of it (no listing, no writing).
    fs_bits = 13 + (1 if abi >= 2 else 0) + (1 if abi >= 3 else 0) + (1 if abi >= 5 else 0)
    handled_fs = (1 << fs_bits) - 1
    fields = [handled_fs]
    if abi >= 4:
        fields.append(0b11)  # LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP
    if abi >= 6:
        fields.append(0b11)  # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    attr = struct.pack(f"<{len(fields)}Q", *fields)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = syscall(
        ctypes.c_long(nr["landlock_create_ruleset"]), buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
    )
    if fd < 0:
        return "landlock", f"landlock_create_ruleset failed: {_errno_text()}"
    no_rule = None
    try:
        if readable_dir is not None:
            # Without its rule the ruleset still applies, granting nothing: sql() then cannot
            # open the table, and says so; the layer is never lost for it.
            no_rule = _landlock_read_beneath(syscall, nr["landlock_add_rule"], fd, readable_dir)
        if syscall(ctypes.c_long(nr["landlock_restrict_self"]), ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return "landlock", f"landlock_restrict_self failed: {_errno_text()}"
    finally:
        os.close(fd)
    return f"landlock(abi {abi})" + (f", the table's folder not readable: {no_rule}" if no_rule else ""), None


def _landlock_read_beneath(syscall: Any, add_rule: int, ruleset: int, folder: str) -> str | None:
    """Add to `ruleset` the right to read the files beneath `folder`; None, or why it failed
    (the caller then applies no Landlock layer at all, and says so)."""
    try:
        dir_fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return f"the table's folder could not be opened: {exc.strerror}"
    try:
        # struct landlock_path_beneath_attr { __u64 allowed_access; __s32 parent_fd; } packed
        attr = struct.pack("<Qi", _LANDLOCK_ACCESS_FS_READ_FILE, dir_fd)
        buf = ctypes.create_string_buffer(attr, len(attr))
        rc = syscall(
            ctypes.c_long(add_rule),
            ctypes.c_int(ruleset),
            ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
            buf,
            ctypes.c_uint32(0),
        )
        return None if rc == 0 else f"landlock_add_rule failed: {_errno_text()}"
    finally:
        os.close(dir_fd)


def _seccomp_program(arch: _Arch, pid: int) -> list[tuple[int, int, int, int]]:
    """Assemble the BPF filter: a deny-list answered with EPERM, so Python
    raises a clean OSError; wrong architecture kills."""
    nr = arch.nr
    eperm = _SECCOMP_RET_ERRNO | 1
    enosys = _SECCOMP_RET_ERRNO | 38
    prog: list[tuple[int, int, int, int] | tuple[str, ...]] = []

    def ins(code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        prog.append((code, jt, jf, k))  # type: ignore[arg-type]

    ins(_BPF_LD_W_ABS, _OFF_ARCH)
    ins(_BPF_JEQ_K, arch.audit_arch, 1, 0)
    ins(_BPF_RET_K, _SECCOMP_RET_KILL_PROCESS)
    ins(_BPF_LD_W_ABS, _OFF_NR)
    if arch.x32_bit:
        ins(_BPF_JGE_K, _X32_SYSCALL_BIT, "deny", 0)
    for name in _DENIED_NAMES:
        if name in nr:
            ins(_BPF_JEQ_K, nr[name], "deny", 0)
    # clone3 passes its flags in memory the filter cannot read: answer ENOSYS so
    # libc falls back to clone, whose flags are checked below.
    ins(_BPF_JEQ_K, nr["clone3"], "enosys", 0)
    ins(_BPF_JEQ_K, nr["clone"], "clone", 0)
    ins(_BPF_JEQ_K, nr["kill"], "own_pid", 0)
    ins(_BPF_JEQ_K, nr["tkill"], "own_pid", 0)
    ins(_BPF_JEQ_K, nr["tgkill"], "own_pid", 0)
    ins(_BPF_JEQ_K, nr["ioctl"], "ioctl", 0)
    ins(_BPF_RET_K, _SECCOMP_RET_ALLOW)
    prog.append(("clone",))
    ins(_BPF_LD_W_ABS, _arg_low(0))  # clone flags: threads only
    ins(_BPF_JSET_K, _CLONE_THREAD, "allow", "deny")
    prog.append(("own_pid",))
    ins(_BPF_LD_W_ABS, _arg_low(0))  # signals only to this process
    ins(_BPF_JEQ_K, pid, "allow", "deny")
    prog.append(("ioctl",))
    ins(_BPF_LD_W_ABS, _arg_low(1))  # no typing into a terminal (TIOCSTI)
    ins(_BPF_JEQ_K, _TIOCSTI, "deny", "allow")
    prog.append(("allow",))
    ins(_BPF_RET_K, _SECCOMP_RET_ALLOW)
    prog.append(("deny",))
    ins(_BPF_RET_K, eperm)
    prog.append(("enosys",))
    ins(_BPF_RET_K, enosys)

    labels: dict[str, int] = {}
    pc = 0
    for item in prog:
        if len(item) == 1:
            labels[item[0]] = pc
        else:
            pc += 1
    out: list[tuple[int, int, int, int]] = []
    for item in prog:
        if len(item) == 1:
            continue
        code, jt, jf, k = item
        here = len(out)
        jt = labels[jt] - here - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - here - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp program jump out of range")
        out.append((int(code), jt, jf, int(k)))
    return out


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp(libc: ctypes.CDLL) -> tuple[str, str | None]:
    arch = _ARCHES.get(platform.machine().lower())
    if arch is None:
        return "seccomp", f"no syscall table for architecture {platform.machine()!r}"
    program = _seccomp_program(arch, os.getpid())
    filters = (_SockFilter * len(program))(*[_SockFilter(c, jt, jf, k) for c, jt, jf, k in program])
    fprog = _SockFprog(len(program), filters)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    # TSYNC: threads a library started before lock-down get the filter too.
    rc = syscall(
        ctypes.c_long(arch.nr["seccomp"]),
        ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if rc == 0:
        return "seccomp", None
    first = _errno_text()
    # Kernels before 3.17 have no seccomp(2): prctl installs the same filter
    # (without TSYNC).
    rc = libc.prctl(
        ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0
    )
    if rc == 0:
        return "seccomp", None
    return "seccomp", f"could not install the filter: {first}"


def apply_os_limits(
    *,
    memory_bytes: int,
    open_files: int = 64,
    drop_to_uid: int | None = None,
    readable_dir: str | None = None,
) -> OsLimitsReport:
    """Lock the current process down; returns what is active and what is missing.

    memory_bytes: address space allowed on top of what the process maps now
    (the caller passes the input size plus a headroom; 0 = no limit).
    drop_to_uid: the uid to become when running as root (default 65534, nobody);
    0 keeps root (and says so in the report).
    readable_dir: a folder whose files stay readable (Landlock's one rule), for a table placed
    there after lock-down.
    """
    report = OsLimitsReport()
    libc = _libc()
    _apply_rlimits(report, memory_bytes, open_files)
    if libc is None:
        report.add(*_drop_privileges(drop_to_uid))
        report.add("rlimit-nproc(0)", _no_new_processes())
        for layer in ("netns", "no-new-privs", "not-dumpable", "landlock", "seccomp"):
            report.add(layer, "libc is not reachable through ctypes")
        return report
    report.add(*_private_network(libc))
    parent = os.getppid()
    report.add(*_drop_privileges(drop_to_uid))
    _die_with_parent_again(libc, parent)
    report.add("rlimit-nproc(0)", _no_new_processes())
    report.add("no-new-privs", _prctl(libc, _PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1)))
    report.add("not-dumpable", _prctl(libc, _PR_SET_DUMPABLE, ctypes.c_ulong(0)))
    report.add(*_landlock(libc, readable_dir))
    report.add(*_seccomp(libc))
    return report


# ---------------------------------------------------------------------------
# Per-cell CPU limit
# ---------------------------------------------------------------------------


class CpuTimeExceeded(BaseException):
    """Raised in the cell when it passes its CPU time (a BaseException so that
    `except Exception` in model code does not swallow it)."""


_GRACE_SECONDS = 1.0
# After the first CpuTimeExceeded, raise again this often, for cells that swallow it.
_REPEAT_SECONDS = 0.25
_armed_seconds = 0.0


def _on_sigprof(signum: int, frame: object) -> None:
    if _armed_seconds:
        raise CpuTimeExceeded(f"the cell used more than {_armed_seconds:g} s of CPU time and was stopped")


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def arm_cpu_timer(seconds: float) -> None:
    """Limit the next `seconds` of CPU time; the kernel enforces it.

    At `seconds`, ITIMER_PROF (process CPU time, re-armable per cell) sends
    SIGPROF, whose handler raises CpuTimeExceeded in the cell: the worker and
    its variables survive. If the cell swallows that, or is stuck in C code
    where no Python handler runs, the RLIMIT_CPU soft limit passes
    `_GRACE_SECONDS` later and SIGXCPU, left at its default action, terminates
    the worker; model code cannot catch or change that. (The soft limit is
    used as the kill switch because an unprivileged process can never raise a
    hard limit again for the next cell.)
    """
    global _armed_seconds
    seconds = max(0.01, float(seconds))
    _armed_seconds = seconds
    signal.signal(signal.SIGPROF, _on_sigprof)
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    deadline = _cpu_used() + seconds + _GRACE_SECONDS
    kill_at = int(deadline) + (1 if deadline % 1 else 0)  # RLIMIT_CPU counts whole seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        kill_at = min(kill_at, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (kill_at, hard))
    signal.setitimer(signal.ITIMER_PROF, seconds, _REPEAT_SECONDS)


def disarm_cpu_timer() -> None:
    """Stop the per-cell limit (call it in a `finally` after the cell)."""
    global _armed_seconds
    signal.setitimer(signal.ITIMER_PROF, 0)
    _armed_seconds = 0.0
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
