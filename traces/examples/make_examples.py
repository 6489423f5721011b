"""Regenerate the example traces in this folder: real runs of `rlm ask` on fixtures/.

    .venv/bin/python traces/examples/make_examples.py

The model is the scripted provider (no network, no key): its replies are
written to traces/examples/scripts/ first. Every figure the scripted model
states is computed here from the fixture itself, so the traces tell the
truth about the files; everything else in them (observations, findings,
timings, the tree) is the tool's own output.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BOT = re.compile(r"bot|spider|crawl", re.I)


def _lines(name: str) -> list[str]:
    return (ROOT / "fixtures" / name).read_text(encoding="utf-8", errors="replace").splitlines()


def _agent(line: str) -> str:
    parts = line.rsplit('"', 2)
    return parts[-2] if len(parts) >= 3 else ""


def access_404s() -> tuple[str, str, list[Any], dict[str, str]]:
    lines = _lines("access.log")
    fails = [ln for ln in lines if '" 404 ' in ln]
    paths = collections.Counter(ln.split('"')[1].split()[1] for ln in fails)
    top, n = paths.most_common(1)[0]
    code = (
        "from collections import Counter\n"
        "fails = [l for l in context_lines if '\" 404 ' in l]\n"
        "paths = Counter(l.split('\"')[1].split()[1] for l in fails)\n"
        "print(len(fails))\n"
        "for p, k in paths.most_common(3):\n"
        "    print(k, p)"
    )
    replies = [
        {
            "content": "First, how the 404 lines look.",
            "tool": "grep",
            "args": {"pattern": '" 404 ', "max_matches": 5},
        },
        {"tool": "execute", "args": {"code": code}},
        {
            "tool": "final",
            "args": {"answer": f"{len(fails)} requests returned 404; the most frequent is {top} ({n})."},
        },
        f"{len(fails)} requests returned 404 [F1]. The path that failed most is {top}, {n} times [F2].",
    ]
    return "access.log", "How many requests returned 404, and which path failed most?", replies, {}


def auth_failures() -> tuple[str, str, list[Any], dict[str, str]]:
    lines = _lines("auth.log")
    pattern = re.compile(r"Failed password for (?:invalid user )?(\S+) from (\S+)")
    hits = [m for m in map(pattern.search, lines) if m]
    users = collections.Counter(m.group(1) for m in hits)
    user, count = users.most_common(1)[0]
    ips = collections.Counter(m.group(2) for m in hits if m.group(1) == user)
    ip, ip_count = ips.most_common(1)[0]
    replies = [
        {"content": "A look at the format first.", "tool": "peek", "args": {"start": 1, "length": 6}},
        {"tool": "grep", "args": {"pattern": "Failed password", "max_matches": 5}},
        {
            "tool": "execute",
            "args": {
                "code": "import re\nfrom collections import Counter\n"
                "pat = re.compile(r'Failed password for (?:invalid user )?(\\S+) from (\\S+)')\n"
                "hits = [m for m in map(pat.search, context_lines) if m]\n"
                "users = Counter(m.group(1) for m in hits)\nusers.most_common(5)"
            },
        },
        {
            "tool": "execute",
            "args": {
                "code": f"ips = Counter(m.group(2) for m in hits if m.group(1) == {user!r})\n"
                "note(f'{len(hits)} failed passwords; top sources for " + user + ": {ips.most_common(3)}')\n"
                "ips.most_common(3)"
            },
        },
        {"tool": "final", "args": {"answer": f"{user}: {count} failed logins, most from {ip} ({ip_count})."}},
        f"`{user}` failed to log in most often: {count} of {len(hits)} failed passwords [F2]; "
        f"most of them came from {ip} ({ip_count}) [F3].",
    ]
    return "auth.log", "Which user failed to log in most often, and from where?", replies, {}


def access_bots() -> tuple[str, str, list[Any], dict[str, str]]:
    lines = _lines("access.log")
    bots = [ln for ln in lines if BOT.search(_agent(ln))]
    chunk = 150
    rules = []
    for start in range(1, len(lines) + 1, chunk):
        end = min(len(lines), start + chunk - 1)
        k = sum(1 for ln in lines[start - 1 : end] if BOT.search(_agent(ln)))
        rules.append(
            {
                "match": rf"Excerpt \(lines {start:,}-{end:,}\)",
                "reply": f"{k} requests in this excerpt come from bots or crawlers.",
                "times": 1,
            }
        )
    second = [ln for ln in lines[1000:2000] if BOT.search(_agent(ln))]
    second_top = collections.Counter(_agent(ln) for ln in second).most_common(1)[0]
    top_name = "archive.org_bot" if "archive.org_bot" in second_top[0] else second_top[0][:40]
    replies = [
        {"tool": "grep", "args": {"pattern": "bot|spider|crawl", "ignore_case": True, "max_matches": 3}},
        {
            "tool": "execute",
            "args": {
                "code": "import re\nfrom collections import Counter\nBOT = re.compile(r'bot|spider|crawl', re.I)\n"
                "agents = Counter(l.rsplit('\"', 2)[-2] for l in context_lines if l.count('\"') >= 2)\n"
                "bot_agents = Counter({a: n for a, n in agents.items() if BOT.search(a)})\n"
                "print(sum(bot_agents.values()), 'bot requests')\nfor a, n in bot_agents.most_common(3):\n    print(n, a[:70])"
            },
        },
        {
            "tool": "partition_map",
            "args": {
                "question": "How many requests in this excerpt come from bots or crawlers (by user agent)? Give the number.",
                "chunk_lines": chunk,
            },
        },
        {
            "tool": "execute",
            "args": {
                "code": "counts = [int(re.search(r'\\d+', r).group()) for r in results]\nprint(counts, sum(counts))"
            },
        },
        {
            "tool": "llm_query",
            "args": {
                "question": "How many requests in these lines come from bots, and which bot made the most?",
                "start_line": 1001,
                "end_line": 2000,
            },
        },
        # The child node (lines 1001-2000) investigates on its own:
        {
            "tool": "execute",
            "args": {
                "code": "import re\nfrom collections import Counter\n"
                "b = [l.rsplit('\"', 2)[-2] for l in context_lines if re.search(r'bot|spider|crawl', l.rsplit('\"', 2)[-2], re.I)]\n"
                "print(len(b))\nprint(Counter(b).most_common(1))"
            },
        },
        {
            "tool": "final",
            "args": {"answer": f"{len(second)} bot requests; most from {top_name} ({second_top[1]})"},
        },
        f"{len(second)} of these 1,000 requests come from bots; {top_name} made the most ({second_top[1]}) [F5].",
        {"tool": "final", "args": {"answer": f"{len(bots)} of {len(lines)} requests come from bots."}},
        f"{len(bots)} of the {len(lines):,} requests ({100 * len(bots) / len(lines):.0f}%) come from bots or "
        f"crawlers [F2], the same total as the per-chunk counts [F4]; in the second half, {top_name} "
        f"is the busiest [F7].",
    ]
    # Sub-calls may take 20,000 tokens, so 150-line chunks fit in one call.
    return (
        "access.log",
        "How much of the traffic comes from bots?",
        {"rules": rules, "replies": replies},
        {"RLM_SUB_PROMPT_TOKENS": "20000"},
    )


def run(name: str, fixture: str, question: str, script: Any, env_extra: dict[str, str]) -> None:
    scripts = HERE / "scripts"
    scripts.mkdir(exist_ok=True)
    script_path = scripts / f"{name}.json"
    script_path.write_text(json.dumps(script, indent=1) + "\n")
    out = HERE / ".new"
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", f"fixtures/{fixture}", question, "-q",
         "-m", f"scripted/{script_path.relative_to(ROOT)}", "--trace-dir", str(out.relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"{name}: rlm ask failed ({proc.returncode}): {proc.stderr}")
    produced = sorted(out.glob("*.json"))[-1]
    shutil.move(produced, HERE / f"{name}.json")
    shutil.rmtree(out, ignore_errors=True)
    print(f"{name}.json: {proc.stdout.strip()}")


def main() -> None:
    for name, make in (
        ("access-404s", access_404s),
        ("auth-failed-logins", auth_failures),
        ("access-bots", access_bots),
    ):
        fixture, question, script, env = make()
        run(name, fixture, question, script, env)


if __name__ == "__main__":
    main()
