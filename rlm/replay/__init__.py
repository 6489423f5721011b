"""Reading recorded runs back: render a trace, verify it, re-run it, list runs.

verify and rerun replay actions through the same runner a live node uses
(rlm.run). What it may import: docs/architecture.md (the contracts in
pyproject.toml).
"""
