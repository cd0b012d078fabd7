"""Compact, immutable records of a long ε → 0 limit on a banded ``C`` (:func:`nqf.reductions.lv.limit`).

With ``K = 10⁴`` modes and as many events, the dense records (the active set after each event,
the state after each event, the paths at each breakpoint) would take ``O(K²)`` numbers.  Here
they are logs of changes, shared by all events and materialised on demand:

* :class:`Support` — the active set after one event (a sequence of int, like a tuple);
* :class:`States` — the plateau state after each event (a sequence of arrays of shape (K,));
* :class:`Knots` — the log coordinates ``s_k(τ)``: a knot ``(τ, k, s, v)`` wherever the velocity
  of mode ``k`` changes, straight lines (capped at 0) in between.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Support(Sequence):
    """The active set after the first ``n`` membership changes of a shared log ``(modes, +1/−1)``."""

    __slots__ = ("_log", "_n")

    def __init__(self, log: dict, n: int):
        self._log, self._n = log, n

    def _tuple(self) -> tuple:
        K, modes, signs = self._log["K"], self._log["modes"], self._log["signs"]
        count = np.zeros(K, dtype=np.int64)
        np.add.at(count, np.asarray(modes[: self._n], dtype=np.int64), np.asarray(signs[: self._n], dtype=np.int64))
        return tuple(np.flatnonzero(count > 0).tolist())

    def __getitem__(self, i):
        return self._tuple()[i]

    def __len__(self) -> int:
        return len(self._tuple())

    def __iter__(self):
        return iter(self._tuple())

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, Support)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._tuple())

    def __repr__(self) -> str:
        return f"Support[{self._n} changes]"

    def __reduce__(self):
        return (Support, (self._log, self._n))

    def to_dict(self) -> list:
        """JSON form: the list of active modes."""
        return list(self._tuple())


class States(Sequence):
    """Plateau states after each event: event ``i`` sets ``z[idx[i]] = val[i]`` on the previous state."""

    def __init__(self, K: int, idx: list, val: list):
        self.K, self._idx, self._val = K, idx, val

    def __len__(self) -> int:
        return len(self._idx)

    def __iter__(self):
        z = np.zeros(self.K)
        for i, v in zip(self._idx, self._val, strict=True):
            z[i] = v
            yield z.copy()

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self._idx)
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError(i)
        z = np.zeros(self.K)
        for j in range(i + 1):
            z[self._idx[j]] = self._val[j]
        return z


class Knots:
    """Piecewise-linear ``s_k(τ)``: knots ``(τ, k, s, v)`` in time order, one per change of ``v_k``."""

    def __init__(self, s0: np.ndarray, tau, mode, s, v):
        self.s0 = np.asarray(s0, dtype=np.float64)
        self.tau = np.asarray(tau, dtype=np.float64)
        self.mode = np.asarray(mode, dtype=np.int64)
        self.s = np.asarray(s, dtype=np.float64)
        self.v = np.asarray(v, dtype=np.float64)

    def at(self, t: np.ndarray) -> np.ndarray:
        """``s(τ)`` for the times ``t`` (shape (T,)), shape (T, K)."""
        out = np.empty((t.shape[0], self.s0.shape[0]))
        for r, tq in enumerate(t):
            base_s, base_t, base_v = self.s0.copy(), np.zeros_like(self.s0), np.zeros_like(self.s0)
            n = int(np.searchsorted(self.tau, tq, side="right"))
            # the latest knot of each mode at or before tq
            u, first = np.unique(self.mode[:n][::-1], return_index=True)
            last = n - 1 - first
            base_s[u], base_t[u], base_v[u] = self.s[last], self.tau[last], self.v[last]
            with np.errstate(invalid="ignore"):
                out[r] = np.minimum(base_s + base_v * (tq - base_t), 0.0)
            out[r][np.isneginf(base_s)] = -np.inf
        return out
