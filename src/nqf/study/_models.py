"""Models for ``nqf analyze``: built-in specs (``mlp:width=256,act=tanh``) and factories in Python files.

Built-in spec grammar: ``KIND:key=value,key=value``.  Only ``mlp`` exists:
``nn.Sequential(nn.Linear(D, width, bias=bias), ACT, nn.Linear(width, C, bias=False))``
in float64 with keys ``width`` (default 256), ``act`` (a name of the activation registry
:data:`nqf.structure.REGISTRY`: ``tanh``, ``sin``, ``erf``, ``gelu``,
``softplus-centred``, ``sigmoid``, ``linear``, …; the non-smooth ones such as ``relu`` are
accepted here so that the smoothness check can refuse them with its message) and ``bias``
(hidden biases, default false).  ``D`` and ``C`` come from the data.

Factory: ``FILE.py:NAME`` imports ``FILE.py`` and calls ``NAME``; the call passes
``in_features=D`` and ``n_outputs=C`` for the keyword parameters the factory
declares (any of ``in_features``/``n_inputs``/``D`` and ``n_outputs``/``out_features``/``C``),
so ``def make(): return nn.Sequential(...)`` and ``def make(in_features, n_outputs): ...``
both work.  The result must be a ``torch.nn.Module``; it is converted to float64.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import torch
from torch import nn

from ..errors import ModelSpecError
from ..structure import REGISTRY, ActivationModule, find_activation

__all__ = ["build_model", "parse_spec", "load_factory", "Elementwise", "MODEL_KINDS"]

MODEL_KINDS = ("mlp",)
#: An elementwise activation by name, for activations torch has no module for (the registry's module).
Elementwise = ActivationModule


def _act_names(smooth: bool | None = None) -> tuple[str, ...]:
    """Names ``act=`` accepts: every activation of the registry (non-smooth ones are refused later by the
    smoothness check, with its message); ``smooth=True`` lists the smooth ones (what messages offer)."""
    return tuple(a.name for a in REGISTRY if smooth is None or a.smooth == smooth)


def _activation_module(name: str) -> nn.Module:
    rec = find_activation(name)
    if rec is None:  # pragma: no cover - guarded in parse_spec
        raise ModelSpecError(f"`model`: act must be one of {', '.join(_act_names(True))}; found {name!r}")
    return rec.module().to(torch.float64)


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"mlp:width=256,act=tanh"`` → ``("mlp", {"width": 256, "act": "tanh", "bias": False})``.

    Raises
    ------
    ModelSpecError
        Unknown kind or key, or a bad value.
    """
    kind, _, rest = str(spec).partition(":")
    kind = kind.strip().lower()
    if kind not in MODEL_KINDS:
        raise ModelSpecError(
            f"`model`: expected a built-in spec ({', '.join(k + ':…' for k in MODEL_KINDS)}) or "
            f"FILE.py:FACTORY; found {spec!r}"
        )
    opts: dict = {"width": 256, "act": "tanh", "bias": False}
    for item in [i.strip() for i in rest.split(",") if i.strip()]:
        key, eq, val = item.partition("=")
        key, val = key.strip().lower(), val.strip()
        if not eq or key not in opts:
            raise ModelSpecError(f"`model`: {kind} takes width=INT, act=NAME, bias=true|false; found {item!r}")
        if key == "width":
            if not val.isdigit() or int(val) < 2:
                raise ModelSpecError(f"`model`: width must be an integer ≥ 2; found {val!r}")
            opts["width"] = int(val)
        elif key == "act":
            wanted = val.lower().replace("_", "-")
            names = {n.replace("_", "-"): n for n in _act_names()}
            if wanted not in names:
                raise ModelSpecError(f"`model`: act must be one of {', '.join(_act_names(True))}; found {wanted!r}")
            opts["act"] = names[wanted]
        else:
            if val.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ModelSpecError(f"`model`: bias must be true or false; found {val!r}")
            opts["bias"] = val.lower() in ("true", "1", "yes")
    return kind, opts


def load_factory(spec: str):
    """Import ``FILE.py`` and return its callable ``NAME`` from ``"FILE.py:NAME"``.

    Raises
    ------
    ModelSpecError
        Missing file, import failure, or no callable of that name.
    """
    path_s, _, name = str(spec).rpartition(":")
    path = Path(path_s)
    if not path_s or not name or path.suffix != ".py":
        raise ModelSpecError(f"`model`: expected FILE.py:FACTORY; found {spec!r}")
    if not path.is_file():
        raise ModelSpecError(f"`model`: file {path_s!r} not found")
    mod_name = f"_nqf_model_{abs(hash(str(path.resolve())))}"
    try:
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ModelSpecError(f"`model`: {path_s} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        loader_spec.loader.exec_module(module)
    except ModelSpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's file: one clear line
        raise ModelSpecError(f"`model`: importing {path_s} failed: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ModelSpecError(f"`model`: {path_s} has no callable {name!r}")
    return fn


def _call_factory(fn, D: int, C: int):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    kw = {}
    for key in ("in_features", "n_inputs", "D"):
        if key in params:
            kw[key] = D
    for key in ("n_outputs", "out_features", "C"):
        if key in params:
            kw[key] = C
    return fn(**kw)


def build_model(spec, in_features: int, n_outputs: int, *, seed: int = 0) -> nn.Module:
    """A float64 ``nn.Module`` from a spec, a ``FILE.py:FACTORY`` string, or a module.

    Parameters
    ----------
    spec : str or torch.nn.Module
    in_features, n_outputs : int
        ``D`` and ``C`` of the data.
    seed : int
        Seed of ``torch.manual_seed`` before building (parameters outside the
        units keep these values).

    Returns
    -------
    torch.nn.Module (float64)
    """
    if isinstance(spec, nn.Module):
        return spec.to(torch.float64)
    spec = str(spec)
    torch.manual_seed(seed)
    if ".py:" in spec:
        try:
            model = _call_factory(load_factory(spec), in_features, n_outputs)
        except ModelSpecError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ModelSpecError(f"`model`: the factory {spec} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(model, nn.Module):
            raise ModelSpecError(
                f"`model`: the factory {spec} must return a torch.nn.Module; found {type(model).__name__}"
            )
        return model.to(torch.float64)
    kind, o = parse_spec(spec)
    return nn.Sequential(
        nn.Linear(in_features, o["width"], bias=o["bias"], dtype=torch.float64),
        _activation_module(o["act"]),
        nn.Linear(o["width"], n_outputs, bias=False, dtype=torch.float64),
    )
