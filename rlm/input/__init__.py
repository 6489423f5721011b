"""Opening an input (path, stdin, FIFO), its profile, log formats and the cached index and table.

Runs in the parent. `source.open_source` returns a `Source` with the profile
the prompt shows (`detect` names its format); `parts.open_inputs` reads several
files (rotated, compressed, globbed; in the order `order` sets) as one such
input, joined once into the cache, `remote` objects in S3 or GCS and files over
HTTPS among them (each copied once into the cache); `tables` builds the DuckDB
table of a recognised log format (`logformats`), which the worker opens
before lock-down to serve `sql()` (rlm.sandbox.worker.sql_session); `stats` and
`templates` sum an input up over that table, with no model (`rlm stats`). What it
may import: docs/architecture.md (the contracts in pyproject.toml).
"""
