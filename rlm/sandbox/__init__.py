"""The sandbox boundary: the parent's `client.Sandbox`, the OS limits and the `worker` package.

`client` runs in the parent and treats the worker as hostile (JSON replies,
size caps, kill on timeout). `oslimits` is the lock-down itself (rlimits,
network namespace, uid drop, Landlock, seccomp). Everything under `worker/`
runs inside the locked-down process. What it may import:
docs/architecture.md (the contracts in pyproject.toml).
"""
