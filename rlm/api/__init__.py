"""The Python API: `rlm.ask`, `rlm.aask`, `rlm.estimate` and the typed `Result` they return.

It owns what a program gets instead of the command line: settings resolved as
`rlm ask` resolves them (keyword arguments in the place of flags), the run's
progress as typed events handed to a callback, the outcome as a dataclass, and
every failure as an exception carrying the documented exit code. It prints
nothing. It imports the run (`rlm.run`) and the model's prices (`rlm.model`);
`rlm.mcp` and `rlm.cli` build on it. The arrows: docs/architecture.md.
"""
