"""The `rlm` program: a run handed to the warm process when one serves this code, else run here.

Kept apart from rlm.cli.app so that a run the warm process takes imports nothing but the
standard library here (rlm.cli.warm_client): the point is the seconds not spent.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    from rlm.cli.warm_client import forward

    code = forward(sys.argv[1:])
    if code is not None:
        os._exit(code)
    from rlm.cli.app import main as run_here

    run_here()


if __name__ == "__main__":
    main()
