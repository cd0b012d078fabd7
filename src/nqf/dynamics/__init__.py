r"""Training dynamics: closed order-parameter form, weight form, gradient flow, the real network.

Conventions (docs/theory.md §0): ``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½ (f − y)²`` for
MSE, ``r = ∂ℓ/∂f``, ``G = (1/N) 𝒜*(r)``, ``W ← W − η ∇_W L``, training time
``t = η · steps``.

* :func:`simulate` — GD / minibatch SGD / weight decay / heavy-ball momentum in
  order-parameter form (``M ← (I − 2ηG) M (I − 2ηG)ᵀ``, exact) or weight form
  (``W ← (I − 2ηG) W``), Adam in weight form; ``(M, μ)`` without the
  zero-gradient condition; optional compression to the data subspace.
* :func:`simulate_batched` — many GD runs on shared data (differing ε, seed, η, λ) as one batch.
* :func:`gradient_flow` — ``dM/dt = −2(GM + MG)`` with ``scipy.integrate.solve_ivp``.
* :func:`train_network` — the real ``nn.Module`` with the same loss, time, data and ``W(0)``.
* :func:`seeded_nqf` — the NQF plus the next orders' seeds in the unlearned directions: the real network's clock.
* :func:`active_levels` — the real module's level on each plateau: its own flow over the learned directions.
* :func:`initial_state` / :func:`initial_weights` — the one parser (and builder, at scale ε) of ``M(0)``/``W(0)``.
* :class:`Trajectory` — the common result.
* Configuration objects: :class:`Loss` (:class:`MSE`, :class:`Logistic`, :class:`CrossEntropy`;
  :func:`as_loss` resolves a name), :class:`Optimizer` (:class:`GD`, :class:`SGD`, :class:`Adam`;
  :func:`as_optimizer` builds one from a name and keywords), :class:`Save` (what a run saves).  A run takes these
  objects (a loss may also be given by name: ``loss="mse"``), never loose keywords beside them.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
