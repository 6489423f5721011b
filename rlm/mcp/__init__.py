"""`rlm mcp`: rlm as a Model Context Protocol server, for coding agents (stdio or streamable HTTP).

It owns the server (server: the tools `ask`, `estimate`, `stats`, `replay`, `memory`; over
HTTP, the bearer token), what a client may read (paths: the `--allow` directories and, over
stdio, its declared roots, symlinks resolved first, the file's identity checked again where
it is opened), and how a run is made for it (runs: in a child process, child, so progress can be
forwarded, a cancel can stop it with the trace kept, and nothing of a run reaches the
protocol's stdout). It builds on the Python API (rlm.api) and the replay (rlm.replay); only
rlm.cli imports it. The arrows: docs/architecture.md.
"""
