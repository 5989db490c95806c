"""numeric.memory.give_back: heap pages freed by the process go back to the system (glibc's malloc_trim), which
glibc keeps otherwise (the freed memory of a large model's passes stacked on the next pass's peak)."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from gradaudit.numeric import memory

PAGE = os.sysconf("SC_PAGE_SIZE")


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@pytest.mark.skipif(not sys.platform.startswith("linux") or memory._malloc_trim() is None,
                    reason="glibc's malloc_trim only")
def test_freed_heap_pages_are_returned_to_the_system():
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    # 3000 blocks of 64 KiB (below glibc's mmap threshold: on the heap), each written so that it is resident; the
    # last one stays allocated, so that freeing the others cannot shrink the heap from its top
    blocks = [libc.malloc(64 << 10) for _ in range(3000)]
    assert all(blocks)
    for b in blocks:
        ctypes.memset(b, 1, 64 << 10)
    for b in blocks[:-1]:
        libc.free(b)
    held = _resident()
    memory.give_back()
    released = held - _resident()
    libc.free(blocks[-1])
    assert released > 100 << 20, f"{released >> 20} MiB returned of about 187 MiB freed"


def test_give_back_is_a_no_op_without_malloc_trim(monkeypatch):
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    memory.give_back()  # nothing to call: returns without error
