"""Memory: what is available, the limit a run may keep, this process's resident memory, and the checks that
refuse a size from its estimate before anything is allocated."""

from __future__ import annotations

import ctypes
import functools
import gc
import math
import os
import sys

import psutil
import torch

from ._validation import ParameterError


def available_memory(device=None) -> int | None:
    """Bytes of memory available for new allocations: psutil's ``virtual_memory().available`` on the host
    (``MemAvailable`` of ``/proc/meminfo`` on Linux; ``sysconf``'s available pages where psutil fails), free
    memory of the GPU for a CUDA device; ``None`` when unknown."""
    if device is not None and torch.device(device).type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except (RuntimeError, AssertionError, ValueError, AttributeError):  # unknown is acceptable
            return None
    try:
        return int(psutil.virtual_memory().available)
    except (psutil.Error, OSError, RuntimeError, ValueError, AttributeError):  # unknown here: the fallback
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(device=None) -> int | None:
    """The most bytes a run may keep in saved states: ``NQF_MEMORY_LIMIT`` (bytes) if set, else a quarter
    of :func:`available_memory`."""
    env = os.environ.get("NQF_MEMORY_LIMIT")
    if env:
        try:
            return int(float(env))
        except ValueError:
            raise ParameterError(f"`NQF_MEMORY_LIMIT` must be a number of bytes; found {env!r}") from None
    avail = available_memory(device)
    return None if avail is None else avail // 4


def process_memory() -> tuple[int | None, int | None]:
    """``(resident bytes now, peak resident bytes so far)`` of this process: psutil's ``memory_info().rss`` and
    ``getrusage``'s ``ru_maxrss`` (KiB on Linux, bytes on macOS; psutil has no portable peak); ``None`` for what
    the platform does not tell."""
    now = peak = None
    try:
        now = int(psutil.Process().memory_info().rss)
    except (psutil.Error, OSError, RuntimeError, ValueError, AttributeError):  # unknown is acceptable
        pass
    try:
        import resource

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    return now, peak


def _saved_states(steps: int, save_every: int) -> int:
    return steps // save_every + 2  # step 0, every save_every-th step, and the last step


def check_saved_memory(
    steps: int, save_every: int, bytes_per_state: int, *, device=None, limit: int | None = None
) -> int:
    """Estimate the bytes kept by saving every ``save_every``-th state; refuse above the limit.

    Returns the estimate.  Raises :class:`ParameterError` naming ``save_every`` and the smallest
    value that would fit when the estimate exceeds ``limit`` (default :func:`memory_limit`).
    """
    n = _saved_states(steps, save_every)
    total = n * int(bytes_per_state)
    if limit is None:
        limit = memory_limit(device)
    if limit is None or total <= limit:
        return total
    per = max(int(bytes_per_state), 1)
    fit_states = limit // per
    if fit_states < 3:
        raise ParameterError(
            f"`save_every`: one saved state takes {_bytes(per)}, more than the memory limit {_bytes(limit)} allows "
            f"for even the first and last state; save fewer arrays (save_M=False / save_W=False)"
        )
    fit = max(save_every, math.ceil(steps / (fit_states - 2)))
    while _saved_states(steps, fit) * per > limit:
        fit += 1
    raise ParameterError(
        f"`save_every`={save_every} keeps {n} states of {_bytes(per)} each = {_bytes(total)}, above the limit of "
        f"{_bytes(limit)} (a quarter of the available memory, or NQF_MEMORY_LIMIT); use save_every ≥ {fit}, "
        f"or save fewer arrays (save_M=False / save_W=False)"
    )


def check_memory(nbytes: float, names: str, what: str, *, device=None, limit: int | None = None) -> float:
    """Refuse sizes whose arrays cannot fit, from an estimate, before anything is allocated.

    ``nbytes`` is a lower bound of what the sizes allocate (``what`` says which arrays), ``names`` the
    parameters with their values (``"`width` = 10⁹"``).  Above ``limit`` (default :func:`memory_limit`: a
    quarter of the available memory, or ``NQF_MEMORY_LIMIT`` bytes, the override) raises
    :class:`ParameterError` naming them; returns ``nbytes``.  The same limit as :func:`check_saved_memory`.
    """
    if limit is None:
        limit = memory_limit(device)
    if limit is None or nbytes <= limit:
        return nbytes
    raise ParameterError(
        f"{names}: needs at least {_bytes(nbytes)} ({what}), above the memory limit of {_bytes(limit)} (a quarter "
        "of the available memory; set NQF_MEMORY_LIMIT=BYTES to allow more); choose smaller sizes"
    )


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


@functools.cache
def _glibc():
    """The C library when it is glibc (``malloc_trim`` exists), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def release_free_memory() -> None:
    """Hand the heap's free memory back to the system: a garbage collection, then glibc's ``malloc_trim(0)``
    (a no-op elsewhere).  Freed blocks otherwise stay resident, so a stage's transient arrays (the saddle
    sequence's dense orbit outputs: ≈ 50 MB on digits) would add to the peak of every later stage
    (digits analysis, width 256: peak 508.5 → 481.1 MiB with one call after the prediction)."""
    gc.collect()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
