"""Calls into the user's own code (a model file, its factory, its forward) and what they may not do.

Every call nqf makes into a model file goes through :func:`users_code`, which turns whatever that code does
wrong into one :class:`~nqf.errors.ModelCodeError` naming the model:

* ``sys.exit`` (a ``SystemExit``) — it would otherwise end ``nqf analyze`` with exit 0 and no output;
* an exception raised in the user's file, a ``RecursionError`` (a forward that calls itself);
* a change of the working directory (undone: paths the user gave stay valid);
* a thread that is not a daemon, left running (Python would wait for it forever at exit);
* a call that runs past its time budget (``--timeout``; ``SIGALRM``, so only in the main thread).

:func:`probe_forward` runs the forward once on the data, as the analysis will, and refuses a forward that
modifies its input in place, draws from a global random number generator, returns something other than
a finite floating-point tensor, or returns a tensor that does not depend on the parameters (detached);
and a module on the ``meta`` device (no values).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ._limits import DEFAULT_TIMEOUT
from .errors import InvalidParameterError, ModelCodeError, NQFError

if TYPE_CHECKING:  # torch and NumPy are imported where they are used: `nqf --version` stays light
    import torch
    from torch import nn

__all__ = [
    "users_code",
    "user_files",
    "probe_forward",
    "check_timeout",
    "time_budget",
    "alive_foreign_threads",
    "DEFAULT_TIMEOUT",
]

#: Threads that are not daemons, started by the user's code and still running: :func:`nqf.app.main` ends the
#: process past them (Python's own exit would wait for them forever).
_FOREIGN_THREADS: list[threading.Thread] = []

_BUDGET: contextvars.ContextVar[float | None] = contextvars.ContextVar("nqf_user_code_budget", default=None)

_NQF_DIR = str(Path(__file__).resolve().parent) + os.sep


def _own_dirs() -> tuple[str, ...]:
    """Folders of code that is not the user's: torch, NumPy, the standard library, nqf."""
    import numpy as np
    import torch

    return (*(str(Path(m.__file__).resolve().parent) + os.sep for m in (torch, np, contextlib) if m.__file__), _NQF_DIR)


class _OutOfTime(BaseException):
    """Raised by the alarm inside the user's code; a ``BaseException`` so that ``except Exception`` there does
    not swallow it."""


def alive_foreign_threads() -> list[threading.Thread]:
    """The non-daemon threads the user's code started that are still running."""
    return [t for t in _FOREIGN_THREADS if t.is_alive()]


def user_files(module: nn.Module | None = None, extra: Iterable = ()) -> frozenset[str]:
    """The source files of the user's code: ``extra`` (a model file) and the files defining the classes of
    ``module``'s submodules, except torch's, NumPy's, the standard library's and nqf's own."""
    out = {str(Path(f).resolve()) for f in extra}
    own = _own_dirs()
    for m in module.modules() if module is not None else ():
        try:
            f = inspect.getsourcefile(type(m))
        except (TypeError, OSError):
            continue
        if f is None:
            continue
        f = str(Path(f).resolve())
        if not f.startswith(own):
            out.add(f)
    return frozenset(out)


def _in_files(exc: BaseException, files: frozenset[str]) -> bool:
    """True when ``exc`` was raised in, or passed through, a frame of one of ``files``."""
    tb = exc.__traceback__
    while tb is not None:
        if str(Path(tb.tb_frame.f_code.co_filename).resolve()) in files:
            return True
        tb = tb.tb_next
    return False


def _first_line(exc: BaseException) -> str:
    try:  # one line; any other control character is escaped when it is printed (nqf._text)
        text = str(exc).strip().replace("\n", " ")
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails: its type alone
        text = ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


_ARMED = threading.Event()  # set while a budget of ours runs: an inner call does not re-arm it


@contextlib.contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """``_OutOfTime`` after ``seconds`` (``None``: no budget; outside the main thread: none either).  A timer
    someone else set (``pytest-timeout``, the user's own) is put back afterwards with what was left of it."""
    if seconds is None or _ARMED.is_set() or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _ring(signum, frame):
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, _ring)
    left, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    t0 = time.monotonic()
    _ARMED.set()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _ARMED.clear()
        signal.signal(signal.SIGALRM, previous)
        if left > 0:  # the other timer: what remains of it (at least a microsecond: it rings, late, not never)
            signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - t0), 1e-6), interval)


def check_timeout(timeout) -> float | None:
    """``timeout``: ``None`` (no budget) or finite seconds ``> 0`` and below ``10⁷``
    (:func:`nqf._validation.positive_float`, imported here: this module stays light for ``nqf --version``)."""
    if timeout is None:
        return None
    from ._validation import positive_float

    seconds = positive_float("--timeout", timeout)
    if seconds >= 10**7:
        raise InvalidParameterError(f"`--timeout` must be below 10⁷ seconds; found {timeout!r}")
    return seconds


@contextlib.contextmanager
def time_budget(seconds) -> Iterator[None]:
    """Inside this block every :func:`users_code` call without its own ``timeout`` gets ``seconds``
    (``nqf analyze --timeout``; ``None``: no budget)."""
    token = _BUDGET.set(check_timeout(seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def users_code(
    what: str,
    files: Iterable[str] = (),
    *,
    timeout: float | None = None,
    stdout: bool = True,
    blame_all: bool = False,
):
    """Run the user's code (``what``, e.g. ``"the forward of net.py:make"``) and turn what it does wrong into
    one :class:`ModelCodeError` naming ``what`` (see the module docstring).

    ``files``: the user's source files (:func:`user_files`); an exception raised in one of them is the user's
    fault, any other propagates as it is (``blame_all=True``: every exception is the user's, for a call that
    runs nothing of nqf's).  ``timeout``: seconds (default: the enclosing :func:`time_budget`).
    ``stdout=True``: what the code prints goes to stderr (stdout stays one JSON document with ``--json``).
    The working directory is restored afterwards."""
    files = frozenset(files)
    timeout = _BUDGET.get() if timeout is None else timeout
    cwd = os.getcwd()
    before = set(threading.enumerate())
    try:
        with contextlib.redirect_stdout(sys.stderr) if stdout else contextlib.nullcontext(), _alarm(timeout):
            yield
    except _OutOfTime:
        raise ModelCodeError(
            f"`model`: {what} did not return within --timeout {timeout:g} s (is it waiting or looping forever? "
            "give a larger --timeout if it is only slow)"
        ) from None
    except SystemExit as exc:
        raise ModelCodeError(f"`model`: {what} called sys.exit({exc.code!r}); a model must not exit") from None
    except RecursionError:
        raise ModelCodeError(
            f"`model`: {what} recursed past Python's recursion limit (RecursionError: does it call itself?)"
        ) from None
    except NQFError:
        raise
    except Exception as exc:
        if blame_all or (files and _in_files(exc, files)):
            raise ModelCodeError(f"`model`: {what} raised {_first_line(exc)}") from exc
        raise
    finally:
        try:
            moved = os.getcwd() != cwd
        except OSError:  # the directory it moved to was removed
            moved = True
        if moved:
            os.chdir(cwd)
        started = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]
        _FOREIGN_THREADS.extend(started)
    if started:
        names = ", ".join(repr(t.name) for t in started[:3])
        raise ModelCodeError(
            f"`model`: {what} started {len(started)} thread(s) that are not daemons ({names}) and still run; "
            "nqf would wait for them forever when it ends: start them with daemon=True, or not at all"
        )


def _rng_states() -> tuple:
    import numpy as np
    import torch

    st = np.random.get_state(legacy=False)  # {"state": {"key": …, "pos": …}, "has_gauss": …, "gauss": …}
    extra = (int(st["state"]["pos"]), int(st["has_gauss"]), float(st["gauss"]))
    return torch.random.get_rng_state(), np.asarray(st["state"]["key"]).copy(), extra, random.getstate()


def _same_rng(a: tuple, b: tuple) -> bool:
    import numpy as np
    import torch

    return bool(torch.equal(a[0], b[0])) and bool(np.array_equal(a[1], b[1])) and a[2:] == b[2:]


def probe_forward(
    module: nn.Module, X, spec: str, *, files: Iterable[str] = (), timeout: float | None = None
) -> torch.Tensor:
    """Run ``module``'s forward once on ``X`` (with autograd, as training will) and return its output.

    Raises
    ------
    ModelCodeError
        Parameters or buffers on the ``meta`` device; a forward that exits, raises in the user's file,
        recurses forever or runs past ``timeout`` seconds; one that modifies its input in place, draws
        random numbers from torch's, NumPy's or Python's global generator, or returns something other than
        a floating-point tensor, values that are not finite, or a tensor that does not depend on the
        module's parameters (``.detach()``, ``torch.no_grad()``).
    """
    import torch

    where = f"the forward of {spec}"
    meta = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if meta:
        raise ModelCodeError(
            f"`model`: {spec} has {len(meta)} parameter(s) or buffer(s) on the meta device (shapes without "
            f"values: {', '.join(meta[:3])}); build the model on the CPU"
        )
    x = torch.as_tensor(X, dtype=torch.float64).clone()
    x0, v0 = x.clone(), x._version
    states = _rng_states()
    with users_code(where, files, timeout=timeout, blame_all=True):
        out = module(x)
    if x._version != v0 or not torch.equal(x, x0):
        raise ModelCodeError(
            f"`model`: {where} modifies its input in place (an in-place operation such as x.mul_(…) or x[...] = …); "
            "nqf differentiates the forward and needs it to leave x unchanged: use out-of-place operations"
        )
    if not _same_rng(states, _rng_states()):
        raise ModelCodeError(
            f"`model`: {where} draws random numbers from a global generator (torch.randn…, np.random…, random…, "
            "or dropout called as a function); nqf needs a deterministic forward: draw the noise once, outside"
        )
    if not isinstance(out, torch.Tensor):
        return out  # the output's type and width: nqf.app._study._models.check_model_output names what is expected
    if not (out.is_floating_point() or out.is_complex()):
        raise ModelCodeError(
            f"`model`: {where} returns a tensor of {str(out.dtype).replace('torch.', '')}; nqf needs floating-point "
            "outputs (no .round(), .long() or argmax in forward)"
        )
    bad = int((~torch.isfinite(out.detach())).sum())
    if bad:
        raise ModelCodeError(
            f"`model`: {where} returns {bad} NaN or infinite value(s) out of {out.numel()} on the data, at the "
            "model's own initial weights; nqf needs a finite forward"
        )
    trained = [p for p in module.parameters() if p.requires_grad]
    if trained and not out.requires_grad:
        raise ModelCodeError(
            f"`model`: the output of {where} does not depend on the model's parameters (.detach(), "
            "torch.no_grad() or .item() in forward); nqf differentiates it with respect to the units' weights"
        )
    return out
