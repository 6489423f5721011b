"""The trace: its schema (`schema`, typed and versioned), the writer, the reader, redaction.

Every run leaves one JSON document; `schema` is the single definition of its
shape, used by the writer and by every reader (replay, verify, rerun, logs);
docs/trace-format.md is checked against it. While the run goes the document is
an event log appended to (`eventlog`), folded into the document at its end and
by any reader of a log a killed run left. May import: rlm.errors,
rlm.privatefiles, the version.
"""
