"""Named experiments reproducing the paper's claims, their configs and the runner.

This package is the one door: its modules are private. The names are imported on first use,
so that listing the catalogue (``nqf list``: :data:`CATALOG`, :func:`describe`) does not
import the experiments, the runner or torch.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
