"""The only door to litellm: `client.ModelClient` (retries, time limits, usage), the budget, tokens.

litellm is imported lazily, inside `client`, only when a model is called.
`testing.scripted` is the scripted provider the tests (and `rlm eval`'s
self-checks) drive runs with; product code reaches it only through the
client's provider table. `budget` lives here, not in rlm.run, because the
client admits every call against it before the call is made (one door, one
check). What it may import: docs/architecture.md (the contracts in
pyproject.toml).
"""
