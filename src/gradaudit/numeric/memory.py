"""Memory a large model's passes freed, handed back to the system between them.

TensorFlow's CPU tensors are allocated with glibc's malloc, which keeps freed heap pages for reuse instead of
returning them: after the local checks or a batched gradient pass over a ResNet50 the process held about 0.5 GiB
it no longer used, which the next pass's peak stacked on top of. `give_back` asks glibc to release them
(malloc_trim); elsewhere (another C library, another platform) it does nothing."""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


def give_back() -> None:
    """Return the freed heap pages of this process to the system (glibc's malloc_trim; a no-op without it)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
