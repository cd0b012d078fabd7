"""What differs between the torch versions nqf supports (torch ≥ 2.2; tested: 2.13 in CI, 2.2.2 by .ci/lowest-torch)."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import NormalFormError

__all__ = ["check_attention_torch", "has_mha_switch", "math_attention"]


def has_mha_switch() -> bool:
    """Whether this torch can switch off attention's fused fast path (``torch.backends.mha``: torch ≥ 2.3)."""
    return getattr(torch.backends, "mha", None) is not None


def check_attention_torch(module: nn.Module) -> None:
    """Refuse attention on a torch without the switch of its fused fast path (torch 2.2, the lowest supported).

    That fast path (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer`` in eval mode) skips the submodules
    nqf hooks and differentiates; torch ≥ 2.3 lets :func:`nqf.modules.evaluation_mode` turn it off, torch 2.2 does
    not, so nqf would read a layer that did not run.

    Raises
    ------
    NormalFormError
        ``module`` holds an ``nn.MultiheadAttention`` and ``torch.backends.mha`` does not exist.
    """
    if has_mha_switch():
        return
    for name, sub in module.named_modules():
        if isinstance(sub, nn.MultiheadAttention):
            raise NormalFormError(
                f"`model`: attention (`{name or type(module).__name__}`, nn.MultiheadAttention) needs torch ≥ 2.3 in "
                f"nqf: torch {torch.__version__} cannot switch off its fused fast path, which skips the layers nqf "
                "reads; found an older torch"
            )


def math_attention():
    """``scaled_dot_product_attention`` on its math kernel: ``torch.nn.attention.sdpa_kernel`` (torch ≥ 2.3), or
    the flags of ``torch.backends.cuda.sdp_kernel`` that torch 2.2 (the lowest supported) reads on every device."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch 2.2
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False)
    return sdpa_kernel(SDPBackend.MATH)
