"""Mesh file decoding (STL, OBJ, MuJoCo MSH) matching MuJoCo's decoders.

Host-only numpy code. The goal is bit-compatibility with what MuJoCo's
compiler ingests: vertices are float32 values (MuJoCo stores user vertices as
``float``), faces are int32 triangles, and OBJ polygons are triangulated with
the same ear-clipping rules (evaluated in float32) as the OBJ loader MuJoCo
links against.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct

import numpy as np

MSH_CONTENT_TYPE = "model/vnd.mujoco.msh"
OBJ_CONTENT_TYPE = "model/obj"
STL_CONTENT_TYPE = "model/stl"

_EXT_CONTENT_TYPES = {
    ".stl": STL_CONTENT_TYPE,
    ".obj": OBJ_CONTENT_TYPE,
    ".msh": MSH_CONTENT_TYPE,
}


class MeshError(ValueError):
    """Invalid mesh data or mesh file; the compiler adds element/file context."""


@dataclasses.dataclass
class RawMesh:
    """Mesh data as decoded from a file or given inline in the XML.

    Attributes:
      vert: (n, 3) float64 array holding float32-representable values.
      face: (m, 3) int32 triangle indices, or None when no faces were given
        (a point cloud: MuJoCo then uses the convex hull as faces).
      normal: (k, 3) float32 normals or None.
      texcoord: (t, 2) float32 texture coordinates or None.
      facenormal: (m, 3) int32 normal indices or None.
      facetexcoord: (m, 3) int32 texcoord indices or None.
      content_type: the resolved content type ("model/obj", ...), or None for
        inline data.
    """

    vert: np.ndarray
    face: np.ndarray | None = None
    normal: np.ndarray | None = None
    texcoord: np.ndarray | None = None
    facenormal: np.ndarray | None = None
    facetexcoord: np.ndarray | None = None
    content_type: str | None = None
    line: np.ndarray | None = None  # (k, 2) segments of OBJ `l` polylines (flexcomp dim 1)


def content_type_of(filename: str, content_type: str | None = None) -> str:
    """Resolves a mesh content type the way MuJoCo does (explicit wins)."""
    if content_type:
        return content_type
    ext = os.path.splitext(filename)[1].lower()
    if ext not in _EXT_CONTENT_TYPES:
        raise MeshError(f"no decoder found for mesh file '{filename}'")
    return _EXT_CONTENT_TYPES[ext]


def raw_from_user(vertex, face=None, normal=None, texcoord=None) -> RawMesh:
    """Builds a RawMesh from inline ``vertex=``/``face=`` XML data.

    Args:
      vertex: flat sequence of vertex coordinates.
      face: optional flat sequence of vertex indices.
      normal: optional flat sequence of normal components.
      texcoord: optional flat sequence of texture coordinates.

    Returns:
      The RawMesh, with float32 rounding applied as MuJoCo's spec does.
    """
    v = np.asarray(vertex, dtype=np.float64).astype(np.float32)
    if v.size % 3:
        raise MeshError("vertex data must be a multiple of 3")
    f = None
    if face is not None and len(face):
        f = np.asarray(face, dtype=np.int64)
        if f.size % 3:
            raise MeshError("face data must be a multiple of 3")
        f = f.reshape(-1, 3).astype(np.int32)
    n = None
    if normal is not None and len(normal):
        n = np.asarray(normal, dtype=np.float64).astype(np.float32)
        if n.size % 3:
            raise MeshError("normal data must be a multiple of 3")
        n = n.reshape(-1, 3)
    t = None
    if texcoord is not None and len(texcoord):
        t = np.asarray(texcoord, dtype=np.float64).astype(np.float32)
        if t.size % 2:
            raise MeshError("texcoord must be a multiple of 2")
        t = t.reshape(-1, 2)
    _check_finite(v)
    return RawMesh(vert=v.reshape(-1, 3).astype(np.float64), face=f, normal=n,
                   texcoord=t)


def _check_finite(v: np.ndarray) -> None:
    bad = ~np.isfinite(v.reshape(-1, 3)).all(axis=1)
    if bad.any():
        raise MeshError(f"vertex coordinate {int(np.argmax(bad))} is not finite")


def read_mesh_file(data: bytes, filename: str,
                   content_type: str | None = None) -> RawMesh:
    """Decodes a mesh file.

    Args:
      data: the file contents.
      filename: file name (used for the extension and in messages).
      content_type: optional explicit content type from the XML.

    Returns:
      A RawMesh.

    Raises:
      MeshError: if the file cannot be decoded the way MuJoCo would.
    """
    ctype = content_type_of(filename, content_type)
    if ctype == MSH_CONTENT_TYPE:
        raw = _read_msh(data, filename)
    elif ctype == STL_CONTENT_TYPE:
        raw = _read_stl(data, filename)
    elif ctype == OBJ_CONTENT_TYPE:
        raw = _read_obj(data, filename)
    else:
        raise MeshError(f"no decoder found for mesh file '{filename}'")
    raw.content_type = ctype
    _check_finite(raw.vert)
    return raw


# ----------------------------------------------------------------------------
# STL (binary only: MuJoCo's decoder rejects ASCII STL)


def _read_stl(data: bytes, filename: str) -> RawMesh:
    if not data:
        raise MeshError(f"STL file '{filename}' is empty")
    if len(data) < 84:
        raise MeshError(f"invalid header in STL file '{filename}'")
    (nfaces,) = struct.unpack_from("<i", data, 80)
    if nfaces < 1 or nfaces > 200000:
        raise MeshError(
            f"number of faces should be between 1 and 200000 in STL file "
            f"'{filename}'; perhaps this is an ASCII file?")
    if nfaces * 50 != len(data) - 84:
        raise MeshError(
            f"STL file '{filename}' has wrong size; perhaps this is an ASCII file?")
    rec = np.frombuffer(data, dtype=np.uint8, offset=84).reshape(nfaces, 50)
    # each record: normal(3f), v1(3f), v2(3f), v3(3f), attribute(u16)
    tri = rec[:, 12:48].copy().view("<f4").reshape(nfaces * 3, 3)
    if (np.abs(tri.astype(np.float64)) > 2.0**30).any():
        raise MeshError(f"vertex in STL file '{filename}' exceeds maximum bounds")
    # de-duplicate by bit pattern (so -0 and +0 differ), first occurrence order
    bits = tri.view("<u4")
    _, first, inverse = np.unique(bits, axis=0, return_index=True,
                                  return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    vert = tri[first[order]].astype(np.float64)
    face = rank[inverse].reshape(nfaces, 3).astype(np.int32)
    return RawMesh(vert=vert, face=face)


# ----------------------------------------------------------------------------
# MuJoCo MSH binary


def _read_msh(data: bytes, filename: str) -> RawMesh:
    if not data:
        raise MeshError(f"MSH file '{filename}' is empty")
    if len(data) < 16:
        raise MeshError(f"missing header in MSH file '{filename}'")
    nv, nn, nt, nf = struct.unpack_from("<4i", data, 0)
    if (nv < 4 or nf < 0 or nn < 0 or nt < 0 or (nn > 0 and nn != nv)
            or (nt > 0 and nt != nv)):
        raise MeshError(f"invalid sizes in MSH file '{filename}'")
    imax = 2**31 - 1
    if (nv >= imax // 12 or nn >= imax // 12 or nt >= imax // 8
            or nf >= imax // 12):
        raise MeshError(f"too large sizes in MSH file '{filename}'.")
    if len(data) != 16 + 12 * nv + 12 * nn + 8 * nt + 12 * nf:
        raise MeshError(f"unexpected file size in MSH file '{filename}'")
    off = 16
    vert = np.frombuffer(data, "<f4", 3 * nv, off).reshape(nv, 3)
    off += 12 * nv
    normal = texcoord = face = facetex = None
    if nn:
        normal = np.frombuffer(data, "<f4", 3 * nn, off).reshape(nn, 3).copy()
        off += 12 * nn
    if nt:
        texcoord = np.frombuffer(data, "<f4", 2 * nt, off).reshape(nt, 2).copy()
        off += 8 * nt
    if nf:
        face = np.frombuffer(data, "<i4", 3 * nf, off).reshape(nf, 3).astype(np.int32)
        if texcoord is not None:
            facetex = face.copy()
    return RawMesh(vert=vert.astype(np.float64), face=face, normal=normal,
                   texcoord=texcoord, facenormal=None if face is None else face.copy(),
                   facetexcoord=facetex)


# ----------------------------------------------------------------------------
# OBJ (replicates the parsing/triangulation rules of MuJoCo's OBJ loader)

_DIGITS = "0123456789"
_POW_LUT = (1.0, 0.1, 0.01, 0.001, 0.0001, 0.00001, 0.000001, 0.0000001)


def _obj_real(tok: str, default: float = 0.0) -> tuple[float, bool]:
    """Parses a number like the OBJ loader does (not correctly rounded)."""
    n = len(tok)
    if n == 0:
        return default, False
    i = 0
    sign = 1.0
    lead_dot = False
    c = tok[0]
    if c in "+-":
        sign = -1.0 if c == "-" else 1.0
        i = 1
        if i < n and tok[i] == ".":
            lead_dot = True
    elif c in _DIGITS:
        pass
    elif c == ".":
        lead_dot = True
    else:
        return default, False
    mant = 0.0
    if not lead_dot:
        read = 0
        while i < n and tok[i] in _DIGITS:
            mant = mant * 10 + (ord(tok[i]) - 48)
            i += 1
            read += 1
        if read == 0:
            return default, False
    expo = 0
    if i < n:
        if tok[i] == ".":
            i += 1
            read = 1
            while i < n and tok[i] in _DIGITS:
                p = _POW_LUT[read] if read < 8 else math.pow(10.0, -read)
                mant += (ord(tok[i]) - 48) * p
                read += 1
                i += 1
        if i < n and tok[i] in "eE":
            i += 1
            esign = 1
            if i < n and tok[i] in "+-":
                esign = -1 if tok[i] == "-" else 1
                i += 1
            elif not (i < n and tok[i] in _DIGITS):
                return default, False
            read = 0
            while i < n and tok[i] in _DIGITS:
                expo = expo * 10 + (ord(tok[i]) - 48)
                i += 1
                read += 1
            expo *= esign
            if read == 0:
                return default, False
    if expo:
        val = math.ldexp(mant * math.pow(5.0, expo), expo)
    else:
        val = mant
    return sign * val, True


def _atoi(s: str) -> int:
    """C atoi: optional sign then leading digits, 0 if none."""
    s = s.lstrip(" \t")
    j = 0
    if j < len(s) and s[j] in "+-":
        j += 1
    k = j
    while k < len(s) and s[k] in _DIGITS:
        k += 1
    if k == j:
        return 0
    return int(s[:k])


def _fix_index(idx: int, n: int) -> int | None:
    if idx > 0:
        return idx - 1
    if idx == 0:
        return None
    return n + idx


def _parse_triple(tok: str, nv: int, nvn: int, nvt: int):
    """Parses v, v/vt, v//vn or v/vt/vn; returns (v, vt, vn) or None."""
    parts = tok.split("/")
    v = _fix_index(_atoi(parts[0]), nv)
    if v is None:
        return None
    vt = vn = -1
    if len(parts) >= 2:
        if parts[1] == "" and len(parts) >= 3:
            vn = _fix_index(_atoi(parts[2]), nvn)
            if vn is None:
                return None
        else:
            vt = _fix_index(_atoi(parts[1]), nvt)
            if vt is None:
                return None
            if len(parts) >= 3:
                vn = _fix_index(_atoi(parts[2]), nvn)
                if vn is None:
                    return None
    return v, vt, vn


def _pnpoly(vx, vy, tx, ty) -> bool:
    c = False
    j = 2
    for i in range(3):
        if (vy[i] > ty) != (vy[j] > ty):
            # float32 arithmetic as in the loader (real_t is float)
            xint = np.float32(np.float32(np.float32(vx[j] - vx[i]) *
                                         np.float32(ty - vy[i])) /
                              np.float32(vy[j] - vy[i])) + vx[i]
            if tx < xint:
                c = not c
        j = i
    return c


def _triangulate(face: list, v: np.ndarray) -> list:
    """Ear-clipping triangulation of one polygon, in float32 like the loader."""
    f32 = np.float32
    npolys = len(face)
    nv = v.shape[0]
    axes = [1, 2]
    eps = f32(np.finfo(np.float32).eps)
    for k in range(npolys):
        i0, i1, i2 = (face[(k + j) % npolys][0] for j in range(3))
        if max(i0, i1, i2) >= nv or min(i0, i1, i2) < 0:
            continue
        p0, p1, p2 = v[i0], v[i1], v[i2]
        e0 = p1 - p0
        e1 = p2 - p1
        cx = abs(f32(e0[1] * e1[2]) - f32(e0[2] * e1[1]))
        cy = abs(f32(e0[2] * e1[0]) - f32(e0[0] * e1[2]))
        cz = abs(f32(e0[0] * e1[1]) - f32(e0[1] * e1[0]))
        if cx > eps or cy > eps or cz > eps:
            if not (cx > cy and cx > cz):
                axes[0] = 0
                if cz > cx and cz > cy:
                    axes[1] = 1
            break
    a0, a1 = axes
    area = f32(0)
    for k in range(npolys):
        i0 = face[k][0]
        i1 = face[(k + 1) % npolys][0]
        if not (0 <= i0 < nv and 0 <= i1 < nv):
            continue
        area += f32(f32(v[i0, a0] * v[i1, a1]) - f32(v[i0, a1] * v[i1, a0])) * f32(0.5)
    out = []
    rem = list(face)
    guess = 0
    remaining_iter = len(face)
    prev_remaining = len(rem)
    while len(rem) > 3 and remaining_iter > 0:
        npolys = len(rem)
        if guess >= npolys:
            guess -= npolys
        if prev_remaining != npolys:
            prev_remaining = npolys
            remaining_iter = npolys
        else:
            remaining_iter -= 1
        ind = [rem[(guess + k) % npolys] for k in range(3)]
        vx = []
        vy = []
        for k in range(3):
            vi = ind[k][0]
            if 0 <= vi < nv:
                vx.append(v[vi, a0])
                vy.append(v[vi, a1])
            else:
                vx.append(f32(0))
                vy.append(f32(0))
        e0x = vx[1] - vx[0]
        e0y = vy[1] - vy[0]
        e1x = vx[2] - vx[1]
        e1y = vy[2] - vy[1]
        cross = f32(e0x * e1y) - f32(e0y * e1x)
        if cross * area < 0:
            guess += 1
            continue
        overlap = False
        for other in range(3, npolys):
            idx = (guess + other) % npolys
            ovi = rem[idx][0]
            if not 0 <= ovi < nv:
                continue
            if _pnpoly(vx, vy, v[ovi, a0], v[ovi, a1]):
                overlap = True
                break
        if overlap:
            guess += 1
            continue
        out.extend(ind)
        del rem[(guess + 1) % npolys]
    if len(rem) == 3:
        out.extend(rem)
    return out


def _split_quad(face: list, v: np.ndarray) -> list:
    """Splits a quad along its shorter diagonal (float32, like the loader)."""
    idx = [f[0] for f in face]
    if max(idx) >= v.shape[0] or min(idx) < 0:
        return []  # the loader skips quads with invalid vertex indices
    p0, p1, p2, p3 = (v[i] for i in idx)
    e02 = p2 - p0
    e13 = p3 - p1
    sqr02 = (e02[0] * e02[0] + e02[1] * e02[1]) + e02[2] * e02[2]
    sqr13 = (e13[0] * e13[0] + e13[1] * e13[1]) + e13[2] * e13[2]
    if sqr02 < sqr13:
        return [face[0], face[1], face[2], face[0], face[2], face[3]]
    return [face[0], face[1], face[3], face[1], face[2], face[3]]


def _read_obj(data: bytes, filename: str) -> RawMesh:
    text = data.decode("latin-1")
    v: list = []
    vn: list = []
    vt: list = []
    groups: list = []  # faces of the current primitive group
    shape_faces: list | None = None  # first exported shape's triangles
    cur_shape: list = []
    cache: dict = {}
    segments: list = []

    def real(tok):
        r = cache.get(tok)
        if r is None:
            r = cache[tok] = _obj_real(tok)
        return r

    def export():
        # triangulate the current group into the current shape
        if not groups:
            return
        varr = np.asarray(v, dtype=np.float32).reshape(-1, 3)
        for face in groups:
            if len(face) < 3:
                continue
            if len(face) == 3:
                cur_shape.extend(face)
            elif len(face) == 4:
                cur_shape.extend(_split_quad(face, varr))
            else:
                cur_shape.extend(_triangulate(face, varr))

    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for lineno, line in enumerate(lines, 1):
        tok = line.lstrip(" \t")
        if not tok or tok[0] == "#":
            continue
        c0 = tok[0]
        c1 = tok[1] if len(tok) > 1 else "\0"
        if c0 == "v" and c1 in " \t":
            fields = tok[2:].split()
            xyz = [real(fields[k])[0] if k < len(fields) else 0.0 for k in range(3)]
            v.extend(xyz)
        elif c0 == "v" and c1 == "n" and len(tok) > 2 and tok[2] in " \t":
            fields = tok[3:].split()
            vn.extend(real(fields[k])[0] if k < len(fields) else 0.0
                      for k in range(3))
        elif c0 == "v" and c1 == "t" and len(tok) > 2 and tok[2] in " \t":
            fields = tok[3:].split()
            vt.extend(real(fields[k])[0] if k < len(fields) else 0.0
                      for k in range(2))
        elif c0 == "f" and c1 in " \t":
            face = []
            for f in tok[2:].split():
                t = _parse_triple(f, len(v) // 3, len(vn) // 3, len(vt) // 2)
                if t is None:
                    raise MeshError(
                        f"could not parse OBJ file '{filename}': bad face index "
                        f"(line {lineno})")
                face.append(t)
            groups.append(face)
        elif c0 in "go" and c1 in " \t":
            # a new group/object closes the current shape; MuJoCo keeps only
            # the first shape that has faces
            export()
            groups.clear()
            if cur_shape and shape_faces is None:
                shape_faces = list(cur_shape)
            cur_shape.clear()
        elif c0 in "lp" and c1 in " \t":
            ids = []
            for f in tok[2:].split():
                t = _parse_triple(f, len(v) // 3, len(vn) // 3, len(vt) // 2)
                if t is None:
                    raise MeshError(f"could not parse OBJ file '{filename}' "
                                    f"(line {lineno})")
                ids.append(t[0])
            if c0 == "l":
                segments.extend(zip(ids[:-1], ids[1:], strict=True))
    export()
    if shape_faces is None and cur_shape:
        shape_faces = list(cur_shape)

    vert32 = np.asarray(v, dtype=np.float32).reshape(-1, 3)
    normal = np.asarray(vn, dtype=np.float32).reshape(-1, 3) if vn else None
    texcoord = None
    if vt:
        texcoord = np.asarray(vt, dtype=np.float32).reshape(-1, 2)
        texcoord[:, 1] = np.float32(1) - texcoord[:, 1]
    face = facenormal = facetex = None
    if shape_faces:
        idx = np.asarray(shape_faces, dtype=np.int64).reshape(-1, 3, 3)
        face = idx[:, :, 0].astype(np.int32)
        if normal is not None:
            facenormal = idx[:, :, 2].astype(np.int32)
        if texcoord is not None:
            facetex = idx[:, :, 1].astype(np.int32)
    return RawMesh(vert=vert32.astype(np.float64), face=face, normal=normal,
                   texcoord=texcoord, facenormal=facenormal, facetexcoord=facetex,
                   line=np.asarray(segments, np.int32).reshape(-1, 2) if segments else None)
