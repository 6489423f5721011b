"""Remote inputs through the CLI: a real S3 server (moto, in server mode on 127.0.0.1) holding a
rotated set split from a real log (two gzip parts and the plain newest one), and an HTTP server
on 127.0.0.1 serving a gzip file with an ETag. A glob over the bucket answers as the same files
do locally (the answer, the parts, their order and line ranges); a second question fetches no
object's bytes (the servers count what they were asked); a part that cannot be read is left
out with --skip-bad; an interrupted download leaves nothing in the cache; a signed URL's token
is written nowhere; a missing object, a missing bucket, a pattern matching nothing, no
credentials, a refused connection and plain http:// to another machine are one line and exit 3."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gzip
import hashlib
import http.server
import io
import json
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import latest_trace, run_cli, start_cli, wait_for, write_script

THIRD = 3_333  # apache_logs has 10,000 lines: parts of 3,333, 3,333 and 3,334
BUCKET = "rlm-logs"
KEYS = ("app/app.log.2.gz", "app/app.log.1.gz", "app/app.log")  # oldest first
TOKEN = "s3cr3t-T0ken-8f2a9c"

# Whatever the parts are called, the cell prints the lines, the 404s and each part's name and
# range; the synthesis answers with what it printed, so the answer is the data's, not the script's.
CODE = (
    "lines = context.splitlines()\n"
    "bad = len([x for x in lines if '\" 404 ' in x])\n"
    "try:\n"
    "    parts = context_files\n"
    "except NameError:\n"
    "    parts = []\n"
    "files = [f.name.rsplit('/', 1)[-1] + ':' + str(f.first_line) + '-' + str(f.last_line) for f in parts]\n"
    "print('RESULT' + '=' + str(len(lines)) + '/' + str(bad) + '/' + ','.join(files) + '=END')"
)
SCRIPT = {
    "rules": [{"match": r"^system: You write the final answer.*?RESULT=(\S+?)=END", "reply": r"\1"}],
    "replies": [
        {"tool": "execute", "args": {"code": CODE}},
        {"tool": "final", "args": {"answer": "see the finding"}},
    ],
}


def _parts(apache_log: Path) -> dict[str, bytes]:
    """The rotated set as stored: the two older parts gzip-compressed, the newest plain and
    without its final newline."""
    lines = apache_log.read_bytes().splitlines(keepends=True)
    assert len(lines) == 10_000
    chunks = [lines[:THIRD], lines[THIRD : 2 * THIRD], lines[2 * THIRD :]]
    return {
        KEYS[0]: gzip.compress(b"".join(chunks[0]), mtime=0),
        KEYS[1]: gzip.compress(b"".join(chunks[1]), mtime=0),
        KEYS[2]: b"".join(chunks[2]).rstrip(b"\n"),
    }


class _Counting:
    """WSGI middleware: every request the S3 server is asked, as (method, path, query)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[tuple[str, str, str]] = []

    def __call__(self, environ: dict[str, Any], start: Any) -> Any:
        self.requests.append(
            (environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("QUERY_STRING", ""))
        )
        return self.app(environ, start)

    def object_gets(self) -> list[str]:
        """The GETs of an object's bytes (a listing is a GET of the bucket, `list-type=2`)."""
        return [p for m, p, q in self.requests if m == "GET" and p.count("/") >= 2 and "list-type" not in q]

    def listings(self) -> int:
        return sum(1 for m, _, q in self.requests if m == "GET" and "list-type" in q)


@pytest.fixture(scope="module")
def s3(real_data: Path) -> Iterator[tuple[str, _Counting]]:
    """A moto S3 server on 127.0.0.1 holding the rotated set under app/ (and an object a glob
    over app.log* must not take); its endpoint and the request counter."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    counting = _Counting(server._server.app)  # type: ignore[union-attr]  # the WSGI app werkzeug serves
    server._server.app = counting  # type: ignore[union-attr]
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = _s3_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    for key, body in _parts(real_data / "elastic" / "apache_logs").items():
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    client.put_object(Bucket=BUCKET, Key="app/other.txt", Body=b"not a log\n")
    yield endpoint, counting
    server.stop()


def _s3_client(endpoint: str) -> Any:
    """boto3's S3 client of the test server, as a test puts objects there."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def _aws(endpoint: str, tmp_path: Path, **more: str) -> dict[str, str]:
    """The CLI's environment for the test server: dummy keys, no profile, no instance role."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        **more,
    }


def _ask(
    cwd: Path, inputs: list[str], env: dict[str, str] | None, *extra: str
) -> tuple[str, str, dict[str, Any]]:
    model = write_script(cwd / "s.json", SCRIPT)
    proc = run_cli(["ask", *inputs, "how many 404s?", "-m", model, *extra], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout.strip(), proc.stderr, latest_trace(cwd)


def _expected(apache_log: Path) -> str:
    lines = apache_log.read_text().splitlines()
    bad = sum(1 for x in lines if '" 404 ' in x)
    return f"10000/{bad}/app.log.2.gz:1-3333,app.log.1.gz:3334-6666,app.log:6667-10000"


def test_a_bucket_glob_answers_as_the_same_files_do_locally_and_is_fetched_once(
    tmp_path: Path, apache_log: Path, s3: tuple[str, _Counting]
) -> None:
    endpoint, counting = s3
    local = tmp_path / "local"
    local.mkdir()
    for key, body in _parts(apache_log).items():
        (local / key.rsplit("/", 1)[-1]).write_bytes(body)
    (local / "other.txt").write_bytes(b"not a log\n")
    answer, _, trace = _ask(tmp_path, [str(local / "app.log*")], None)
    assert answer == _expected(apache_log)
    local_parts = trace["input"]["parts"]

    cwd = tmp_path / "remote"
    cwd.mkdir()
    env = _aws(endpoint, tmp_path)
    before = len(counting.object_gets())
    answer, stderr, trace = _ask(cwd, [f"s3://{BUCKET}/app/app.log*"], env)
    assert answer == _expected(apache_log)
    parts = trace["input"]["parts"]
    assert [p["name"] for p in parts] == [f"s3://{BUCKET}/{k}" for k in KEYS]
    assert [(p["first_line"], p["last_line"], p["plain_size"], p["compression"]) for p in parts] == [
        (p["first_line"], p["last_line"], p["plain_size"], p["compression"]) for p in local_parts
    ]
    assert trace["input"]["lines"] == 10_000
    assert (
        "read 3 files" in stderr and f"s3://{BUCKET}/app/app.log.2.gz … s3://{BUCKET}/app/app.log" in stderr
    )
    fetched = counting.object_gets()[before:]
    assert sorted(fetched) == sorted(f"/{BUCKET}/{k}" for k in KEYS)  # each object once; other.txt never
    copies = sorted((cwd / ".cache").glob("*.obj"))
    assert len(copies) == 3
    assert {stat.S_IMODE(p.stat().st_mode) for p in copies} == {0o600}
    assert not list((cwd / ".cache").glob("*.tmp"))

    # A second question, one more part named that does not exist: the listing is asked again,
    # no object's bytes are fetched, the missing part is left out and said.
    listed = counting.listings()
    answer, stderr, trace = _ask(
        cwd, [f"s3://{BUCKET}/app/app.log*", f"s3://{BUCKET}/app/nope.log"], env, "--skip-bad"
    )
    assert answer == _expected(apache_log)
    assert counting.object_gets()[before:] == fetched
    assert counting.listings() > listed
    assert f"s3://{BUCKET}/app/nope.log (no such object)" in stderr
    assert trace["input"]["skipped"] == [{"name": f"s3://{BUCKET}/app/nope.log", "why": "no such object"}]
    assert [p["name"] for p in trace["input"]["parts"]] == [f"s3://{BUCKET}/{k}" for k in KEYS]


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves `body` at /logs/app.log.gz with an ETag; records every request."""

    body = b""
    seen: list[tuple[str, str]] = []

    def _answer(self, send_body: bool) -> None:
        self.seen.append((self.command, self.path))
        if self.path.split("?")[0] != "/logs/app.log.gz":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("ETag", '"' + hashlib.sha256(self.body).hexdigest()[:16] + '"')
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if send_body:
            self.wfile.write(self.body)

    def do_HEAD(self) -> None:
        self._answer(False)

    def do_GET(self) -> None:
        self._answer(True)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web(apache_log: Path) -> Iterator[tuple[str, type[_Files]]]:
    lines = apache_log.read_bytes().splitlines(keepends=True)[:2_000]

    class Files(_Files):
        body = gzip.compress(b"".join(lines), mtime=0)
        seen: list[tuple[str, str]] = []

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", Files
    server.shutdown()
    server.server_close()


def test_a_file_over_http_on_this_machine_is_fetched_once_and_its_token_written_nowhere(
    tmp_path: Path, apache_log: Path, web: tuple[str, type[_Files]]
) -> None:
    base, files = web
    url = f"{base}/logs/app.log.gz?token={TOKEN}&day=5"
    lines = apache_log.read_text().splitlines()[:2_000]
    not_found = sum(1 for x in lines if '" 404 ' in x)
    expected = f"2000/{not_found}/"
    first, stderr1, trace = _ask(tmp_path, [url], None)
    assert first == expected
    shown = f"{base}/logs/app.log.gz?token=[REDACTED]&day=[REDACTED]"
    assert trace["input"]["display_name"] == shown
    assert trace["input"]["compression"] == "gzip" and trace["input"]["lines"] == 2_000
    assert [m for m, _ in files.seen].count("GET") == 1
    second, stderr2, _ = _ask(tmp_path, [url], None, "--jsonl")
    events = [json.loads(line) for line in second.splitlines()]
    assert events[0]["file"] == shown
    assert [e["answer"] for e in events if e["event"] == "answer"] == [expected]
    assert [m for m, _ in files.seen] == ["HEAD", "GET", "HEAD"]  # the second run: its HEAD alone
    for path in tmp_path.rglob("*"):  # traces, the cache's notes, the memory: no token anywhere
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in stderr1 + stderr2 + first + second


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreadable_remote_input_is_one_line_and_exit_3(
    tmp_path: Path, s3: tuple[str, _Counting], web: tuple[str, type[_Files]]
) -> None:
    endpoint, _ = s3
    base, files = web
    env = _aws(endpoint, tmp_path)
    no_keys = _aws(endpoint, tmp_path, AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="", AWS_SESSION_TOKEN="")
    refused = _aws(f"http://127.0.0.1:{_closed_port()}", tmp_path)
    cases = [
        (f"s3://{BUCKET}/app/nope.log", env, "no such object"),
        (f"s3://{BUCKET}/app/*.csv", env, "no object matches this pattern"),
        ("s3://no-such-bucket-rlm/app.log", env, "no such bucket"),
        (f"s3://{BUCKET}/app/app.log", no_keys, "no AWS credentials found"),
        (f"s3://{BUCKET}/app/app.log", refused, "connection refused"),
        (f"{base}/logs/missing.log", env, "not found (HTTP 404)"),
        ("http://192.0.2.7/app.log", env, "plain http:// is read only from this machine"),
        # urllib reads 127.0.0.1 as the host; a WHATWG parser (obstore's) reads `\` as `/`.
        (f"http://192.0.2.2:18081\\@{base[len('http://') :]}/logs/app.log.gz", env, "backslash"),
        (f"s3://{BUCKET}/app/[z-a]*", env, "no object matches this pattern"),  # not an internal error
    ]
    model = write_script(tmp_path / "s.json", SCRIPT)
    for url, case_env, said in cases:
        proc = run_cli(["ask", url, "how many 404s?", "-m", model], cwd=tmp_path, env=case_env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 3, (url, proc.stderr)
        assert len(lines) == 1 and lines[0].startswith("rlm: ") and said in lines[0], (url, proc.stderr)
        assert proc.stdout == ""
    assert not [p for _, p in files.seen if "app.log.gz" in p]  # the backslash URL asked nothing


def test_an_interrupted_download_leaves_nothing_in_the_cache(
    tmp_path: Path, s3: tuple[str, _Counting], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlm.input import remote

    endpoint, _ = s3
    for name, value in _aws(endpoint, tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(remote, "_stores", {})
    (found,) = remote.objects(f"s3://{BUCKET}/app/app.log.1.gz")
    folder = tmp_path / "cache"
    folder.mkdir()
    # The server sends fewer bytes than the listing said: the copy is refused, and removed.
    cut = dataclasses.replace(found, size=found.size + 10)
    with pytest.raises(remote.RemoteError, match=r"the download ended after [\d,]+ of [\d,]+ bytes"):
        remote.fetch(cut, str(folder), [])
    assert os.listdir(folder) == []
    owned: list[str] = []
    path = remote.fetch(found, str(folder), owned)
    assert owned == [] and Path(path).parent == folder and os.path.getsize(path) == found.size
    assert sorted(os.listdir(folder)) == sorted([Path(path).name, Path(path).name + ".json"])


class _Stalling(http.server.BaseHTTPRequestHandler):
    """Promises 8 MB, sends 2 MB, then waits for `release` (a transfer stalled mid-way)."""

    release = threading.Event()

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("ETag", '"stalled-1"')
        self.send_header("Content-Length", str(8 << 20))
        self.end_headers()

    def do_GET(self) -> None:
        self.do_HEAD()
        self.wfile.write((b"x" * 127 + b"\n") * (2 << 13))
        self.wfile.flush()
        self.release.wait(60)

    def log_message(self, *args: Any) -> None:
        pass


def test_ctrl_c_during_a_stalled_download_stops_at_once_and_leaves_nothing_in_the_cache(
    tmp_path: Path,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cache = tmp_path / ".cache"
    try:
        model = write_script(tmp_path / "s.json", SCRIPT)
        url = f"http://127.0.0.1:{server.server_address[1]}/stall.log"
        proc = start_cli(["ask", url, "how many 404s?", "-m", model], cwd=tmp_path)
        # The first bytes are in a temporary file, none at an entry's name.
        wait_for(lambda: any(p.name.endswith(".tmp") for p in cache.glob("*")), proc, seconds=30)
        time.sleep(0.3)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        _Stalling.release.set()
        server.shutdown()
        server.server_close()
    assert proc.returncode == 130, stderr
    assert took < 5, took  # not the minute a stalled read waits before it times out
    assert "Traceback" not in stderr
    assert not [p.name for p in cache.glob("*") if p.name.endswith((".tmp", ".obj"))]


def test_names_patterns_and_the_mcp_server() -> None:
    from rlm.errors import InputError
    from rlm.input.remote import _pattern, shown, url_secrets
    from rlm.mcp.paths import confine

    url = f"https://user:pw-1234567@example.com/a/b.log?X-Amz-Signature={TOKEN}&day=5"
    assert shown(url) == "https://example.com/a/b.log?X-Amz-Signature=[REDACTED]&day=[REDACTED]"
    assert url_secrets(url) == ["pw-1234567", TOKEN]  # `day` is no credential: never masked in the text
    assert shown("s3://b/k?x.log") == "s3://b/k?x.log"  # in a key, ? is a pattern, not a query
    match = _pattern("logs/2026-11-*.log.[0-9].gz")
    assert match("logs/2026-11-03.log.1.gz")
    assert not match("logs/2026-11-03/x.log.1.gz")  # * stays within one level, as a local glob's
    assert not match("logs/2026-11-03.log.a.gz")
    assert _pattern("a/[!x]?")("a/yz") and not _pattern("a/[!x]?")("a/xz")
    assert _pattern("a/[^b]")("a/^") and not _pattern("a/[^b]")("a/c")  # `^` itself, as a local glob's
    started = time.monotonic()  # a regex of `[^/]*` runs backtracked here for minutes, holding the GIL
    assert not _pattern("*-*-*-*.log")("-" * 1000)
    assert time.monotonic() - started < 1
    assert not _pattern("[z-a]*")("zz")  # an empty range matches nothing: no re.error
    # An item without `=` may be the secret itself: masked whole, and registered.
    keyonly = "https://example.com/a.log?KEYONLYTOKEN123&day=5"
    assert shown(keyonly) == "https://example.com/a.log?[REDACTED]&day=[REDACTED]"
    assert url_secrets(keyonly) == ["KEYONLYTOKEN123"]
    with pytest.raises(InputError, match=r"^refused: s3://b/app\.log is a remote input"):
        confine("s3://b/app.log", ["/tmp"])


class _Tricky(http.server.BaseHTTPRequestHandler):
    """A loopback server that misbehaves by path: /moved redirects (HEAD and GET) to `elsewhere`,
    /moved-get only its GET; /more says 10 bytes and sends 32 MiB (`wrote` counts what went
    out); /future has a Last-Modified in 2300 and no ETag. Records every request in `seen`."""

    elsewhere = ""
    seen: list[tuple[str, str]] = []
    wrote: list[int] = []

    def _answer(self, get: bool) -> None:
        self.seen.append((self.command, self.path))
        if self.path in ("/moved", "/moved-get") and (get or self.path == "/moved"):
            self.send_response(302)
            self.send_header("Location", f"{self.elsewhere}/app.log")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/more" and get:
            self.send_response(200)  # no Content-Length: the body runs until the connection closes
            self.end_headers()
            sent = 0
            try:
                for _ in range(512):
                    self.wfile.write(b"x" * (64 << 10))
                    sent += 64 << 10
            except OSError:
                pass
            self.wrote.append(sent)
            return
        body = b"a line\n" * 1000 if self.path in ("/future", "/moved-get") else b"0123456789"
        self.send_response(200)
        if self.path == "/future":
            self.send_header("Last-Modified", "Sat, 01 Jan 2300 00:00:00 GMT")
        else:
            self.send_header("ETag", '"tricky-1"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if get:
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._answer(False)

    def do_GET(self) -> None:
        self._answer(True)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tricky() -> Iterator[tuple[str, type[_Tricky], type[_Tricky]]]:
    """The misbehaving server and the loopback server it redirects to: their URLs and records."""

    class Elsewhere(_Tricky):
        seen: list[tuple[str, str]] = []

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)

    class Tricky(_Tricky):
        elsewhere = f"http://127.0.0.1:{other.server_address[1]}"
        seen: list[tuple[str, str]] = []
        wrote: list[int] = []

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tricky)
    for s in (server, other):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", Tricky, Elsewhere
    for s in (server, other):
        s.shutdown()
        s.server_close()


def test_a_loopback_server_that_redirects_or_sends_more_than_it_said_is_refused(
    tmp_path: Path, tricky: tuple[str, type[_Tricky], type[_Tricky]]
) -> None:
    base, server, elsewhere = tricky
    model = write_script(tmp_path / "s.json", SCRIPT)
    cases = [
        ("/moved", "it redirects elsewhere (HTTP 302): refused"),
        ("/moved-get", "it redirects elsewhere (HTTP 302): refused"),
        ("/more", "it sent more than the 10 bytes it listed: refused"),
    ]
    for path, said in cases:
        proc = run_cli(["ask", base + path, "how many 404s?", "-m", model], cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 3, (path, proc.stderr)
        assert len(lines) == 1 and lines[0] == f"rlm: {base}{path}: {said}", (path, proc.stderr)
    assert elsewhere.seen == []  # the redirects were never followed
    assert [m for m, p in server.seen if p == "/more"] == ["HEAD", "GET"]  # not fetched again
    assert len(server.wrote) == 1 and server.wrote[0] < 32 << 20  # cut off, not read whole
    cache = tmp_path / ".cache"
    assert not [p.name for p in cache.glob("*") if p.name.endswith((".obj", ".tmp"))]


def test_no_room_for_a_remote_copy_is_one_line(
    tmp_path: Path, tricky: tuple[str, type[_Tricky], type[_Tricky]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlm.input import remote
    from rlm.input.compressed import DISK_MARGIN

    base, server, _ = tricky
    (found,) = remote.objects(f"{base}/future")
    folder = tmp_path / "cache"
    folder.mkdir()
    real = os.statvfs(folder)
    full = os.statvfs_result((*real[:4], (DISK_MARGIN + found.size - 1) // real.f_frsize, *real[5:]))
    monkeypatch.setattr(os, "statvfs", lambda _: full)
    with pytest.raises(remote.RemoteError, match=r"would leave less than 1 GiB free .* set RLM_CACHE_DIR"):
        remote.fetch(found, str(folder), [])
    assert os.listdir(folder) == [] and [m for m, _ in server.seen] == ["HEAD"]  # nothing fetched
    monkeypatch.undo()

    # The disk fills mid-way: one line, and the object is not downloaded again into $TMPDIR.
    @contextlib.contextmanager
    def filling(path: str) -> Iterator[Any]:
        class Full(io.BytesIO):
            def write(self, data: Any) -> int:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        yield Full()

    with monkeypatch.context() as patched:
        patched.setattr(remote, "replace_private", filling)
        owned: list[str] = []
        with pytest.raises(remote.RemoteError, match=r"cannot write its local copy: No space left on device"):
            remote.fetch(found, str(folder), owned)
    assert owned == [] and [m for m, _ in server.seen] == ["HEAD", "GET"]
    # A Last-Modified in 2300: the copy's mtime is not in the future (the sweep would keep it).
    path = remote.fetch(found, str(folder), [])
    assert found.modified_ns > time.time_ns() and os.stat(path).st_mtime_ns <= time.time_ns()


def test_a_cache_entry_is_not_reused_through_another_s3_endpoint(
    tmp_path: Path, s3: tuple[str, _Counting], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlm.input import remote

    endpoint, counting = s3
    folder = tmp_path / "cache"
    folder.mkdir()
    identities = []
    before = len(counting.object_gets())
    # One moto server named two ways stands for two endpoints holding the same bucket and key
    # with the same bytes (the same ETag): each endpoint's copy is its own.
    for each in (endpoint, endpoint.replace("127.0.0.1", "localhost")):
        for name, value in _aws(each, tmp_path).items():
            monkeypatch.setenv(name, value)
        (found,) = remote.objects(f"s3://{BUCKET}/app/app.log.1.gz")
        identities.append(found.identity())
        remote.fetch(found, str(folder), [])
    assert identities[0] != identities[1]
    assert len(counting.object_gets()) - before == 2


def test_a_time_range_leaves_out_objects_by_the_date_in_their_names_unfetched(
    tmp_path: Path, apache_log: Path, s3: tuple[str, _Counting]
) -> None:
    """Daily objects (17-20 May 2015, the log's four days): --since/--until on the 20th fetches
    the 19th's and the 20th's only (a name's day may be a rotation's, or another zone's: the day
    before is kept), and counts exactly the lines of the range."""
    endpoint, counting = s3
    client = _s3_client(endpoint)
    days: dict[str, list[bytes]] = {}
    for line in apache_log.read_bytes().splitlines(keepends=True):
        days.setdefault(line.split(b"[", 1)[1][:2].decode(), []).append(line)
    for day, lines in days.items():
        client.put_object(
            Bucket=BUCKET, Key=f"daily/web-2015-05-{day}.log.gz", Body=gzip.compress(b"".join(lines))
        )
    in_range = [
        x
        for x in apache_log.read_text().splitlines()
        if "[20/May/2015:00:" <= x.split(" ", 4)[3] <= "[20/May/2015:06:00:00"
    ]
    code = 'print(sql("SELECT count(*) FROM log")[0][0])'
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "final", "args": {"answer": "counted"}},
            json.dumps({"answer": "counted", "citations": ["F1"]}),
        ],
    )
    before = len(counting.object_gets())
    proc = run_cli(
        [
            "ask",
            f"s3://{BUCKET}/daily/web-*.log.gz",
            "q?",
            "-m",
            model,
            "--since",
            "2015-05-20",
            "--until",
            "2015-05-20 06:00",
        ],
        cwd=tmp_path,
        env=_aws(endpoint, tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(counting.object_gets()[before:]) == [
        f"/{BUCKET}/daily/web-2015-05-{d}.log.gz" for d in ("19", "20")
    ]
    trace = latest_trace(tmp_path)
    assert trace["steps"][0]["observation"]["preview"].strip() == str(len(in_range))
    left = {x["name"].rsplit("/", 1)[-1]: x["why"] for x in trace["input"]["time_range"]["left_out"]}
    assert left["web-2015-05-17.log.gz"] == "not fetched: its name's date (2015-05-17) is before the range"
    assert left["web-2015-05-18.log.gz"] == "not fetched: its name's date (2015-05-18) is before the range"
    assert left["web-2015-05-19.log.gz"] == "read: no line in the range"
