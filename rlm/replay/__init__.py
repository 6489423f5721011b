"""Reading recorded runs back: render a trace, verify it, re-run it, list runs.

May import: rlm.trace, rlm.run (verify and rerun replay actions through the
same runner a live node uses), rlm.sandbox, rlm.input, rlm.errors.
"""
