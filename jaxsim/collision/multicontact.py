"""Flat-feature contacts of convex pairs (MuJoCo's multi-contact after EPA).

When the EPA normal is aligned with a face or an edge of both geoms (boxes, meshes,
cylinder caps as 16-gons), one feature is clipped by the other's face and up to four points
are kept (`_polygon_clip`, `_polygon_quad`); see `jaxsim.collision.convex` for
the rules MuJoCo 4.0 follows and the cases not reproduced.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim.collision.ccd import (
    BOX,
    CYLINDER,
    EDGE_TOL,
    FACE_TOL,
    I32,
    MESH,
    MINVAL,
    MINVAL2,
    TypeOf,
    cross,
    dot,
    is_type,
    mul,
    mul_t,
    normalize,
    type_options,
)
from jaxsim.math import no_fma

# --------------------------------------------------------------------------- multi-contact
# Flat-face contacts of box and mesh pairs: from the vertices of EPA's final face, find a
# face (or edge) of each geom aligned with the contact normal and clip one against the
# other (MuJoCo's multicontact and polygonClip).

_BOX_NORMALS = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]],
                        np.float64)
_BOX_FACES = np.array([  # boxFace: corner signs of the six faces, in MuJoCo's order
    [[1, 1, 1], [1, 1, -1], [1, -1, -1], [1, -1, 1]],
    [[-1, 1, -1], [-1, 1, 1], [-1, -1, 1], [-1, -1, -1]],
    [[-1, 1, -1], [1, 1, -1], [1, 1, 1], [-1, 1, 1]],
    [[-1, -1, 1], [1, -1, 1], [1, -1, -1], [-1, -1, -1]],
    [[-1, 1, 1], [1, 1, 1], [1, -1, 1], [-1, -1, 1]],
    [[1, 1, -1], [-1, 1, -1], [-1, -1, -1], [1, -1, -1]]], np.float64)


def pad_rows(x, n):
    return jnp.concatenate([x, jnp.zeros((n - x.shape[0],) + x.shape[1:], x.dtype)])


def _box_axis_normals(g, sign, axes):
    """World normals mat @ (sign * e_axis) for traced axes (exact, as MuJoCo's globalcoord)."""
    return jnp.where(sign[:, None] > 0, g.mat.T[axes], -g.mat.T[axes])


def _box_normals2(g, n):
    """boxNormals2: the box face whose normal is within mjFACE_TOL of n (found, normal, id)."""
    ln = mul_t(g.mat, n)
    ln = ln * (1 / jnp.sqrt(dot(ln, ln)))
    d = jnp.stack([ln[0], -ln[0], ln[1], -ln[1], ln[2], -ln[2]])
    hit = d > FACE_TOL
    i = jnp.argmax(hit).astype(I32)
    nrm = _box_axis_normals(g, jnp.where(i % 2 == 0, 1, -1)[None], (i // 2)[None])[0]
    return jnp.any(hit), nrm, i


def _box_normals(g, dim, vi, dirn, nn: int):
    """boxNormals: candidate face normals of a box feature (corner ids vi, dimension dim)."""
    bits = jnp.stack([(vi & 1) != 0, (vi & 2) != 0, (vi & 4) != 0])  # (axis, vertex)
    use = jnp.arange(3)[None, :] < dim
    all_set = jnp.all(bits | ~use, 1)
    all_clr = jnp.all(~bits | ~use, 1)
    t = all_set.astype(I32) - all_clr.astype(I32)  # (3,) in {-1, 0, 1}
    c = jnp.sum(t != 0)
    axes = jnp.argsort(t == 0, stable=True)[:2].astype(I32)
    sgn = t[axes]
    feat = _box_axis_normals(g, sgn, axes)  # (2, 3) first two nonzero axes
    fid = 2 * axes + (sgn < 0)
    ok2, n2, i2 = _box_normals2(g, dirn)
    # a corner: the three faces meeting there
    s1 = jnp.where(bits[:, 0], 1, -1)
    n_corner = _box_axis_normals(g, s1, jnp.arange(3))
    id_corner = 2 * jnp.arange(3) + (s1 < 0)
    face_like = ((dim == 3) & (c == 1)) | ((dim == 2) & (c == 2))
    cnt_face = jnp.where(dim == 3, 1, 2)
    normals = jnp.where(dim == 1, n_corner,
                        jnp.where(face_like, pad_rows(feat, 3), pad_rows(n2[None], 3)))
    ids = jnp.where(dim == 1, id_corner,
                    jnp.where(face_like, pad_rows(fid, 3), pad_rows(i2[None], 3)))
    count = jnp.where(dim == 1, 3, jnp.where(face_like, cnt_face, ok2.astype(I32)))
    return pad_rows(normals, nn), pad_rows(ids, nn), count


def _mesh_normals(g, dim, vi, nn: int):
    """meshNormals: normals of the mesh polygons containing the feature's vertices."""
    D = g.data
    dp = D.vert_poly.shape[1]
    p1 = D.vert_poly[vi[0]]
    ok1 = jnp.arange(dp) < D.vert_npoly[vi[0]]

    def member(p, v):
        row = D.vert_poly[v]
        return jnp.any((p[:, None] == row[None, :]) & (jnp.arange(dp) < D.vert_npoly[v])[None],
                       1)

    edge = ok1 & member(p1, vi[1])
    edge = edge & (jnp.cumsum(edge) <= 2)  # intersect() keeps the first two
    face = edge & member(p1, vi[2])
    face = face & (jnp.cumsum(face) <= 1)
    sel = jnp.where(dim == 1, ok1, jnp.where(dim == 2, edge, face))
    order = jnp.argsort(~sel, stable=True)
    ids = p1[order]
    count = jnp.sum(sel).astype(I32)
    normals = jax.vmap(lambda i: mul(g.mat, D.poly_normal[i]))(jnp.maximum(ids, 0))
    normals = pad_rows(normals, nn) if nn > dp else normals[:nn]
    ids = pad_rows(ids, nn) if nn > dp else ids[:nn]
    return normals, ids, count


def _box_edges(g, dim, v, vi0, nn: int):
    """boxEdgeNormals: directions (and far ends) of the box edges at the feature."""
    s = g.size
    x = jnp.where(vi0 & 1, s[0], -s[0])
    y = jnp.where(vi0 & 2, s[1], -s[1])
    z = jnp.where(vi0 & 4, s[2], -s[2])
    loc = jnp.stack([jnp.stack([-x, y, z]), jnp.stack([x, -y, z]), jnp.stack([x, y, -z])])
    ends = jax.vmap(lambda l: mul(g.mat, l) + g.pos)(loc)
    ends = jnp.where(dim == 2, pad_rows(v[1:2], 3), ends)
    dirs = normalize(ends - v[0])
    count = jnp.where(dim == 2, 1, jnp.where(dim == 1, 3, 0))
    return pad_rows(dirs, nn), pad_rows(ends, nn), count


def _mesh_edges(g, dim, v, vi0, nn: int):
    """meshEdgeNormals: directions to the preceding vertex in each polygon at the vertex."""
    D = g.data
    dp = D.vert_poly.shape[1]
    prev = D.vert_prev[vi0]
    ends = jax.vmap(lambda i: mul(g.mat, D.vert[i]) + g.pos)(jnp.maximum(prev, 0))
    ends = jnp.where(dim == 2, jnp.broadcast_to(v[1], ends.shape), ends)
    dirs = normalize(ends - v[0])
    count = jnp.where(dim == 2, 1, jnp.where(dim == 1, D.vert_npoly[vi0], 0))
    dirs = pad_rows(dirs, nn) if nn > dp else dirs[:nn]
    ends = pad_rows(ends, nn) if nn > dp else ends[:nn]
    return dirs, ends, count


def _box_face(g, idx, pv: int):
    loc = jnp.asarray(_BOX_FACES, g.size.dtype)[idx] * g.size
    return pad_rows(jax.vmap(lambda l: mul(g.mat, l) + g.pos)(loc), pv), jnp.asarray(4, I32)


def _mesh_face(g, idx, pv: int):
    """meshFace: polygon vertices in reverse order (clockwise about the outward normal)."""
    D = g.data
    n = D.poly_nvert[idx]
    j = jnp.arange(D.poly_vert.shape[1])
    ids = D.poly_vert[idx, jnp.where(j < n, n - 1 - j, 0)]
    pts = jax.vmap(lambda i: mul(g.mat, D.vert[i]) + g.pos)(jnp.maximum(ids, 0))
    return (pad_rows(pts, pv) if pv > pts.shape[0] else pts), n


def _by_type(t, g, box_fn, mesh_fn, cyl_fn=None):
    """Dispatch on the box/mesh/cylinder geom type t of geom g (static, TypeOf or traced);
    a geom without mesh data is not a mesh."""
    if isinstance(t, (int, np.integer)):
        return {BOX: box_fn, MESH: mesh_fn, CYLINDER: cyl_fn}[int(t)]()
    opts = type_options(t)
    fns = [(tt, f) for tt, f in ((BOX, box_fn), (MESH, mesh_fn), (CYLINDER, cyl_fn))
           if f is not None and (opts is None or tt in opts)
           and (tt != MESH or g.data is not None)]
    if len(fns) == 1:
        return fns[0][1]()
    tv = t.value if isinstance(t, TypeOf) else t
    outs = [(tt, f()) for tt, f in fns]
    res = outs[-1][1]
    for tt, o in outs[-2::-1]:
        res = jax.tree.map(lambda x, y, tt=tt: jnp.where(tv == tt, x, y), o, res)
    return res


# A cylinder's cap as MuJoCo 4.0 clips it: a 16-gon inscribed in the cap circle, first vertex
# on the local x axis, clockwise about the cap's outward normal.
_COS16 = np.cos(2 * np.pi * np.arange(16) / 16)
_SIN16 = np.sin(2 * np.pi * np.arange(16) / 16)


def _cyl_normals(g, dim, vi, nn: int):
    """cylinderNormals: the cap normal when the feature is a single cap's point set."""
    sgn = jnp.where(vi[0] != 0, -1.0, 1.0)
    n = g.mat[:, 2] * sgn
    return pad_rows(n[None], nn), pad_rows(vi[:1], nn), (dim == 1).astype(I32)


def _cap_facing(t, n, dirn, count):
    """The face count a cap offers to an edge of the other geom: none when the contact
    direction `dirn` (outward from the cylinder) is more than mjFACE_TOL off the cap normal
    `n` (a rim point pressed into a tilted face is not an edge lying on the cap; MuJoCo 4.0,
    corpus boxbox_bad1). Faces of boxes and meshes are offered as they are."""
    cyl = is_type(t, CYLINDER)
    if cyl is False:
        return count
    nd = dot(dirn, dirn)
    facing = (nd > 0) & (dot(n, dirn) > FACE_TOL * jnp.sqrt(jnp.where(nd > 0, nd, 1.0)))
    return jnp.where(cyl & ~facing, 0, count)


def _cyl_edges(g, dim, v, vi0, nn: int):
    """cylinderEdgeNormals: the side line through the feature's first point, towards the
    other cap, and its far end."""
    sgn = jnp.where(vi0 != 0, 1.0, -1.0)
    d = g.mat[:, 2] * sgn
    end = v[0] + d * (2 * g.size[1])
    return pad_rows(d[None], nn), pad_rows(end[None], nn), (dim <= 2).astype(I32)


def _cyl_face(g, idx, pv: int):
    """cylinderFace: the cap polygon (idx 0: top, 1: bottom)."""
    dt = g.size.dtype
    sgn = jnp.where(idx != 0, -1.0, 1.0).astype(dt)
    r, h = g.size[0], g.size[1]
    x = jnp.asarray(_COS16, dt) * r
    y = jnp.asarray(-_SIN16, dt) * r * sgn
    loc = jnp.stack([x, y, jnp.broadcast_to(sgn * h, x.shape)], -1)
    pts = jax.vmap(lambda l: mul(g.mat, l) + g.pos)(loc)
    return (pad_rows(pts, pv) if pv > 16 else pts), jnp.asarray(16, I32)


def _cross_exact(a, b):
    """Cross product rounded as MuJoCo's (each product rounded before the difference, no FMA:
    the quadrilateral search compares near-equal areas)."""
    p = [no_fma(v) for v in (a[1] * b[2], a[2] * b[1], a[2] * b[0], a[0] * b[2],
                             a[0] * b[1], a[1] * b[0])]
    return jnp.stack([p[0] - p[1], p[2] - p[3], p[4] - p[5]])


def _area4(a, b, c, d):
    """Half the norm of (c - a) x (d - b), the squares summed as MuJoCo 4.0's vectorised
    build does, (g0^2 + g2^2) + g1^2, each rounded (measured on quadrilateral ties of
    clipped mesh faces; the pairing is the one its quaternion-to-matrix shows too)."""
    g = _cross_exact(c - a, d - b)
    sq = [no_fma(v) for v in (g[0] * g[0], g[1] * g[1], g[2] * g[2])]
    return 0.5 * jnp.sqrt((sq[0] + sq[2]) + sq[1])


def _polygon_quad(poly, npg, ties=False):
    """polygonQuad: a quadrilateral of (locally) maximum area, MuJoCo's search order."""
    def nxt(i):
        return jnp.where(i == npg - 1, 0, i + 1)

    def area(a, b, c, d):
        return _area4(poly[a], poly[b], poly[c], poly[d])

    # with `ties` (cap on cap) a corner moves only on a gain beyond rounding: the equal areas
    # of a cap's regular 16-gon are ties, of which MuJoCo 4.0 keeps the first found (measured:
    # its rounding of the cap's points is not ours). Otherwise the gain of the last bits
    # decides, as in MuJoCo (box and mesh faces; a cap on them agrees more often so).
    rtol = jnp.where(ties, 1000 * jnp.finfo(poly.dtype).eps, 0.0)
    i0 = jnp.asarray(0, I32)
    st = dict(a=i0, b=i0 + 1, c=i0 + 2, d=i0 + 3, m=area(0, 1, 2, 3),
              res=jnp.arange(4, dtype=I32), stage=i0, it=i0)

    def body(st):
        a, b, c, d, stage = st["a"], st["b"], st["c"], st["d"], st["stage"]
        nb = jnp.where(stage == 2, nxt(b), b)
        nc = jnp.where(stage == 1, nxt(c), c)
        nd = jnp.where(stage == 0, nxt(d), d)
        cand = area(a, nb, nc, nd)
        # MuJoCo 4.0 does not let the last corner wrap around onto the first one
        up = (cand > st["m"] * (1 + rtol)) & ~((stage == 0) & (nd == a))
        # no improvement in stage 0: move on to the next a, fixing coinciding pointers
        fb = b == a
        b2 = jnp.where(fb, nxt(b), b)
        fc = fb & (c == b2)
        c2 = jnp.where(fc, nxt(c), c)
        d2 = jnp.where(fc & (d == c2), nxt(d), d)
        adv = (stage == 0) & ~up
        new = dict(st)
        new["a"] = a + adv.astype(I32)
        new["b"] = jnp.where(up, nb, jnp.where(adv, b2, b))
        new["c"] = jnp.where(up, nc, jnp.where(adv, c2, c))
        new["d"] = jnp.where(up, nd, jnp.where(adv, d2, d))
        new["m"] = jnp.where(up, cand, st["m"])
        new["res"] = jnp.where(up, jnp.stack([a, nb, nc, nd]), st["res"])
        new["stage"] = jnp.where(up, jnp.where(stage == 0, 1, stage),
                                 jnp.where(stage == 0, 0, (stage + 1) % 3)).astype(I32)
        new["it"] = st["it"] + 1
        return new

    st = lax.while_loop(lambda st: (st["a"] < npg) & (st["it"] < 64 * poly.shape[0] ** 2),
                        body, st)
    return st["res"]


def _polygon_clip(C, nc, S, ns, n, margin, ties=False):
    """polygonClip: clip polygon S (ns vertices) by the planes through the edges of polygon C
    (nc) along C's normal n, keep the points within `margin` of C's plane; returns (count,
    points (4, 3), dist (4,))."""
    pv = C.shape[0]
    q = max(2 * pv, S.shape[0] + pv)  # clipping a convex ns-gon by nc planes: <= ns + nc
    nxt = jnp.where(jnp.arange(pv) + 1 < nc, jnp.arange(pv) + 1, 0)
    v1, v2 = C, C[nxt]
    pn = normalize(cross(v2 - v1, (v1 + n) - v1))
    pd = dot(pn, v1)
    poly0 = pad_rows(S, q) if q > S.shape[0] else S[:q]

    def clip(e, carry):
        poly, npg = carry
        i = jnp.arange(q)
        P = poly
        Q = poly[jnp.where(i + 1 < npg, i + 1, 0)]
        PQ = Q - P
        in1 = dot(P - C[e], pn[e]) > -MINVAL
        in2 = dot(Q - C[e], pn[e]) > -MINVAL
        tmp = dot(pn[e], PQ)
        t = (pd[e] - dot(pn[e], P)) / jnp.where(tmp != 0, tmp, 1.0)
        inter = (in1 ^ in2) & (tmp != 0) & (t >= 0) & (t <= 1)
        cnt = jnp.where(i < npg, inter.astype(I32) + in2.astype(I32), 0)
        off = jnp.cumsum(cnt) - cnt
        out = jnp.zeros_like(poly)
        out = out.at[jnp.where(cnt >= 1, off, q)].set(
            jnp.where(inter[:, None], P + t[:, None] * PQ, Q), mode="drop")
        out = out.at[jnp.where(cnt == 2, off + 1, q)].set(Q, mode="drop")
        active = e < nc
        return (jnp.where(active, out, poly),
                jnp.where(active, jnp.minimum(jnp.sum(cnt), q), npg).astype(I32))

    poly, npg = lax.fori_loop(0, pv, clip, (poly0, ns.astype(I32)))
    # keep the points within the margin of the clipping face
    keep = (jnp.arange(q) < npg) & (dot(poly - C[0], n) <= margin)
    poly = poly[jnp.argsort(~keep, stable=True)]
    npg = jnp.sum(keep).astype(I32)
    # more than four points: a maximum-area quadrilateral
    quad = _polygon_quad(poly, npg, ties)
    # the clipped feature is an edge: its two most distant points
    i, j = jnp.meshgrid(jnp.arange(q), jnp.arange(q), indexing="ij")
    dd = dot(poly[j] - poly[i], poly[j] - poly[i])
    dd = jnp.where((i < j) & (j < npg), dd, -1.0).ravel()
    k = jnp.argmax(dd)
    far = jnp.stack([k // q, k % q, 0, 0]).astype(I32)
    use_quad = npg > 4
    use_far = ~use_quad & (ns == 2) & (npg > 2)
    sel = jnp.where(use_quad, quad, jnp.where(use_far, far, jnp.arange(4, dtype=I32)))
    count = jnp.where(use_quad, 4, jnp.where(use_far, 2, jnp.minimum(npg, 4)))
    count = jnp.where(nc < 3, 0, count)
    v = poly[sel]
    return count, v, dot(v - C[0], n)


def _simplex_dim(vi, v):
    """simplexDim: number of distinct vertices of a face feature, duplicates moved last."""
    same01, same02, same12 = vi[0] == vi[1], vi[0] == vi[2], vi[1] == vi[2]
    dim = jnp.where(same01, jnp.where(same02, 1, 2), jnp.where(same02 | same12, 2, 3))
    vi = jnp.where(same01 & ~same02, vi.at[1].set(vi[2]), vi)
    v = jnp.where(same01 & ~same02, v.at[1].set(v[2]), v)
    return dim.astype(I32), vi, v


def _cyl_raw(g, pts, vi, margin):
    """A cylinder's own support points from EPA's points `pts` (which carry the margin
    inflation margin/2 * d: it keeps the local xy direction, so the rim point is recovered)."""
    def one(p, cap):
        loc = mul_t(g.mat, p - g.pos)
        n2 = loc[0] * loc[0] + loc[1] * loc[1]
        ok = n2 > MINVAL2
        scl = jnp.where(ok, g.size[0] / jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)
        raw = jnp.stack([loc[0] * scl, loc[1] * scl, jnp.where(cap == 0, g.size[1], -g.size[1])])
        return mul(g.mat, raw) + g.pos
    return jnp.where(margin > 0, jax.vmap(one)(pts, vi), pts)


def _vertices(t, g, vi, pts, margin):
    """World positions of box corners (index bits) or mesh vertices; a cylinder's are EPA's
    points `pts` without the margin inflation."""
    def box():
        sgn = jnp.stack([(vi & 1) != 0, (vi & 2) != 0, (vi & 4) != 0], 1)
        return jax.vmap(lambda l: mul(g.mat, l) + g.pos)(jnp.where(sgn, g.size, -g.size))

    def mesh():
        return jax.vmap(lambda i: mul(g.mat, g.data.vert[i]) + g.pos)(jnp.maximum(vi, 0))

    return _by_type(t, g, box, mesh, lambda: _cyl_raw(g, pts, vi, margin))


class _Multi(NamedTuple):
    applied: jax.Array  # the contacts below replace EPA's
    count: jax.Array
    dist: jax.Array  # (4,) signed distances
    pos: jax.Array  # (4, 3)
    normal: jax.Array  # (3,) from geom 1 to geom 2


def multicontact(t1, g1, t2, g2, frec, x1, x2, margin) -> _Multi:
    """Contacts of two aligned flat features of box or mesh geoms (MuJoCo 4.0's multicontact).

    Features come from the vertices of EPA's final face. Two faces: geom 2's face is clipped
    by geom 1's and the points are then taken onto geom 1's face (distances to geom 2's);
    an edge against a face: the edge is clipped by the face. Each point is paired with its
    projection on the other face; points within `margin` of it are kept (MuJoCo 4.0 keeps
    near points with a positive distance when the pair has a margin)."""
    dt = g1.pos.dtype
    dps = [g.data.vert_poly.shape[1] for g in (g1, g2) if g.data is not None]
    pvs = [g.data.poly_vert.shape[1] for g in (g1, g2) if g.data is not None]
    cyl = is_type(t1, CYLINDER) is not False or is_type(t2, CYLINDER) is not False
    nn, pv = max([3] + dps), max([4] + pvs + ([16] if cyl else []))
    vi1, vi2 = frec[:, 9].astype(I32), frec[:, 10].astype(I32)
    # the feature's vertices themselves (EPA's points carry the margin inflation)
    dim1, vi1, v1 = _simplex_dim(vi1, _vertices(t1, g1, vi1, frec[:, 3:6], margin))
    dim2, vi2, v2 = _simplex_dim(vi2, _vertices(t2, g2, vi2, frec[:, 6:9], margin))
    dirn = x2 - x1
    n1, id1, nn1 = _by_type(t1, g1, lambda: _box_normals(g1, dim1, vi1, dirn * -1, nn),
                            lambda: _mesh_normals(g1, dim1, vi1, nn),
                            lambda: _cyl_normals(g1, dim1, vi1, nn))
    n2, id2, nn2 = _by_type(t2, g2, lambda: _box_normals(g2, dim2, vi2, dirn, nn),
                            lambda: _mesh_normals(g2, dim2, vi2, nn),
                            lambda: _cyl_normals(g2, dim2, vi2, nn))
    ar = jnp.arange(nn)
    # aligned faces: of the pairs within mjFACE_TOL of opposite, the most nearly opposite
    # (MuJoCo 4.0; 3.x took the first, so the order of the mesh polygons mattered)
    dots = jnp.sum(n1[:, None, :] * n2[None, :, :], -1)
    al = (dots < -FACE_TOL) & (ar[:, None] < nn1) & (ar[None, :] < nn2)
    k = jnp.argmin(jnp.where(al, dots, 2.0).ravel())
    fi, fj = k // nn, k % nn
    aligned = jnp.any(al)
    # edge-face: an edge of one geom perpendicular to a face normal of the other

    def edge_face(ed, ne, fn, nf):
        pe = (jnp.abs(jnp.sum(fn[:, None, :] * ed[None, :, :], -1)) < EDGE_TOL) & (
            ar[:, None] < nf) & (ar[None, :] < ne)
        k2 = jnp.argmax(pe.ravel())
        return jnp.any(pe), k2 // nn, k2 % nn  # found, face index, edge index

    ed1, end1, ne1 = _by_type(t1, g1, lambda: _box_edges(g1, dim1, v1, vi1[0], nn),
                              lambda: _mesh_edges(g1, dim1, v1, vi1[0], nn),
                              lambda: _cyl_edges(g1, dim1, v1, vi1[0], nn))
    ed2, end2, ne2 = _by_type(t2, g2, lambda: _box_edges(g2, dim2, v2, vi2[0], nn),
                              lambda: _mesh_edges(g2, dim2, v2, vi2[0], nn),
                              lambda: _cyl_edges(g2, dim2, v2, vi2[0], nn))
    ok1, f1, e1 = edge_face(ed1, ne1, n2, _cap_facing(t2, n2[0], dirn, nn2))
    ok2, f2, e2 = edge_face(ed2, ne2, n1, _cap_facing(t1, n1[0], dirn * -1, nn1))
    edgecon1 = ~aligned & (dim1 < 3) & ok1
    edgecon2 = ~aligned & ~edgecon1 & (dim2 < 3) & ok2
    # the two features: faces, or an edge of one geom and a face of the other
    fidx2 = jnp.where(edgecon1, id2[f1], id2[fj])
    fidx1 = jnp.where(edgecon2, id1[f2], id1[fi])
    face1, nface1 = _by_type(t1, g1, lambda: _box_face(g1, fidx1, pv), lambda: _mesh_face(g1, fidx1, pv),
                             lambda: _cyl_face(g1, fidx1, pv))
    face2, nface2 = _by_type(t2, g2, lambda: _box_face(g2, fidx2, pv), lambda: _mesh_face(g2, fidx2, pv),
                             lambda: _cyl_face(g2, fidx2, pv))
    # face against face: geom 2's face clipped by planes through geom 1's edges along its
    # normal (the polygon's order decides MuJoCo's quadrilateral); an edge: clipped by
    # the other geom's face
    on1 = aligned | edgecon2  # the clipping face is geom 1's
    C = jnp.where(on1, face1, face2)
    nc = jnp.where(on1, nface1, nface2)
    edge = jnp.where(edgecon1, pad_rows(jnp.stack([v1[0], end1[e1]]), pv),
                     pad_rows(jnp.stack([v2[0], end2[e2]]), pv))
    S = jnp.where(edgecon1 | edgecon2, edge, face2)
    ns = jnp.where(edgecon1 | edgecon2, 2, nface2)
    nrm = jnp.where(aligned, n1[fi], jnp.where(edgecon2, n1[f2], n2[f1]))
    caps = is_type(t1, CYLINDER) & is_type(t2, CYLINDER)
    count, v, dist = _polygon_clip(C, nc, S, ns, nrm, margin, caps)
    # face against face: the points taken down onto geom 1's face, distances along geom 2's
    # face normal back to the clipped points themselves (MuJoCo 4.0; not to the plane
    # through a vertex: the float32 vertices are not exactly coplanar)
    n2f = n2[fj]
    w = v - nrm * dist[:, None]
    dist = jnp.where(aligned, dot(w - v, n2f), dist)
    v = jnp.where(aligned, w, v)
    nrm = jnp.where(aligned, n2f, nrm)
    # contact points halfway to the clipping face, normal from geom 1 to geom 2
    pos = v - nrm * (0.5 * dist)[:, None]
    normal = jnp.where(edgecon2, nrm, nrm * -1)
    polys_ok = True
    for t, g in ((t1, g1), (t2, g2)):
        if g.data is not None:
            polys_ok = polys_ok & (jnp.logical_not(is_type(t, MESH)) | (g.data.npoly > 0))
    applied = polys_ok & (aligned | edgecon1 | edgecon2) & (count > 0)
    return _Multi(applied, count.astype(I32), dist.astype(dt), pos.astype(dt),
                  normal.astype(dt))
