"""The worker process (`python -m rlm.sandbox.worker.main`): everything that runs after lock-down.

`main` reads the spec, preloads and starts what is needed, locks the process
down (`rlm.sandbox.oslimits`) and serves cells; `policy` is the
RestrictedPython interpreter and its guards; `modules` the allowed imports;
`formatting` how results print. May import: the standard library, numpy,
RestrictedPython, duckdb (opened before lock-down), rlm.text, rlm.input.tables
and rlm.sandbox.oslimits; nothing is imported at call time
(tests/test_house.py enforces it).
"""
