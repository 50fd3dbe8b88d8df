"""Image decoding for height fields: a small PNG reader and MuJoCo's hfield formats.

Host-only numpy + zlib code (no PIL). Two goals:

  * ``read_png``: a minimal but complete PNG decoder (all colour types, bit
    depths, filter types and Adam7 interlacing), raising ``ValueError`` on
    malformed files.
  * ``hfield_from_png`` / ``hfield_from_custom``: the elevation samples MuJoCo
    derives from a height-field file, *before* it rescales them to [0, 1]
    (the caller, ``assets._compile_hfield``, does that step).

MuJoCo decodes PNG height fields with lodepng, asking for 8-bit grey output.
lodepng's colour converter does not compute a luminance: it goes through an
8-bit RGBA intermediate and keeps the *red* channel as the grey value. So an
RGB(A) or palette image contributes only its red channel, 16-bit samples
contribute their high byte, and 1/2/4-bit grey samples are scaled to 0..255.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["read_png", "hfield_from_png", "hfield_from_custom"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# PNG colour types and the number of samples per pixel of each
_GREY, _RGB, _PALETTE, _GREY_ALPHA, _RGBA = 0, 2, 3, 4, 6
_CHANNELS = {_GREY: 1, _RGB: 3, _PALETTE: 1, _GREY_ALPHA: 2, _RGBA: 4}
_DEPTHS = {_GREY: (1, 2, 4, 8, 16), _RGB: (8, 16), _PALETTE: (1, 2, 4, 8),
           _GREY_ALPHA: (8, 16), _RGBA: (8, 16)}

# Adam7 passes: (x0, y0, dx, dy)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
          (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


class _Png:
    """Decoded PNG before any colour conversion.

    Attributes:
      width, height: image size in pixels.
      depth: bit depth of one sample (1, 2, 4, 8 or 16).
      ctype: PNG colour type (0, 2, 3, 4 or 6).
      samples: (height, width, channels) uint8 (depth <= 8) or uint16 array of
        the stored sample values (palette images: palette indices).
      palette: (n, 4) uint8 RGBA palette (alpha from tRNS, else 255) or None.
    """

    def __init__(self, width, height, depth, ctype, samples, palette):
        self.width, self.height, self.depth, self.ctype = width, height, depth, ctype
        self.samples, self.palette = samples, palette


def _chunks(data: bytes):
    """Yields (type, payload) for every chunk, checking lengths and CRCs."""
    if len(data) < 8 or data[:8] != _SIGNATURE:
        raise ValueError("not a PNG file (bad signature)")
    pos, n = 8, len(data)
    while True:
        if pos + 12 > n:
            raise ValueError("PNG file truncated (missing IEND chunk)")
        length, = struct.unpack_from(">I", data, pos)
        if length > 0x7FFFFFFF:
            raise ValueError("PNG chunk length exceeds 2^31-1")
        ctype = data[pos + 4:pos + 8]
        end = pos + 8 + length
        if end + 4 > n:
            raise ValueError(f"PNG chunk {ctype!r} truncated")
        payload = data[pos + 8:end]
        crc, = struct.unpack_from(">I", data, end)
        # lodepng verifies CRCs by default, so a corrupt chunk is an error there too
        if zlib.crc32(ctype + payload) & 0xFFFFFFFF != crc:
            raise ValueError(f"PNG chunk {ctype!r} has a wrong CRC")
        if not all(65 <= c <= 90 or 97 <= c <= 122 for c in ctype):
            raise ValueError(f"invalid PNG chunk type {ctype!r}")
        yield ctype, payload
        if ctype == b"IEND":
            return
        pos = end + 4


def _unfilter(raw: bytes, rows: int, rowbytes: int, bpp: int) -> np.ndarray:
    """Reverses the per-scanline filters of one (sub)image.

    Args:
      raw: filter-type byte + filtered bytes for each of ``rows`` scanlines.
      rows: number of scanlines.
      rowbytes: bytes per scanline without the filter-type byte.
      bpp: bytes per complete pixel, rounded up to 1 (the filter offset).

    Returns:
      (rows, rowbytes) uint8 array of reconstructed bytes.
    """
    buf = np.frombuffer(raw, dtype=np.uint8).reshape(rows, rowbytes + 1)
    ftypes = buf[:, 0]
    if np.any(ftypes > 4):
        r = int(np.argmax(ftypes > 4))
        raise ValueError(f"invalid PNG filter type {int(ftypes[r])} in scanline {r}")
    out = np.zeros((rows, rowbytes), dtype=np.uint8)
    prior = np.zeros(rowbytes, dtype=np.uint8)
    for r in range(rows):
        line = buf[r, 1:]
        ft = ftypes[r]
        if ft == 0:  # None
            cur = line.copy()
        elif ft == 2:  # Up
            cur = line + prior
        elif ft == 1:  # Sub: a running sum along each byte lane, modulo 256
            pad = (-rowbytes) % bpp
            lanes = np.concatenate([line, np.zeros(pad, np.uint8)]).reshape(-1, bpp)
            cur = np.cumsum(lanes, axis=0, dtype=np.uint8).reshape(-1)[:rowbytes]
        else:
            # Average and Paeth depend on the byte just reconstructed, so they are
            # inherently sequential; plain Python ints are fastest here.
            cur = _unfilter_sequential(line.tolist(), prior.tolist(), bpp, ft)
            cur = np.asarray(cur, dtype=np.uint8)
        out[r] = cur
        prior = cur
    return out


def _unfilter_sequential(line: list, prior: list, bpp: int, ft: int) -> list:
    """Average (ft=3) or Paeth (ft=4) reconstruction of one scanline."""
    cur = list(line)
    n = len(cur)
    if ft == 3:
        for i in range(n):
            left = cur[i - bpp] if i >= bpp else 0
            cur[i] = (cur[i] + ((left + prior[i]) >> 1)) & 0xFF
        return cur
    for i in range(n):
        if i >= bpp:
            a, c = cur[i - bpp], prior[i - bpp]
        else:
            a = c = 0
        b = prior[i]
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        if pa <= pb and pa <= pc:
            pred = a
        elif pb <= pc:
            pred = b
        else:
            pred = c
        cur[i] = (cur[i] + pred) & 0xFF
    return cur


def _unpack(rows: np.ndarray, width: int, channels: int, depth: int) -> np.ndarray:
    """Turns reconstructed scanline bytes into (rows, width, channels) samples."""
    nrow = rows.shape[0]
    nsamp = width * channels
    if depth == 8:
        return rows[:, :nsamp].reshape(nrow, width, channels)
    if depth == 16:
        big = rows[:, :2 * nsamp].reshape(nrow, nsamp, 2).astype(np.uint16)
        return ((big[..., 0] << 8) | big[..., 1]).reshape(nrow, width, channels)
    # sub-byte samples are packed most significant bits first; each scanline
    # is padded to whole bytes, so unpack row by row before regrouping
    bits = np.unpackbits(rows, axis=1)[:, :nsamp * depth].reshape(nrow, nsamp, depth)
    weights = (1 << np.arange(depth - 1, -1, -1)).astype(np.uint8)
    vals = (bits * weights).sum(axis=2).astype(np.uint8)
    return vals.reshape(nrow, width, channels)


def _decode(data: bytes) -> _Png:
    """Parses and decompresses a PNG without colour conversion."""
    data = bytes(data)
    header = None
    palette = None
    trns = None
    idat = []
    for ctype, payload in _chunks(data):
        if header is None and ctype != b"IHDR":
            raise ValueError("PNG file does not start with an IHDR chunk")
        if ctype == b"IHDR":
            if header is not None:
                raise ValueError("PNG file has more than one IHDR chunk")
            if len(payload) != 13:
                raise ValueError("PNG IHDR chunk has the wrong size")
            header = struct.unpack(">IIBBBBB", payload)
        elif ctype == b"PLTE":
            if len(payload) % 3 or not 0 < len(payload) <= 768:
                raise ValueError("PNG palette size is invalid")
            palette = np.frombuffer(payload, np.uint8).reshape(-1, 3)
        elif ctype == b"tRNS":
            trns = payload
        elif ctype == b"IDAT":
            idat.append(payload)
        elif ctype == b"IEND":
            break
        elif ctype[0] & 0x20 == 0:  # upper-case first letter: critical chunk
            raise ValueError(f"unknown critical PNG chunk {ctype!r}")

    width, height, depth, ctype, comp, filt, interlace = header
    if width == 0 or height == 0 or width > 0x7FFFFFFF or height > 0x7FFFFFFF:
        raise ValueError(f"PNG image has invalid dimensions {width}x{height}")
    if ctype not in _CHANNELS:
        raise ValueError(f"invalid PNG colour type {ctype}")
    if depth not in _DEPTHS[ctype]:
        raise ValueError(f"invalid PNG bit depth {depth} for colour type {ctype}")
    if comp != 0 or filt != 0:
        raise ValueError("unsupported PNG compression or filter method")
    if interlace > 1:
        raise ValueError(f"invalid PNG interlace method {interlace}")
    # a palette longer than the bit depth can index is tolerated, as lodepng does
    if ctype == _PALETTE and palette is None:
        raise ValueError("palette PNG image has no PLTE chunk")
    if not idat:
        raise ValueError("PNG file has no IDAT chunk")

    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise ValueError(f"corrupt PNG image data: {e}") from None

    channels = _CHANNELS[ctype]
    bits_pp = channels * depth
    bpp = max(1, bits_pp // 8)

    def rowbytes(w):
        return (w * bits_pp + 7) // 8

    if interlace == 0:
        passes = [(0, 0, 1, 1, width, height)]
    else:
        passes = []
        for x0, y0, dx, dy in _ADAM7:
            pw = (width - x0 + dx - 1) // dx if width > x0 else 0
            ph = (height - y0 + dy - 1) // dy if height > y0 else 0
            passes.append((x0, y0, dx, dy, pw, ph))
    expected = sum(ph * (rowbytes(pw) + 1) for *_, pw, ph in passes if pw and ph)
    if len(raw) != expected:
        raise ValueError(f"PNG image data has {len(raw)} bytes, expected {expected}")

    dtype = np.uint16 if depth == 16 else np.uint8
    samples = np.zeros((height, width, channels), dtype=dtype)
    pos = 0
    for x0, y0, dx, dy, pw, ph in passes:
        if not pw or not ph:
            continue  # empty Adam7 passes store no scanlines at all
        size = ph * (rowbytes(pw) + 1)
        rows = _unfilter(raw[pos:pos + size], ph, rowbytes(pw), bpp)
        samples[y0::dy, x0::dx] = _unpack(rows, pw, channels, depth)
        pos += size

    pal = None
    if palette is not None:
        pal = np.full((len(palette), 4), 255, dtype=np.uint8)
        pal[:, :3] = palette
        if ctype == _PALETTE and trns is not None:
            alpha = np.frombuffer(trns, np.uint8)[:len(pal)]
            pal[:len(alpha), 3] = alpha
    return _Png(width, height, depth, ctype, samples, pal)


def read_png(data: bytes) -> np.ndarray:
    """Decodes a PNG file.

    Args:
      data: the PNG file contents.

    Returns:
      (height, width, channels) array, rows top to bottom. Grey, grey+alpha,
      RGB and RGBA images keep their channels and stored sample values
      (uint8 for bit depths up to 8, unscaled, so a 4-bit sample is 0..15;
      uint16 for 16-bit images). Palette images are expanded to uint8 RGB, or
      RGBA when a tRNS chunk makes some entry translucent; indices beyond the
      palette map to opaque black, as lodepng does. Colour-key tRNS chunks of
      non-palette images are ignored.

    Raises:
      ValueError: if the data is not a well-formed PNG file.
    """
    png = _decode(data)
    if png.ctype != _PALETTE:
        return png.samples
    return _palette_rgba(png)[..., :4 if png.palette[:, 3].min() < 255 else 3]


def _palette_rgba(png: _Png) -> np.ndarray:
    """(h, w, 4) uint8 RGBA of a palette image (out-of-range indices: black)."""
    pal = np.concatenate([png.palette, np.zeros((256 - len(png.palette), 4), np.uint8)])
    pal[len(png.palette):, 3] = 255
    return pal[png.samples[..., 0]]


def _red8(png: _Png) -> np.ndarray:
    """The 8-bit red channel lodepng produces when converting to RGBA8."""
    if png.ctype == _PALETTE:
        return _palette_rgba(png)[..., 0]
    red = png.samples[..., 0]
    if png.depth == 16:
        return (red >> 8).astype(np.uint8)  # lodepng keeps the high byte
    if png.depth < 8:
        highest = (1 << png.depth) - 1
        return (red.astype(np.uint32) * 255 // highest).astype(np.uint8)
    return red


def hfield_from_png(data: bytes) -> np.ndarray:
    """Height-field samples MuJoCo reads from a PNG file (before normalisation).

    MuJoCo asks lodepng for 8-bit grey pixels, which is the red channel of the
    image (see the module docstring), and stores the rows bottom to top.

    Args:
      data: the PNG file contents.

    Returns:
      (nrow, ncol) float32 array with values in 0..255, row 0 being the last
      image row.

    Raises:
      ValueError: if the data is not a well-formed PNG file, or the image has
        fewer than 2 rows or columns (MuJoCo 4 rejects such height fields).
    """
    elev = _red8(_decode(data))[::-1].astype(np.float32)
    _check_hfield_shape(*elev.shape)
    return elev


def _check_hfield_shape(nrow: int, ncol: int) -> None:
    # MuJoCo 4 rejects height fields from files with fewer than 2 rows or columns
    if nrow < 2 or ncol < 2:
        raise ValueError(f"hfield dimensions must be at least 2 (got {nrow}x{ncol})")


def hfield_from_custom(data: bytes) -> np.ndarray:
    """Height-field samples from MuJoCo's binary hfield format.

    The format is two native (little-endian) int32 values ``nrow, ncol``
    followed by ``nrow*ncol`` float32 elevations. Unlike PNG files the rows
    are used in file order, without flipping.

    Args:
      data: the file contents.

    Returns:
      (nrow, ncol) float32 array.

    Raises:
      ValueError: for an empty or truncated file, fewer than 2 rows or columns
        or a size that does not match the header (MuJoCo's checks).
    """
    data = bytes(data)
    if not data:
        raise ValueError("empty hfield file")
    if len(data) < 8:
        raise ValueError("hfield missing header")
    nrow, ncol = struct.unpack_from("<ii", data, 0)
    _check_hfield_shape(nrow, ncol)
    if len(data) != nrow * ncol * 4 + 8:
        raise ValueError(f"unexpected hfield file size {len(data)} for {nrow}x{ncol} "
                         f"samples (expected {nrow * ncol * 4 + 8})")
    return np.frombuffer(data, dtype="<f4", offset=8).reshape(nrow, ncol).astype(np.float32)
