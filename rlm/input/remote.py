"""Remote inputs: objects in S3 (`s3://bucket/key`) or Google Cloud Storage (`gs://`), and files
over HTTPS, read as local parts.

`rlm ask 's3://bucket/app/2026-11-*.log.gz' "..."` reads as a local glob does: the pattern (`*`,
`?`, `[...]` in the key; never in the bucket) is matched against the bucket's listing, `*` and
`?` within one level of the key as a local glob within one folder, the matches sorted naturally;
rlm.input.parts then orders them (rotated sets oldest first) and joins them as it joins local
files. An HTTPS URL names one file: it is never a pattern (its `?` starts the query).

Each object is streamed once into the cache folder (rlm.input.cachedir), as
`<key>.obj` (0600, written under a temporary name and renamed whole: an interrupted download
leaves nothing at the entry's name), its key the object's identity as the store reports it:
bucket, key and ETag (else version, size and last-modified), for S3 also the endpoint or
region it is read through; for HTTPS the URL and its ETag, else its Last-Modified and
Content-Length. A second question lists or HEADs the objects to learn their identity and finds
them there: no object's bytes are fetched again. Beside it, `<key>.obj.json` says what it is
and is rewritten at each use, so the cache's sweep keeps an object in use. The copy's mtime is
the object's last-modified time, never later than now (`--order mtime`). A download that would
leave less than compressed.DISK_MARGIN free is not started, one that sends more than listed is
cut off, and a disk that fills mid-way is one line (not a second download into $TMPDIR). A
server that gives no identity at all is fetched each time, into a private temp file.

Credentials are the usual ones. S3: botocore's chain (AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials and config, SSO, the instance's role);
AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) for another endpoint (MinIO, a local test server:
plain http is allowed there because the user set it), AWS_REGION, AWS_SKIP_SIGNATURE=true for a
public bucket. GCS: GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT, the application
default credentials. Plain `http://` is read only from this machine (localhost, 127.0.0.1, ::1):
over the network nothing would say the bytes are the server's, and the cache would keep
whatever an attacker on the path sent under the identity they chose. It is read with the
standard library's http.client, which follows no redirect (a 3xx is refused); an http(s) URL
with a backslash, whitespace or a control character is refused (a WHATWG parser, obstore's,
would read another host than the one checked and shown).

Nothing of a credential reaches a message, the trace or the prompt: an input is named by
`shown` (an HTTPS URL without user:password@, each query value masked), and the CLI and the
API register the credential-bearing parts of a URL (`url_secrets`) with rlm.trace.redact.

The library (obstore) is imported only when a remote input is given.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import ipaddress
import json
import os
import re
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from rlm.errors import InputError
from rlm.input.compressed import DISK_MARGIN
from rlm.input.order import natural_key
from rlm.privatefiles import replace_private, write_private

if TYPE_CHECKING:
    from obstore import GetOptions, ObjectMeta
    from obstore.store import ObjectStore

__all__ = [
    "SCHEMES",
    "RemoteError",
    "RemoteObject",
    "fetch",
    "is_remote",
    "objects",
    "shown",
    "unsupported_scheme",
    "url_secrets",
]

SCHEMES = ("s3", "gs", "https", "http")
MASK = "[REDACTED]"
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_GLOB = re.compile(r"[*?\[]")
# Query parameters that carry a credential (a signed URL's signature, its key id, a token).
_SECRET_PARAM = re.compile(r"sig|token|key|cred|auth|pass|secret|session", re.I)
_CACHE_VERSION = 1
_CHUNK = 1 << 20
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")
# What a URL library may read otherwise than urllib does: a WHATWG parser (obstore's) takes `\`
# for `/` and drops tabs and newlines, so `http://evil\@127.0.0.1/` would go to `evil`.
_AMBIGUOUS = re.compile(r"[\\\s\x00-\x1f\x7f-\x9f]")
T = TypeVar("T")


class RemoteError(InputError):
    """A remote input that cannot be read: `name` (as shown) and `why`, one line (exit 3)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.name = name
        self.why = why


def _scheme(arg: str) -> str | None:
    found = _URL.match(arg)
    return found.group(1).lower() if found else None


def is_remote(arg: str) -> bool:
    """Whether `arg` is a URL rlm reads remotely (s3://, gs://, https://, http://)."""
    return _scheme(arg) in SCHEMES


def unsupported_scheme(arg: str) -> str | None:
    """Why `arg`, a URL of a kind rlm does not read (ftp://, az://, ...), cannot be read; None
    for anything else."""
    scheme = _scheme(arg)
    if scheme is None or scheme in SCHEMES:
        return None
    return f"{scheme}:// is not read by rlm: give a local path, or an s3://, gs:// or https:// URL"


def shown(url: str) -> str:
    """How an input URL is named everywhere (messages, the trace, the prompt): an S3 or GCS URL
    as given (it holds no credential); an HTTP(S) URL without user:password@ and with each
    query value masked (a signed URL's signature, key id and token are in its query)."""
    if _scheme(url) in ("s3", "gs"):
        return url
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        # An item without `=` (`?TOKEN`) is masked whole: its name may be the secret.
        query = "&".join(
            f"{k}={MASK}" if "=" in item else MASK
            for item in parts.query.split("&")
            if item
            for k, _ in parse_qsl(item, keep_blank_values=True)[:1]
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return f"{_scheme(url)}://{MASK}"


def url_secrets(url: str) -> list[str]:
    """The credentials written into an HTTP(S) URL: its password and the values of its
    credential-bearing query parameters (signature, key id, token...), for the callers to
    register with rlm.trace.redact so that no echo of them is written anywhere."""
    if _scheme(url) not in ("http", "https"):
        return []
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
        found += [v for k, v in parse_qsl(parts.query) if _SECRET_PARAM.search(k)]
        found += [
            k
            for item in parts.query.split("&")
            if item and "=" not in item
            for k, _ in parse_qsl(item, keep_blank_values=True)
        ]
    except ValueError:
        return []
    return [v for v in found if v]


# --------------------------------------------------------------------------- what a URL names


@dataclass(frozen=True)
class _Location:
    scheme: str
    bucket: str  # S3/GCS: the bucket; HTTP(S): ""
    key: str  # S3/GCS: the object's key, or a pattern; HTTP(S): ""
    url: str  # as given (an HTTP(S) URL may hold credentials: never shown)
    name: str  # as shown
    endpoint: str = ""  # S3: the endpoint (AWS_ENDPOINT_URL...) or region the bucket is read through


@dataclass(frozen=True)
class RemoteObject:
    """One object found: where it is, and its identity as the store reported it."""

    name: str  # its URL as shown
    location: _Location
    size: int
    e_tag: str | None
    version: str | None
    modified_ns: int  # 0 when the server did not say

    def identity(self) -> str | None:
        """What names these bytes and no others, or None when the server gives nothing to tell
        one version from the next (then the object is fetched each time)."""
        where = f"{self.location.scheme}|{self.location.bucket}|{self.location.key or self.location.url}"
        if self.location.endpoint:  # the same bucket and key through another endpoint: other bytes
            where += f"|endpoint={self.location.endpoint}"
        if self.e_tag:
            return f"{where}|etag={self.e_tag}|size={self.size}"
        if self.version:
            return f"{where}|version={self.version}|size={self.size}"
        if self.modified_ns > 0:
            return f"{where}|modified={self.modified_ns}|size={self.size}"
        return None


def _locate(arg: str) -> _Location:
    scheme = _scheme(arg) or ""
    name = shown(arg)
    if scheme in ("s3", "gs"):
        bucket, _, key = arg[len(scheme) + 3 :].partition("/")
        if not bucket:
            raise RemoteError(name, "no bucket in this URL")
        if _GLOB.search(bucket):
            raise RemoteError(name, "a bucket's name cannot be a pattern: only the key can")
        if not key:
            raise RemoteError(
                name, f"names a bucket, not an object: add a key, or a pattern such as {name}/*.log"
            )
        if key.endswith("/"):
            raise RemoteError(name, f"names a folder, not an object: add a pattern such as {name}*")
        return _Location(scheme, bucket, key, arg, name, _endpoint(scheme))
    if _AMBIGUOUS.search(arg):
        raise RemoteError(
            name,
            "a URL with a backslash, a space or a control character is refused: it may name another host",
        )
    from urllib.parse import urlsplit

    try:
        host = urlsplit(arg).hostname
    except ValueError:
        host = None
    if not host:
        raise RemoteError(name, "no host in this URL")
    if scheme == "http" and not _loopback(host):
        raise RemoteError(
            name,
            "plain http:// is read only from this machine (localhost, 127.0.0.1, ::1): nothing "
            "would say the bytes are the server's; use https://",
        )
    return _Location(scheme, "", "", arg, name)


def _endpoint(scheme: str) -> str:
    """Where an S3 bucket is read through: the endpoint set, else the region (AWS's own)."""
    if scheme != "s3":
        return ""  # GCS: Google's endpoint, the only one obstore reads
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    if endpoint:
        return endpoint.rstrip("/")
    return "region=" + (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "")


def _loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def objects(arg: str) -> list[RemoteObject]:
    """The objects `arg` names: a pattern's matches sorted naturally, or the one object.
    Raises RemoteError in one line: nothing matches, no such object or bucket, no
    credentials, the store cannot be reached."""
    location = _locate(arg)
    return _waited(lambda: _objects(location))


def _objects(location: _Location) -> list[RemoteObject]:
    if location.scheme == "http":
        return [_http_head(location)]
    store = _store(location)
    if location.scheme in ("s3", "gs") and _GLOB.search(location.key):
        found = [_object_of(location, meta) for meta in _listed(store, location)]
        if not found:
            raise RemoteError(location.name, "no object matches this pattern")
        return sorted(found, key=lambda o: natural_key(o.name))
    import obstore

    try:
        meta = obstore.head(store, location.key)
    except Exception as exc:  # noqa: BLE001 (every failure of the store is one line)
        why = _why(exc, location)
        if why == "no such object" and location.scheme in ("s3", "gs"):
            why = _missing(store, location)
        raise RemoteError(location.name, why) from None
    return [_object_of(location, meta)]


def _object_of(location: _Location, meta: ObjectMeta) -> RemoteObject:
    if location.scheme in ("s3", "gs"):
        key = str(meta["path"])
        url = f"{location.scheme}://{location.bucket}/{key}"
        location = dataclasses.replace(location, key=key, url=url, name=url)
    modified = meta.get("last_modified")
    modified_ns = int(modified.timestamp() * 1_000_000_000) if modified is not None else 0
    return RemoteObject(
        name=location.name,
        location=location,
        size=int(meta["size"]),
        e_tag=meta.get("e_tag") or None,
        version=meta.get("version") or None,
        modified_ns=max(0, modified_ns),
    )


def _listed(store: ObjectStore, location: _Location) -> list[ObjectMeta]:
    """The objects of the listing whose keys match the pattern: the folder before the first
    pattern character is listed, one level of it when the rest has no `/`."""
    import obstore

    first = _GLOB.search(location.key)
    assert first is not None
    folder = location.key[: location.key.rfind("/", 0, first.start()) + 1]
    try:
        matches = _pattern(location.key)
    except re.error:
        raise RemoteError(location.name, "not a valid pattern") from None
    prefix = folder.rstrip("/") or None
    try:
        if "/" in location.key[len(folder) :]:
            listed: list[ObjectMeta] = []
            for chunk in obstore.list(store, prefix=prefix, chunk_size=1000):
                listed.extend(chunk)
        else:
            listed = list(obstore.list_with_delimiter(store, prefix=prefix)["objects"])
    except Exception as exc:  # noqa: BLE001 (every failure of the store is one line)
        raise RemoteError(location.name, _why(exc, location)) from None
    return [m for m in listed if not str(m["path"]).endswith("/") and matches(str(m["path"]))]


def _pattern(key: str) -> Callable[[str], bool]:
    """A key pattern as a local glob reads a path: `*` and `?` within one level, `[...]` a set
    (`[!...]` its complement, `^` itself): each `/`-separated level of a key matched against the
    pattern's level by fnmatch, whose expressions do not backtrack without end. Raises re.error."""
    levels = [re.compile(fnmatch.translate(level)).match for level in key.split("/")]

    def matches(path: str) -> bool:
        parts = path.split("/")
        return len(parts) == len(levels) and all(m(p) is not None for m, p in zip(levels, parts, strict=True))

    return matches


def _missing(store: ObjectStore, location: _Location) -> str:
    """Why a HEAD found nothing: the bucket itself may be missing (a HEAD cannot tell)."""
    import obstore

    folder = location.key.rpartition("/")[0] or None
    try:
        obstore.list_with_delimiter(store, prefix=folder)
    except Exception as exc:  # noqa: BLE001
        why = _why(exc, location)
        if why == "no such bucket":
            return why
    return "no such object"


# --------------------------------------------------------------------------- the local copy


def fetch(obj: RemoteObject, folder: str | None, owned: list[str]) -> str:
    """The local copy of `obj`: from the cache folder when it is there (nothing fetched), else
    streamed into it once; with no usable folder, or an object without identity, into a
    private temp file listed in `owned` (the Source removes it). Raises RemoteError."""
    identity = obj.identity()
    if folder is not None and identity is not None:
        key = hashlib.sha256(f"remote|v{_CACHE_VERSION}|{identity}".encode()).hexdigest()[:32]
        target = os.path.join(folder, f"{key}.obj")
        if _own_file(target, obj.size):
            _note(target, obj)  # used now: kept by the cache's sweep
            return target
        _check_room(obj, folder, "set RLM_CACHE_DIR to a larger disk")
        opened = False
        try:
            with replace_private(target) as out:
                opened = True
                _copy(obj, out)
            _note(target, obj)
            return target
        except OSError as exc:
            if opened:  # the disk failed mid-way (a full one): not downloaded again elsewhere
                raise RemoteError(obj.name, f"cannot write its local copy: {exc.strerror or exc}") from None
            # a cache that cannot take it at all: a private temp file instead
    from rlm.input.source import private_temp

    path = private_temp("rlm-remote-", ".obj", owned)
    _check_room(obj, os.path.dirname(path) or ".", "set TMPDIR to a larger disk")
    try:
        with open(path, "wb") as out:
            _copy(obj, out)
    except OSError as exc:  # the disk, not the store: a full one, say
        raise RemoteError(obj.name, f"cannot write its local copy: {exc.strerror or exc}") from None
    return path


def _check_room(obj: RemoteObject, folder: str, hint: str) -> None:
    """Stop before the copy would leave less than DISK_MARGIN (compressed inputs' margin) free."""
    try:
        free = os.statvfs(folder)
    except (OSError, AttributeError):
        return  # nothing to measure: the write itself says
    room = free.f_bavail * free.f_frsize
    if room < obj.size + DISK_MARGIN:
        raise RemoteError(
            obj.name,
            f"its {obj.size:,} bytes would leave less than {DISK_MARGIN >> 30} GiB free on the disk "
            f"of {folder} ({room:,} bytes free): free some space or {hint}",
        )


def _copy(obj: RemoteObject, out: BinaryIO) -> None:
    """`_download`, waited for in this thread (`_waited`): stopped, it stops the transfer at
    its next chunk, and the caller's temporary file goes."""
    stop = threading.Event()
    try:
        _waited(lambda: _download(obj, out, stop))
    except BaseException:
        stop.set()
        raise


def _waited(work: Callable[[], T]) -> T:
    """`work()` in a thread of its own, waited for here a tenth of a second at a time: a Ctrl-C
    (the CLI's handler raises in this thread) or a cancelled `aask` stops the wait at once,
    where a call blocked in the library would hold this thread until its own timeout (a
    minute of a stalled transfer)."""
    done: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            done.append((True, work()))
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
            done.append((False, exc))

    thread = threading.Thread(target=run, name="rlm-remote", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    ok, value = done[0]
    if not ok:
        raise value
    result: T = value
    return result


def _own_file(path: str, size: int) -> bool:
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_size == size


def _note(target: str, obj: RemoteObject) -> None:
    meta = {
        "version": _CACHE_VERSION,
        "name": obj.name,
        "size": obj.size,
        "e_tag": obj.e_tag,
        "object_version": obj.version,
        "modified_ns": obj.modified_ns,
    }
    try:
        write_private(f"{target}.json", json.dumps(meta))
    except OSError:
        pass  # only the sweep's view of its use is lost


def _download(obj: RemoteObject, out: BinaryIO, stop: threading.Event) -> None:
    """Stream the object's bytes into `out`, checking they are the version listed (its ETag,
    where the store honours If-Match) and whole (its size, never more: a server that sends more
    is cut off at once); the copy's mtime set to the object's, never later than now. Raises
    RemoteError. Returns early once `stop` is set (the caller has gone)."""
    chunks = _http_chunks(obj) if obj.location.scheme == "http" else _store_chunks(obj)
    written = 0
    try:
        for chunk in chunks:
            if stop.is_set():
                return
            written += len(chunk)
            if written > obj.size:
                raise RemoteError(obj.name, f"it sent more than the {obj.size:,} bytes it listed: refused")
            out.write(chunk)
    finally:
        chunks.close()  # the connection goes at once, not when the generator is collected
    if written != obj.size:
        raise RemoteError(obj.name, f"the download ended after {written:,} of {obj.size:,} bytes: ask again")
    out.flush()
    if obj.modified_ns > 0:
        # A server's Last-Modified in the future would keep the copy from the cache's sweep.
        when = min(obj.modified_ns, time.time_ns())
        try:
            os.utime(out.fileno(), ns=(when, when))
        except (OSError, ValueError):
            pass


def _store_chunks(obj: RemoteObject) -> Generator[bytes, None, None]:
    """The object's bytes from its store (S3, GCS, HTTPS) in chunks. Raises RemoteError."""
    import obstore

    location = obj.location
    store = _store(location)
    options: GetOptions = {}
    # S3 and HTTP servers compare If-Match with the ETag their listing or HEAD gave; GCS's
    # listing and its reads may spell an ETag differently, so there the size is the check.
    if obj.e_tag and location.scheme != "gs":
        options["if_match"] = obj.e_tag
    read = 0
    try:
        stream = iter(obstore.get(store, location.key, options=options).stream(min_chunk_size=_CHUNK))
    except Exception as exc:  # noqa: BLE001 (every failure of the store is one line)
        raise RemoteError(obj.name, _why(exc, location)) from None
    while True:
        try:
            chunk = next(stream)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001
            raise RemoteError(obj.name, f"{_why(exc, location)} (after {read:,} bytes)") from None
        read += len(chunk)
        yield bytes(chunk)


# ------------------------------------------------------------ plain http:// on this machine
# Read with the standard library's http.client, which follows no redirect (obstore's HTTP
# client follows them, and offers no setting): a loopback server's 3xx to another host is
# refused, never read and kept under the loopback URL's name.


def _http_open(location: _Location, method: str, headers: dict[str, str]) -> tuple[Any, Any]:
    """The connection and the response to `method` on a loopback http:// URL (a 2xx: anything
    else is a RemoteError in one line)."""
    import base64
    import http.client
    from urllib.parse import quote, unquote, urlsplit

    from rlm import __version__

    parts = urlsplit(location.url)
    try:
        port = parts.port or 80
    except ValueError:
        raise RemoteError(location.name, "not a valid port in this URL") from None
    host = parts.hostname or ""
    target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=~")
    if parts.query:
        target += "?" + quote(parts.query, safe="/?%:@!$&'()*+,;=~")
    sent = {"User-Agent": f"rlm/{__version__}", **headers}
    if parts.username is not None:
        user = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        sent["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode("ascii")
    conn = http.client.HTTPConnection(host, port, timeout=10)
    where = f"http://{parts.netloc.rsplit('@', 1)[-1]}"
    try:
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(60)  # a stalled transfer: a minute of silence, as the stores'
        conn.request(method, target, headers=sent)
        response = conn.getresponse()
    except ConnectionRefusedError:
        conn.close()
        raise RemoteError(location.name, f"cannot reach {where}: connection refused") from None
    except TimeoutError:
        conn.close()
        raise RemoteError(location.name, f"cannot reach {where}: timed out") from None
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise RemoteError(location.name, f"cannot reach {where}: {_reason(exc)}") from None
    status = response.status
    if 200 <= status < 300:
        return conn, response
    conn.close()
    if 300 <= status < 400:
        raise RemoteError(location.name, f"it redirects elsewhere (HTTP {status}): refused")
    if status == 404:
        raise RemoteError(location.name, "not found (HTTP 404)")
    if status == 412:
        raise RemoteError(location.name, "it changed while it was read: ask again")
    raise RemoteError(location.name, f"the server answered {status} {response.reason}".strip())


def _reason(exc: BaseException) -> str:
    return (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).splitlines()[0][:200]


def _http_head(location: _Location) -> RemoteObject:
    """The one object a loopback http:// URL names: its size and identity from a HEAD."""
    from email.utils import parsedate_to_datetime

    conn, response = _http_open(location, "HEAD", {})
    try:
        length = response.getheader("Content-Length")
        e_tag = response.getheader("ETag") or None
        modified = response.getheader("Last-Modified")
    finally:
        conn.close()
    try:
        size = int(length or "")
    except ValueError:
        size = -1
    if size < 0:
        raise RemoteError(location.name, "the server does not say its size (no Content-Length)")
    modified_ns = 0
    if modified:
        try:
            modified_ns = max(0, int(parsedate_to_datetime(modified).timestamp() * 1_000_000_000))
        except (TypeError, ValueError, IndexError, OverflowError):
            modified_ns = 0
    return RemoteObject(
        name=location.name,
        location=location,
        size=size,
        e_tag=e_tag,
        version=None,
        modified_ns=modified_ns,
    )


def _http_chunks(obj: RemoteObject) -> Generator[bytes, None, None]:
    """The bytes of a loopback http:// object in chunks, If-Match its ETag. Raises RemoteError."""
    import http.client

    conn, response = _http_open(obj.location, "GET", {"If-Match": obj.e_tag} if obj.e_tag else {})
    read = 0
    try:
        while True:
            try:
                chunk = response.read1(_CHUNK)
            except (OSError, http.client.HTTPException) as exc:
                raise RemoteError(obj.name, f"{_reason(exc)} (after {read:,} bytes)") from None
            if not chunk:
                return
            read += len(chunk)
            yield chunk
    finally:
        conn.close()


# --------------------------------------------------------------------------- the stores

_stores: dict[tuple[str, str, str], Any] = {}


def _store(location: _Location) -> ObjectStore:
    """The store of `location` (one per bucket, or per HTTP(S) URL), made on first use."""
    handle = (location.scheme, location.bucket or location.url, location.endpoint)
    if handle not in _stores:
        _stores[handle] = _new_store(location)
    store: ObjectStore = _stores[handle]
    return store


def _new_store(location: _Location) -> ObjectStore:
    try:
        import obstore.store as stores
    except ImportError:
        raise RemoteError(
            location.name, "reading remote inputs needs obstore: pip install 'obstore>=0.12'"
        ) from None
    retry: Any = {
        "max_retries": 2,
        "retry_timeout": timedelta(seconds=30),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=2),
            "base": 2,
        },
    }
    try:
        if location.scheme == "s3":
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
            options = _client_options(allow_http=endpoint.lower().startswith("http://"))
            if _truthy(os.environ.get("AWS_SKIP_SIGNATURE")):
                return stores.S3Store(location.bucket, client_options=options, retry_config=retry)
            return stores.S3Store(
                location.bucket,
                client_options=options,
                retry_config=retry,
                credential_provider=_aws_credentials(location),
            )
        if location.scheme == "gs":
            return stores.GCSStore(location.bucket, client_options=_client_options(), retry_config=retry)
        # https only: plain http:// (this machine's) is read by http.client, following no redirect.
        return stores.HTTPStore(location.url, client_options=_client_options(), retry_config=retry)
    except RemoteError:
        raise
    except Exception as exc:  # noqa: BLE001 (a configuration the library refuses)
        raise RemoteError(location.name, _why(exc, location)) from None


def _client_options(*, allow_http: bool = False) -> Any:
    from rlm import __version__

    return {
        "allow_http": allow_http,
        "connect_timeout": timedelta(seconds=10),
        # A stalled transfer is retried after a minute of silence; a whole object may take long.
        "read_timeout": timedelta(seconds=60),
        "timeout": timedelta(hours=12),
        "user_agent": f"rlm/{__version__}",
    }


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _aws_credentials(location: _Location) -> Any:
    """botocore's credential chain (the AWS CLI's: variables, profiles, SSO, the instance's
    role), handed to the store; RemoteError when it finds none."""
    try:
        import boto3
        import botocore.exceptions
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return None  # then the store's own chain: AWS_* variables, web identity, the instance's role
    try:
        session = boto3.Session()
        found = session.get_credentials()
        if found is None:
            raise RemoteError(
                location.name,
                "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                "AWS_PROFILE, or write ~/.aws/credentials (AWS_SKIP_SIGNATURE=true reads a public bucket)",
            )
        return Boto3CredentialProvider(session)
    except botocore.exceptions.BotoCoreError as exc:  # a profile that does not exist, a broken config
        raise RemoteError(location.name, f"the AWS configuration cannot be used: {exc}") from None


# --------------------------------------------------------------------------- errors in one line

_STATUS = re.compile(r"Server returned non-2xx status code: (\d{3}[^:\n]*)")
_URI = re.compile(r"(https?)://(?:[^\s/@]*@)?([^\s/,?#@]+)")


def _why(exc: BaseException, location: _Location) -> str:
    """A failure of the store as a few words: what a user can act on, never a credential."""
    text = str(exc)
    kind = type(exc).__name__
    status = _STATUS.search(text)
    code = status.group(1).split()[0] if status else ""
    if "169.254.169.254" in text or "metadata.google" in text or "token request" in text:
        # The store asked the cloud's metadata server for credentials: none were configured.
        if location.scheme == "gs":
            return (
                "no Google Cloud credentials found: set GOOGLE_APPLICATION_CREDENTIALS, or run "
                "`gcloud auth application-default login`"
            )
        return "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
    if isinstance(exc, FileNotFoundError) or kind == "NotFoundError":
        return "no such object" if location.scheme in ("s3", "gs") else "not found (HTTP 404)"
    if kind == "PreconditionError":
        return "it changed while it was read: ask again"
    if "NoSuchBucket" in text:
        return "no such bucket"
    if "PermanentRedirect" in text or "AuthorizationHeaderMalformed" in text or code == "301":
        return "the bucket is in another region: set AWS_REGION to its region"
    if kind == "UnauthenticatedError" or any(
        w in text for w in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken")
    ):
        return "the credentials were refused"
    if kind == "PermissionDeniedError" or "AccessDenied" in text or code == "403":
        return "access denied: the credentials in use may not read it"
    host = _host_of(text)
    if "ConnectionRefused" in text or "Connection refused" in text:
        return f"cannot reach {host}: connection refused"
    if "dns error" in text:
        return f"cannot reach {host}: the host name does not resolve"
    if "TimedOut" in text or "timed out" in text.lower():
        return f"cannot reach {host}: timed out"
    if "certificate" in text.lower():
        return f"cannot reach {host}: its TLS certificate was not accepted"
    if "error sending request" in text or "kind: Connect" in text:
        return f"cannot reach {host}"
    if status:
        return f"the server answered {status.group(1).strip()}"
    first = (text.splitlines() or [kind])[0]
    first = re.sub(r"(https?://[^\s?]*)\?\S*", r"\1?…", first)  # no query: it may hold a token
    first = re.sub(r"//[^/@\s]*@", "//", first)  # no user:password@
    return first[:200] or kind


def _host_of(text: str) -> str:
    found = _URI.search(text)
    return f"{found.group(1)}://{found.group(2)}" if found else "the server"
