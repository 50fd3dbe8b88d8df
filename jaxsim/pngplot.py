"""Line plots written as PNG with numpy, zlib and struct only (no plotting dependency).

Used by `python -m jaxsim simulate` and scripts/benchmark.py. A figure is a row-major grid
of panels; each panel has a title, axis labels, optional log axes and any number of
series (x, y, colour, label). Text uses a built-in 5x7 bitmap font (upper case).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# 5x7 font, one byte per column, bit 0 at the top (the classic HD44780-style glyphs).
_FONT = {
    " ": (0, 0, 0, 0, 0), "0": (0x3E, 0x51, 0x49, 0x45, 0x3E), "1": (0x00, 0x42, 0x7F, 0x40, 0x00),
    "2": (0x42, 0x61, 0x51, 0x49, 0x46), "3": (0x21, 0x41, 0x45, 0x4B, 0x31),
    "4": (0x18, 0x14, 0x12, 0x7F, 0x10), "5": (0x27, 0x45, 0x45, 0x45, 0x39),
    "6": (0x3C, 0x4A, 0x49, 0x49, 0x30), "7": (0x01, 0x71, 0x09, 0x05, 0x03),
    "8": (0x36, 0x49, 0x49, 0x49, 0x36), "9": (0x06, 0x49, 0x49, 0x29, 0x1E),
    "A": (0x7E, 0x11, 0x11, 0x11, 0x7E), "B": (0x7F, 0x49, 0x49, 0x49, 0x36),
    "C": (0x3E, 0x41, 0x41, 0x41, 0x22), "D": (0x7F, 0x41, 0x41, 0x22, 0x1C),
    "E": (0x7F, 0x49, 0x49, 0x49, 0x41), "F": (0x7F, 0x09, 0x09, 0x09, 0x01),
    "G": (0x3E, 0x41, 0x49, 0x49, 0x7A), "H": (0x7F, 0x08, 0x08, 0x08, 0x7F),
    "I": (0x00, 0x41, 0x7F, 0x41, 0x00), "J": (0x20, 0x40, 0x41, 0x3F, 0x01),
    "K": (0x7F, 0x08, 0x14, 0x22, 0x41), "L": (0x7F, 0x40, 0x40, 0x40, 0x40),
    "M": (0x7F, 0x02, 0x0C, 0x02, 0x7F), "N": (0x7F, 0x04, 0x08, 0x10, 0x7F),
    "O": (0x3E, 0x41, 0x41, 0x41, 0x3E), "P": (0x7F, 0x09, 0x09, 0x09, 0x06),
    "Q": (0x3E, 0x41, 0x51, 0x21, 0x5E), "R": (0x7F, 0x09, 0x19, 0x29, 0x46),
    "S": (0x46, 0x49, 0x49, 0x49, 0x31), "T": (0x01, 0x01, 0x7F, 0x01, 0x01),
    "U": (0x3F, 0x40, 0x40, 0x40, 0x3F), "V": (0x1F, 0x20, 0x40, 0x20, 0x1F),
    "W": (0x3F, 0x40, 0x38, 0x40, 0x3F), "X": (0x63, 0x14, 0x08, 0x14, 0x63),
    "Y": (0x07, 0x08, 0x70, 0x08, 0x07), "Z": (0x61, 0x51, 0x49, 0x45, 0x43),
    "-": (0x08, 0x08, 0x08, 0x08, 0x08), ".": (0x00, 0x60, 0x60, 0x00, 0x00),
    "+": (0x08, 0x08, 0x3E, 0x08, 0x08), "(": (0x00, 0x1C, 0x22, 0x41, 0x00),
    ")": (0x00, 0x41, 0x22, 0x1C, 0x00), "/": (0x20, 0x10, 0x08, 0x04, 0x02),
    ":": (0x00, 0x36, 0x36, 0x00, 0x00), "=": (0x14, 0x14, 0x14, 0x14, 0x14),
    "_": (0x40, 0x40, 0x40, 0x40, 0x40), ",": (0x00, 0x50, 0x30, 0x00, 0x00),
    "%": (0x23, 0x13, 0x08, 0x64, 0x62), "*": (0x14, 0x08, 0x3E, 0x08, 0x14),
    "[": (0x00, 0x7F, 0x41, 0x41, 0x00), "]": (0x00, 0x41, 0x41, 0x7F, 0x00),
    "|": (0x00, 0x00, 0x7F, 0x00, 0x00), "^": (0x04, 0x02, 0x01, 0x02, 0x04),
    "'": (0x00, 0x00, 0x07, 0x00, 0x00), "<": (0x08, 0x14, 0x22, 0x41, 0x00),
    ">": (0x00, 0x41, 0x22, 0x14, 0x08), "#": (0x14, 0x7F, 0x14, 0x7F, 0x14),
}
_GLYPHS = {c: np.array([[(col >> r) & 1 for col in cols] for r in range(7)], bool)
           for c, cols in _FONT.items()}

PALETTE = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207))


def write_png(path: str, rgb: np.ndarray) -> None:
    """Writes an (H, W, 3) uint8 image as an 8-bit RGB PNG."""
    rgb = np.ascontiguousarray(rgb, np.uint8)
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


@dataclass
class Series:
    """One line: x, y (same length), colour, optional legend label, width in pixels."""

    x: np.ndarray
    y: np.ndarray
    color: tuple = PALETTE[0]
    label: str | None = None
    width: int = 1
    marker: bool = False


@dataclass
class Panel:
    """One plot: title, axis labels, log axes, series."""

    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    logx: bool = False
    logy: bool = False
    series: list[Series] = field(default_factory=list)


class _Canvas:
    def __init__(self, w: int, h: int):
        self.img = np.full((h, w, 3), 255, np.uint8)

    def rect(self, x0, y0, x1, y1, color):
        h, w, _ = self.img.shape
        x0, x1 = max(0, int(x0)), min(w, int(x1))
        y0, y1 = max(0, int(y0)), min(h, int(y1))
        if x0 < x1 and y0 < y1:
            self.img[y0:y1, x0:x1] = color

    def text(self, x, y, s, color=(0, 0, 0), scale=1, anchor="left"):
        s = s.upper()
        width = 6 * scale * len(s)
        if anchor == "center":
            x -= width // 2
        elif anchor == "right":
            x -= width
        h, w, _ = self.img.shape
        for i, c in enumerate(s):
            g = _GLYPHS.get(c, _GLYPHS["*"] if c not in " \t" else _GLYPHS[" "])
            if scale > 1:
                g = np.kron(g, np.ones((scale, scale), bool))
            gx, gy = int(x + 6 * scale * i), int(y)
            ys, xs = np.nonzero(g)
            ys, xs = ys + gy, xs + gx
            ok = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
            self.img[ys[ok], xs[ok]] = color

    def vtext(self, x, y, s, color=(0, 0, 0)):
        """Text rotated 90 degrees (reads bottom to top), centred on y."""
        tmp = _Canvas(6 * len(s) + 2, 8)
        tmp.text(0, 0, s)
        mask = np.rot90(tmp.img[:, :, 0] < 128)
        h, w, _ = self.img.shape
        ys, xs = np.nonzero(mask)
        ys, xs = ys + int(y) - mask.shape[0] // 2, xs + int(x)
        ok = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        self.img[ys[ok], xs[ok]] = color

    def polyline(self, px, py, color, width=1, clip=None):
        px, py = np.asarray(px, float), np.asarray(py, float)
        good = np.isfinite(px) & np.isfinite(py)
        pts_x, pts_y = [], []
        for i in range(len(px) - 1):
            if not (good[i] and good[i + 1]):
                continue
            n = int(max(abs(px[i + 1] - px[i]), abs(py[i + 1] - py[i]))) + 1
            t = np.linspace(0.0, 1.0, n + 1)
            pts_x.append(px[i] + t * (px[i + 1] - px[i]))
            pts_y.append(py[i] + t * (py[i + 1] - py[i]))
        if len(px) == 1 and good[0]:
            pts_x.append(px), pts_y.append(py)
        if not pts_x:
            return
        xs = np.rint(np.concatenate(pts_x)).astype(int)
        ys = np.rint(np.concatenate(pts_y)).astype(int)
        self.dots(xs, ys, color, width, clip)

    def dots(self, xs, ys, color, width=1, clip=None):
        h, w, _ = self.img.shape
        x0, y0, x1, y1 = clip or (0, 0, w, h)
        off = range(-(width // 2), width - width // 2)
        for dx in off:
            for dy in off:
                X, Y = xs + dx, ys + dy
                ok = (X >= x0) & (X < x1) & (Y >= y0) & (Y < y1)
                self.img[Y[ok], X[ok]] = color


def _nice_ticks(lo: float, hi: float, n: int = 5) -> np.ndarray:
    if not np.isfinite(lo) or not np.isfinite(hi) or hi <= lo:
        return np.array([lo])
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    return np.arange(math.ceil(lo / step) * step, hi + 1e-9 * step, step)


def _log_ticks(lo: float, hi: float) -> np.ndarray:
    """Tick positions (log10 units) at the decades, or at 1-2-5 when less than two fit."""
    t = np.arange(math.ceil(lo), math.floor(hi) + 1, dtype=float)
    if t.size < 2:
        d = np.arange(math.floor(lo), math.ceil(hi) + 1, dtype=float)
        t = np.log10(np.outer(10.0 ** d, [1, 2, 5]).ravel())
        t = t[(t >= lo - 1e-9) & (t <= hi + 1e-9)]
    return t


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a < 1e7 and float(v).is_integer():
        return str(int(v))
    if a >= 1e5 or a < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    return f"{v:.4g}"


def _limits(vals: np.ndarray, log: bool) -> tuple[float, float]:
    v = vals[np.isfinite(vals)]
    if log:
        v = v[v > 0]
    if v.size == 0:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        return math.floor(lo * 4) / 4, math.ceil(hi * 4) / 4
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        pad = 0.5 * max(abs(hi), 1e-3)
        return lo - pad, hi + pad
    pad = 0.05 * (hi - lo)
    return lo - pad, hi + pad


def _draw_panel(cv: _Canvas, p: Panel, x0: int, y0: int, w: int, h: int) -> None:
    left, right, top, bottom = 70, 12, 22, 36
    ax0, ay0, ax1, ay1 = x0 + left, y0 + top, x0 + w - right, y0 + h - bottom
    cv.text(x0 + w // 2, y0 + 6, p.title, anchor="center")
    xs = np.concatenate([np.asarray(s.x, float).ravel() for s in p.series] or [np.zeros(0)])
    ys = np.concatenate([np.asarray(s.y, float).ravel() for s in p.series] or [np.zeros(0)])
    xlo, xhi = _limits(xs, p.logx)
    ylo, yhi = _limits(ys, p.logy)

    def tx(v):
        v = np.asarray(v, float)
        if p.logx:
            v = np.log10(np.where(v > 0, v, np.nan))
        return ax0 + (v - xlo) / (xhi - xlo) * (ax1 - ax0)

    def ty(v):
        v = np.asarray(v, float)
        if p.logy:
            v = np.log10(np.where(v > 0, v, np.nan))
        return ay1 - (v - ylo) / (yhi - ylo) * (ay1 - ay0)

    grid = (230, 230, 230)
    xt = _log_ticks(xlo, xhi) if p.logx else _nice_ticks(xlo, xhi)
    yt = _log_ticks(ylo, yhi) if p.logy else _nice_ticks(ylo, yhi)
    for t in xt:
        px = ax0 + (t - xlo) / (xhi - xlo) * (ax1 - ax0)
        cv.rect(px, ay0, px + 1, ay1, grid)
        cv.text(px, ay1 + 5, _fmt(float(f"{10.0 ** t:.6g}") if p.logx else t), anchor="center")
    for t in yt:
        py = ay1 - (t - ylo) / (yhi - ylo) * (ay1 - ay0)
        cv.rect(ax0, py, ax1, py + 1, grid)
        cv.text(ax0 - 4, py - 3, _fmt(float(f"{10.0 ** t:.6g}") if p.logy else t), anchor="right")
    black = (0, 0, 0)
    cv.rect(ax0, ay0, ax1, ay0 + 1, black), cv.rect(ax0, ay1, ax1 + 1, ay1 + 1, black)
    cv.rect(ax0, ay0, ax0 + 1, ay1, black), cv.rect(ax1, ay0, ax1 + 1, ay1, black)
    cv.text((ax0 + ax1) // 2, ay1 + 18, p.xlabel, anchor="center")
    cv.vtext(x0 + 2, (ay0 + ay1) // 2, p.ylabel)
    clip = (ax0 + 1, ay0 + 1, ax1, ay1)
    for s in p.series:
        px, py = tx(s.x), ty(s.y)
        cv.polyline(px, py, s.color, s.width, clip)
        if s.marker:
            good = np.isfinite(px) & np.isfinite(py)
            cv.dots(np.rint(px[good]).astype(int), np.rint(py[good]).astype(int), s.color, 5, clip)
    labels = [s for s in p.series if s.label]
    for i, s in enumerate(labels):
        ly = ay0 + 6 + 11 * i
        cv.rect(ax0 + 8, ly + 2, ax0 + 22, ly + 5, s.color)
        cv.text(ax0 + 26, ly, s.label)


def save_figure(path: str, panels: Sequence[Panel], *, cols: int = 2, panel_w: int = 480,
                panel_h: int = 320, title: str = "") -> None:
    """Draws `panels` in a grid of `cols` columns and writes the PNG to `path`."""
    cols = max(1, min(cols, len(panels)))
    rows = -(-len(panels) // cols)
    head = 24 if title else 0
    cv = _Canvas(cols * panel_w, rows * panel_h + head)
    if title:
        scale = 2 if 12 * len(title) < cols * panel_w - 20 else 1
        cv.text(cols * panel_w // 2, 6, title, anchor="center", scale=scale)
    for i, p in enumerate(panels):
        r, c = divmod(i, cols)
        _draw_panel(cv, p, c * panel_w, head + r * panel_h, panel_w, panel_h)
    write_png(path, cv.img)
