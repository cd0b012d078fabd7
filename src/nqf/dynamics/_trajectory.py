"""The result object of every dynamics run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from ..errors import DivergenceError, ShapeError
from ..results import Result, summarize, to_jsonable

__all__ = ["Trajectory", "DIVERGED", "FINISHED"]

FINISHED = 0
DIVERGED = -1


@dataclass(frozen=True)
class Trajectory(Result):
    """Saved states of a training run (NQF or real network).

    Conventions (docs/theory.md §0): ``L = (1/N) Σ_n ℓ(f_n, y_n)`` on the full data,
    training time ``t = η · step``; for gradient flow ``step`` is ``None``.

    Attributes
    ----------
    t : torch.Tensor, shape (K,)
        Training time of each saved state.
    loss : torch.Tensor, shape (K,)
        Full-data loss at each saved state.
    step : torch.Tensor of int64, shape (K,), or None
        Step index of each saved state.
    M : torch.Tensor, shape (K, p, p), or None
        Order parameter ``M = W Wᵀ`` (``None`` when not saved).
    W : torch.Tensor, shape (K, p, m), or None
        Unit weights (weight form and real networks only).
    mu : torch.Tensor, shape (K, p), or None
        ``μ = Σ_i w_i`` (only tracked without the zero-gradient condition).
    status : int
        ``0``: finished; ``-1``: stopped because the run diverged (the states
        up to the divergence are kept).  In the style of
        ``scipy.integrate.solve_ivp`` (for gradient flow, its status).
    message : str
        Human-readable reason for the termination.
    info : dict
        Run settings (form, optimizer, lr, …) and counters.
    """

    t: torch.Tensor
    loss: torch.Tensor
    step: torch.Tensor | None = None
    M: torch.Tensor | None = None
    W: torch.Tensor | None = None
    mu: torch.Tensor | None = None
    status: int = FINISHED
    message: str = "finished"
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.t, torch.Tensor) or self.t.ndim != 1:
            raise ShapeError(f"`t` must be a 1-D tensor of saved times; found {_shape(self.t)}")
        K = int(self.t.shape[0])
        for name in ("loss", "step", "M", "W", "mu"):
            x = getattr(self, name)
            if name != "loss" and x is None:
                continue
            if not isinstance(x, torch.Tensor) or x.ndim == 0 or int(x.shape[0]) != K:
                raise ShapeError(f"`{name}` must hold one entry per saved time (K = {K}); found {_shape(x)}")

    @property
    def success(self) -> bool:
        """True when the run reached its requested end."""
        return self.status >= 0

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def head(self, n: int) -> Trajectory:
        """The first ``n`` saved states (every saved array cut at ``n``; status, message and info kept)."""
        cut = {k: getattr(self, k)[:n] for k in ("t", "loss", "step", "M", "W", "mu") if getattr(self, k) is not None}
        return dataclasses.replace(self, **cut)

    def raise_for_status(self) -> Trajectory:
        """Raise :class:`~nqf.errors.DivergenceError` (carrying ``self``) if the run failed."""
        if not self.success:
            err = DivergenceError(self.message)
            err.trajectory = self
            raise err
        return self

    def __repr__(self) -> str:
        shape = None if self.M is None else tuple(self.M.shape[1:])
        return (
            f"Trajectory(saved={len(self)}, t=[{float(self.t[0]) if len(self) else 0:g}, "
            f"{float(self.t[-1]) if len(self) else 0:g}], M={shape}, status={self.status}, "
            f"message={summarize(self.message)})"
        )

    def to_dict(self) -> dict:
        """JSON-ready: the curves ``t``, ``loss``, ``step``, the status and the settings in ``info``; the saved
        states ``M``, ``W``, ``mu`` (up to ``K p²`` numbers) by their shapes only (``None`` when not saved)."""

        def shape(x):
            return None if x is None else list(x.shape)

        return to_jsonable(
            {
                "t": self.t,
                "loss": self.loss,
                "step": self.step,
                "status": self.status,
                "message": self.message,
                "success": self.success,
                "M_shape": shape(self.M),
                "W_shape": shape(self.W),
                "mu_shape": shape(self.mu),
                "info": self.info,
            },
            "Trajectory",
        )


def _shape(x) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
