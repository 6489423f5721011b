"""Opening an input (path, stdin, FIFO), its profile, log formats and the cached index and table.

Runs in the parent. `source.open_source` returns a `Source` with the
profile the prompt shows; `tables` builds the DuckDB table of a recognised
log format (`logformats`) and serves `sql()` inside the worker, where it is
opened before lock-down. May import: rlm.text, rlm.errors.
"""
