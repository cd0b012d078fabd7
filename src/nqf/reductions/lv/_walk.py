"""The event loop of :func:`nqf.reductions.lv.limit` for a dense ``C`` (docs/theory.md §4.3).

:class:`Walk` holds ``τ``, the log coordinates ``s``, the active-set solver and the outputs
so far.  It advances either one event at a time with the exact velocities of every inactive
mode (:meth:`Walk.exact_step`), or by a blocked epoch of many events
(:class:`nqf.reductions.lv._epoch.Epoch`); both produce the same events.
"""

from __future__ import annotations

import numpy as np

from ...errors import InvalidParameterError
from ._epoch import MAX_JOINS, Epoch
from ._qp import ActiveSetQP, UnboundedError

EPOCHS = True  # blocked epochs (False: one exact step per event, the reference path)
SKIP = 4  # exact steps after an epoch that made no progress


class Walk:
    """State of the event loop; ``events`` holds ``(τ, mode, kind, active, loss, value)`` tuples."""

    def __init__(self, qp: ActiveSetQP, b: np.ndarray, s: np.ndarray, vthr: float, stol: float):
        self.qp, self.b, self.s = qp, b, s
        self.vthr, self.stol = vthr, stol
        self.tau = 0.0
        self.events: list[tuple] = []
        self.z_after: list[np.ndarray] = []
        self.path_tau, self.path_s = [0.0], [s.copy()]
        self.finite = np.isfinite(s)
        self.skip = 0

    def run(self, max_events: int) -> None:
        """Events until the KKT conditions hold (InvalidParameterError past ``max_events``)."""
        self.process()
        while len(self.events) <= max_events:
            if EPOCHS and self.epoch():
                continue
            if not self.exact_step():
                return
        raise InvalidParameterError(f"`limit` exceeded `max_events` = {max_events}")

    def exact_step(self) -> bool:
        """The next event from the exact velocities of all modes; False when none has ``v > 0``."""
        s = self.s
        v = 4.0 * self.qp.free_gradient()
        idx = np.flatnonzero((v > self.vthr) & self.finite)
        if not idx.size:
            return False
        dt = -s[idx] / v[idx]
        jj = int(np.argmin(dt))
        dtau = max(float(dt[jj]), 0.0)
        self.tau += dtau
        # s ← min(s + v dτ, 0): unchanged on the active set (s = v = 0) and at s = −inf
        step = v * dtau
        step += s
        np.minimum(step, 0.0, out=s)
        s[int(idx[jj])] = 0.0
        self.path_tau.append(self.tau)
        self.path_s.append(s.copy())
        self.process()
        return True

    def process(self) -> bool:
        """All joins and leaves at ``τ`` with the exact solver: add every mode at ``s = 0`` with ``v > 0``, in turn.

        Sets ``s_k = 0`` of the modes that join and emits the modes that changed membership
        (on before off); True if any did.
        """
        qp, s = self.qp, self.s
        was = {}  # membership before this τ of every mode that joins or leaves at this τ
        for _ in range(3 * s.shape[0] + 10):
            v = 4.0 * qp.free_gradient()
            idx = np.flatnonzero((v > self.vthr) & (s >= -self.stol))
            if not idx.size:
                break
            k = int(idx[np.argmax(v[idx])])
            s[k] = 0.0
            was.setdefault(k, False)
            try:
                removed = qp.add(k)
            except UnboundedError as exc:
                raise InvalidParameterError(f"`beta`, `C`: {exc}") from None
            for r in removed:
                was.setdefault(r, True)
        in_p = qp.in_p
        on = sorted(k for k, w in was.items() if not w and in_p[k])
        off = sorted(k for k, w in was.items() if w and not in_p[k])
        self.emit(on, off)
        return bool(on or off)

    def emit(self, on: list, off: list) -> None:
        """Events of the modes ``on`` and ``off`` at ``τ``, with the plateau after them."""
        if not (on or off):
            return
        z = self.qp.z.copy()
        val = -0.5 * float(self.b @ z)
        act = tuple(np.flatnonzero(self.qp.in_p).tolist())
        for k in on:
            self.events.append((self.tau, k, "on", act, val, float(z[k])))
            self.z_after.append(z)
        for k in off:
            self.events.append((self.tau, k, "off", act, val, 0.0))
            self.z_after.append(z)

    def epoch(self) -> bool:
        """One blocked epoch, then the joins it left at its last ``τ``; True if any event happened."""
        if self.skip:
            self.skip -= 1
            return False
        ep = Epoch(self.qp, self.s, self.tau)
        n0 = len(self.events)
        while len(ep.N) < MAX_JOINS:
            nxt = ep.advance(self.tau, self.vthr)
            if nxt is None:
                break
            self.tau, sI, v = nxt
            row = self.s.copy()
            row[ep.I] = sI
            self.path_tau.append(self.tau)
            self.path_s.append(row)
            if not self._joins(ep, sI, v):
                break
        ep.commit(self.tau, self.s)
        done = len(self.events) > n0
        done = self.process() or done  # joins the epoch left to the exact solver
        if not done:
            self.skip = SKIP
        return done

    def _joins(self, ep: Epoch, sI: np.ndarray, v: np.ndarray) -> bool:
        """Joins at ``τ`` within the epoch, most positive velocity first; False if one needs the exact solver."""
        joined = []
        complete = True
        while True:
            ok = ~ep.active & (v > self.vthr) & (sI >= -self.stol)
            if not ok.any():
                break
            c = int(np.argmax(np.where(ok, v, -np.inf)))
            if not ep.join(c, self.qp.rtol):
                complete = False
                break
            joined.append(int(ep.I[c]))
            sI, v = ep.state(self.tau)
        self.emit(sorted(joined), [])
        return complete

    def extended(self):
        """The path continued past the last event for plotting: ``(1.25 τ, s)`` (``(1, s)`` when ``τ = 0``)."""
        qp, s, tau = self.qp, self.s, self.tau
        v = 4.0 * qp.free_gradient()
        end = 1.25 * tau if tau > 0 else 1.0
        s_end = s.copy()
        fin = ~qp.in_p & np.isfinite(s)
        s_end[fin] = np.minimum(s[fin] + v[fin] * (end - tau), 0.0)
        return end, s_end
