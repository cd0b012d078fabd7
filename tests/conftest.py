import pytest
import torch

# Tests are many small tensor operations: one thread is fastest and immune to a busy second core.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
    torch.set_num_threads(1)  # a test that changed it (e.g. the CLI's --threads) does not leak it


@pytest.fixture(scope="session")
def iris_tanh():
    """Iris as float64 tensors and the NQF of a tanh MLP on it: ``(X, Y, op)`` (shared; nothing changes them)."""
    import numpy as np

    from nqf.app._data import load_dataset
    from nqf.structure import mlp

    d = load_dataset("iris")
    X = torch.as_tensor(np.asarray(d.X, dtype=float))
    Y = torch.as_tensor(np.asarray(d.Y, dtype=float))
    return X, Y, mlp(X, "tanh", n_outputs=Y.shape[1])
