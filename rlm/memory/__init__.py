"""Memory that outlives a run: what earlier investigations of the same file established.

`store` is the SQLite database (memories, run records, the sub-call cache),
`rules` how feedback moves scores and tiers, `tags` what a memory is about,
`relevance` whether a question needs it, `recall` what a run is offered at its
start and keeps at its end. What it may import: docs/architecture.md (the
contracts in pyproject.toml).
"""
