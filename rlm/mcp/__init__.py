"""`rlm mcp`: rlm as a Model Context Protocol server, for coding agents (stdio or streamable HTTP).

It owns the server (server: the tools `ask`, `estimate`, `stats`, `replay`, `memory`), what a
client may read (paths: its declared roots and `--allow` directories, symlinks resolved
first), and how a run is made for it (runs: in a child process, child, so progress can be
forwarded, a cancel can stop it with the trace kept, and nothing of a run reaches the
protocol's stdout). It builds on the Python API (rlm.api) and the replay (rlm.replay); only
rlm.cli imports it. The arrows: docs/architecture.md.
"""
