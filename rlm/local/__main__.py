"""`python -m rlm.local setup|status`: the same commands as `rlm local`, without the engine."""

from rlm.local.cli import app

if __name__ == "__main__":
    app(prog_name="rlm local")
