"""Questions over the real logs in fixtures/data, each with its answer computed in plain Python.

The answers are computed here, from the files, every time the suite runs:
nothing is hard-coded, so a changed data file changes the expectation too.
Avoid questions whose answer is a number the prompts use as an example
(an early draft asked for HEAD requests, 42, which the system prompt's
`final("42 requests")` example also says: a copied example scored as right).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "data"


@dataclass(frozen=True)
class Question:
    id: str
    file: Path
    question: str
    expected: Callable[[list[str]], str]  # the answer, from the file's lines

    def answer(self) -> str:
        return self.expected(_lines(self.file))


@cache
def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _count(pred: Callable[[str], bool]) -> Callable[[list[str]], str]:
    return lambda lines: str(sum(1 for line in lines if pred(line)))


def _most_common(key: Callable[[str], str | None]) -> Callable[[list[str]], str]:
    def top(lines: list[str]) -> str:
        counts = Counter(k for line in lines if (k := key(line)) is not None)
        (first, n1), (_, n2) = counts.most_common(2)
        assert n1 > n2, "a question needs one clear winner"
        return first

    return top


def _field(i: int) -> Callable[[str], str | None]:
    def get(line: str) -> str | None:
        parts = line.split()
        return parts[i] if len(parts) > i else None

    return get


def _apache_status(line: str) -> str | None:
    quoted = line.split('"')
    return quoted[2].split()[0] if len(quoted) > 2 and quoted[2].split() else None


def _failed_password_ip(line: str) -> str | None:
    m = re.search(r"Failed password for .* from (\d+\.\d+\.\d+\.\d+)", line)
    return m.group(1) if m else None


def _syslog_process(line: str) -> str | None:
    # "Jun 14 15:16:01 combo sshd(pam_unix)[19939]: ..." -> "sshd"
    m = re.match(r"\w{3} +\d+ [\d:]{8} \S+ ([A-Za-z][\w.-]*)", line)
    return m.group(1) if m else None


LOGHUB = DATA / "loghub"
APACHE = DATA / "elastic" / "apache_logs"

QUESTIONS: tuple[Question, ...] = (
    Question(
        "hdfs-warn",
        LOGHUB / "HDFS_2k.log",
        "How many lines have the log level WARN?",
        _count(lambda line: _field(3)(line) == "WARN"),
    ),
    Question(
        "ssh-failed-password",
        LOGHUB / "OpenSSH_2k.log",
        "How many lines contain the text 'Failed password'?",
        _count(lambda line: "Failed password" in line),
    ),
    Question(
        "ssh-top-attacker",
        LOGHUB / "OpenSSH_2k.log",
        "Which IP address appears in the most 'Failed password' lines?",
        _most_common(_failed_password_ip),
    ),
    Question(
        "linux-auth-failures",
        LOGHUB / "Linux_2k.log",
        "How many lines contain 'authentication failure'?",
        _count(lambda line: "authentication failure" in line),
    ),
    Question(
        "linux-top-process",
        LOGHUB / "Linux_2k.log",
        "Which program (the name before the '[pid]' or '(' after the host name) wrote the most lines?",
        _most_common(_syslog_process),
    ),
    Question(
        "zookeeper-errors",
        LOGHUB / "Zookeeper_2k.log",
        "How many lines have the log level ERROR?",
        _count(lambda line: _field(3)(line) == "ERROR"),
    ),
    Question(
        "hadoop-errors",
        LOGHUB / "Hadoop_2k.log",
        "How many lines have the log level ERROR?",
        _count(lambda line: _field(2)(line) == "ERROR"),
    ),
    Question(
        "proxifier-top-program",
        LOGHUB / "Proxifier_2k.log",
        "Which program (the .exe name after the timestamp) appears in the most lines?",
        _most_common(_field(2)),
    ),
    Question(
        "openstack-404",
        LOGHUB / "OpenStack_2k.log",
        "How many requests were answered with 'status: 404'?",
        _count(lambda line: "status: 404 " in line),
    ),
    Question(
        "apache-404",
        APACHE,
        "How many requests got the HTTP status code 404?",
        _count(lambda line: _apache_status(line) == "404"),
    ),
    Question(
        "apache-304",
        APACHE,
        "How many requests got the HTTP status code 304?",
        _count(lambda line: _apache_status(line) == "304"),
    ),
    Question(
        "apache-top-client",
        APACHE,
        "Which client IP address (the first field) made the most requests?",
        _most_common(_field(0)),
    ),
)


def normalise(answer: str) -> str:
    """Thousands separators removed, so that "1,318" matches 1318."""
    return re.sub(r"(?<=\d)[,_](?=\d{3}\b)", "", answer)


def is_correct(expected: str, answer: str) -> bool:
    """Lenient: the expected number or word appears in the answer as a whole token."""
    text = normalise(answer)
    pattern = rf"(?<![\w.]){re.escape(expected)}(?![\w]|\.\d)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None
