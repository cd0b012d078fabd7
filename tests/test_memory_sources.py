"""nqf._memory reads host and process memory through psutil: the values are psutil's (planted fakes come back),
agree with the kernel's own files on Linux, and fall back (sysconf, None) where psutil fails."""

import os
import sys
from types import SimpleNamespace

import numpy as np
import psutil
import pytest

import nqf._memory as memory
from nqf._memory import available_memory, memory_limit, process_memory

LINUX = sys.platform.startswith("linux")


def _boom(*args, **kwargs):
    raise psutil.AccessDenied(os.getpid())


def test_available_memory_is_psutils(monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=123_456_789))
    assert available_memory() == 123_456_789
    monkeypatch.delenv("NQF_MEMORY_LIMIT", raising=False)
    assert memory_limit() == 123_456_789 // 4


def test_available_memory_falls_back_to_sysconf(monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", _boom)
    try:
        want = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        want = None
    assert available_memory() == want
    monkeypatch.setattr(memory.os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert available_memory() is None


def test_the_environment_override_still_wins(monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=4))
    monkeypatch.setenv("NQF_MEMORY_LIMIT", "1e9")
    assert memory_limit() == 10**9


@pytest.mark.skipif(not LINUX, reason="compares with /proc/meminfo")
def test_available_memory_matches_meminfo():
    with open("/proc/meminfo") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
    got = available_memory()
    assert got is not None and abs(got - kib * 1024) < max(0.05 * got, 256 * 2**20)


def test_resident_memory_is_psutils(monkeypatch):
    class _Proc:
        def memory_info(self):
            return SimpleNamespace(rss=987_654_321)

    monkeypatch.setattr(psutil, "Process", _Proc)
    now, peak = process_memory()
    assert now == 987_654_321 and (peak is None or peak > 0)
    monkeypatch.setattr(psutil, "Process", _boom)
    assert process_memory()[0] is None


@pytest.mark.skipif(not LINUX, reason="compares with /proc/self/statm and ru_maxrss in KiB")
def test_resident_and_peak_memory_track_an_allocation():
    with open("/proc/self/statm") as fh:
        statm = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    now, peak = process_memory()
    assert now is not None and peak is not None
    assert abs(now - statm) < 64 * 2**20 and peak >= 0.9 * now
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
    grown, peak2 = process_memory()
    assert grown is not None and peak2 is not None
    assert grown - now > 48 * 2**20 and peak2 >= grown - 4 * 2**20
    del block
