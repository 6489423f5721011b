"""The trace: its schema (`schema`, typed and versioned), the writer, the reader, redaction.

Every run writes one JSON document; `schema` is the single definition of its
shape, used by the writer and by every reader (replay, verify, rerun, logs);
docs/trace-format.md is checked against it. May import: rlm.errors only.
"""
