"""Shared test utilities (importable as `helpers` from any test module)."""

import importlib
import importlib.util
import json
from pathlib import Path

import numpy as np

#: The model zoo of issue 32 (``benchmarks/zoo/models.py``): models written the way researchers write them.
ZOO_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo" / "models.py"


def load_zoo(name: str = "nqf_test_zoo"):
    """The zoo's module, loaded from its file (``benchmarks`` is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ZOO_FILE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def loglog_slope(s, e):
    """Least-squares slope of log e against log s."""
    s, e = np.log(np.asarray(s, float)), np.log(np.asarray(e, float))
    return float(np.polyfit(s, e, 1)[0])


def toml_value(v):
    """A Python value (bool, str, number, list) as a TOML literal."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def interacting_commuting_modes(seed=3, p=6, N=40):
    """Commuting sensing matrices ``A_n = U diag(a_n) Uᵀ`` with correlated (interacting) modes ``a``.

    Returns ``(U, a, y)``: the basis (p, p), the mode coordinates (N, p) and targets (N,) in which one mode
    later leaves the active set and a slower mode joins.
    """
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((p, p)))
    mix = np.eye(p) + 0.6 * rng.standard_normal((p, p)) / np.sqrt(p)
    a = rng.standard_normal((N, p)) @ mix.T
    y = a @ np.array([2.0, 1.0, 0.5, 0.3, 0.0, 0.0]) + 0.2 * rng.standard_normal(N)
    return U, a, y


def resolves(dotted: str) -> bool:
    """True when ``dotted`` (``nqf.x.y``) imports as a module, or is an attribute path from the longest module
    before it."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _torch_minor() -> tuple[int, int]:
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


#: torch ≥ 2.3: the switch of attention's fused fast path (nqf refuses attention on older torch).
TORCH_HAS_MHA_SWITCH = _torch_minor() >= (2, 3)
#: torch ≥ 2.6: a saved TensorDataset can be read without unpickling it (nqf refuses it on older torch).
TORCH_READS_TENSOR_DATASET = _torch_minor() >= (2, 6)
