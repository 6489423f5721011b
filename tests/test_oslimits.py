"""The kernel layer, exercised in real child processes (it cannot be undone
in the process that applies it)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlm.sandbox import oslimits

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the kernel layer is Linux-only")

PROBE = """
import json, os, socket, sys, threading
from rlm.sandbox.oslimits import apply_os_limits
keep = open(sys.argv[1], "a")              # opened before lock-down, like the worker's input
if sys.argv[3] == "nobody":                # a tool started by an unprivileged user
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
report = apply_os_limits(memory_bytes=int(sys.argv[2]), drop_to_uid=None)
result = {"active": report.active, "missing": report.missing, "uid": os.getuid()}

def attempt(name, fn):
    try:
        fn()
        result[name] = "allowed"
    except BaseException as exc:
        result[name] = type(exc).__name__

attempt("open_read", lambda: open("/etc/hostname").read())
attempt("open_create", lambda: open(os.path.join(os.path.dirname(sys.argv[1]), "new.txt"), "w"))
attempt("listdir", lambda: os.listdir("/"))
attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("fork", lambda: os.fork() or None)
attempt("exec", lambda: os.execv("/bin/true", ["true"]))
attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
attempt("kill_self", lambda: os.kill(os.getpid(), 0))
attempt("thread", lambda: threading.Thread(target=int).start())
attempt("big_alloc", lambda: bytearray(1 << 30))
attempt("write_inherited_file", lambda: (keep.write("x" * 10), keep.flush()))
result["computes"] = sum(i * i for i in range(100000))
print(json.dumps(result), flush=True)
"""


def _run_probe(tmp_path: Path, *, as_nobody: bool = False, memory: int = 256 << 20) -> dict:
    target = tmp_path / "inherited.txt"
    target.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(target, 0o666)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(target), str(memory), "nobody" if as_nobody else "-"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _check_layers(result: dict) -> None:
    active = " ".join(result["active"])
    missing = dict(result["missing"])
    names = [a.split("(")[0] for a in result["active"]] + list(missing)
    for layer in (
        "rlimit-as",
        "rlimit-fsize",
        "rlimit-nofile",
        "rlimit-core",
        "rlimit-nproc",
        "netns",
        "unprivileged-uid",
        "no-new-privs",
        "landlock",
        "seccomp",
    ):
        assert any(n.startswith(layer) for n in names), f"{layer} neither active nor reported missing"
    for layer, why in result["missing"]:
        assert why.strip(), f"{layer} is missing without a reason"
    assert result["computes"] == sum(i * i for i in range(100000))
    assert result["uid"] != 0 or "unprivileged-uid" in missing
    # Each effect is checked whenever a layer that provides it is active.
    if "landlock" in active:
        assert result["open_read"] == "PermissionError"
        assert result["open_create"] == "PermissionError"
        assert result["listdir"] == "PermissionError"
    if "seccomp" in active:
        assert result["socket"] == "PermissionError"
        assert result["unix_socket"] == "PermissionError"
        assert result["fork"] == "PermissionError"
        assert result["exec"] == "PermissionError"
        assert result["kill_parent"] == "PermissionError"
    if "seccomp" in active or "landlock" in active:
        assert result["exec"] in ("PermissionError", "OSError")
    if "rlimit-nproc" in active or "seccomp" in active:
        assert result["fork"] != "allowed"
    if "rlimit-nproc" in active:
        assert result["thread"] == "RuntimeError"
    assert result["kill_self"] == "allowed"
    if "rlimit-as" in active:
        assert result["big_alloc"] == "MemoryError"
    if "rlimit-fsize" in active:
        assert result["write_inherited_file"] == "OSError"  # EFBIG, not a SIGXFSZ death


def test_lockdown_in_a_real_process(tmp_path: Path) -> None:
    result = _run_probe(tmp_path)
    _check_layers(result)
    if os.geteuid() == 0:
        assert "unprivileged-uid(65534)" in result["active"]
        assert result["uid"] == oslimits.NOBODY_UID


@pytest.mark.skipif(
    os.geteuid() != 0, reason="already unprivileged: test_lockdown_in_a_real_process covers it"
)
def test_lockdown_when_started_unprivileged(tmp_path: Path) -> None:
    """Where the tool is not root: weaker (no dropped uid needed, maybe no
    netns), the missing layers named, the process still works."""
    result = _run_probe(tmp_path, as_nobody=True)
    _check_layers(result)
    assert result["uid"] == oslimits.NOBODY_UID
    assert "unprivileged-uid" in result["active"]
    assert "rlimit-nproc(0)" in result["active"]  # enforced for non-root users


CPU_PROBE = """
import json, sys
from rlm.sandbox.oslimits import apply_os_limits, arm_cpu_timer, disarm_cpu_timer
from rlm.sandbox.worker.interpreter import Interpreter
apply_os_limits(memory_bytes=0)
interp = Interpreter({})
out = []
for code in sys.argv[1:]:
    arm_cpu_timer(0.5)
    try:
        outcome = interp.run(code)
    finally:
        disarm_cpu_timer()
    print(json.dumps({"output": outcome.output, "error": outcome.error}), flush=True)
"""


def _cpu_probe(*cells: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CPU_PROBE, *cells], capture_output=True, text=True, timeout=60
    )


def test_cpu_timer_stops_a_cell_and_the_worker_survives() -> None:
    proc = _cpu_probe("n = 0\nwhile True:\n    n += 1", "print('next cell', n > 0)")
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert first["error"].startswith("CpuTimeExceeded: the cell used more than 0.5 s of CPU time")
    assert second == {"output": "next cell True\n", "error": None}


def test_cpu_timer_kills_a_cell_that_swallows_the_exception() -> None:
    swallow = "while True:\n    try:\n        while True:\n            x = 1\n    except BaseException:\n        pass"
    proc = _cpu_probe("print('before')", swallow, "print('never')")
    assert proc.stdout.splitlines()[0] == json.dumps({"output": "before\n", "error": None})
    assert "never" not in proc.stdout
    assert proc.returncode == -signal.SIGXCPU


def test_disarmed_timer_lets_long_work_finish() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                from rlm.sandbox.oslimits import arm_cpu_timer, disarm_cpu_timer
                arm_cpu_timer(0.3)
                disarm_cpu_timer()
                x = 0
                for i in range(10**7):
                    x += i
                print(x)
                """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sum(range(10**7)))


# --- the seccomp program, checked by evaluating it ---------------------------------


def _eval_bpf(
    program: list[tuple[int, int, int, int]], nr: int, arch: int, args: tuple[int, ...] = ()
) -> int:
    """A tiny classic-BPF interpreter for the instructions the filter uses."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


ALLOW, EPERM, ENOSYS, KILL = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000


@pytest.mark.parametrize("arch", [oslimits._X86_64, oslimits._AARCH64], ids=["x86_64", "aarch64"])
def test_seccomp_program_decisions(arch: oslimits._Arch) -> None:
    pid = 4242
    prog = oslimits._seccomp_program(arch, pid)
    nr = arch.nr
    a = arch.audit_arch
    for name in (
        "socket",
        "connect",
        "bind",
        "execve",
        "execveat",
        "ptrace",
        "mount",
        "unshare",
        "setns",
        "bpf",
    ):
        assert _eval_bpf(prog, nr[name], a) == EPERM, name
    for name in ("keyctl", "personality", "process_vm_readv", "process_vm_writev", "io_uring_setup"):
        assert _eval_bpf(prog, nr[name], a) == EPERM, name
    read_nr = 0 if arch is oslimits._X86_64 else 63
    assert _eval_bpf(prog, read_nr, a) == ALLOW
    assert _eval_bpf(prog, read_nr, 0x40000003) == KILL  # i386 entry on the same kernel
    assert _eval_bpf(prog, nr["clone"], a, (0x00010000 | 0x00000100,)) == ALLOW  # a thread
    assert _eval_bpf(prog, nr["clone"], a, (17,)) == EPERM  # fork(): SIGCHLD only
    assert _eval_bpf(prog, nr["clone3"], a) == ENOSYS
    assert _eval_bpf(prog, nr["kill"], a, (pid, 0)) == ALLOW
    assert _eval_bpf(prog, nr["kill"], a, (1, 9)) == EPERM
    assert _eval_bpf(prog, nr["kill"], a, (0xFFFFFFFF, 9)) == EPERM  # kill(-1): everyone
    assert _eval_bpf(prog, nr["tgkill"], a, (pid, pid, 10)) == ALLOW
    assert _eval_bpf(prog, nr["tgkill"], a, (pid + 1, pid + 1, 9)) == EPERM
    assert _eval_bpf(prog, nr["ioctl"], a, (0, 0x5412)) == EPERM
    assert _eval_bpf(prog, nr["ioctl"], a, (0, 0x5401)) == ALLOW
    if arch.x32_bit:
        assert _eval_bpf(prog, 0x40000000 + 41, a) == EPERM
    else:
        assert "fork" not in nr and "vfork" not in nr  # aarch64 forks through clone


def test_report_shape() -> None:
    report = oslimits.OsLimitsReport()
    report.add("seccomp", None)
    report.add("netns", "unshare(CLONE_NEWNET) failed: Operation not permitted (errno 1)")
    assert report.active == ["seccomp"]
    assert report.missing == [("netns", "unshare(CLONE_NEWNET) failed: Operation not permitted (errno 1)")]


def test_unavailable_layers_are_named_and_the_rest_still_applies() -> None:
    """A second lock-down runs where the first one took privileges away: the
    network namespace and the uid drop are no longer possible (seccomp denies
    unshare), and the report must say so while the process keeps working."""
    script = textwrap.dedent(
        """
        import json
        from rlm.sandbox.oslimits import apply_os_limits
        apply_os_limits(memory_bytes=0)
        again = apply_os_limits(memory_bytes=0)
        print(json.dumps({"active": again.active, "missing": again.missing, "sum": sum(range(1000))}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    missing = dict(result["missing"])
    assert result["sum"] == sum(range(1000))
    if "seccomp" in " ".join(result["active"]):
        assert "Operation not permitted" in missing["netns"]
    assert "rlimit-as" in missing and missing["rlimit-as"] == "no memory limit was requested"
    assert all(why for why in missing.values())
