"""``python -m nqf``: the ``nqf`` command line."""

from .cli import app

if __name__ == "__main__":  # pragma: no branch
    app(prog_name="nqf")
