"""grep() results inside the worker: every matching line, and how the result reads in the REPL.

A result stands for all the lines that match, never the first few: `len()` is
their exact number and indexing, slicing and loops reach every one of them.
It holds only their line numbers (a compact array, four bytes a match) and
reads a line's text from the mapped file when it is asked for, so a pattern
that matches most lines of a big file costs megabytes, not the file again as
Python strings. Its echo shows the first `shown` lines, the total, and how to
get the rest.

Worker-safe: standard library only (the array comes from rlm.text.textfile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, overload

from rlm.sandbox.worker.formatting import format_grep

__all__ = ["GrepMatches"]

# Line numbers turned into Python ints at a time while a result is looped over.
_ITER_BLOCK = 65_536


class GrepMatches(Sequence[tuple[int, str]]):
    """grep() inside code: every matching line as a (line_number, line) pair, read on access.

    Read-only, like `context_lines`: `list(result)` makes a list that can be changed. A slice
    is such a list. `.total` is `len(result)`; `.pattern` is the pattern searched for.
    """

    __slots__ = ("_line", "_numbers", "_part_of", "pattern", "shown", "total")

    def __init__(
        self,
        pattern: str,
        numbers: Any,
        line: Callable[[int], str],
        shown: int = 50,
        part_of: Callable[[int], tuple[str, int]] | None = None,
    ) -> None:
        self.pattern = pattern
        self._part_of = part_of  # several files read as one: the echo names each line's file
        self._numbers = numbers  # 1-based line numbers, ascending (numpy array or any int sequence)
        self._line = line  # the text of line n, as grep shows it
        self.total = len(numbers)
        self.shown = shown  # lines the echo shows (grep's max_matches)

    def __len__(self) -> int:
        return self.total

    @overload
    def __getitem__(self, index: int) -> tuple[int, str]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, str]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, str] | list[tuple[int, str]]:
        if isinstance(index, slice):
            return [self._pair(int(n)) for n in self._numbers[index]]
        try:
            i = index.__index__()
        except AttributeError:
            raise TypeError(
                f"grep result indices must be integers or slices, not {type(index).__name__}"
            ) from None
        if not -self.total <= i < self.total:
            raise IndexError(f"grep result index out of range: {self.total:,} lines match")
        return self._pair(int(self._numbers[i]))

    def _pair(self, n: int) -> tuple[int, str]:
        return n, self._line(n)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for k in range(0, self.total, _ITER_BLOCK):
            for n in self._block(k):
                yield n, self._line(n)

    def _block(self, k: int) -> list[int]:
        block = self._numbers[k : k + _ITER_BLOCK]
        return block.tolist() if hasattr(block, "tolist") else [int(n) for n in block]

    def __reversed__(self) -> Iterator[tuple[int, str]]:
        for i in range(self.total - 1, -1, -1):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GrepMatches | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares like a list, so unhashable like one

    def __add__(self, other: Sequence[Any]) -> list[Any]:
        return [*self, *other]

    def __radd__(self, other: Sequence[Any]) -> list[Any]:
        return [*other, *self]

    def copy(self) -> list[tuple[int, str]]:
        return list(self)

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a grep() result is read-only: list(result) copies it into a list you can change")

    append = extend = insert = remove = pop = clear = sort = reverse = _read_only

    def __repr__(self) -> str:
        head = [self._pair(int(n)) for n in self._numbers[: self.shown]]
        text = format_grep(self.pattern, self.total, head, self._part_of)
        if self.total > len(head):
            # Printed, a result shows its head; what it returns is every line. Said where it is seen,
            # so a count taken from the echo is never read as the number of matches.
            text += (
                f"\n(the returned list holds all {self.total:,} matching lines as (line_number, line) pairs; "
                f"len() is {self.total:,}: loop over it, or slice it for more, e.g. [{len(head)}:{len(head) + 50}])"
            )
        return text
