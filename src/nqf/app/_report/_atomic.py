"""Atomic file and directory operations of the run directory (:mod:`nqf.app._report._rundir`).

* :func:`atomic_write_bytes` / :func:`atomic_write_text`: a file is written to a
  temporary sibling, flushed to disk and renamed over the target, so a reader (or a
  kill) sees the old file or the new one, never a part;
* :func:`exchange_paths`: two directories swapped in one step (Linux
  ``renameat2(RENAME_EXCHANGE)``), or ``False`` where the system cannot;
* :func:`carry_entry`: an entry of a previous run directory carried into the new one
  as hard links (copies across file systems), so ``--force`` never deletes a file nqf
  did not write; :func:`remove_tree` deletes a staging or stale sibling directory.

**Permissions.**  Files are created ``0666 & ~umask`` (``0644`` with the usual
umask ``022``), directories ``0777 & ~umask`` (``0755``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text", "exchange_paths", "carry_entry", "remove_tree"]


def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + ``os.replace``), mode ``0666 & ~umask``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, as :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange_paths(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _link_or_copy(src, dst, *, follow_symlinks=True):
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


def carry_entry(entry: Path, dst: Path) -> None:
    """Recreate ``entry`` (a file, a directory tree or a symbolic link) at ``dst`` with hard links where possible."""
    if entry.is_symlink():
        os.symlink(os.readlink(entry), dst)
    elif entry.is_dir():
        shutil.copytree(entry, dst, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(entry, dst)


def remove_tree(path: Path) -> None:
    """Delete the directory tree ``path``, ignoring what is already gone; a symbolic link is removed itself
    (never what it points to)."""
    if os.path.islink(path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    shutil.rmtree(path, ignore_errors=True)
