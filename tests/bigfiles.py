"""Big input files built from the real lines in fixtures/data, for tests and benchmarks.

Each builder repeats real lines until the file reaches the size asked for. The
Apache builder shifts dates four days per pass so that timestamps keep
increasing, as in a long-lived server's log. Nothing here is made up: every
line is a real line (or a real JSON object) of a public data set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "fixtures" / "data"
APACHE = DATA / "elastic" / "apache_logs"
NGINX_JSON = DATA / "elastic" / "nginxplus_json_logs"
SYSLOG = DATA / "loghub" / "Linux_2k.log"
SSH = DATA / "loghub" / "OpenSSH_2k.log"
TAXIS = DATA / "seaborn" / "taxis.csv"

_DATE = re.compile(rb"\[(\d\d/[A-Z][a-z]{2}/\d{4}):")


def _repeat(path: Path, target: int, blob_for_pass: Callable[[int], bytes], head: bytes = b"") -> int:
    """Write `head`, then pass after pass of real lines, cut at a line end at `target` bytes."""
    written = len(head)
    with open(path, "wb") as out:
        out.write(head)
        k = 0
        while written < target:
            blob = blob_for_pass(k)
            if written + len(blob) > target:
                cut = blob.rfind(b"\n", 0, target - written)
                if cut < 0:
                    break  # not one more whole line fits
                blob = blob[: cut + 1]
            out.write(blob)
            written += len(blob)
            k += 1
    return written


def apache_log(path: Path, size: int) -> int:
    """Real Apache combined-format lines, dates shifted 4 days per pass."""
    parts: list[tuple[bytes, bytes, bytes]] = []
    for line in APACHE.read_bytes().splitlines(keepends=True):
        m = _DATE.search(line)
        parts.append((line[: m.start(1)], m.group(1), line[m.end(1) :]) if m else (line, b"", b""))
    dates = sorted({d for _, d, _ in parts if d})

    def one_pass(k: int) -> bytes:
        shift = timedelta(days=4 * k)
        new = {
            d: (datetime.strptime(d.decode(), "%d/%b/%Y") + shift).strftime("%d/%b/%Y").encode()
            for d in dates
        }
        return b"".join(a + new[d] + c if d else a for a, d, c in parts)

    return _repeat(path, size, one_pass)


def _whole_lines(data: bytes) -> bytes:
    """`data` ending with a line end: the loghub files lack a final one, and a pass glued to the
    next (or one file to another) would make lines that are in no real log."""
    return data if data.endswith(b"\n") else data + b"\n"


def syslog(path: Path, size: int) -> int:
    """Real syslog lines (loghub Linux and OpenSSH), repeated."""
    blob = _whole_lines(SYSLOG.read_bytes()) + _whole_lines(SSH.read_bytes())
    return _repeat(path, size, lambda _k: blob)


def csv_rows(path: Path, size: int) -> int:
    """The taxi trips CSV: its header once, then its rows repeated."""
    header, _, rows = TAXIS.read_bytes().partition(b"\n")
    return _repeat(path, size, lambda _k: rows, head=header + b"\n")


def json_lines(path: Path, size: int) -> int:
    """Real NGINX Plus status objects, one per line."""
    blob = NGINX_JSON.read_bytes()
    return _repeat(path, size, lambda _k: blob)


def single_line_json(path: Path, size: int) -> int:
    """One JSON array on one line holding real NGINX Plus status objects, about `size` bytes.

    Written pass by pass (a 1 GB document is never held in memory whole)."""
    objects = [json.loads(line) for line in NGINX_JSON.read_text().splitlines() if line.strip()]
    one = [json.dumps(o, separators=(",", ":")) for o in objects]
    per_pass = sum(len(s) + 1 for s in one)
    blob = ",".join(one).encode()
    with open(path, "wb") as out:
        out.write(b"[")
        for k in range(max(1, size // per_pass)):
            out.write(b"," + blob if k else blob)
        out.write(b"]\n")
        return out.tell()


def utf16_log(path: Path, size: int) -> int:
    """Real OpenSSH lines in UTF-16 (little-endian, with its byte-order mark), about `size` bytes.

    Written pass by pass (a 1 GB file is never held in memory whole)."""
    text = _whole_lines(SSH.read_bytes()).decode()
    blob = text.encode("utf-16-le")
    with open(path, "wb") as out:
        out.write("\ufeff".encode("utf-16-le"))
        for _ in range(max(1, size // (2 * len(text)))):
            out.write(blob)
        return out.tell()
