"""The sentences ``nqf.analyze`` adds to its progress log and verdict: the data line, what is trained and
frozen, the training-only layers switched off, and the targets' scale when the network leaves the regime."""

from __future__ import annotations

import math

import numpy as np

from .._data import Dataset
from ._checks import training_only_layers
from ._parts import Validity

__all__ = ["data_line", "target_scale", "training_only_notes", "trained_notes"]


def data_line(data: Dataset) -> str:
    """The progress line of the data: samples, input shape, outputs, task and how it was decided."""
    rule = data.preprocessing.get("task_rule")
    names = f"; classes {', '.join(str(c) for c in data.classes)}" if data.classes else ""
    return (
        f"data: {data.name}: N = {data.n_samples}, input shape {data.input_shape}, C = {data.n_outputs}, "
        f"{data.task}" + (f" ({rule})" if rule else "") + names
    )


def target_scale(data: Dataset, val: Validity) -> list[str]:
    """A verdict sentence when regression targets of standard deviation above 1 go with leaving the regime.

    The NQF's plateau weights grow like the square root of the targets' scale; with standardised inputs,
    targets of standard deviation ``s > 1`` need pre-activations beyond 1, where the activation's next
    orders act at once (diabetes: ``s ≈ 77``)."""
    if data.task != "regression" or val.get("left_step") is None:
        return []
    sd = float(np.std(np.asarray(data.Y, dtype=float)))
    if sd <= 1.0:
        return []
    return [
        f"The regression targets have standard deviation {sd:.3g} (centred, not scaled): fitting them needs unit "
        f"weights of size ~√{sd:.3g} = {math.sqrt(sd):.2g}, outside the quadratic regime, which is why the network "
        "leaves it; analyse the scaled targets instead (nqf.analyze(model, X, Y / Y.std()) on the prepared data)."
    ]


def training_only_notes(module, say) -> list[str]:
    """Sentences (verdict text) and log lines naming the training-only layers switched off."""
    names = training_only_layers(module)
    if not names:
        return []
    note = (
        f"Training-only layers {', '.join(names)} were switched off (eval mode: no dropout, batch norm on its "
        "running statistics) for the prediction, the NQF and the real training; a network trained with them "
        "on is not what was analysed."
    )
    say(f"note: {note}")
    return [note]


def trained_notes(module, found, say) -> list[str]:
    """What the analysis trains (the unit layer's parameters) and what it freezes (every other trainable
    parameter, held at the values the model was built with), for the NQF and the real network alike."""
    trained = list(dict.fromkeys(sl.param for sl in found.layout.slices))
    frozen = [name for name, prm in module.named_parameters() if prm.requires_grad and name not in trained]
    line = f"trained: {', '.join(trained)} (the {found.n_units} units)"
    if not frozen:
        say(line + "; no other trainable parameter")
        return []
    n = sum(int(module.get_parameter(name).numel()) for name in frozen)
    note = (
        f"Trained: {', '.join(trained)} (the {found.n_units} units). Frozen at their initial values, in the NQF "
        f"and in the real network alike: {', '.join(frozen)} ({n} parameters); a network trained with all its "
        "layers is not what was analysed."
    )
    say(f"{line}; frozen: {', '.join(frozen)} ({n} parameters)")
    return [note]
