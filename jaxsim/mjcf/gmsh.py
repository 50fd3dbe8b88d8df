"""GMSH `.msh` files for `<flexcomp type="gmsh">`, read the way MuJoCo reads them.

MuJoCo (4.x) hands the file to its GMSH decoder and the flexcomp builder takes the node
positions and the triangles (dim 2) or tetrahedra (dim 3) from it. `read_gmsh` reproduces
that reader, restrictions and quirks included, so that the files MuJoCo accepts are the ones
accepted here and give the same points and elements:

* Only format versions 2.2 and 4.1 (`round(100 * version)` is 220 or 410), ASCII or binary
  (a non-zero file-type field means binary; binary values are little-endian).
* Sections are found by the first occurrence of `$Nodes`, `$EndNodes`, `$Elements`,
  `$EndElements` anywhere in the file; a section's data starts one byte after its tag.
* 4.1: one node block and one element block. Node tags must run consecutively from
  `minNodeTag` (ASCII also wants `maxNodeTag` equal to the block's node count); the block's
  entity dimension is the flex dim and the element type must be 2 (triangle) for dim 2 and
  4 (tetrahedron) for dim 3. Line meshes (dim 1, type 1) are parsed and then refused.
* 2.2: nodes are taken in file order, their tags ignored; elements name nodes by 1-based
  position. The first element's type (2 or 4) fixes the dim and the node count of every
  element (later types are not looked at). ASCII elements with a positive tag count carry
  exactly two tags. Binary elements are gmsh-style (a 3-int header per element, two tags)
  or fTetWild-style (one block header, no tags), chosen by the first element's tag count;
  with an element count of 0 the first record is still read.
* ASCII numbers are read as C++ (libc++) streams read `size_t`, `int` and `double`: a value
  may stop in the middle of a word, a section must not end right after its last number, a
  `size_t` may be negative (it wraps), hexadecimal floats are accepted, and out-of-range
  values (double overflow, inexact underflow) are errors.
* A triangle mesh (dim 2) then goes through MuJoCo's mesh loader: every node becomes float32
  (and must stay finite, used or not) and nodes at the same float32 position are merged.
  A tetrahedral mesh (dim 3) keeps its float64 nodes, but the nodes of its boundary faces
  must be finite in float32, and it must have a boundary face (MuJoCo crashes otherwise).
* The flexcomp's `dim`, when given, must equal the file's; without it the file decides.

Checked against MuJoCo 4.0.0 (the GMSH decoder plugin, not the older in-flexcomp reader:
that one took dim from the file silently, checked 2.2 binary node tags against the element
count, and had no float32 step).

`compact` then drops the points no element uses, as the flexcomp builder does after scaling
and placing them.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

import numpy as np

from jaxsim.mjcf.errors import MJCFError

_INT_MAX = 2**31 - 1
_U64 = 2**64
_DBL_MIN = 2.2250738585072014e-308


class _Bad(Exception):
    """Internal: the file is rejected (message without context)."""


# ---------------------------------------------------------------------------------------------
# ASCII numbers as libc++'s num_get reads them (C locale)

_SKIP = re.compile(rb"[ \t\n\v\f\r]*")
_INT_CHARS = re.compile(rb"[+-]?[0-9]*")
_PLAIN_FLOAT = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# characters the float scanner may take in (besides '.')
_FP_ATOMS = frozenset(b"0123456789abcdefABCDEFxX+-pP")
_FP_MORE = _FP_ATOMS | {ord(".")}
_DIGITS = frozenset(b"0123456789")
_STRTOD_DEC = re.compile(rb"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?")
_STRTOD_HEX = re.compile(
    rb"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?[0-9]+))?")


def _scan_float(t: bytes, p: int) -> tuple[bytes, int]:
    """The characters libc++ collects for a floating-point value starting at t[p]."""
    m = _PLAIN_FLOAT.match(t, p)
    if m and (m.end() == len(t) or t[m.end()] not in _FP_MORE):
        return m.group(), m.end()
    out = bytearray()
    in_units, exp, lead = True, ord("E"), False
    n = len(t)
    while p < n:
        c = t[p]
        if c == 0x2E:  # '.'
            if not in_units:
                break
            in_units = False
        elif c not in _FP_ATOMS:
            break
        elif c in (0x2B, 0x2D):  # '+' '-'
            if out and _upper(out[-1]) != _upper(exp):
                break
        elif c in (0x78, 0x58):  # 'x' 'X'
            exp = ord("P")
        elif _upper(c) == exp:
            exp = exp + 32  # lower case: a second exponent letter is just a character
            in_units = False
        out.append(c)
        if not lead:  # the first character after an optional sign must be a digit or '.'
            first = out[1:2] if out[0] in (0x2B, 0x2D) else out[0:1]
            if first:
                if first[0] not in _DIGITS and first[0] != 0x2E:
                    break
                lead = True
        p += 1
    return bytes(out), p


def _upper(c: int) -> int:
    return c - 32 if 0x61 <= c <= 0x7A else c


def _strtod(s: bytes) -> float | None:
    """glibc strtod of the whole of `s`; None when it would not use all of `s` or would set
    ERANGE (overflow, or an underflowing result that is not exact)."""
    hexa = _STRTOD_HEX.fullmatch(s)
    m = hexa or _STRTOD_DEC.fullmatch(s)
    if m is None or not (m.group(2) or m.group(3)):
        return None
    sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or b"", m.group(4)
    try:
        if hexa:
            text = sign + b"0x" + (whole or b"0") + b"." + frac + b"p" + (exp or b"0")
            x = float.fromhex(text.decode())
        else:
            x = float(s.decode())
    except OverflowError:
        return None
    if math.isinf(x):
        return None
    if abs(x) < _DBL_MIN and not _exact_match(x, s, bool(hexa), whole + frac):
        return None
    return x


def _exact_match(x: float, s: bytes, hexa: bool, digits: bytes) -> bool:
    """Whether the tiny result x equals the value written in s (glibc sets ERANGE otherwise)."""
    if not digits.strip(b"0"):
        return x == 0
    if x == 0:
        return False
    if not hexa:
        return Decimal(s.decode()) == Decimal(x)
    m = _STRTOD_HEX.fullmatch(s)
    frac = m.group(3) or b""
    shift = int(m.group(4) or 0) - 4 * len(frac)
    value = Fraction(int(digits.decode(), 16)) * Fraction(2) ** shift
    return Fraction(x) == (-value if m.group(1) == b"-" else value)


class _Text:
    """A std::stringstream over one ASCII section, read with operator>>."""

    def __init__(self, text: bytes):
        self.t = text
        self.p = 0
        self.eof = False

    def _token(self, kind: str):
        if self.eof:  # the sentry of any further read fails
            return None
        t = self.t
        p = _SKIP.match(t, self.p).end()
        if p >= len(t):
            self.p, self.eof = p, True
            return None
        if kind == "f":
            s, q = _scan_float(t, p)
        else:
            q = _INT_CHARS.match(t, p).end()
            s = t[p:q]
        self.p = q
        self.eof = q >= len(t)
        if kind == "f":
            return _strtod(s)
        digits = s.lstrip(b"+-")
        if not digits:
            return None
        digits = digits.lstrip(b"0") or b"0"
        if len(digits) > 20:  # beyond any 64-bit value (and Python's int-parsing limit)
            return None
        v = -int(digits) if s[:1] == b"-" else int(digits)
        if kind == "u":  # strtoull on the digits, negated modulo 2**64 after a '-'
            if abs(v) >= _U64:
                return None
            return v % _U64
        if not -_INT_MAX - 1 <= v <= _INT_MAX:  # long, then the int range check
            return None
        return v

    def read(self, kind: str, msg: str, good: bool = True):
        """Reads a size_t ('u'), int ('i') or double ('f'); fails like `!ss.good()` (or like
        `ss.fail()` when good is False)."""
        v = self._token(kind)
        if v is None or (good and self.eof):
            raise _Bad(msg)
        return v


def _count_line(text: bytes, what: str) -> _Text:
    """The 2.2 ASCII section start: its first line must be digits only and end in '\\n'."""
    j = text.find(b"\n")
    line = text if j < 0 else text[:j]
    if not all(c in _DIGITS for c in line):
        raise _Bad(f"the {what} section's first line is not a count")
    if not text or j < 0:
        raise _Bad(f"cannot read the number of {what}")
    return _Text(text)


# ---------------------------------------------------------------------------------------------
# binary values


def _fetch(buf: bytes, off: int, dtype: str, count: int = 1) -> np.ndarray:
    size = np.dtype(dtype).itemsize * count
    if off < 0 or count < 0 or off + size > len(buf):
        raise _Bad("binary data runs past the end of the file")
    return np.frombuffer(buf, dtype, count, off)


def _scalar(buf: bytes, off: int, dtype: str) -> int:
    return int(_fetch(buf, off, dtype)[0])


def _leading_count(buf: bytes, begin: int, end: int) -> tuple[bytes, int]:
    """The count text at the start of a binary 2.2 section (up to 10 bytes, up to a NUL) and
    the offset MuJoCo takes the records to start at (that length minus one)."""
    chars = buf[begin:begin + min(10, end - begin)].split(b"\0", 1)[0]
    return chars, len(chars) - 1


# ---------------------------------------------------------------------------------------------
# format 4.1


def _nodes41(buf: bytes, binary: bool, b: int, e: int):
    if not binary:
        s = _Text(buf[b:e])
        head = [s.read(k, "cannot read the $Nodes header") for k in "uuuuiiiu"]
        nblock, nnode, tag0, tagmax, edim, _etag, _param, nblocknode = head
        if nblock != 1 or nnode != nblocknode:
            raise _Bad("all nodes must be in a single block")
        if tagmax != nblocknode:
            raise _Bad("maxNodeTag must equal the number of nodes in the block")
        if not 1 <= edim <= 3:
            raise _Bad("the node block's entity must be 1D, 2D or 3D")
        for i in range(nnode):
            if s.read("u", "cannot read the node tags") != (i + tag0) % _U64:
                raise _Bad("node tags must be consecutive")
        if nnode >= _INT_MAX // 3:
            raise _Bad("too many nodes")
        pts = [s.read("f", "cannot read the node coordinates") for _ in range(3 * nnode)]
        return np.array(pts, float).reshape(-1, 3), nnode, tag0, edim
    if e - b < 52:
        raise _Bad("the $Nodes header is too short")
    nblock, nnode, tag0, _tagmax = (_scalar(buf, b + 8 * k, "<u8") for k in range(4))
    edim = _scalar(buf, b + 32, "<i4")
    nblocknode = _scalar(buf, b + 44, "<u8")
    if nblock != 1 or nnode != nblocknode:
        raise _Bad("all nodes must be in a single block")
    if not 1 <= edim <= 3:
        raise _Bad("the node block's entity must be 1D, 2D or 3D")
    if e - b < 52 + 32 * nnode:
        raise _Bad("the $Nodes section is too short")
    tags = _fetch(buf, b + 52, "<u8", nnode)
    want = np.arange(nnode, dtype=np.uint64) + np.uint64(tag0)
    if np.any(tags != want):
        raise _Bad("node tags must be consecutive")
    if nnode >= _INT_MAX // 3:
        raise _Bad("too many nodes")
    pts = _fetch(buf, b + 52 + 8 * nnode, "<f8", 3 * nnode)
    return pts.astype(float).reshape(-1, 3), nnode, tag0, edim


_TYPE41 = {1: 1, 2: 2, 3: 4}  # entity dim -> element type


def _elements41(buf: bytes, binary: bool, b: int, e: int, nnode: int, tag0: int, dim: int):
    if not binary:
        s = _Text(buf[b:e])
        head = [s.read(k, "cannot read the $Elements header") for k in "uuuuiiiu"]
        nblock, nelem, _t0, _t1, edim, _etag, etype, nblockelem = head
    else:
        if e - b < 52:
            raise _Bad("the $Elements header is too short")
        nblock, nelem = _scalar(buf, b, "<u8"), _scalar(buf, b + 8, "<u8")
        edim, etype = _scalar(buf, b + 32, "<i4"), _scalar(buf, b + 40, "<i4")
        nblockelem = _scalar(buf, b + 44, "<u8")
    if nblock != 1 or nelem != nblockelem:
        raise _Bad("all elements must be in a single block")
    if edim != dim:
        raise _Bad("the element block's dimension differs from the node block's")
    if _TYPE41[dim] != etype:
        raise _Bad(f"element type {etype} does not match dimension {dim}")
    if nelem >= _INT_MAX // 4:
        raise _Bad("too many elements")
    if not binary:
        ids = []
        for _ in range(nelem):
            s.read("u", "cannot read the elements", good=False)
            for _k in range(dim + 1):
                v = s.read("u", "cannot read the elements")
                if v < tag0 or v - tag0 >= nnode:
                    raise _Bad(f"element node tag {v} is not a node")
                ids.append(v - tag0)
        return np.array(ids, np.int64).reshape(-1, dim + 1)
    if e - b < 52 + nelem * (dim + 2) * 8:
        raise _Bad("the $Elements section is too short")
    rec = _fetch(buf, b + 52, "<u8", nelem * (dim + 2)).reshape(nelem, dim + 2)[:, 1:]
    t0 = np.uint64(tag0)
    if np.any((rec < t0) | (rec - t0 >= np.uint64(nnode))):
        raise _Bad("an element node tag is not a node")
    return (rec - t0).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# format 2.2


def _nodes22(buf: bytes, binary: bool, b: int, e: int):
    if not binary:
        s = _count_line(buf[b:e], "nodes")
        nnode = s.read("u", "cannot read the number of nodes")
        if nnode >= _INT_MAX // 3:
            raise _Bad("too many nodes")
        pts = []
        for _ in range(nnode):
            s.read("u", "cannot read a node tag")
            pts.extend(s.read("f", "cannot read the node coordinates") for _k in range(3))
        return np.array(pts, float).reshape(-1, 3), nnode
    if e - b < 4:
        raise _Bad("the $Nodes section is too short")
    chars, start = _leading_count(buf, b, e)
    m = re.match(rb"[0-9]+", chars)
    if m is None:
        raise _Bad("cannot read the number of nodes")
    nnode = int(m.group())
    if e - b < 4 + 28 * nnode:
        raise _Bad("the $Nodes section is too short")
    if nnode >= _INT_MAX // 3:
        raise _Bad("too many nodes")
    _fetch(buf, b + start, "u1", 28 * nnode)  # bounds
    rec = np.frombuffer(buf, np.dtype([("tag", "<i4"), ("x", "<f8", (3,))]), nnode, b + start)
    return np.array(rec["x"], float).reshape(-1, 3), nnode


_TYPE22 = {2: 2, 4: 3}  # element type -> dim


def _elements22(buf: bytes, binary: bool, b: int, e: int, nnode: int):
    if not binary:
        s = _count_line(buf[b:e], "elements")
        nelem = s.read("u", "cannot read the number of elements")
        if nelem >= _INT_MAX // 4:
            raise _Bad("too many elements")
        msg = "cannot read the elements"
        _tag, etype, ntag = (s.read("i", msg) for _ in range(3))
        if etype not in _TYPE22:
            raise _Bad(f"element type {etype} is neither a triangle (2) nor a tetrahedron (4)")
        dim = _TYPE22[etype]
        ids = []
        for i in range(nelem):
            if i:
                _tag, _etype, ntag = (s.read("i", msg) for _ in range(3))
            if ntag > 0:  # two tags, whatever the count says
                s.read("i", msg)
                s.read("i", msg)
            for _k in range(dim + 1):
                v = s.read("i", msg)
                if not 1 <= v <= nnode:
                    raise _Bad(f"element node tag {v} is not a node")
                ids.append(v - 1)
        return np.array(ids, np.int64).reshape(-1, dim + 1), dim
    if e - b < 4:
        raise _Bad("the $Elements section is too short")
    chars, start = _leading_count(buf, b, e)
    m = re.match(rb"-?[0-9]+", chars)
    if m is None or not 0 <= int(m.group()) <= _INT_MAX:
        raise _Bad("cannot read the number of elements")
    nelem = int(m.group())
    at = b + start
    etype, ntag = _scalar(buf, at, "<i4"), _scalar(buf, at + 8, "<i4")
    _scalar(buf, at + 12, "<i4")
    if etype not in _TYPE22:
        raise _Bad(f"element type {etype} is neither a triangle (2) nor a tetrahedron (4)")
    dim = _TYPE22[etype]
    nn = dim + 1
    if e - b < 17 + 20 * nelem:
        raise _Bad("the $Elements section is too short")
    count = max(nelem, 1)  # the first record is read even when the count is 0
    if ntag > 0:  # gmsh: [type, 1, 2, tag, phys, geom, nodes...] per element
        if e - b < 4 + 4 * (6 + nn) * nelem:
            raise _Bad("the $Elements section is too short")
        ints = _fetch(buf, at, "<i4", count * (6 + nn)).reshape(count, 6 + nn)[:, 6:]
    else:  # fTetWild: [type, n, 0] then [tag, 4 nodes] per element
        ints = _fetch(buf, at + 16, "<i4", 5 * (count - 1) + nn)
        ints = ints[(5 * np.arange(count))[:, None] + np.arange(nn)]
    ints = ints.astype(np.int64)
    if np.any((ints < 1) | (ints > nnode)):
        raise _Bad("an element node tag is not a node")
    return ints - 1, dim


# ---------------------------------------------------------------------------------------------


def _header(buf: bytes) -> tuple[float, bool]:
    s = _Text(buf[11:11 + min(len(buf) - 11, 64)])
    msg = "cannot read the $MeshFormat line"
    version = s.read("f", msg, good=False)
    binary = s.read("i", msg, good=False)
    return version, binary != 0


def _round(x: float) -> int | None:
    """mju_round: C round() (half away from zero) clamped to the int range; None for NaN."""
    if math.isnan(x):
        return None
    if x > _INT_MAX or x < -_INT_MAX - 1:
        return int(math.copysign(_INT_MAX, x))
    r = math.floor(abs(x))
    if abs(x) - r >= 0.5:
        r += 1
    return int(math.copysign(r, x))


def _read(data: bytes, dim: int | None):
    if dim is not None and not 1 <= dim <= 3:
        raise _Bad("Invalid dim, must be between 1 and 3")
    if len(data) == 0:
        raise _Bad("empty GMSH file")
    if len(data) < 11 or data[:11] != b"$MeshFormat":
        raise _Bad("a GMSH file must begin with $MeshFormat")
    version, binary = _header(data)
    v = _round(100 * version)
    if v not in (220, 410):
        raise _Bad(f"GMSH format version {version:g} is not supported (only 2.2 and 4.1)")
    nb, ne = data.find(b"$Nodes"), data.find(b"$EndNodes")
    eb, ee = data.find(b"$Elements"), data.find(b"$EndElements")
    if nb < 0:
        raise _Bad("no $Nodes section")
    if eb < 0:
        raise _Bad("no $Elements section")
    nb += len(b"$Nodes") + 1
    eb += len(b"$Elements") + 1
    if ne < nb:
        raise _Bad("no $EndNodes after $Nodes")
    if ee < eb:
        raise _Bad("no $EndElements after $Elements")
    buf = data + b"\0"  # MuJoCo works on a NUL-terminated copy
    if v == 410:
        points, nnode, tag0, fdim = _nodes41(buf, binary, nb, ne)
        elements = _elements41(buf, binary, eb, ee, nnode, tag0, fdim)
        if fdim == 1:
            raise _Bad("1D (line) GMSH meshes are not supported")
    else:
        points, nnode = _nodes22(buf, binary, nb, ne)
        elements, fdim = _elements22(buf, binary, eb, ee, nnode)
    if len(elements) == 0:
        raise _Bad("the GMSH file has no elements")
    if len(points) == 0:
        raise _Bad("the GMSH file has no nodes")
    if dim is not None and dim != fdim:
        raise _Bad(f"flexcomp dim={dim} does not match the GMSH mesh dimension {fdim}")
    if fdim == 2:
        points, elements = _surface(points, elements)
    else:
        _check_boundary(points, elements)
    return points, elements.astype(np.int32), fdim


def _float32(points: np.ndarray, ids=None) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = points.astype(np.float32)
    bad = ~np.isfinite(f32).all(axis=1)
    if ids is not None:
        bad &= np.isin(np.arange(len(points)), ids)
    if bad.any():
        raise _Bad(f"node {int(np.argmax(bad)) + 1} has a coordinate that is not a finite "
                   "float32")
    return f32


def _surface(points: np.ndarray, tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo takes a triangle mesh through its mesh loader: every node in float32 (and then
    finite), nodes at the same float32 position merged into the first of them (0 and -0
    alike), the triangles renumbered accordingly."""
    f32 = _float32(points)
    key = f32 + np.float32(0)  # -0 -> +0
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    newid = rank[np.asarray(inverse).reshape(-1)]
    return f32[first[order]].astype(float), newid[tris]


_TET_FACES = np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]])


def _check_boundary(points: np.ndarray, tets: np.ndarray) -> None:
    """MuJoCo also builds the boundary surface of a tetrahedral mesh (the faces of only one
    tetrahedron) and runs it through its mesh loader, which wants those nodes to be finite in
    float32 (the others are not looked at); with no boundary face at all MuJoCo crashes."""
    faces = np.sort(tets[:, _TET_FACES].reshape(-1, 3), axis=1)
    _, inverse, counts = np.unique(faces, axis=0, return_inverse=True, return_counts=True)
    boundary = faces[counts[np.asarray(inverse).reshape(-1)] == 1]
    if len(boundary) == 0:
        raise _Bad("the tetrahedral mesh has no boundary face")
    _float32(points, np.unique(boundary))


def read_gmsh(data: bytes, dim: int | None, *, where=None) -> tuple[np.ndarray, np.ndarray, int]:
    """Reads a GMSH file as MuJoCo's flexcomp does.

    Args:
      data: the file's bytes.
      dim: the flexcomp's `dim` attribute, or None when it was not given.
      where: the XML element named in errors (or None).

    Returns:
      (points, elements, dim): points (npoint, 3) float64 and elements (nelem, dim+1) int32
      indices into points, as the flexcomp gets them before it scales and places the points
      and drops the unreferenced ones (see `compact`), and the mesh dimension (2 or 3).

    Raises:
      MJCFError: for every file MuJoCo rejects, and when `dim` is given and differs from the
        file's dimension.
    """
    try:
        return _read(bytes(data), dim)
    except _Bad as err:
        raise MJCFError(f"GMSH: {err}", where) from None
    except (ValueError, IndexError, OverflowError, TypeError, MemoryError) as err:
        raise MJCFError(f"GMSH: unreadable file ({err})", where) from None


def compact(points: np.ndarray, elements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drops the points no element uses and renumbers the elements, keeping the order of the
    remaining points (what MuJoCo's flexcomp does for direct, mesh and gmsh types)."""
    points = np.asarray(points)
    elements = np.asarray(elements)
    used = np.zeros(len(points), bool)
    used[elements.reshape(-1)] = True
    newid = np.cumsum(used) - 1
    return points[used], newid[elements].astype(elements.dtype)
