import pytest
import torch

# Tests are many small tensor operations: one thread is fastest and immune to a busy second core.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
    torch.set_num_threads(1)  # a test that changed it (e.g. the CLI's --threads) does not leak it
