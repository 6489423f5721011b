"""The command line: the typer app (`app`), its commands and what they print.

Owns argument parsing, exit codes, the live status line, `--json` / `--jsonl`
output and the `ask`, `replay`, `logs`, `eval` and `local` commands.
May import: rlm.run, rlm.replay, rlm.trace, rlm.local, rlm.errors. Nothing
imports rlm.cli.
"""
