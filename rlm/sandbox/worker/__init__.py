"""The worker process (`python -m rlm.sandbox.worker.main`): everything that runs after lock-down.

`main` reads the spec, preloads and starts what is needed, locks the process
down (`rlm.sandbox.oslimits`) and serves cells; `interpreter` runs a cell in
the persistent namespace under `policy`, the RestrictedPython guards and
checks; `stand_ins` are the modules a cell may import (`modules` lists
them); `sql_session` serves `sql()` over the input's table, `sql_result` is
what it returns; `files` which input file each line came from (several
inputs read as one); `formatting` how results print. Everything it needs is
imported before lock-down, never at call time. What it may import (the worker
boundary): docs/architecture.md, the contracts in pyproject.toml and
tests/test_house.py.
"""
