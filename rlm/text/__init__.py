"""Worker-safe text: the line index, the mapped view of the file, grep, caps on text.

These modules run inside the locked-down worker, where no new module can be
imported: they import only the standard library, numpy and each other, all
at module load, never at call time (tests/test_house.py enforces it).
"""
