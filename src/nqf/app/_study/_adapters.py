"""Thin adapters that feed a :class:`nqf.app.Monitor` from the trainers researchers use (docs/watch.md).

* :func:`lightning_callback` — a ``lightning.pytorch.Callback``: after each training batch, the batch's loss
  (``training_step``'s return, a tensor or a dict with ``"loss"``) at the step it was computed at
  (``trainer.global_step − 1``: the weights before that optimiser step);
* :func:`hf_callback` — a ``transformers.TrainerCallback``: at each log, the ``loss`` the Trainer logs (the mean of
  the minibatch losses since the previous log, read at the middle of those steps).

Both announce a status line (``echo``, default ``print``) whenever the phase or the plateau changes, and keep
the latest :class:`nqf.app.WatchStatus` as ``callback.status``.  The packages are optional (the ``lightning``
and ``hf`` extras); without them the factory raises :class:`nqf.errors.MissingDependencyError`.
"""

from __future__ import annotations

from ...errors import MissingDependencyError

__all__ = ["lightning_callback", "hf_callback"]


class _Announcer:
    """The status lines of a run: printed when the phase or the plateau changes."""

    def __init__(self, monitor, echo):
        self.monitor, self.echo, self.status, self._seen = monitor, echo, None, None

    def feed(self, step: float, loss: float) -> None:
        last = self.monitor.last_step
        if last is not None and not step > last:
            return  # a repeated step (a resumed run, a second log at one step): nothing new
        self.status = self.monitor.update(step, loss)
        key = (self.status.phase, self.status.plateau)
        if key != self._seen and self.echo is not None:
            self.echo(f"nqf: {self.status.text}")
        self._seen = key


def lightning_callback(monitor, *, echo=print):
    """A ``lightning.pytorch.Callback`` that feeds ``monitor`` (module docstring).

    Raises
    ------
    MissingDependencyError
        Lightning is not installed (``pip install 'nqf[lightning]'``).
    """
    try:
        from lightning.pytorch import Callback
    except ImportError:
        raise MissingDependencyError("`lightning_callback` needs Lightning: pip install 'nqf[lightning]'") from None

    class NQFMonitor(Callback):
        """Feeds an nqf monitor the loss of every training batch."""

        def __init__(self):
            self.announcer = _Announcer(monitor, echo)

        @property
        def status(self):
            return self.announcer.status

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if hasattr(loss, "detach"):  # a tensor (None: a step the module skipped)
                self.announcer.feed(float(trainer.global_step - 1), float(loss.detach()))  # type: ignore[union-attr]

    return NQFMonitor()


def hf_callback(monitor, *, echo=print):
    """A ``transformers.TrainerCallback`` that feeds ``monitor`` the logged training loss (module docstring).

    Raises
    ------
    MissingDependencyError
        transformers is not installed (``pip install 'nqf[hf]'``).
    """
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise MissingDependencyError("`hf_callback` needs transformers: pip install 'nqf[hf]'") from None

    class NQFMonitor(TrainerCallback):
        """Feeds an nqf monitor the loss the Trainer logs."""

        def __init__(self):
            self.announcer, self._last = _Announcer(monitor, echo), 0

        @property
        def status(self):
            return self.announcer.status

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            step = int(state.global_step)
            middle = 0.5 * (self._last + step - 1)  # the mean of the losses at the weights of steps last … step − 1
            self._last = step
            self.announcer.feed(middle, float(logs["loss"]))

    return NQFMonitor()
