"""open_source: profiles of real files, the index cache, stdin, and every input error."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from pathlib import Path

import duckdb
import pytest

from rlm.errors import ExitCode, InputError
from rlm.input import source as source_mod
from rlm.input.source import Profile, open_source
from rlm.text.textfile import MappedText

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data"
APACHE = DATA / "elastic" / "apache_logs"
needs_data = pytest.mark.skipif(not APACHE.exists(), reason="fixtures/data is missing")


@pytest.fixture()
def cache(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


@needs_data
def test_profile_of_the_real_apache_log(cache: str) -> None:
    raw = APACHE.read_bytes()
    with open_source(str(APACHE), cache_dir=cache) as src:
        p = src.profile
    lines = raw.decode().splitlines()
    assert p.path == str(APACHE) and p.display_name == str(APACHE)
    assert (p.size, p.lines, p.encoding, p.format) == (len(raw), 10000, "utf-8", "apache-access")
    assert p.sha256 == hashlib.sha256(raw).hexdigest()
    assert p.invalid_lines == 0 and not p.binary
    assert p.longest_line == max(len(s) + 1 for s in raw.split(b"\n")[:-1])
    capped = [s[:199] + "…" if len(s) > 200 else s for s in lines]
    assert p.head == capped[:5] and p.tail == capped[-5:]
    assert p.index_path and os.path.exists(p.index_path)
    assert p.to_dict()["lines"] == 10000


@needs_data
@pytest.mark.parametrize(
    "path,fmt",
    [
        ("elastic/nginxplus_json_logs", "jsonl"),
        ("loghub/Linux_2k.log", "syslog"),
        ("loghub/HDFS_2k.log", "log"),
        ("loghub/Hadoop_2k.log", "log"),
        ("seaborn/taxis.csv", "csv"),
        ("gsm8k/test.jsonl", "jsonl"),
        ("iso3166/all.csv", "csv"),
        # Quoted fields hold commas ("18:01:47,978", messages): counted as a CSV reader counts.
        ("loghub/Hadoop_2k.log_structured.csv", "csv"),
        ("loghub/Zookeeper_2k.log_structured.csv", "csv"),
    ],
)
def test_format_detection_on_real_files(path: str, fmt: str, cache: str) -> None:
    with open_source(str(DATA / path), cache_dir=cache) as src:
        assert src.profile.format == fmt


def test_format_detection_on_built_files(tmp_path: Path, cache: str) -> None:
    cases = {
        "a.tsv": "name\tage\tcity\nann\t3\tx\nbob\t4\ty\n",
        "b.json": '{\n  "a": 1,\n  "b": [1, 2]\n}\n',
        "c.txt": "It was a dark and stormy night.\nThe rain fell.\n",
    }
    want = {"a.tsv": "tsv", "b.json": "json", "c.txt": "text"}
    for name, body in cases.items():
        (tmp_path / name).write_text(body)
        with open_source(str(tmp_path / name), cache_dir=cache) as src:
            assert src.profile.format == want[name], name


def test_a_csv_whose_quoted_fields_hold_commas_is_a_table_of_its_columns(tmp_path: Path, cache: str) -> None:
    """Quoted commas (a time's milliseconds, a message) vary the raw count of commas per line:
    the rows are still CSV, and the table has the header's columns, each row's values whole."""
    rows = [
        ("1", "2024-05-01", "10:00:01,250", "WARN", "disk full, retrying"),
        ("2", "2024-05-01", "10:00:02,500", "INFO", "ok"),
        ("3", "2024-05-02", "11:30:00,000", "WARN", "slow, slower, slowest"),
    ] * 10
    body = "Id,Date,Time,Level,Content\n" + "".join(
        ",".join(f'"{v}"' if "," in v else v for v in r) + "\n" for r in rows
    )
    (tmp_path / "app.log_structured.csv").write_text(body)
    with open_source(str(tmp_path / "app.log_structured.csv"), cache_dir=cache) as src:
        assert src.profile.format == "csv"
        table = src.profile.table
    assert table is not None
    assert [c for c, _ in table["columns"]][2:] == ["Id", "Date", "Time", "Level", "Content"]
    with duckdb.connect(table["path"], read_only=True) as con:
        got = con.execute(
            "SELECT Time, Content FROM log WHERE Level = 'WARN' ORDER BY line_no LIMIT 2"
        ).fetchall()
    assert got == [("10:00:01,250", "disk full, retrying"), ("11:30:00,000", "slow, slower, slowest")]


def test_index_is_cached_and_reused(tmp_path: Path, cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "log.txt"
    f.write_text("".join(f"{i} GET /x\n" for i in range(3000)))
    first = open_source(str(f), cache_dir=cache).profile
    assert first.index_path and first.index_path.startswith(cache)
    calls: list[str] = []
    real_scan = source_mod._scan
    monkeypatch.setattr(source_mod, "_scan", lambda *a, **k: calls.append("scan") or real_scan(*a, **k))
    second = open_source(str(f), cache_dir=cache).profile
    assert calls == [] and second == first
    with MappedText(second.path, index_path=second.index_path) as t:
        assert t._index_mm is not None and t.lines[2999] == "2999 GET /x"
    # Changing the file (size and mtime) means a new scan, never a stale index.
    f.write_text("".join(f"{i} GET /x\n" for i in range(10)))
    third = open_source(str(f), cache_dir=cache).profile
    assert calls == ["scan"] and third.lines == 10 and third.index_path != first.index_path


def test_unwritable_cache_falls_back_to_a_private_index(tmp_path: Path) -> None:
    f = tmp_path / "x.txt"
    f.write_text("a\nb\n")
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    src = open_source(str(f), cache_dir=str(blocker / "sub"))
    idx = src.profile.index_path
    assert idx and os.path.exists(idx)
    src.close()
    assert not os.path.exists(idx)


def test_invalid_bytes_are_counted_per_line(tmp_path: Path, cache: str) -> None:
    f = tmp_path / "bad.log"
    f.write_bytes(b"fine\nbad \xff here\n\xc3( and \xfe twice\nfine \xc3\xa9\n" + b"ok\n" * 100)
    with open_source(str(f), cache_dir=cache) as src:
        assert src.profile.invalid_lines == 2
        assert src.profile.encoding == "utf-8"
        assert "2 lines hold invalid bytes" in src.profile.prompt_block()


def test_utf16_bom_profile(tmp_path: Path, cache: str) -> None:
    f = tmp_path / "u16.txt"
    f.write_bytes(b"\xff\xfe" + "id,name\n1,zoë\n2,øyvind\n".encode("utf-16-le"))
    with open_source(str(f), cache_dir=cache) as src:
        p = src.profile
    assert (p.encoding, p.lines, p.format, p.binary) == ("utf-16-le", 3, "csv", False)
    assert p.head == ["id,name", "1,zoë", "2,øyvind"]


def test_binary_file_profile(tmp_path: Path, cache: str) -> None:
    f = tmp_path / "blob.bin"
    f.write_bytes(bytes(range(256)) * 64 + b"\nhello world\n")
    with open_source(str(f), cache_dir=cache) as src:
        p = src.profile
    assert p.binary and p.format == "binary"
    assert "Binary data" in p.prompt_block()
    assert p.tail[-1] == "hello world"
    assert all("\x00" not in s for s in p.head)


def test_prompt_block_is_bounded_whatever_the_lines(tmp_path: Path, cache: str) -> None:
    f = tmp_path / "wide.txt"
    f.write_text(("x" * 100_000 + "\n") * 20)
    with open_source(str(f), cache_dir=cache) as src:
        p = src.profile
    assert p.longest_line == 100_001
    assert all(len(s) <= 200 for s in p.head + p.tail)
    for cap in (300, 1200, 4000):
        block = p.prompt_block(cap)
        assert len(block) <= cap
        assert block.startswith(f"File: {f} (")
    assert "20 lines" in p.prompt_block()


def _error(arg: str, **kw: object) -> InputError:
    with pytest.raises(InputError) as exc:
        open_source(arg, **kw)  # type: ignore[arg-type]
    assert exc.value.exit_code == ExitCode.INPUT
    assert "\n" not in exc.value.message
    return exc.value


def test_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _error(str(tmp_path / "nope.log")).message


def test_directory(tmp_path: Path) -> None:
    assert "is a directory" in _error(str(tmp_path)).message


def test_empty_file(tmp_path: Path) -> None:
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    assert "is empty" in _error(str(f)).message


def test_a_file_of_a_byte_order_mark_alone_is_refused_through_the_cli(tmp_path: Path) -> None:
    """No line to read: exit 3 and one line, not an internal error from a table of no lines."""
    import subprocess
    import sys

    f = tmp_path / "bom.log"
    f.write_bytes(b"\xef\xbb\xbf")
    env = {**os.environ, "RLM_CACHE_DIR": str(tmp_path / "c"), "XDG_DATA_HOME": str(tmp_path / "d")}
    out = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", str(f), "how many lines?", "-m", "openai/x", "--api-base",
         "http://127.0.0.1:9/v1", "--trace-dir", str(tmp_path / "t")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 3 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"rlm: {f} holds nothing but a byte-order mark: there is nothing to ask about"
    ]


def test_device() -> None:
    assert "is a device" in _error("/dev/null").message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path: Path) -> None:
    f = tmp_path / "secret.log"
    f.write_text("x\n")
    f.chmod(0)
    try:
        assert "permission denied" in _error(str(f)).message
    finally:
        f.chmod(0o600)


def test_fifo_without_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_mod, "FIFO_WAIT_SECONDS", 0.2)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "pipe with no data" in _error(str(fifo)).message

    # A writer that opens and closes without writing: an empty pipe.
    def writer() -> None:
        time.sleep(0.05)
        with open(fifo, "wb"):
            pass

    t = threading.Thread(target=writer)
    t.start()
    monkeypatch.setattr(source_mod, "FIFO_WAIT_SECONDS", 5.0)
    msg = _error(str(fifo)).message
    t.join()
    assert "empty" in msg or "no data" in msg


def test_fifo_with_data_is_spooled(tmp_path: Path, cache: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    payload = b"".join(b"line %d\n" % i for i in range(20000))

    def writer() -> None:
        with open(fifo, "wb") as fh:
            fh.write(payload)

    t = threading.Thread(target=writer)
    t.start()
    src = open_source(str(fifo), cache_dir=cache)
    t.join()
    assert src.profile.lines == 20000 and src.profile.path != str(fifo)
    assert src.profile.sha256 == hashlib.sha256(payload).hexdigest()
    spooled = src.path
    src.close()
    assert not os.path.exists(spooled)


def test_stdin_is_spooled_hashed_and_removed(cache: str) -> None:
    payload = "".join(f"{i} user{i % 7} login failed\n" for i in range(50000)).encode()
    src = open_source("-", cache_dir=cache, stdin=io.BytesIO(payload))
    p = src.profile
    assert p.display_name == "<stdin>" and "<stdin>" in p.prompt_block()
    assert p.sha256 == hashlib.sha256(payload).hexdigest()
    assert (p.size, p.lines) == (len(payload), 50000)
    assert Path(p.path).read_bytes() == payload
    with MappedText(p.path, index_path=p.index_path) as t:
        assert t.grep("user3 login").total == sum(1 for i in range(50000) if i % 7 == 3)
    src.close()
    assert not os.path.exists(p.path)
    src.close()  # idempotent


def test_empty_stdin() -> None:
    assert "stdin is empty" in _error("-", stdin=io.BytesIO(b"")).message


def test_stdin_spool_is_removed_at_exit(tmp_path: Path) -> None:
    # A process that never calls close(): the spooled copy must not outlive it.
    import subprocess
    import sys

    code = (
        "import io, sys\n"
        "from rlm.input.source import open_source\n"
        "s = open_source('-', cache_dir=sys.argv[1], stdin=io.BytesIO(b'a\\nb\\n'))\n"
        "print(s.path)\n"
        "globals()['keep'] = s  # never closed\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "c")], capture_output=True, text=True, check=True
    )
    spooled = out.stdout.strip()
    assert spooled and not os.path.exists(spooled)


def test_profile_is_frozen(cache: str, tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("a\n")
    p: Profile = open_source(str(f), cache_dir=cache).profile
    with pytest.raises(AttributeError):
        p.lines = 3  # type: ignore[misc]


def test_a_hash_thread_that_dies_ends_the_digest_instead_of_hanging(tmp_path: Path) -> None:
    """Whatever stops the background hash (here the cache store fails with a non-OS error) ends
    the future: the trace says the sha256 is unavailable; nobody waits forever."""
    import hashlib

    data = tmp_path / "a.log"
    data.write_bytes(b"x\n" * 1000)

    def store_fails(value: str) -> None:
        raise RuntimeError("facts store broke")

    digest = source_mod._hasher(str(data), None, store_fails)
    digest.compute_once()  # as the thread after the table's build runs it
    with pytest.raises(RuntimeError, match="facts store broke"):
        digest.result(timeout=10)
    stored: list[str] = []
    ok = source_mod._hasher(str(data), None, stored.append)
    assert ok.result(timeout=10) == hashlib.sha256(data.read_bytes()).hexdigest() == stored[0]


def test_the_cache_forgets_entries_unused_for_a_month(tmp_path: Path) -> None:
    """`rlm ask` sweeps the per-user cache (platformdirs, XDG_CACHE_HOME honoured) once a day:
    entries unused for CACHE_KEEP_DAYS go, recent ones and the input's own stay."""
    import os
    import time

    from conftest import run_cli, write_script

    cache = tmp_path / "xdg-cache" / "rlm" / "index"
    cache.mkdir(parents=True)
    stale = [cache / f"{'de' * 16}.idx", cache / f"{'de' * 16}.json", cache / f"{'de' * 16}.utf8"]
    fresh = [cache / f"{'ca' * 16}.idx", cache / f"{'ca' * 16}.json"]  # rlm's names: 32-hex keys
    month_ago = time.time() - (source_mod.CACHE_KEEP_DAYS + 1) * 86_400
    for p in stale + fresh:
        p.write_text("x")
    for p in stale:
        os.utime(p, (month_ago, month_ago))
    os.utime(fresh[0], (month_ago, month_ago))  # one file of the entry used lately keeps it all
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
            {"tool": "final", "args": {"answer": "10000"}},
            '{"answer": "10000", "explanation": "counted", "citations": ["F1"]}',
        ],
    )
    # An empty RLM_CACHE_DIR is unset: the per-user default applies.
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg-cache"), "RLM_CACHE_DIR": ""}
    proc = run_cli(["ask", str(APACHE), "how many lines?", "-m", model], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "10000\n"
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in fresh)
    assert (cache / ".swept").exists()
    assert len(list(cache.glob("*.idx"))) == 2  # the kept entry and the input's own
