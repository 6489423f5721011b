"""MappedText: lines, windows, peeks and grep on real files and files built here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import rlm.text.index as ti
import rlm.text.lazytext as tl
import rlm.text.textfile as tf
from rlm.text.textfile import GrepResult, LazyText, MappedText, build_index, read_index

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data"
APACHE = DATA / "elastic" / "apache_logs"
needs_data = pytest.mark.skipif(not APACHE.exists(), reason="fixtures/data is missing")


def _grep_c(args: list[str], path: Path) -> int:
    out = subprocess.run(["grep", "-c", *args, str(path)], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


@needs_data
def test_lines_match_a_plain_read_of_the_real_log() -> None:
    expected = APACHE.read_text(encoding="utf-8").splitlines()
    with MappedText(str(APACHE)) as t:
        assert t.n_lines == len(expected) == 10000
        assert len(t.lines) == 10000
        assert t.lines[0] == expected[0]
        assert t.lines[-1] == expected[-1]
        assert t.lines[1234] == expected[1234]
        assert t.lines[10:20] == expected[10:20]
        assert t.lines[::997] == expected[::997]
        assert list(t.lines) == expected
        assert [s for s in t.lines if " 404 " in s] == [s for s in expected if " 404 " in s]
        with pytest.raises(IndexError):
            t.lines[10000]
        with pytest.raises(TypeError):
            t.lines["1"]  # type: ignore[index]
        assert t.text() == APACHE.read_text(encoding="utf-8")


@needs_data
@pytest.mark.parametrize(
    "pattern,grep_args",
    [
        ("GET", ["-F", "GET"]),
        (r'" 404 ', ["-F", '" 404 ']),
        (r'" (4|5)[0-9]{2} ', ["-E", r'" (4|5)[0-9]{2} ']),
        (r"^66\.249\.", ["-E", r"^66\.249\."]),
        (r"Firefox/[0-9]+\.0\)?\"$", ["-E", r'Firefox/[0-9]+\.0\)?"$']),
        ("nomatchatall", ["-F", "nomatchatall"]),
    ],
)
def test_grep_total_equals_grep_c(pattern: str, grep_args: list[str]) -> None:
    expected_total = _grep_c(grep_args, APACHE)
    with MappedText(str(APACHE)) as t:
        r = t.grep(pattern, max_matches=7)
    assert isinstance(r, GrepResult)
    assert r.total == expected_total
    assert len(r.matches) == min(7, expected_total)
    lines = APACHE.read_text(encoding="utf-8").splitlines()
    want = [(i + 1, s) for i, s in enumerate(lines) if re.search(pattern, s)][:7]
    assert r.matches == want


def test_grep_counts_a_line_once_and_maps_numbers(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.log", b"aaa\nb\naXa\n\nlast a")
    with MappedText(path) as t:
        r = t.grep("a", max_matches=2)
        assert r.total == 3
        assert r.matches == [(1, "aaa"), (3, "aXa")]
        assert t.grep("^$").total == 1
        assert t.grep("$").total == 5  # every line, the unterminated last one too
        assert t.grep("A", ignore_case=True).total == 3
        assert t.grep("A").total == 0
        assert t.grep("(?i)X").matches == [(3, "aXa")]
        with pytest.raises(re.error):
            t.grep("(unclosed")


def test_grep_non_ascii_pattern_runs_on_text(tmp_path: Path) -> None:
    path = _write(tmp_path, "u.txt", "café au lait\nthé\nnaïve\ncafé noir\n".encode())
    with MappedText(path) as t:
        assert t.grep("café").total == 2
        assert t.grep("[éï]").matches == [(1, "café au lait"), (2, "thé"), (3, "naïve"), (4, "café noir")]


def test_crlf_endings_are_stripped(tmp_path: Path) -> None:
    path = _write(tmp_path, "w.txt", b"one\r\ntwo\r\n\r\nfour")
    with MappedText(path) as t:
        assert t.n_lines == 4
        assert list(t.lines) == ["one", "two", "", "four"]
        assert t.lines[1] == "two"
        assert t.peek_lines(1, 2) == [(1, "one"), (2, "two")]


def test_window_is_relative_and_bounded(tmp_path: Path) -> None:
    data = "".join(f"line {i}\n" for i in range(1, 101)).encode()
    path = _write(tmp_path, "n.txt", data)
    with MappedText(path, start_line=41, end_line=50) as t:
        assert t.n_lines == 10
        assert t.lines[0] == "line 41"
        assert t.lines[-1] == "line 50"
        assert t.peek_lines(9, 5) == [(9, "line 49"), (10, "line 50")]
        r = t.grep(r"line \d+0$")
        assert r.total == 1 and r.matches == [(10, "line 50")]
        assert t.text() == "".join(f"line {i}\n" for i in range(41, 51))
        assert t.peek_chars(0, 7) == "line 41"
    with MappedText(path, start_line=200, end_line=300) as t:
        assert t.n_lines == 0 and t.text() == "" and t.grep("line").total == 0


def test_peek_lines_clips(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.txt", b"a\nb\nc\n")
    with MappedText(path) as t:
        assert t.peek_lines(0, 2) == [(1, "a")]
        assert t.peek_lines(3, 10) == [(3, "c")]
        assert t.peek_lines(4, 1) == []
        assert t.peek_lines(1, 0) == []


def test_single_ten_megabyte_line_peeks_by_characters(tmp_path: Path) -> None:
    unit = "0123456789abcdéf"  # 16 characters, 17 bytes
    text = unit * (10 * 1024 * 1024 // 17)
    path = _write(tmp_path, "one.txt", text.encode())
    with MappedText(path) as t:
        assert t.n_lines == 1
        assert t.n_chars == len(text)
        start = len(text) - 5000
        assert t.peek_chars(start, 40) == text[start : start + 40]
        assert t.peek_chars(3_000_001, 33) == text[3_000_001:3_000_034]
        assert t.peek_chars(len(text) - 3, 100) == text[-3:]
        r = t.grep("céf", max_matches=1)
        assert r.total == 0
        r = t.grep("déf0", max_matches=1)
        assert r.total == 1 and r.matches[0][0] == 1
        # Past SHOWN_LINE_MAX_BYTES a shown line is cut with a note; lines[] stays whole.
        shown = r.matches[0][1]
        assert shown.startswith(text[:1000]) and "line cut" in shown
        assert len(shown.encode()) < tf.SHOWN_LINE_MAX_BYTES + 200
        assert t.lines[0] == text


def test_invalid_bytes_are_replaced_not_raised(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.txt", b"ok\nbad \xff\xfe here\nalso \xc3( bad\nfine\n")
    with MappedText(path) as t:
        assert t.lines[1] == "bad \ufffd\ufffd here"
        assert "\ufffd" in t.lines[2]
        assert t.grep("bad").total == 2
        assert t.lines[3] == "fine"


def test_utf16_with_bom_is_decoded(tmp_path: Path) -> None:
    text = "héllo\nwörld\nthird line\n"
    for enc, bom in (("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")):
        path = _write(tmp_path, f"{enc}.txt", bom + text.encode(enc))
        with MappedText(path) as t:
            assert t.encoding == enc
            assert list(t.lines) == ["héllo", "wörld", "third line"]
            assert t.text() == text
            assert t.grep("w.rld").matches == [(2, "wörld")]
            assert t.grep("third").total == 1


def test_utf8_bom_is_not_part_of_line_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "bom.txt", b"\xef\xbb\xbfstart here\nsecond\n")
    with MappedText(path) as t:
        assert t.lines[0] == "start here"
        assert t.grep("^start").matches == [(1, "start here")]
        assert t.text() == "start here\nsecond\n"


def test_binary_file_still_peeks_and_greps(tmp_path: Path) -> None:
    data = b"\x7fELF\x02\x01\x00\x00\x00" + b"\x00" * 100 + b"\nGCC: (Debian) 12.2\n\x00\x01version 3\n"
    path = _write(tmp_path, "bin.dat", data)
    with MappedText(path) as t:
        assert t.binary
        r = t.grep("GCC")
        assert r.total == 1 and r.matches[0] == (2, "GCC: (Debian) 12.2")
        assert t.grep("version").matches == [(3, "..version 3")]
        assert t.peek_lines(1, 1)[0][1].startswith(".ELF")


def test_empty_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "empty.txt", b"")
    with MappedText(path) as t:
        assert t.n_lines == 0
        assert list(t.lines) == []
        assert t.text() == ""
        assert t.grep("x").total == 0
        assert t.peek_chars(0, 10) == ""
        assert t.peek_lines(1, 5) == []


def test_prebuilt_index_is_used_and_checked(tmp_path: Path) -> None:
    data = "".join(f"row {i}\n" for i in range(5000)).encode()
    path = _write(tmp_path, "rows.txt", data)
    idx = str(tmp_path / "rows.idx")
    assert build_index(path, idx) == 5000
    loaded = read_index(idx, len(data))
    assert loaded is not None
    mm, view, flags = loaded
    assert flags == 0 and len(view) == 5001 and view[-1] == len(data)
    view.release()
    mm.close()
    with MappedText(path, index_path=idx, start_line=4001, end_line=4003) as t:
        assert t._index_mm is not None  # the prebuilt index is mapped, not rebuilt
        assert list(t.lines) == ["row 4000", "row 4001", "row 4002"]
        assert t.grep("row 40").total == 3
    # An index for other bytes (here: a longer file) is ignored, never trusted.
    assert read_index(idx, len(data) + 1) is None
    other = _write(tmp_path, "rows2.txt", data + b"row extra\n")
    with MappedText(other, index_path=idx) as t:
        assert t._index_mm is None and t.n_lines == 5001 and t.lines[-1] == "row extra"


# --------------------------------------------------------------------------- LazyText and re_*


SAMPLE = (
    "alpha beta\nGamma δelta ünïcode\r\n\nline with error 500 and 503\n"
    "ab ab abab aba\nweiß straße\nlast line without newline"
) * 7


@pytest.fixture(params=[37, 64, 1 << 20], ids=["chunk37", "chunk64", "chunk1M"])
def lazy_pair(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Tiny chunks put seams everywhere: every result must still equal the str's.
    for module in (tf, ti, tl):  # the chunk size is shared by the index, the view and the lazy text
        monkeypatch.setattr(module, "SCAN_CHUNK_BYTES", request.param)
    monkeypatch.setattr(tf, "CHAR_BLOCK_BYTES", max(16, request.param // 2))
    path = _write(tmp_path, "lazy.txt", SAMPLE.encode())
    t = MappedText(path)
    lazy = t.lazy_text()
    assert len(list(t._scan_ranges())) > (1 if request.param < 1000 else 0)
    yield lazy, SAMPLE
    t.close()


def test_lazy_text_behaves_like_str(lazy_pair: tuple[LazyText, str]) -> None:
    lazy, s = lazy_pair
    assert len(lazy) == len(s)
    assert str(lazy) == s and lazy == s and lazy != s + "x"
    for i in (0, 1, 17, 100, len(s) - 1, -1, -len(s)):
        assert lazy[i] == s[i]
    with pytest.raises(IndexError):
        lazy[len(s)]
    for a, b, c in [
        (0, 10, None),
        (5, 300, None),
        (-40, None, None),
        (None, -3, None),
        (3, 90, 4),
        (None, None, -7),
    ]:
        assert lazy[a:b:c] == s[a:b:c], (a, b, c)
    for sub in ["ab", "aba", "\n", "\r\n", "δelta", "ß", "503\nab", "without newline" + "alpha", "zzz", "a"]:
        assert lazy.count(sub) == s.count(sub), sub
        assert lazy.find(sub) == s.find(sub), sub
        assert lazy.rfind(sub) == s.rfind(sub), sub
        assert (sub in lazy) == (sub in s), sub
        assert lazy.count(sub, 50, 400) == s.count(sub, 50, 400), sub
        assert lazy.find(sub, 100) == s.find(sub, 100), sub
    assert lazy.count("") == s.count("") and lazy.find("") == 0
    assert lazy.index("weiß") == s.index("weiß")
    with pytest.raises(ValueError):
        lazy.index("not there")
    assert lazy.startswith("alpha") and lazy.startswith(("x", "alpha b"))
    assert lazy.endswith("newline") and not lazy.endswith("alpha")
    assert "".join(lazy) == s
    assert lazy.split("\n") == s.split("\n")
    assert lazy.split("ab") == s.split("ab")
    assert lazy.split() == s.split()
    assert lazy.split("\n", 3) == s.split("\n", 3)
    assert lazy.splitlines(True) == s.splitlines(True)
    assert list(lazy.splitlines()) == [x.removesuffix("\r") for x in s.split("\n")]
    assert "lines" in repr(lazy)
    with pytest.raises(AttributeError, match="would copy the whole"):
        lazy.lower()


@pytest.mark.parametrize(
    "pattern,flags",
    [
        (r"\d+", 0),
        (r"(\w+) (\w+)", 0),
        (r"(?P<code>5\d\d)|(?P<word>ab)", 0),
        (r"^\w+", re.MULTILINE),
        (r"^alpha", 0),
        (r"\bab\b", 0),
        (r"line.*$", re.MULTILINE),
        (r"ü\w+", re.IGNORECASE),
    ],
)
def test_re_functions_match_re_on_lazy_text(
    lazy_pair: tuple[LazyText, str], pattern: str, flags: int
) -> None:
    lazy, s = lazy_pair
    assert tf.re_findall(pattern, lazy, flags) == re.findall(pattern, s, flags)
    assert [m.span() for m in tf.re_finditer(pattern, lazy, flags)] == [
        m.span() for m in re.finditer(pattern, s, flags)
    ]
    got, want = tf.re_search(pattern, lazy, flags), re.search(pattern, s, flags)
    assert (got and (got.span(), got.group())) == (want and (want.span(), want.group()))
    assert tf.re_sub(pattern, "<\\g<0>>", lazy, flags=flags) == re.sub(pattern, "<\\g<0>>", s, flags=flags)
    assert tf.re_subn(pattern, lambda m: str(m.start()), lazy, count=5, flags=flags) == re.subn(
        pattern, lambda m: str(m.start()), s, count=5, flags=flags
    )
    assert tf.re_split(pattern, lazy, flags=flags) == re.split(pattern, s, flags=flags)
    compiled = tf.re_compile(pattern, flags)
    assert compiled.findall(lazy) == re.compile(pattern, flags).findall(s)
    assert compiled.findall(s) == re.findall(pattern, s, flags)
    assert compiled.pattern == pattern


@pytest.mark.parametrize("seam", [32, 64 * 1024], ids=["seam32", "seam64k"])
@pytest.mark.parametrize(
    "pattern", [r'"version":\d+', r"\d+", r"\{[^}]*\}", r"(\w+)\":(\d)", r"(?<=:)\d+(?=,)", r"\d+$"]
)
def test_re_over_one_long_line_finds_the_matches_a_cut_goes_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pattern: str, seam: int
) -> None:
    """A line longer than a chunk (a one-line JSON document) is scanned in pieces cut inside
    it: a match across a cut was lost or split in two (re.finditer over a 1 GB one-line JSON
    found 183,499 of 183,500 `"version":\\d+`; `\\d+` gave two numbers for one)."""
    for module in (tf, ti, tl):
        monkeypatch.setattr(module, "SCAN_CHUNK_BYTES", 37)
    monkeypatch.setattr(tl, "SEAM_CHARS", seam)
    s = "[" + ",".join(f'{{"version":{i * 7919},"ok":1}}' for i in range(300)) + "]\nlast"
    path = _write(tmp_path, "one.json", s.encode())
    with MappedText(path) as t:
        lazy = t.lazy_text()
        assert len(list(t._scan_ranges())) > 100
        assert tf.re_findall(pattern, lazy) == re.findall(pattern, s)
        assert [m.span() for m in tf.re_finditer(pattern, lazy)] == [
            m.span() for m in re.finditer(pattern, s)
        ]
        assert tf.re_sub(pattern, "<\\g<0>>", lazy) == re.sub(pattern, "<\\g<0>>", s)
        assert tf.re_split(pattern, lazy) == re.split(pattern, s)
        assert tf.re_compile(pattern).findall(lazy) == re.findall(pattern, s)


def test_re_functions_pass_str_through() -> None:
    assert tf.re_findall(r"\d", "a1b22") == ["1", "2", "2"]
    assert tf.re_match("a", "abc").span() == (0, 1)
    assert tf.re_fullmatch(r"a\w+", "abc") is not None
    with pytest.raises(re.error):
        tf.re_findall("(", "x")


def test_text_switches_to_lazy_above_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "t.txt", b"x 1\ny 2\n" * 100)
    with MappedText(path) as t:
        assert isinstance(t.text(), str)
        monkeypatch.setattr(tf, "TEXT_IN_MEMORY_MAX_BYTES", 100)
        ctx = t.text()
        assert isinstance(ctx, LazyText)
        assert ctx.count("x") == 100 and "y 2" in ctx and len(ctx) == 800
        assert tf.re_findall(r"y (\d)", ctx) == ["2"] * 100


@pytest.mark.parametrize(
    "pattern,ignore_case",
    [
        ("GET /", False),
        ("get /", True),
        (r"Mozilla/5\.0", False),
        ("KiBaNa", True),
        ("ü", False),
        ("zz", False),
    ],
)
def test_literal_fast_path_equals_regex_path(
    pattern: str, ignore_case: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = APACHE.read_bytes()[:300_000] if APACHE.exists() else b"GET / x\n" * 5000
    body += "über ünï Kelvin \u212aibana\n".encode() * 3
    path = _write(tmp_path, "mix.log", body)
    for module in (tf, ti, tl):  # the chunk size is shared by the index, the view and the lazy text
        monkeypatch.setattr(module, "SCAN_CHUNK_BYTES", 4096)
    with MappedText(path) as t:
        assert t._literal_needle(pattern, ignore_case) is not None
        fast = t.grep(pattern, max_matches=20, ignore_case=ignore_case)
        monkeypatch.setattr(MappedText, "_literal_needle", lambda self, p, ic: None)
        slow = t.grep(pattern, max_matches=20, ignore_case=ignore_case)
    assert fast == slow
    lines = body.decode().splitlines()
    flags = re.IGNORECASE if ignore_case else 0
    assert fast.total == sum(1 for s in lines if re.search(pattern, s, flags))


def test_lazy_regex_across_cuts_inside_one_long_non_ascii_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (tf, ti, tl):  # the chunk size is shared by the index, the view and the lazy text
        monkeypatch.setattr(module, "SCAN_CHUNK_BYTES", 50)
    s = ("ßü€ word𝄞 " * 40) + "\nend ü\n"
    path = _write(tmp_path, "long.txt", s.encode())
    with MappedText(path) as t:
        assert len(list(t._scan_ranges())) > 10
        lazy = t.lazy_text()
        assert str(lazy) == s and len(lazy) == len(s)
        assert [m.span() for m in tf.re_finditer(r"\bword", lazy)] == [
            m.span() for m in re.finditer(r"\bword", s)
        ]
        assert tf.re_findall(r"€ (\w+)", lazy) == re.findall(r"€ (\w+)", s)
        assert lazy.count("ü€") == s.count("ü€") and lazy.rfind("ü") == s.rfind("ü")
        assert t.grep("word").total == 1 and t.grep("ü$").matches == [(2, "end ü")]


def test_scans_fall_back_when_threads_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import concurrent.futures

    body = b"".join(b"%d GET /x\n" % i for i in range(3000))
    path = _write(tmp_path, "t.log", body)
    for module in (tf, ti, tl):  # the chunk size is shared by the index, the view and the lazy text
        monkeypatch.setattr(module, "SCAN_CHUNK_BYTES", 1024)
    monkeypatch.setattr(ti, "_threads_ok", True)
    monkeypatch.setattr(ti, "_pool", None)
    calls = {"n": 0}
    real_submit = concurrent.futures.ThreadPoolExecutor.submit

    def submit(self, fn, *a, **k):  # the third thread "cannot start", as under RLIMIT_NPROC
        calls["n"] += 1
        if calls["n"] > 2:
            raise RuntimeError("can't start new thread")
        return real_submit(self, fn, *a, **k)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", submit)
    monkeypatch.setattr(ti.os, "cpu_count", lambda: 4)
    with MappedText(path) as t:
        assert t.n_lines == 3000 and t.lines[2999] == "2999 GET /x"
        assert ti._threads_ok is False
        assert t.grep("GET /x").total == 3000


def test_overlong_lines_are_cut_in_peeks_and_grep_but_not_in_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tf, "SHOWN_LINE_MAX_BYTES", 1000)
    long_line = "é" * 600 + " needle " + "x" * 2000
    path = _write(tmp_path, "wide.txt", f"short\n{long_line}\nend\n".encode())
    with MappedText(path) as t:
        rows = t.peek_lines(1, 3)
        assert rows[0] == (1, "short") and rows[2] == (3, "end")
        assert rows[1][1].startswith("é" * 500) and "line cut" in rows[1][1] and len(rows[1][1]) < 700
        assert t.grep("needle").matches[0][1] == rows[1][1]
        assert t.lines[1] == long_line


def test_an_index_in_big_steps_is_the_index_in_small_ones() -> None:
    """The whole file's index is scanned in INDEX_CHUNK_BYTES steps: the same line starts, and
    the same non-ASCII ranges (at most SCAN_CHUNK_BYTES each, so that validating them costs what
    it did), as in SCAN_CHUNK_BYTES steps; a last line without a newline ends at the end."""
    step = ti.SCAN_CHUNK_BYTES
    lines = -(-16 * step // 100)  # a little over 16 small steps of 100-byte lines
    text = bytearray(b"a" * 99 + b"\n") * lines
    for at in (3 * step + 5, 3 * step + 7, 9 * step + 1):  # a character in two of the small steps
        text[at : at + 2] = "é".encode()
    text += "last é".encode()
    small: list[tuple[int, int]] = []
    big: list[tuple[int, int]] = []
    starts = ti.line_starts(bytes(text), 0, small)
    assert (ti.line_starts(bytes(text), 0, big, chunk_bytes=4 * step) == starts).all()
    assert big == small == [(3 * step, 4 * step), (9 * step, 10 * step), (16 * step, len(text))]
    assert int(starts[-1]) == len(text) and len(starts) == lines + 2
