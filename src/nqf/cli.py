"""The ``nqf`` command line."""

from __future__ import annotations

from typing import Optional

import typer

from . import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Neural Quadratic Forms: structure matrices, closed dynamics and staircase predictions.")


def _version(value: bool):
    if value:
        typer.echo(f"nqf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                                  help="Print the version and exit.")):
    """Neural Quadratic Forms."""


@app.command()
def demo(out: Optional[str] = typer.Option(None, "--out", help="Run directory (unused until experiments land).")):
    """Structure matrix of a small tanh MLP, analytic vs autodiff."""
    import torch

    from .networks import TwoLayerMLP
    from .structure import from_module, mlp

    torch.manual_seed(0)
    X = torch.randn(64, 8, dtype=torch.float64)
    op = mlp(X, "tanh", n_outputs=3)
    net = TwoLayerMLP(8, 16, 3, "tanh")
    auto = from_module(net, net.units, X)
    err = float((op.dense() - auto.dense()).abs().max())
    typer.echo(f"two-layer tanh MLP, N={op.n_samples}, D=8, C={op.n_outputs}: p = {op.p}")
    typer.echo(f"unit layout: {op.layout}")
    typer.echo(f"max |A_analytic − A_autodiff| = {err:.2e}")


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
