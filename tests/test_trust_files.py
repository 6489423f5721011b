"""What rlm writes about an input is its user's alone, rlm deletes only what it wrote, and
damage to its cache heals: `rlm ask` run as a user runs it (the CLI in a subprocess, a
scripted model calling sql(), the real worker), with a second Unix user where permissions
are checked."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATA, latest_trace, run_cli, write_script

APACHE = DATA / "elastic" / "apache_logs"  # 10,000 lines of a real access log
LINUX = DATA / "loghub" / "Linux_2k.log"
KEY = "[0-9a-f]" * 32
DAY = 86_400
NOBODY = 65534


def _count_script(tmp: Path, where: str = "true", grep: str | None = None) -> str:
    """A model that counts rows with sql(), prints the count (and greps) and answers."""
    code = f'n = sql("SELECT count(*) FROM log WHERE {where}")[0][0]\nprint("rows:", n)'
    greps = [{"tool": "grep", "args": {"pattern": grep}}] if grep else []
    script = {
        "replies": [
            {"tool": "execute", "args": {"code": code}},
            *greps,
            {"tool": "final", "args": {"answer": "counted"}},
        ],
        "rules": [{"match": "final answer to a question", "reply": "counted [F1]"}],
    }
    return write_script(tmp / "model.json", script)


def _ask(cwd: Path, path: Path, model: str, env: dict[str, str] | None = None) -> tuple[str, dict]:
    """Run `rlm ask --json` over `path`; (the first observation, the JSON document)."""
    proc = run_cli(["ask", str(path), "how many rows?", "-m", model, "--json"], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    trace = latest_trace(cwd)
    return trace["steps"][0]["observation"]["preview"], json.loads(proc.stdout)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A work folder another user can enter (pytest's own are 0700): only rlm's modes then
    stand between that user and what rlm writes."""
    base = Path(tempfile.mkdtemp(prefix="rlm-trust-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _as_nobody_read(paths: list[Path]) -> dict[str, str]:
    """Try to read each path (a file's bytes, a folder's listing) as uid/gid 65534."""
    reader = (
        "import json, os, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        if os.path.isdir(p):\n"
        "            os.listdir(p)\n"
        "        else:\n"
        "            open(p, 'rb').read(1)\n"
        "        out[p] = 'read'\n"
        "    except OSError as exc:\n"
        "        out[p] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    cmd = [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "/usr/bin/python3",
        "-c",
        reader,
    ]
    proc = subprocess.run([*cmd, *map(str, paths)], capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_another_user_reads_nothing_rlm_wrote_about_a_private_file(shared: Path) -> None:
    secrets = shared / "secrets.log"
    lines = APACHE.read_text().splitlines()[:3000]
    lines[1500] = lines[1500] + " password=hunter2-very-secret"
    secrets.write_text("\n".join(lines) + "\n")
    secrets.chmod(0o600)
    observed, doc = _ask(shared, secrets, _count_script(shared, "line LIKE '%password=%'", grep="password="))
    assert observed.startswith("rows: 1\n"), observed  # sql() and grep worked over 0600 files as root
    assert "hunter2" in latest_trace(shared)["steps"][1]["observation"]["preview"]
    written = [p for d in (shared / ".cache", shared / "traces") for p in [d, *d.rglob("*")]]
    assert any(p.suffix == ".duckdb" for p in written) and any(p.suffix == ".idx" for p in written)
    modes = {str(p): oct(stat.S_IMODE(p.lstat().st_mode)) for p in written}
    # A table is the user's alone and read-only even to the user (a worker handed a link of it
    # cannot open it for writing): 0400.
    want = {str(p): "0o700" if p.is_dir() else "0o400" if p.suffix == ".duckdb" else "0o600" for p in written}
    assert modes == want
    got = _as_nobody_read(written)
    assert set(got.values()) == {"PermissionError"}, got


def test_a_folder_of_documents_as_the_cache_keeps_every_document(tmp_path: Path) -> None:
    """RLM_CACHE_DIR names a folder of the user's: its files, old and named any way (even as
    rlm names its entries), all survive the sweep; rlm's entries go in a subfolder of its own."""
    docs = tmp_path / "Documents"
    docs.mkdir()
    names = ["abcd.txt", "report.pdf", "notes.json", "0123456789abcdef0123456789abcdef.json", "a.b.idx"]
    old = time.time() - 60 * DAY
    for name in names:
        (docs / name).write_text(f"the user's {name}")
        os.utime(docs / name, (old, old))
    observed, _ = _ask(tmp_path, LINUX, _count_script(tmp_path), {"RLM_CACHE_DIR": str(docs)})
    assert observed.startswith("rows: 2000"), observed
    for name in names:
        assert (docs / name).read_text() == f"the user's {name}", name
    assert sorted(p.name for p in docs.iterdir()) == sorted([*names, "rlm-cache"])
    assert list((docs / "rlm-cache").glob(f"{KEY}.t*.duckdb"))


def test_symlinks_planted_in_the_cache_are_never_followed(tmp_path: Path) -> None:
    """Every cache file (and the sweep's mark) replaced by a symlink to a file of the user's:
    the next run reads none of them as its own, writes none of them, and rebuilds its entries."""
    model = _count_script(tmp_path)
    _ask(tmp_path, LINUX, model)
    cache = tmp_path / ".cache"
    precious = tmp_path / "precious"
    precious.mkdir()
    two_days_ago = time.time() - 2 * DAY
    planted = sorted({*(p for p in cache.iterdir() if p.name != ".rlm-cache"), cache / ".swept"})
    assert len(planted) >= 5  # facts, index, table, its description, the sweep's mark
    for entry in planted:
        target = precious / entry.name
        target.write_text(f"precious {entry.name}\n")
        os.utime(target, (two_days_ago, two_days_ago))
        entry.unlink(missing_ok=True)
        entry.symlink_to(target)
    before = {p.name: (p.read_text(), p.stat().st_mtime) for p in precious.iterdir()}
    observed, doc = _ask(tmp_path, LINUX, model)
    assert observed.startswith("rows: 2000"), observed
    assert {p.name: (p.read_text(), p.stat().st_mtime) for p in precious.iterdir()} == before
    for entry in planted:
        if entry.name != ".swept":
            assert entry.is_file() and not entry.is_symlink(), entry.name  # rebuilt in its place


def test_a_garbled_table_cache_is_said_and_rebuilt(tmp_path: Path) -> None:
    model = _count_script(tmp_path)
    observed, _ = _ask(tmp_path, LINUX, model)
    assert observed.startswith("rows: 2000"), observed
    (db,) = (tmp_path / ".cache").glob(f"{KEY}.t*.duckdb")
    (index,) = (tmp_path / ".cache").glob(f"{KEY}.idx")
    db.write_bytes(db.read_bytes()[:5000])  # a truncated table
    index.write_bytes(b"not an index")
    again, doc = _ask(tmp_path, LINUX, model)
    assert again == observed  # sql() answers as before
    said = [w for w in doc["warnings"] if "damaged cache entry" in w]
    assert len(said) == 2 and any("table" in w for w in said) and any("line index" in w for w in said), doc
    # Its description garbled: said, and rebuilt.
    (info,) = (tmp_path / ".cache").glob(f"{KEY}.t*.json")
    info.write_text("{garbage")
    again, doc = _ask(tmp_path, LINUX, model)
    assert again == observed
    assert [w for w in doc["warnings"] if "damaged" in w] == [
        "a damaged cache entry of this input was rebuilt (table: its description is not JSON)"
    ]
    assert json.loads(info.read_text())["rows"] == 2000


def test_a_killed_builds_work_folder_is_swept(tmp_path: Path) -> None:
    """A build killed mid-way left its work folder (spill files and all); a later run removes
    it once it is an hour old and no live process holds its lock, and leaves a live one."""
    model = _count_script(tmp_path)
    _ask(tmp_path, LINUX, model)
    cache = tmp_path / ".cache"
    two_hours_ago = time.time() - 7200
    dead, live = cache / "rlm-build-k1ll3d", cache / "rlm-build-l1v3"
    for work in (dead, live):
        (work / "spill").mkdir(parents=True)
        (work / "table.duckdb").write_bytes(b"\0" * 65536)
        (work / ".lock").write_bytes(b"")
        for p in (work, work / "spill"):
            os.utime(p, (two_hours_ago, two_hours_ago))
    with open(live / ".lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a build still running in another process
        _ask(tmp_path, LINUX, _count_script(tmp_path))
    assert not dead.exists()
    assert live.exists()


def test_one_huge_line_does_not_cost_the_file_its_table(tmp_path: Path) -> None:
    lines = APACHE.read_bytes().split(b"\n")[:2000]
    lines.insert(1000, b'{"blob": "' + b"x" * (2 << 20) + b'"}')
    log = tmp_path / "huge-line.log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    observed, doc = _ask(tmp_path, log, _count_script(tmp_path))
    assert observed.startswith("rows: 2001"), observed
    assert not [w for w in doc["warnings"] if "no table" in w], doc["warnings"]
