"""Mesh polygons: the coplanar faces of a convex hull merged (mjCMesh::MakePolygons).

Host-only numpy code run by the compiler; the collision code's flat-face multi-contact
reads the result (mesh_poly* in the Model).
"""

from __future__ import annotations

import numpy as np

_MINVAL = 1e-15  # mjMINVAL


def make_polygons(vert: np.ndarray, faces: np.ndarray):
    """MuJoCo's mjCMesh::MakePolygons on the convex-hull faces (vertex ids).

    Returns (polygons, areas): the vertex cycles, and for each polygon its area vector,
    the cross products of a fan of triangles from its first vertex summed (twice its
    area-weighted normal, not normalised; from the double-precision `vert`)."""
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
    for key in order:
        for path in _polygon_paths(groups[key]):
            if len(path) >= 3:
                polys.append(path)
                p = vert[np.asarray(path)].astype(np.float64)
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
    """MeshPolygon::Paths."""
    edges, islands = g["edges"], g["islands"]
    if len(edges) == 3:
        return [[edges[0][0], edges[1][0], edges[2][0]]]
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
