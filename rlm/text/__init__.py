"""Worker-safe text: the line index, the mapped view of the file, grep, caps on text.

These modules run inside the locked-down worker, where no new module can be
imported: they import only the standard library, numpy and each other, all
at module load, never at call time. What the parent and the worker share
about SQL lives here too: `sqltext` (quoting) and `tabledb` (how a connection
to the table file behaves). The worker boundary: docs/architecture.md, the
contracts in pyproject.toml and tests/test_house.py.
"""
