"""``nqf.app`` — the application: ``nqf analyze``, the experiments, sweeps and run directories.

What a user scripts is exported here, and nothing else:

* your own model on your own data: :func:`analyze` (an :class:`Analysis`), :func:`save_analysis`,
  :func:`unit_listing`; a forecast for a training run and its live check: :func:`forecast`
  (a :class:`Forecast`), :func:`watch` (a :class:`Monitor`);
* data: :func:`load_dataset` and :func:`prepare` (a :class:`Dataset`), :func:`read_loss_log`
  (a :class:`LossLog`);
* the built-in experiments: :func:`run_experiment` (an :class:`Outcome`), :func:`all_experiments`,
  :func:`get_experiment`, :func:`load_config`;
* finished runs: :func:`read_results_json`, :func:`rebuild_report`, :func:`sweep_frame`;
* the command line: :func:`main` (the ``nqf`` command).

Its parts (``_study``, ``_experiments``, ``_sweep``, ``_report``, ``_data``, ``_cli``) are private to the
application: run directories, atomic writes, locks and the report's safety checks are how the application
works, not library API.  The library (``nqf.structure`` … ``nqf.curves``) never imports the application.

Each public name is written once, in ``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds
``__all__`` and the loading on first use from it, so that ``nqf --version`` loads no torch.
"""

from __future__ import annotations

import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
