"""rlm: answer questions about files far too big for any prompt."""

__version__ = "0.1.0"
