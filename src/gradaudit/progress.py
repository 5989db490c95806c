"""Progress of one audit, for a person watching a terminal: the stage and what it is checking.

The stages say what they do through `say`; the CLI observes it (a status line on stderr when stderr is a
terminal, nothing when piped). Nothing here changes a result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

_sink: Callable[[str], None] | None = None


def say(message: str) -> None:
    if _sink is not None:
        _sink(message)


@contextmanager
def observed(sink: Callable[[str], None]) -> Iterator[None]:
    """Send what the stages say to `sink` while the block runs."""
    global _sink  # noqa: PLW0603 - one observer per process, set by the CLI around the audit
    previous, _sink = _sink, sink
    try:
        yield
    finally:
        _sink = previous
