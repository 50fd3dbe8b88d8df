"""Mesh polygons: the coplanar faces of a convex hull merged (mjCMesh::MakePolygons).

Host-only numpy code run by the compiler; the collision code's flat-face multi-contact
reads the result (mesh_poly* in the Model).
"""

from __future__ import annotations

import math
import struct

import numpy as np

_MINVAL = 1e-15  # mjMINVAL
_U64 = (1 << 64) - 1


def make_polygons(vert: np.ndarray, faces: np.ndarray, area_vert: np.ndarray | None = None,
                  rewind: bool = False):
    """MuJoCo's mjCMesh::MakePolygons on the convex-hull faces (vertex ids).

    Faces are grouped by the direction of their normals on `vert`. Returns (polygons,
    areas): the vertex cycles, and for each polygon its area vector, the cross products of
    a fan of triangles from its first vertex summed (twice its area-weighted normal, not
    normalised; from the double-precision `area_vert`, by default `vert`). With `rewind`
    (a mirroring scale) each cycle is reversed after the grouping, keeping its first vertex,
    as MuJoCo 4.0 outputs them."""
    area_vert = vert if area_vert is None else area_vert
    groups: dict[tuple, list] = {}
    order = []
    tol = 0.01
    for f in faces:
        v1, v2, v3 = (vert[i].astype(np.float64) for i in f)
        n = np.cross(v2 - v1, v3 - v1)
        nn = np.sqrt(n @ n)
        if nn < _MINVAL:
            continue
        n = n / nn + 0.0
        if abs(n[2]) > 1.0 - 1e-7:
            key = (0.0, float(np.round(np.pi / tol)) if n[2] < 0 else 0.0)
        else:
            key = (float(np.round(np.arctan2(n[1], n[0]) / tol)),
                   float(np.round(np.arccos(n[2]) / tol)))
        if key not in groups:
            groups[key] = dict(edges=[(f[0], f[1]), (f[1], f[2]), (f[2], f[0])],
                               islands=[0, 0, 0], nisland=1)
            order.append(key)
        else:
            _insert_face(groups[key], *f)
    polys, areas = [], []
    for key in _hash_map_order(order):
        for path in _polygon_paths(groups[key]):
            if len(path) >= 3:
                if rewind:  # the cycle reversed, from the same first vertex
                    path = path[:1] + path[:0:-1]
                polys.append(path)
                p = area_vert[np.asarray(path)].astype(np.float64)
                p = p - p[0]
                areas.append(np.sum(np.cross(p[1:-1], p[2:]), axis=0))
    return polys, areas


def _insert_face(g, v1, v2, v3):
    """MeshPolygon::InsertFace."""
    edges, islands = g["edges"], g["islands"]
    island = -1
    adds = []
    for a, b in ((v1, v2), (v2, v3), (v3, v1)):
        hit = next((i for i, e in enumerate(edges) if e == (b, a)), None)
        if hit is None:
            adds.append((a, b))
            continue
        isl = islands[hit]
        if island == -1:
            island = isl
        elif isl != island:
            g["nisland"] -= 1
            lo, hi = min(island, isl), max(island, isl)
            islands[:] = [lo if x == hi else (x - 1 if x > hi else x) for x in islands]
            island = lo
        del edges[hit]
        del islands[hit]
    if island == -1:
        island = g["nisland"]
        g["nisland"] += 1
    for e in adds:
        edges.append(e)
        islands.append(island)


def _polygon_paths(g):
    """MeshPolygon::Paths (each island's cycle from its first edge; MuJoCo 4.0 walks three
    edges left by merged faces in cycle order too, not in storage order)."""
    edges, islands = g["edges"], g["islands"]
    paths = []
    for i in range(g["nisland"]):
        path = []
        for j, e in enumerate(edges):
            if islands[j] == i:
                path = [e[0], e[1]]
                break
        if not path:
            continue
        nxt = path[-1]
        for _ in range(len(edges)):
            finished = False
            for k in range(1, len(edges)):
                if islands[k] == i and edges[k][0] == nxt:
                    nxt = edges[k][1]
                    if nxt == path[0]:
                        paths.append(path)
                        finished = True
                        break
                    path.append(nxt)
                    break
            if finished:
                break
    return paths


# ------------------------------------------------------------------- the groups' order
# MuJoCo keeps the groups in a std::unordered_map keyed by the rounded angles and emits the
# polygons in the map's iteration order. The order decides which of several equally aligned
# polygons the multi-contact code takes, so it is reproduced here: libc++'s hash table
# (the library MuJoCo's wheels link) with the key hash that matches MuJoCo 4.0's output on
# every corpus mesh, hash(theta) combined with hash(phi) as boost::hash_combine does.


def _double_hash(x: float) -> int:
    """libc++ std::hash<double> on 64 bits: the bit pattern, 0 for both zeros."""
    return 0 if x == 0.0 else struct.unpack("<Q", struct.pack("<d", x))[0]


def _key_hash(key) -> int:
    h1, h2 = _double_hash(key[0]), _double_hash(key[1])
    return h1 ^ ((h2 + 0x9E3779B9 + (h1 << 6) + (h1 >> 2)) & _U64)


def _next_prime(n: int) -> int:
    def prime(k):
        return k >= 2 and all(k % d for d in range(2, math.isqrt(k) + 1))

    while not prime(n):
        n += 1
    return n


def _bucket(h: int, nb: int) -> int:
    return h & (nb - 1) if nb & (nb - 1) == 0 else h % nb


def _hash_map_order(keys: list) -> list:
    """Iteration order of a libc++ std::unordered_map (max_load_factor 1) after inserting
    the distinct `keys` in order: one singly linked list, a bucket's nodes contiguous, a
    new node first in its bucket (or first in the list if its bucket is empty), the list
    regrouped bucket by bucket on each growth (2, then primes >= 2n + 1)."""
    nxt = {None: None}  # node -> next node; None is the list head (before the first)
    hashes = {}
    before: list = []  # bucket -> the node before its first node, or absent (a sentinel)
    empty = object()
    size = 0

    def regroup(nb):
        nonlocal before
        before = [empty] * nb
        pp, cp = None, nxt[None]
        if cp is None:
            return
        prev_b = _bucket(hashes[cp], nb)
        before[prev_b] = pp
        pp, cp = cp, nxt[cp]
        while cp is not None:
            b = _bucket(hashes[cp], nb)
            if b == prev_b:
                pp = cp
            elif before[b] is empty:
                before[b] = pp
                pp, prev_b = cp, b
            else:  # move cp to the front of its bucket
                nxt[pp] = nxt[cp]
                nxt[cp] = nxt[before[b]]
                nxt[before[b]] = cp
            cp = nxt[pp]

    for key in keys:
        h = _key_hash(key)
        hashes[key] = h
        nb = len(before)
        if size + 1 > nb or nb == 0:
            pow2 = nb > 2 and nb & (nb - 1) == 0
            n = max(2 * nb + (not pow2), size + 1)
            n = 2 if n == 1 else (n if n & (n - 1) == 0 else _next_prime(n))
            if n > nb:
                regroup(n)
            nb = len(before)
        b = _bucket(h, nb)
        if before[b] is empty:
            nxt[key] = nxt[None]
            nxt[None] = key
            before[b] = None
            if nxt[key] is not None:
                before[_bucket(hashes[nxt[key]], nb)] = key
        else:
            nxt[key] = nxt[before[b]]
            nxt[before[b]] = key
        size += 1
    out, node = [], nxt[None]
    while node is not None:
        out.append(node)
        node = nxt[node]
    return out
