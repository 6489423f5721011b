"""The command line: the typer app (`app`), its commands and what they print.

Owns argument parsing, exit codes, the live status line, `--json` /
`--jsonl` output and the `ask`, `replay`, `logs`, `stats`, `eval`, `local` and
`warm` commands, and the program's entry (rlm.cli.entry), which hands a run to the warm
process when one serves. The top of the arrows: nothing imports it. What it may import:
docs/architecture.md (the contracts in pyproject.toml).
"""
