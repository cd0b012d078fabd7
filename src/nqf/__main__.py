"""``python -m nqf``: the ``nqf`` command line."""

from .app import main

if __name__ == "__main__":  # pragma: no branch
    main()
