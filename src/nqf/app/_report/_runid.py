"""The run id: how a run directory's files carry it, and the check that they all agree.

Every run gets a fresh id (the ``run_id`` of :class:`nqf.app._report.RunDirectory`), recorded in
``results.json`` (``run_id``), in the zip comment of ``arrays.npz``
(``nqf-run-id=ID``, :func:`archive_comment`), in a PNG text chunk (``nqf-run-id``) and
the SVG ``dc:identifier`` (``nqf-run-id:ID``) of every figure (:func:`figure_metadata`),
in ``report.html`` (``<meta name="nqf-run-id">``) and in every checkpoint header.
:func:`read_run_ids` reads each of them back; :func:`verify_run` checks that they agree.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from pathlib import Path

__all__ = ["RUN_ID_KEY", "figure_metadata", "archive_comment", "read_run_ids", "verify_run"]

RUN_ID_KEY = "nqf-run-id"


def figure_metadata(run_id: str) -> dict[str, dict[str, str]]:
    """``metadata=`` of matplotlib's ``savefig`` for each format: the run id in a PNG text chunk and the SVG
    ``dc:identifier``."""
    return {"png": {RUN_ID_KEY: run_id}, "svg": {"Identifier": f"{RUN_ID_KEY}:{run_id}"}}


def archive_comment(run_id: str) -> bytes:
    """The zip comment of ``arrays.npz`` recording the run id."""
    return f"{RUN_ID_KEY}={run_id}".encode("ascii")


# Text chunks after the image data need the pixels decoded to be reached; only images up to this many pixels
# (a 4096 × 4096 figure) are decoded, so a file declaring huge dimensions is never inflated.
_DECODE_PIXELS = 1 << 24


def _png_text(data: bytes) -> dict[str, str]:
    """The text chunks (``tEXt``, ``zTXt``, ``iTXt``) of a PNG file, by keyword, as Pillow reads them; empty
    for a file that is not a PNG or that Pillow refuses (a broken chunk, a bad checksum, dimensions past its
    decompression-bomb limit).

    The chunks before the image data (where matplotlib, Pillow and libpng write them) come from the header
    alone.  Those after it (the format allows both) are read by decoding the image, for images of at most
    :data:`_DECODE_PIXELS` pixels; when that decoding fails (truncated image data) the header's chunks are kept.
    """
    from PIL import Image, PngImagePlugin

    # What Pillow raises on a file it cannot read: not a PNG (UnidentifiedImageError, an OSError), a broken
    # chunk or checksum (SyntaxError), truncated data (OSError, EOFError, struct.error), text past its limits
    # (ValueError), broken compression (zlib.error), dimensions past its decompression-bomb limit (the error, or
    # the warning where warnings are errors).
    errors = (OSError, SyntaxError, EOFError, ValueError, struct.error, zlib.error)
    errors = (*errors, Image.DecompressionBombError, Image.DecompressionBombWarning)
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as im:
            text = {k: str(v) for k, v in im.info.items() if isinstance(v, str)}  # other entries: dpi, gamma, …
            if not isinstance(im, PngImagePlugin.PngImageFile) or im.width * im.height > _DECODE_PIXELS:
                return text
            try:
                return {k: str(v) for k, v in im.text.items()}
            except errors:
                return text
    except errors:
        return {}


def read_run_ids(path) -> dict[str, str | None]:
    """The run id recorded in each file of a run directory (``None`` where a file has none)."""
    root = Path(path)
    ids: dict[str, str | None] = {}
    from ._schema import read_results_json

    data = read_results_json(root / "results.json")
    ids["results.json"] = data.get("run_id")
    for files in (data.get("figures") or {}).values():
        for ext, rel in files.items():
            p = root / rel
            if not p.is_file():
                ids[rel] = None
                continue
            raw = p.read_bytes()
            if ext == "png":
                ids[rel] = _png_text(raw).get(RUN_ID_KEY)
            else:
                m = re.search(rf"{RUN_ID_KEY}:([0-9a-f]+)", raw.decode("utf-8", "replace"))
                ids[rel] = m.group(1) if m else None
    if data.get("arrays"):
        p = root / data["arrays"]
        try:
            with zipfile.ZipFile(p) as zf:
                c = zf.comment.decode("ascii", "replace")
            ids[data["arrays"]] = c.split("=", 1)[1] if c.startswith(f"{RUN_ID_KEY}=") else None
        except (OSError, zipfile.BadZipFile):
            ids[data["arrays"]] = None
    rep = root / "report.html"
    if rep.is_file():
        m = re.search(rf'<meta name="{RUN_ID_KEY}" content="([0-9a-f]+)">', rep.read_text("utf-8", "replace"))
        ids["report.html"] = m.group(1) if m else None
    else:
        ids["report.html"] = None
    return ids


def verify_run(path) -> list[str]:
    """Problems of a run directory (empty when it is one complete, self-consistent run).

    Checks that ``results.json`` is valid and that every figure, ``arrays.npz`` and
    ``report.html`` exist and carry its run id.
    """
    from ._schema import ResultsFileError, validate_results

    try:
        validate_results(path)
        ids = read_run_ids(path)
    except ResultsFileError as exc:
        return [str(exc)]
    want = ids.get("results.json")
    return [f"{name}: run id {got!r}, results.json has {want!r}" for name, got in ids.items() if got != want]
