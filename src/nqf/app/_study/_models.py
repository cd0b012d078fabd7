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

import copy
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..._usercode import probe_forward, user_files, users_code
from ...errors import ModelSpecError, NQFError
from ...structure import REGISTRY, ActivationModule

__all__ = [
    "build_model",
    "parse_spec",
    "load_factory",
    "model_files",
    "check_model_output",
    "check_users_forward",
    "Elementwise",
    "MODEL_KINDS",
]

#: A model file larger than this is refused before it is read (1 MiB of Python is not a model definition).
MAX_MODEL_FILE_BYTES = 2**20
#: The last model a factory built, by (file, its mtime and size, factory, D, C, seed): the factory runs once
#: per ``nqf analyze`` even though the input checks and the run both build the model (a deep copy each time).
_BUILT: dict[_FactoryKey, nn.Module] = {}


MODEL_KINDS = ("mlp",)
#: An elementwise activation by name, for activations torch has no module for (the registry's module).
Elementwise = ActivationModule


def _act_names(smooth: bool | None = None) -> tuple[str, ...]:
    """Names ``act=`` accepts: every activation of the registry (non-smooth ones are refused later by the
    smoothness check, with its message); ``smooth=True`` lists the smooth ones (what messages offer)."""
    return tuple(a.name for a in REGISTRY if smooth is None or a.smooth == smooth)


def _activation_module(name: str) -> nn.Module:
    rec = REGISTRY.find(name)
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
            if not (val.isascii() and val.isdigit()) or int(val) < 2:  # "²".isdigit() is True
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
    path = path.absolute()  # a model file that changes the working directory keeps its own path valid
    if not path.exists():
        raise ModelSpecError(f"`model`: file {path_s!r} not found")
    from .._data import check_regular_file

    try:
        check_regular_file(path, "model", MAX_MODEL_FILE_BYTES)
    except NQFError as exc:
        raise ModelSpecError(str(exc)) from None
    mod_name = f"_nqf_model_{abs(hash(str(path.resolve())))}"
    try:
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ModelSpecError(f"`model`: {path_s} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        with users_code(f"importing {path_s}"):
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


@dataclass(frozen=True)
class _FactoryKey:
    """What a built factory model depends on: the file's version (path, modification time, size), the spec, the
    data's sizes and the seed (hashable: the key of the cache of built models)."""

    path: str
    mtime_ns: int
    size: int
    spec: str
    D: int
    C: int
    seed: int


def _factory_key(spec: str, D: int, C: int, seed: int) -> _FactoryKey | None:
    path_s = spec.rpartition(":")[0]
    try:
        st = Path(path_s).stat()
    except OSError:
        return None
    return _FactoryKey(str(Path(path_s).resolve()), st.st_mtime_ns, st.st_size, spec, D, C, seed)


def _factory_model(spec: str, D: int, C: int, seed: int) -> nn.Module:
    """The model of ``FILE.py:FACTORY``, built once per (file version, sizes, seed) and copied after."""
    key = _factory_key(spec, D, C, seed)
    if key is not None and key in _BUILT:
        try:
            return copy.deepcopy(_BUILT[key])
        except (TypeError, RuntimeError, AttributeError, copy.Error):  # a module that cannot be copied
            _BUILT.clear()
    try:
        fn = load_factory(spec)
        with users_code(f"the factory {spec}", blame_all=True):
            model = _call_factory(fn, D, C)
    except NQFError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised as ModelSpecError naming the factory
        raise ModelSpecError(f"`model`: the factory {spec} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ModelSpecError(f"`model`: the factory {spec} must return a torch.nn.Module; found {type(model).__name__}")
    model = model.to(torch.float64)
    _BUILT.clear()
    if key is not None:
        try:
            _BUILT[key] = copy.deepcopy(model)
        except (TypeError, RuntimeError, AttributeError, copy.Error):
            pass
    return model


def check_model_output(model: nn.Module, X, n_outputs: int, spec: str, files=()) -> None:
    """Run ``model``'s forward on ``X`` (:func:`nqf._usercode.probe_forward`: refused, naming ``spec``, when
    it exits, raises, hangs, modifies its input, draws random numbers or returns non-finite, non-floating or
    detached values) and refuse a forward that does not return one tensor of shape ``(N, n_outputs)`` (a tuple,
    a dict, the wrong output width for the data's targets).  ``files``: the user's source files."""
    out = probe_forward(model, X, spec, files=files)
    if not isinstance(out, torch.Tensor):
        raise ModelSpecError(
            f"`model`: the forward of {spec} must return one tensor of shape (N, {n_outputs}); found "
            f"{type(out).__name__} (return only the output, not a tuple)"
        )
    n = len(X)
    width = int(out.reshape(out.shape[0], -1).shape[1]) if out.ndim >= 1 and out.shape[0] == n else None
    if width != n_outputs:
        raise ModelSpecError(
            f"`model`: {spec} has output width {width if width is not None else tuple(out.shape)}, but the data "
            f"has {n_outputs} target column(s) (one-hot classes or regression targets); make the last layer output "
            f"{n_outputs}"
        )


def model_files(spec) -> tuple[str, ...]:
    """The model file of a ``FILE.py:FACTORY`` spec, as an absolute path (``()`` for anything else)."""
    if isinstance(spec, str) and ".py:" in spec:
        return (str(Path(spec.rpartition(":")[0]).absolute()),)
    return ()


def check_users_forward(spec, module: nn.Module, X, n_outputs: int) -> None:
    """:func:`check_model_output` for the user's own code (a model file's module or a module passed in);
    the built-in spec is nqf's own and is not probed."""
    if isinstance(spec, str) and ".py:" not in spec:
        return
    desc = spec if isinstance(spec, str) else type(spec).__name__
    check_model_output(module, X, n_outputs, desc, user_files(module, model_files(spec)))


def check_builtin_memory(width: int, D: int, C: int, N: int = 0) -> None:
    """Refuse the built-in MLP of ``width`` units on ``N`` samples of ``D`` features and ``C`` targets when its
    float64 weights ``width·(D + C)`` and hidden activations ``N·width`` (a lower bound of what the analysis
    allocates) exceed the memory limit (:func:`nqf._memory.check_memory`)."""
    from ..._memory import check_memory

    acts = f" and hidden activations {N}·{width}" if N else ""
    check_memory(8.0 * width * (D + C + N), f"`model`: width={width}", f"float64 weights {width}·({D} + {C}){acts}")


def _copied(module: nn.Module) -> nn.Module:
    """A deep copy of the user's module (what is converted and analysed; theirs is never touched)."""
    try:
        return copy.deepcopy(module)
    except (TypeError, RuntimeError, AttributeError, copy.Error) as exc:
        raise ModelSpecError(
            f"`model`: the {type(module).__name__} passed must be copyable with copy.deepcopy (nqf analyses a "
            f"float64 copy and leaves yours unchanged); found {type(exc).__name__}: {str(exc).splitlines()[0]}"
        ) from exc


def build_model(spec, in_features: int, n_outputs: int, *, seed: int = 0, n_samples: int = 0) -> nn.Module:
    """A float64 ``nn.Module`` from a spec, a ``FILE.py:FACTORY`` string, or a module.

    Parameters
    ----------
    spec : str or torch.nn.Module
    in_features, n_outputs : int
        ``D`` and ``C`` of the data.
    seed : int
        Seed of ``torch.manual_seed`` before building (parameters outside the
        units keep these values).
    n_samples : int
        ``N`` of the data, for the memory check of a built-in spec (0: the weights alone).

    Returns
    -------
    torch.nn.Module (float64)
        A module passed in is copied first and the copy converted: the caller's module keeps its dtype,
        parameters, buffers and ``training`` flag.

    Raises
    ------
    ModelSpecError
        A bad spec, a model file or factory that fails, a module that cannot be copied.
    ParameterError
        A built-in spec whose weights and hidden activations cannot fit in memory (:func:`check_builtin_memory`),
        refused before anything is allocated.
    """
    if isinstance(spec, nn.Module):
        return _copied(spec).to(torch.float64)
    spec = str(spec)
    torch.manual_seed(seed)
    if ".py:" in spec:
        return _factory_model(spec, in_features, n_outputs, seed)
    kind, o = parse_spec(spec)
    check_builtin_memory(o["width"], in_features, n_outputs, n_samples)
    return nn.Sequential(
        nn.Linear(in_features, o["width"], bias=o["bias"], dtype=torch.float64),
        _activation_module(o["act"]),
        nn.Linear(o["width"], n_outputs, bias=False, dtype=torch.float64),
    )
