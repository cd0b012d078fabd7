"""nqf._memory.release_free_memory hands freed heap memory back to the system (glibc), so one stage's transient
arrays do not add to the peak of the next (nqf.analyze calls it after the prediction and the timed runs)."""

import numpy as np
import pytest

from nqf._memory import _glibc, process_memory, release_free_memory


@pytest.mark.skipif(_glibc() is None or process_memory()[0] is None, reason="needs glibc and the resident size")
def test_freed_heap_memory_leaves_the_resident_set():
    release_free_memory()
    base = process_memory()[0]
    assert base is not None
    blocks = [np.ones(8_000) for _ in range(20_000)]  # 64 kB each (below the mmap threshold: on the heap), 1.3 GB
    grown = process_memory()[0]
    assert grown is not None and grown - base > 1_000 * 2**20
    del blocks
    held = process_memory()[0]
    release_free_memory()
    now = process_memory()[0]
    assert held is not None and now is not None
    assert now - base < 0.2 * (grown - base), (base, grown, held, now)  # handed back: not resident any more


def test_release_is_harmless_without_glibc(monkeypatch):
    import nqf._memory as memory

    monkeypatch.setattr(memory, "_glibc", lambda: None)
    release_free_memory()  # a garbage collection only
