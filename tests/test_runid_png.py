"""The run id of a PNG figure is read by Pillow (nqf.app._report._runid._png_text): every text chunk kind (tEXt, zTXt,
iTXt, compressed or not, before or after the image data), and never an exception on a broken or hostile file."""

import io
import random
import zlib

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from nqf.app._report._runid import _DECODE_PIXELS, RUN_ID_KEY, _png_text, figure_metadata


def _png(info: PngInfo | None = None, size=(20, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buf, "PNG", pnginfo=info)
    return buf.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def _after_image_data(png: bytes, *chunks: bytes) -> bytes:
    """``png`` with ``chunks`` inserted before IEND (after the image data)."""
    assert png[-12:-8] == (0).to_bytes(4, "big") and png[-8:-4] == b"IEND"
    return png[:-12] + b"".join(chunks) + png[-12:]


def test_a_compressed_ztxt_chunk_is_read():
    """Pillow writes ``zip=True`` text as zTXt (deflated); the hand parser read only tEXt and plain iTXt."""
    info = PngInfo()
    info.add_text(RUN_ID_KEY, "0123abcd", zip=True)
    data = _png(info)
    assert b"zTXt" in data and b"0123abcd" not in data  # really compressed
    assert _png_text(data)[RUN_ID_KEY] == "0123abcd"


def test_every_text_chunk_kind_is_read():
    info = PngInfo()
    info.add_text("plain", "latin-1 \xe9")
    info.add_itxt("intl", "ünïcode ✓", lang="en", tkey="t")
    info.add_itxt("intl-zip", "deflated ✓" * 20, zip=True)
    got = _png_text(_png(info))
    assert got == {"plain": "latin-1 \xe9", "intl": "ünïcode ✓", "intl-zip": "deflated ✓" * 20}
    assert all(type(v) is str for v in got.values())


def test_matplotlib_metadata_is_read():
    """What nqf writes: matplotlib's savefig with :func:`figure_metadata`."""
    from matplotlib.figure import Figure

    buf = io.BytesIO()
    Figure(figsize=(1, 1)).savefig(buf, format="png", metadata=figure_metadata("feedbeef")["png"])
    assert _png_text(buf.getvalue())[RUN_ID_KEY] == "feedbeef"


def test_text_after_the_image_data_is_read():
    data = _after_image_data(
        _png(),
        _chunk(b"tEXt", RUN_ID_KEY.encode() + b"\0after"),
        _chunk(b"zTXt", b"z\0\0" + zlib.compress(b"deflated after")),
    )
    assert _png_text(data) == {RUN_ID_KEY: "after", "z": "deflated after"}


def test_a_huge_image_is_not_decoded():
    """Declared dimensions past :data:`_DECODE_PIXELS`: the chunks before the image data are read from the
    header, the image is never inflated (so a chunk after it is not seen)."""
    info = PngInfo()
    info.add_text(RUN_ID_KEY, "before")
    data = bytearray(_after_image_data(_png(info), _chunk(b"tEXt", b"late\0after")))
    side = int(_DECODE_PIXELS**0.5) + 1
    data[16:24] = side.to_bytes(4, "big") * 2  # IHDR width and height
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    assert _png_text(bytes(data)) == {RUN_ID_KEY: "before"}


@pytest.mark.parametrize(
    "data",
    [b"", b"not a png", b"\x89PNG\r\n\x1a\n", b"\x89PNG\r\n\x1a\n" + b"SECRET" * 10, b"GIF89a" + bytes(40)],
    ids=["empty", "text", "signature only", "signature and junk", "another format"],
)
def test_not_a_png_gives_no_text(data):
    assert _png_text(data) == {}


def test_text_past_pillows_limit_is_dropped_not_raised():
    """A zTXt chunk that inflates past Pillow's text limit (after the image data): the text read before it is
    kept, the chunk is not."""
    info = PngInfo()
    info.add_text(RUN_ID_KEY, "abc", zip=True)
    data = _after_image_data(_png(info), _chunk(b"zTXt", b"bomb\0\0" + zlib.compress(b"x" * 10**7)))
    assert _png_text(data) == {RUN_ID_KEY: "abc"}


def test_broken_files_never_raise():
    """Truncations and flipped bytes anywhere (chunk lengths, checksums, compressed text, pixels): a dict, never
    an exception; a file truncated inside its image data keeps the text read before it."""
    info = PngInfo()
    info.add_text(RUN_ID_KEY, "abc", zip=True)
    src = _after_image_data(_png(info, size=(16, 16)), _chunk(b"iTXt", b"k\0\x01\0en\0\0" + zlib.compress(b"v" * 50)))
    assert _png_text(src) == {RUN_ID_KEY: "abc", "k": "v" * 50}
    idat = src.index(b"IDAT")
    assert _png_text(src[: idat + 20]) == {RUN_ID_KEY: "abc"}
    rnd = random.Random(0)
    for _ in range(3000):
        d = bytearray(src)
        for _ in range(rnd.randint(1, 4)):
            d[rnd.randrange(len(d))] = rnd.randrange(256)
        if rnd.random() < 0.3:
            d = d[: rnd.randrange(len(d))]
        assert isinstance(_png_text(bytes(d)), dict)
