"""The benign battery: programs of the kind a model writes over logs and CSVs,
run through the real worker over the real data files in fixtures/data.

The expected output of every program is computed in the test by running the
same cells in plain, unrestricted CPython over the same text (with the
REPL's echo of a bare last expression): the sandbox must not change what
analysts' code means. A few programs are also checked against values
computed here by independent code.
"""

from __future__ import annotations

import ast
import io
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import product_worker

from rlm.sandbox.client import Sandbox

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data"
APACHE = DATA / "elastic" / "apache_logs"
NGINX = DATA / "elastic" / "nginxplus_json_logs"
TAXIS = DATA / "seaborn" / "taxis.csv"
SSH = DATA / "loghub" / "OpenSSH_2k.log"
HDFS = DATA / "loghub" / "HDFS_2k.log"
LINUX_CSV = DATA / "loghub" / "Linux_2k.log_structured.csv"
ZOOKEEPER = DATA / "loghub" / "Zookeeper_2k.log"
GSM8K = DATA / "gsm8k" / "test.jsonl"
ISO = DATA / "iso3166" / "all.csv"

pytestmark = pytest.mark.skipif(not APACHE.exists(), reason="fixtures/data is missing")


@dataclass(frozen=True)
class Program:
    name: str
    path: Path
    cells: tuple[str, ...]


def P(name: str, path: Path, *cells: str) -> Program:
    return Program(name, path, cells)


APACHE_RE = r'^(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+) [^"]*" (\d{3}) (\S+) "([^"]*)" "([^"]*)"'

PROGRAMS: list[Program] = [
    # ---------------------------------------------------------------- apache access log
    P(
        "status_counts",
        APACHE,
        "import re\nfrom collections import Counter\n"
        "codes = Counter()\nfor line in context_lines:\n    m = re.search(r'\" (\\d{3}) ', line)\n"
        "    if m:\n        codes[m.group(1)] += 1\nprint(codes.most_common(5))",
    ),
    P(
        "count_404_substring",
        APACHE,
        "n = 0\nfor line in context_lines:\n    if ' 404 ' in line:\n        n += 1\nprint(n)",
    ),
    P(
        "top_ips",
        APACHE,
        "from collections import Counter\nips = Counter(line.split(' ', 1)[0] for line in context_lines)\n"
        "for ip, n in ips.most_common(10):\n    print(f'{ip:<16}{n:>6}')",
    ),
    P(
        "requests_per_hour",
        APACHE,
        "from datetime import datetime\nfrom collections import defaultdict\nimport re\n"
        "per_hour = defaultdict(int)\nfor line in context_lines:\n    m = re.search(r'\\[([^\\]]+)\\]', line)\n"
        "    ts = datetime.strptime(m.group(1), '%d/%b/%Y:%H:%M:%S %z')\n"
        "    per_hour[ts.strftime('%Y-%m-%d %H')] += 1\nbusiest = max(per_hour.items(), key=lambda kv: kv[1])\n"
        "print(len(per_hour), busiest)",
    ),
    P(
        "bytes_served",
        APACHE,
        "import re\npat = re.compile(APACHE_RE)\ntotal = 0\nbad = 0\nfor line in context_lines:\n"
        "    m = pat.match(line)\n    if not m:\n        bad += 1\n        continue\n    size = m.group(6)\n"
        "    total += 0 if size == '-' else int(size)\nprint(total, bad)",
    ),
    P(
        "top_user_agents",
        APACHE,
        "from collections import Counter\nagents = Counter()\nfor line in context_lines:\n    parts = line.split('\"')\n"
        "    if len(parts) > 5:\n        agents[parts[5][:40]] += 1\nfor agent, n in agents.most_common(3):\n    print(n, agent)",
    ),
    P("unique_ips", APACHE, "ips = {line.split()[0] for line in context_lines if line}\nlen(ips)"),
    P(
        "png_paths_urlparse",
        APACHE,
        "from urllib.parse import urlparse\nfrom collections import Counter\nimport re\nc = Counter()\n"
        "for line in context_lines:\n    m = re.search(r'\"GET (\\S+)', line)\n    if m:\n"
        "        path = urlparse(m.group(1)).path\n        if path.endswith('.png'):\n            c[path.rsplit('/', 1)[-1]] += 1\n"
        "print(c.most_common(3))",
    ),
    P(
        "error_rate_per_method",
        APACHE,
        "import re\nfrom collections import defaultdict\nseen = defaultdict(lambda: [0, 0])\n"
        'for line in context_lines:\n    m = re.search(r\'"(\\w+) \\S+ [^"]*" (\\d{3})\', line)\n    if not m:\n        continue\n'
        "    stats = seen[m.group(1)]\n    stats[0] += 1\n    if m.group(2).startswith(('4', '5')):\n        stats[1] += 1\n"
        "for method in sorted(seen):\n    total, errors = seen[method]\n"
        "    print('{:<8} {:>6} {:>6.2f}%'.format(method, total, 100 * errors / total))",
    ),
    P(
        "parse_then_aggregate_across_cells",
        APACHE,
        "import re\npat = re.compile(APACHE_RE)\nhits = []\nfor line in context_lines:\n    m = pat.match(line)\n"
        "    if m:\n        hits.append({'ip': m.group(1), 'path': m.group(4), 'status': int(m.group(5))})\nprint(len(hits))",
        "errors = [h for h in hits if h['status'] >= 400]\nprint(len(errors), errors[0]['path'])",
        "by_status = {}\nfor h in errors:\n    by_status[h['status']] = by_status.get(h['status'], 0) + 1\nsorted(by_status.items())",
    ),
    P(
        "class_based_parser",
        APACHE,
        "class Hit:\n    def __init__(self, line):\n        parts = line.split()\n        self.ip = parts[0]\n"
        "        self.status = parts[8] if len(parts) > 8 else '?'\n        self.count = 1\n"
        "    def bump(self):\n        self.count += 1\n\nfirst = {}\nfor line in context_lines:\n    h = Hit(line)\n"
        "    if h.ip in first:\n        first[h.ip].bump()\n    else:\n        first[h.ip] = h\n"
        "top = max(first.values(), key=lambda h: h.count)\nprint(top.ip, top.count, top.status)",
    ),
    P(
        "dataclass_records",
        APACHE,
        "from dataclasses import dataclass, field\n@dataclass\nclass Visitor:\n    ip: str\n    paths: list = field(default_factory=list)\n"
        "    def add(self, p):\n        self.paths.append(p)\nvisitors = {}\nfor line in context_lines[:2000]:\n"
        "    parts = line.split()\n    v = visitors.setdefault(parts[0], Visitor(parts[0]))\n    v.add(parts[6])\n"
        "widest = max(visitors.values(), key=lambda v: len(set(v.paths)))\nprint(widest.ip, len(set(widest.paths)))",
    ),
    P(
        "paths_per_ip_defaultdict",
        APACHE,
        "from collections import defaultdict\npaths = defaultdict(set)\nfor line in context_lines:\n    p = line.split()\n"
        "    if len(p) > 6:\n        paths[p[0]].add(p[6])\nip, ps = max(paths.items(), key=lambda kv: (len(kv[1]), kv[0]))\n"
        "print(ip, len(ps))",
    ),
    P(
        "largest_responses_heapq",
        APACHE,
        "import heapq\nsizes = []\nfor line in context_lines:\n    p = line.split()\n"
        "    if len(p) > 9 and p[9].isdigit():\n        sizes.append(int(p[9]))\nprint(heapq.nlargest(5, sizes))",
    ),
    P(
        "busiest_minute_window",
        APACHE,
        "from collections import deque, Counter\nper_minute = Counter(line.split('[', 1)[1][:17] for line in context_lines if '[' in line)\n"
        "window = deque(maxlen=5)\nbest = 0\nfor minute in sorted(per_minute):\n    window.append(per_minute[minute])\n"
        "    best = max(best, sum(window))\nprint(len(per_minute), best)",
    ),
    P(
        "private_vs_public_ips",
        APACHE,
        "import ipaddress\nkinds = {'private': 0, 'public': 0, 'bad': 0}\nfor line in context_lines:\n    try:\n"
        "        ip = ipaddress.ip_address(line.split()[0])\n    except ValueError:\n        kinds['bad'] += 1\n"
        "        continue\n    kinds['private' if ip.is_private else 'public'] += 1\nprint(kinds)",
    ),
    P(
        "generator_pipeline",
        APACHE,
        "def statuses(lines):\n    for line in lines:\n        parts = line.split()\n        if len(parts) > 8:\n"
        "            yield parts[8]\n\ndef only_server_errors(codes):\n    return (c for c in codes if c.startswith('5'))\n"
        "print(sum(1 for _ in only_server_errors(statuses(context_lines))))",
    ),
    P(
        "json_summary",
        APACHE,
        "import json\nfrom collections import Counter\nmethods = Counter(line.split('\"')[1].split(' ')[0] for line in context_lines if '\"' in line)\n"
        "print(json.dumps({'lines': len(context_lines), 'methods': dict(methods)}, sort_keys=True))",
    ),
    P(
        "size_statistics",
        APACHE,
        "import statistics\nsizes = [int(p[9]) for p in (l.split() for l in context_lines) if len(p) > 9 and p[9].isdigit()]\n"
        "print(round(statistics.mean(sizes), 3), statistics.median(sizes), max(sizes), min(sizes))",
    ),
    P(
        "whole_text_regex",
        APACHE,
        "import re\nprint(len(re.findall(r'\" 200 ', context)), context.count('\\n'), len(context))",
    ),
    # ---------------------------------------------------------------- taxis.csv
    P(
        "fare_by_payment",
        TAXIS,
        "import csv, io\nfrom collections import defaultdict\nfares = defaultdict(list)\n"
        "for row in csv.DictReader(io.StringIO(context)):\n    fares[row['payment'] or 'unknown'].append(float(row['fare']))\n"
        "for k in sorted(fares):\n    print(k, len(fares[k]), round(sum(fares[k]) / len(fares[k]), 2))",
    ),
    P(
        "tips_by_borough",
        TAXIS,
        "import csv\nfrom collections import defaultdict\ntips = defaultdict(float)\nrows = csv.DictReader(context_lines)\n"
        "for r in rows:\n    tips[r['pickup_borough'] or '?'] += float(r['tip'])\n"
        "print(sorted(((b, round(t, 2)) for b, t in tips.items()), key=lambda x: -x[1]))",
    ),
    P(
        "longest_trip",
        TAXIS,
        "import csv\nrows = list(csv.DictReader(context_lines))\nlongest = max(rows, key=lambda r: float(r['distance']))\n"
        "print(longest['distance'], longest['pickup_zone'], '->', longest['dropoff_zone'])",
    ),
    P(
        "trips_per_weekday",
        TAXIS,
        "import csv\nfrom datetime import datetime\nfrom collections import Counter\nc = Counter()\n"
        "for r in csv.DictReader(context_lines):\n    c[datetime.strptime(r['pickup'], '%Y-%m-%d %H:%M:%S').strftime('%A')] += 1\n"
        "print(sorted(c.items()))",
    ),
    P(
        "exact_total_decimal",
        TAXIS,
        "import csv\nfrom decimal import Decimal\ntotal = sum((Decimal(r['total']) for r in csv.DictReader(context_lines)), Decimal('0'))\n"
        "print(total)",
    ),
    P(
        "credit_card_share",
        TAXIS,
        "import csv\nrows = list(csv.DictReader(context_lines))\ncc = sum(1 for r in rows if r['payment'] == 'credit card')\n"
        "print(f'{cc / len(rows):.1%} of {len(rows):,} trips')",
    ),
    P(
        "csv_reader_zip_header",
        TAXIS,
        "import csv\nreader = csv.reader(context_lines)\nheader = next(reader)\nfirst = dict(zip(header, next(reader)))\n"
        "print(header.index('tip'), first['color'], first['passengers'])",
    ),
    P(
        "tip_percent_across_cells",
        TAXIS,
        "import csv\nrows = [r for r in csv.DictReader(context_lines) if float(r['fare']) > 0]\nprint(len(rows))",
        "def tip_pct(r):\n    return 100 * float(r['tip']) / float(r['fare'])\npcts = sorted(tip_pct(r) for r in rows)\n"
        "print(round(pcts[len(pcts) // 2], 2))",
        "generous = [r for r in rows if tip_pct(r) > 30]\nprint(len(generous), round(max(map(tip_pct, rows)), 1))",
    ),
    # ---------------------------------------------------------------- OpenSSH
    P(
        "failed_password_users",
        SSH,
        "import re\nfrom collections import Counter\nusers = Counter()\nfor line in context_lines:\n"
        "    m = re.search(r'Failed password for (invalid user )?(\\S+) from (\\S+)', line)\n    if m:\n"
        "        users[m.group(2)] += 1\nprint(users.most_common(3))",
    ),
    P(
        "invalid_user_names",
        SSH,
        "import re\nnames = sorted({m.group(1) for m in (re.search(r'Invalid user (\\S+)', l) for l in context_lines) if m})\n"
        "print(len(names), names[:5])",
    ),
    P(
        "closure_counter_nonlocal",
        SSH,
        "def make_counter():\n    count = 0\n    def see(line):\n        nonlocal count\n"
        "        if 'Failed password' in line:\n            count += 1\n        return count\n    return see\n"
        "see = make_counter()\nfor line in context_lines:\n    last = see(line)\nprint(last)",
    ),
    P(
        "events_per_pid_groupby",
        SSH,
        "import re, itertools\npids = sorted(m.group(1) for m in (re.search(r'sshd\\[(\\d+)\\]', l) for l in context_lines) if m)\n"
        "sizes = [(pid, len(list(g))) for pid, g in itertools.groupby(pids)]\n"
        "print(len(sizes), max(sizes, key=lambda t: t[1]))",
    ),
    P(
        "time_span",
        SSH,
        "from datetime import datetime\ndef when(line):\n    return datetime.strptime('2024 ' + line[:15], '%Y %b %d %H:%M:%S')\n"
        "first, *middle, last = [l for l in context_lines if l.strip()]\nprint(when(last) - when(first), len(middle))",
    ),
    # ---------------------------------------------------------------- HDFS / Linux / Zookeeper
    P(
        "hdfs_blocks",
        HDFS,
        "import re\nfrom collections import Counter\nblocks = Counter(b for l in context_lines for b in re.findall(r'blk_-?\\d+', l))\n"
        "print(len(blocks), blocks.most_common(2))",
    ),
    P(
        "hdfs_levels_and_components",
        HDFS,
        "levels = {}\ncomponents = set()\nfor line in context_lines:\n    parts = line.split()\n"
        "    if len(parts) > 4:\n        levels[parts[3]] = levels.get(parts[3], 0) + 1\n"
        "        components.add(parts[4].rstrip(':'))\nprint(sorted(levels.items()), len(components))",
    ),
    P(
        "linux_structured_events",
        LINUX_CSV,
        "import csv\nfrom collections import Counter\nrows = list(csv.DictReader(context_lines))\n"
        "events = Counter(r['EventId'] for r in rows)\ntop, n = events.most_common(1)[0]\n"
        "template = next(r['EventTemplate'] for r in rows if r['EventId'] == top)\nprint(top, n, template[:60])",
    ),
    P(
        "zookeeper_levels_shorten",
        ZOOKEEPER,
        "import re, textwrap\nfrom collections import Counter\nlevels = Counter()\nfirst_error = None\n"
        "for line in context_lines:\n    m = re.search(r' - (\\w+) +\\[', line)\n    if m:\n        levels[m.group(1)] += 1\n"
        "        if m.group(1) == 'ERROR' and first_error is None:\n            first_error = line\n"
        "print(dict(sorted(levels.items())))\nprint(textwrap.shorten(first_error or '', width=70))",
    ),
    # ---------------------------------------------------------------- JSON lines
    P(
        "nginx_json_connections",
        NGINX,
        "import json\nrecords = [json.loads(l) for l in context_lines if l.strip()]\n"
        "acc = [r['connections']['accepted'] for r in records]\n"
        "print(len(records), acc[-1] - acc[0], max(r['connections']['active'] for r in records))",
    ),
    P(
        "nginx_json_nested_get",
        NGINX,
        "import json\nmissing = 0\nzones = set()\nfor l in context_lines:\n    r = json.loads(l)\n"
        "    try:\n        zones.update(r['server_zones'].keys())\n    except KeyError:\n        missing += 1\n"
        "print(sorted(zones)[:5], missing)",
    ),
    P(
        "gsm8k_answers",
        GSM8K,
        "import json, re\nanswers = []\nwords = 0\nfor l in context_lines:\n    item = json.loads(l)\n"
        "    words += len(item['question'].split())\n    m = re.search(r'####\\s*(-?[\\d,]+)', item['answer'])\n"
        "    answers.append(int(m.group(1).replace(',', '')))\n"
        "print(len(answers), round(words / len(answers), 2), sum(answers) % 1000, max(answers))",
    ),
    P(
        "gsm8k_fractions",
        GSM8K,
        "import json\nfrom fractions import Fraction\nsteps = [json.loads(l)['answer'].count('<<') for l in context_lines]\n"
        "print(Fraction(sum(steps), len(steps)), max(steps))",
    ),
    # ---------------------------------------------------------------- ISO 3166 CSV
    P(
        "countries_per_region",
        ISO,
        "import csv\nfrom collections import Counter\nregions = Counter(r['region'] or '(none)' for r in csv.DictReader(context_lines))\n"
        "for region, n in sorted(regions.items()):\n    print(f'{region:<10}|{n:>4}')",
    ),
    P(
        "report_with_stringio",
        ISO,
        "import csv, io\nrows = list(csv.DictReader(context_lines))\nwith io.StringIO() as out:\n"
        "    for r in rows[:3]:\n        out.write(r['alpha-2'] + ':' + r['name'].upper() + ';')\n    report = out.getvalue()\nprint(report)",
    ),
    P(
        "namedtuple_rows",
        ISO,
        "import csv\nfrom collections import namedtuple\nreader = csv.reader(context_lines)\nheader = [h.replace('-', '_') for h in next(reader)]\n"
        "Country = namedtuple('Country', header)\ncountries = [Country(*r) for r in reader]\n"
        "print(len(countries), countries[0].name, sum(1 for c in countries if c.sub_region == 'Western Europe'))",
    ),
    P(
        "bad_numbers_try_except",
        ISO,
        "import csv\nok = bad = 0\nfor r in csv.DictReader(context_lines):\n    try:\n"
        "        int(r['intermediate-region-code'])\n        ok += 1\n    except ValueError:\n        bad += 1\nprint(ok, bad)",
    ),
    P(
        "repl_echo_and_none",
        ISO,
        "counts = {'lines': len(context_lines)}\ncounts",
        "counts.get('missing')",
        "print('after', counts['lines'])\nNone",
    ),
    P(
        "star_unpacking_and_enumerate",
        ISO,
        "header, *rows = context_lines\nfor i, row in enumerate(rows, start=1):\n    name, code, *rest = row.split(',')\n"
        "    if code == 'FR':\n        break\nprint(i, name, len(rest))",
    ),
    P(
        "nested_format_spec",
        ISO,
        "import csv\nrows = list(csv.DictReader(context_lines))\nwidth = max(len(r['alpha-3']) for r in rows) + 2\n"
        "for r in rows[:3]:\n    print(f\"[{r['alpha-3']:>{width}}] {'{:.3}'.format(r['name'])}\")",
    ),
    P(
        "sorted_min_max_keys",
        ISO,
        "import csv\nrows = list(csv.DictReader(context_lines))\nlongest = max(rows, key=lambda r: len(r['name']))['name']\n"
        "shortest = min(rows, key=lambda r: (len(r['name']), r['name']))['name']\n"
        "print(longest, '|', shortest, '|', sorted(r['alpha-2'] for r in rows)[-3:])",
    ),
]


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _plain_outputs(program: Program) -> list[str]:
    """The same cells in unrestricted CPython, with a REPL's echo of the last expression."""
    text = program.path.read_bytes().decode("utf-8", errors="replace")
    namespace: dict = {"context": text, "context_lines": _split_lines(text), "APACHE_RE": APACHE_RE}
    outputs = []
    for code in program.cells:
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            exec(compile(tree, "<plain>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<plain>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
        outputs.append(buffer.getvalue())
    return outputs


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, Sandbox]]:
    started: dict[Path, Sandbox] = {}
    _CACHE[:] = [tmp_path_factory.mktemp("benign-cache")]
    yield started
    for sandbox in started.values():
        sandbox.kill()


_CACHE: list[Path] = []  # the index cache of the module's workers


def _sandbox_for(sandboxes: dict[Path, Sandbox], path: Path) -> Sandbox:
    """The worker `rlm ask` starts for this file (the product's factory: index, table, limits)."""
    if path not in sandboxes:
        sandbox = product_worker(path, _CACHE[0])
        sandbox.request("set", timeout=10, name="APACHE_RE", value=APACHE_RE)
        sandboxes[path] = sandbox
    return sandboxes[path]


def test_battery_size() -> None:
    assert len(PROGRAMS) >= 40
    assert len({p.name for p in PROGRAMS}) == len(PROGRAMS)
    assert sum(1 for p in PROGRAMS if len(p.cells) > 1) >= 3


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program_output_matches_plain_python(sandboxes: dict[Path, Sandbox], program: Program) -> None:
    expected = _plain_outputs(program)
    sandbox = _sandbox_for(sandboxes, program.path)
    for code, want in zip(program.cells, expected, strict=True):
        reply = sandbox.request("exec", timeout=60, code=code, cpu_seconds=30)
        assert reply["error"] is None, f"{program.name}: {reply['error']}"
        assert reply["output"] == want, program.name
        assert want.strip() or code.endswith("None") or "get(" in code  # programs print something real


def test_independent_checks(sandboxes: dict[Path, Sandbox]) -> None:
    """A few answers computed here without the programs' code."""
    apache = APACHE.read_text(encoding="utf-8", errors="replace").splitlines()
    sandbox = _sandbox_for(sandboxes, APACHE)
    reply = sandbox.request(
        "exec",
        timeout=60,
        cpu_seconds=30,
        code="n = 0\nfor line in context_lines:\n    if ' 404 ' in line:\n        n += 1\nprint(n)",
    )
    assert reply["output"] == f"{sum(1 for line in apache if ' 404 ' in line)}\n"
    reply = sandbox.request(
        "exec", timeout=60, cpu_seconds=30, code="ips = {l.split()[0] for l in context_lines}\nlen(ips)"
    )
    assert reply["output"] == f"{len({line.split()[0] for line in apache})}\n"

    taxis = TAXIS.read_text(encoding="utf-8").splitlines()[1:]
    sandbox = _sandbox_for(sandboxes, TAXIS)
    reply = sandbox.request(
        "exec",
        timeout=60,
        cpu_seconds=30,
        code="import csv\nprint(round(sum(float(r['tip']) for r in csv.DictReader(context_lines)), 2))",
    )
    assert reply["output"] == f"{round(sum(float(line.split(',')[5]) for line in taxis), 2)}\n"
