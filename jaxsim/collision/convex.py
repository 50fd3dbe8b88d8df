"""General convex collisions: MuJoCo's native CCD and plane-convex.

MuJoCo routes the pairs without a dedicated primitive function to `mjc_Convex` (GJK for the
distance, EPA for the penetration depth, then flat-face contacts) and the plane pairs with an
ellipsoid or a mesh to `mjc_PlaneConvex`. This module follows the algorithms step by step
(same iteration rules, tie breaks and polytope bookkeeping), so that contacts agree with
MuJoCo to rounding rather than to the CCD tolerance. The reference is the MuJoCo 4.0 binary;
where it departs from the 3.x sources it was checked against (found by running it):

- GJK never switches to `gjkIntersect`: after a tetrahedron it keeps running the distance
  sub-algorithm; coincident centres start from the x axis (and find the contact);
- EPA stops when this iteration's upper bound (not the running minimum) is within the
  tolerance of the lower bound;
- there is no multiCCD perturbation pass: box and mesh pairs get their extra contacts by
  clipping aligned faces or edges also when the pair has a margin (points within the margin
  are kept, with their positive distance); the face of geom 1 is clipped by geom 2's face
  (planes perpendicular to face 1), an edge by the other geom's face, feature vertices are
  the geoms' own (not EPA's margin-inflated points), and the quadrilateral search never lets
  its last corner wrap onto the first (its buffer holds the clipped polygon's ns + nc
  points);
- cylinders take part in those flat-feature contacts (with boxes, meshes and cylinders): a
  cylinder's support point carries the id of its cap (0 top, 1 bottom); an EPA face whose
  three points lie on one cap has that cap's normal as face normal, and the cap is clipped
  as a 16-gon inscribed in its circle (first vertex on the local x axis, clockwise about the
  outward normal, like mesh faces); a cylinder feature also offers one edge, the side line
  from its first point towards the other cap (length 2 * half-height).

Not reproduced from MuJoCo 4.0 (the single EPA contact is returned instead): its clipping
of capsule segments against faces (4.0 offsets the segment by radius * (n - (n.u) u), n the
face normal, u the axis, so its distances are shallower than the capsule's true depth by
radius * (n.u)^2; which face it uses was not pinned down), its face/edge contacts of
plane-mesh (MuJoCo 3's deepest vertex plus two graph neighbours are kept) and libccd
(NATIVECCD disabled). When more than four clipped points remain (a 16-gon cap nearly
always), 4.0 keeps another quadrilateral than `_polygon_quad` of the clipped polygon in many
poses (no start vertex or orientation of the polygon reproduces its choice), so the deepest
of the four contacts can differ from MuJoCo's by up to the depth variation across the face.

Structure: support functions per geom type (`_support`, with MuJoCo's warm start for
meshes); `_gjk` (one `lax.while_loop`); `_polytope` + `_epa` (fixed-size vertex, face, map
and horizon buffers; the horizon is a depth-first search on an explicit stack); `_ccd`
(mjc_ccd, sphere and capsule shrunk to a point or segment first); `_multicontact` /
`_polygon_clip` / `_polygon_quad`; `convex`, `plane_convex`, `functions`, `penetration`.

Geom types are Python ints (specialised code) or traced int32 scalars (one compiled
function for every pair; then each geom carries a MeshData, a dummy one for primitives).

The iterative parts run on `stop_gradient` inputs. Gradients reach distances and positions
through support points evaluated at the final (frozen) contact normal, whose derivative is
that of the penetration depth (envelope theorem), and through the clipped face geometry;
normals carry no gradient. `grad` is finite and never differentiates a loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim.collision.common import Contacts, Geom
from jaxsim.types import DisableBit, GeomType

PLANE, SPHERE, CAPSULE, ELLIPSOID = (int(GeomType.PLANE), int(GeomType.SPHERE),
                                     int(GeomType.CAPSULE), int(GeomType.ELLIPSOID))
CYLINDER, BOX, MESH = int(GeomType.CYLINDER), int(GeomType.BOX), int(GeomType.MESH)

MINVAL = 1e-15  # mjMINVAL
MINVAL2 = 1e-30
FACE_TOL = 0.996  # mjFACE_TOL
EDGE_TOL = 0.0888  # mjEDGE_TOL

_I32 = jnp.int32


def _maxl(dtype):
    """mjMAX_LIMIT (DBL_MAX) in the working precision."""
    return jnp.asarray(jnp.finfo(dtype).max, dtype)


# -------------------------------------------------------------------- small vector helpers
# Written component by component in MuJoCo's order of operations so that rounding matches.


def _dot(a, b):
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def _cross(a, b):
    return jnp.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                      a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                      a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], -1)


def _mul(m, v):
    """m @ v."""
    return m[:, 0] * v[0] + m[:, 1] * v[1] + m[:, 2] * v[2]


def _mul_t(m, v):
    """m.T @ v."""
    return m[0] * v[0] + m[1] * v[1] + m[2] * v[2]


def _norm(v):
    return jnp.sqrt(_dot(v, v))


def _normalize(v):
    """mju_normalize3: unit vector, (1, 0, 0) below mjMINVAL; safe to differentiate."""
    n2 = _dot(v, v)
    ok = n2 >= MINVAL * MINVAL
    n = jnp.sqrt(jnp.where(ok, n2, 1.0))
    unit_x = jnp.zeros_like(v).at[..., 0].set(1.0)
    return jnp.where(ok[..., None], v * (1 / n)[..., None], unit_x)


def _same_sign(a, b):
    return ((a > 0) & (b > 0)) | ((a < 0) & (b < 0))


def _sel3(i, v):
    """v[i] for a traced i in {0, 1, 2} (vector of 3 or array with last axis 3)."""
    return jnp.where(i == 0, v[..., 0], jnp.where(i == 1, v[..., 1], v[..., 2]))


# ------------------------------------------------------------------------------ mesh data


class MeshData(NamedTuple):
    """Static-shaped data of one mesh geom (leading axis: one row per mesh when stacked).

    Vertices are in the geom's frame and padded by repeating vertex 0 (support maxima and
    their first-index tie break are unaffected). Polygons are MuJoCo's mesh polygons (the
    coplanar faces of the convex hull merged), vertices counter-clockwise about the
    outward normal; padded entries are -1.
    """

    vert: jax.Array  # (V, 3) vertices (float32 values, as MuJoCo stores them)
    nvert: jax.Array  # () number of real vertices
    rbound: jax.Array  # () geom_rbound of a geom using this mesh
    graph_nvert: jax.Array  # () number of convex-hull vertices in the graph (0: no graph)
    graph_global: jax.Array  # (G,) graph local id -> vertex id
    graph_adj: jax.Array  # (G, Dg) graph neighbours (local ids) in MuJoCo's order, -1 pad
    npoly: jax.Array  # () number of polygons
    poly_vert: jax.Array  # (P, Pv) polygon vertex ids, -1 pad
    poly_nvert: jax.Array  # (P,) polygon sizes
    poly_normal: jax.Array  # (P, 3) outward unit normals
    vert_poly: jax.Array  # (V, Dp) polygons containing each vertex (ascending), -1 pad
    vert_npoly: jax.Array  # (V,) number of polygons containing each vertex
    vert_prev: jax.Array  # (V, Dp) for each such polygon, the vertex preceding this one


def _one_mesh(model, mesh_id: int) -> dict:
    """Integer structure of one mesh (static fields only)."""
    adr, num = int(model.mesh_vertadr[mesh_id]), int(model.mesh_vertnum[mesh_id])
    gadr = int(model.mesh_graphadr[mesh_id])
    graph = np.asarray(model.mesh_graph)
    out = dict(vadr=adr, nvert=num, graph_global=np.zeros(0, int), graph_adj=[], polys=[])
    if gadr >= 0:
        nv, nf = int(graph[gadr]), int(graph[gadr + 1])
        edgeadr = graph[gadr + 2:gadr + 2 + nv]
        out["graph_global"] = graph[gadr + 2 + nv:gadr + 2 + 2 * nv].astype(int)
        edges = graph[gadr + 2 + 2 * nv:gadr + 2 + 3 * nv + 3 * nf]
        adj = []
        for i in range(nv):
            j, row = int(edgeadr[i]), []
            while edges[j] >= 0:
                row.append(int(edges[j]))
                j += 1
            adj.append(row)
        out["graph_adj"] = adj
    pa, pn = int(model.mesh_polyadr[mesh_id]), int(model.mesh_polynum[mesh_id])
    pva, pvn = np.asarray(model.mesh_polyvertadr), np.asarray(model.mesh_polyvertnum)
    pv = np.asarray(model.mesh_polyvert)
    out["polys"] = [[int(v) for v in pv[pva[q]:pva[q] + pvn[q]]] for q in range(pa, pa + pn)]
    return out


def mesh_data(model, mesh_ids) -> MeshData:
    """MeshData for meshes `mesh_ids`, stacked and padded to one size.

    `model` is a compiled jaxsim Model (or a mujoco.MjModel). The integer structure
    (hull graph, polygons) is read from static fields with numpy; vertex positions are
    gathered from `model.mesh_vert` with jnp, so the model's leaves may be traced. Row i
    describes mesh `mesh_ids[i]`; index a row to get the data of one geom.
    """
    meshes = [_one_mesh(model, int(i)) for i in mesh_ids]
    nv = max(1, max(m["nvert"] for m in meshes))
    ng = max(1, max(len(m["graph_adj"]) for m in meshes))
    dg = max(1, max((len(r) for m in meshes for r in m["graph_adj"]), default=1))
    npl = max(1, max(len(m["polys"]) for m in meshes))
    pv = max(4, max((len(p) for m in meshes for p in m["polys"]), default=4))
    dp = 1
    for m in meshes:
        vmap = [[] for _ in range(m["nvert"])]
        for pi, p in enumerate(m["polys"]):
            for v in p:
                vmap[v].append(pi)
        m["vmap"] = vmap
        dp = max(dp, max((len(r) for r in vmap), default=1))
    rows = []
    for m in meshes:
        n = m["nvert"]
        vidx = np.full(nv, m["vadr"], np.int64)  # padding repeats vertex 0
        vidx[:n] += np.arange(n)
        gadj = -np.ones((ng, dg), np.int32)
        for i, r in enumerate(m["graph_adj"]):
            gadj[i, :len(r)] = r
        gglob = np.zeros(ng, np.int32)
        gglob[:len(m["graph_global"])] = m["graph_global"]
        pvert = -np.ones((npl, pv), np.int32)
        pnv = np.zeros(npl, np.int32)
        for i, p in enumerate(m["polys"]):
            pvert[i, :len(p)] = p
            pnv[i] = len(p)
        vpoly = -np.ones((nv, dp), np.int32)
        vnp = np.zeros(nv, np.int32)
        vprev = -np.ones((nv, dp), np.int32)
        for v, r in enumerate(m["vmap"]):
            vpoly[v, :len(r)] = r
            vnp[v] = len(r)
            for s, pi in enumerate(r):
                p = m["polys"][pi]
                vprev[v, s] = p[p.index(v) - 1]
        rows.append(dict(vidx=vidx, nvert=np.int32(n), graph_nvert=np.int32(len(m["graph_adj"])),
                         graph_global=gglob, graph_adj=gadj, npoly=np.int32(len(m["polys"])),
                         poly_vert=pvert, poly_nvert=pnv, vert_poly=vpoly, vert_npoly=vnp,
                         vert_prev=vprev))
    st = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    allv = jnp.asarray(model.mesh_vert)
    if allv.shape[0] == 0:
        allv = jnp.zeros((1, 3), allv.dtype)
    vert = allv[st["vidx"]]  # (M, V, 3)
    # bounding radius: the corner of the vertices' axis-aligned box farthest from the origin
    h = jnp.maximum(jnp.abs(vert.min(1)), jnp.abs(vert.max(1)))
    rbound = jnp.sqrt(jnp.sum(h * h, -1))
    # polygon normals: the area-weighted normal of the polygon (Newell's sum over its edges),
    # as MuJoCo's compiler sums the normals of the merged faces
    pidx = np.maximum(st["poly_vert"], 0)  # (M, P, Pv)
    pts = jnp.take_along_axis(vert[:, None, :, :], pidx[..., None], axis=2)  # (M, P, Pv, 3)
    pvn = st["poly_nvert"][..., None]
    nxt = np.where(np.arange(pidx.shape[-1]) + 1 < pvn, np.arange(pidx.shape[-1]) + 1, 0)
    real = (np.arange(pidx.shape[-1]) < pvn)[..., None]
    pts_next = jnp.take_along_axis(pts, np.broadcast_to(nxt[..., None], pts.shape[:-1] + (1,)),
                                   axis=2)
    nrm = jnp.sum(jnp.where(real, jnp.cross(pts, pts_next), 0.0), axis=2)
    n2 = jnp.sum(nrm * nrm, -1, keepdims=True)
    ok = n2 >= 1e-28
    xaxis = jnp.zeros(3, vert.dtype).at[0].set(1.0)
    pnrm = jnp.where(ok, nrm / jnp.sqrt(jnp.where(ok, n2, 1.0)), xaxis)
    i32 = {k: jnp.asarray(v) for k, v in st.items() if k != "vidx"}
    return MeshData(vert=vert, rbound=rbound, poly_normal=pnrm, **i32)


# ------------------------------------------------------------------------ support functions
# Geom types are Python ints (the usual, specialised case) or traced int32 scalars (one
# compiled function for several pair types; every geom then carries a MeshData, a dummy one
# for primitives, see `dummy_mesh_data`).

_PRIMS = (SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH)


def _is(t, *types):
    """t in types: a Python bool for a static type, a traced bool otherwise."""
    if isinstance(t, (int, np.integer)):
        return int(t) in types
    return jnp.isin(t, jnp.asarray(types, _I32))


def _support(t, g: Geom, d, warm, core):
    """MuJoCo's native support point of geom type `t` in unit direction d (no margin).

    Returns (point, index, warm): index is the box corner or mesh vertex id (-1 otherwise),
    warm the mesh's cached vertex (MuJoCo starts its search there and keeps it on ties).
    `core` shrinks a sphere to its centre and a capsule to its segment.
    """
    if not isinstance(t, (int, np.integer)):
        outs = [_support(tt, g, d, warm, core) for tt in _PRIMS if tt != MESH or g.data is not None]
        ts = [tt for tt in _PRIMS if tt != MESH or g.data is not None]
        sel = [t == tt for tt in ts]
        return tuple(jnp.select(sel, [o[i] for o in outs], outs[0][i]) for i in range(3))
    pos, mat, size = g.pos, g.mat, g.size
    m1 = jnp.asarray(-1, _I32)
    if t == SPHERE:
        return jnp.where(core, pos, size[0] * d + pos), m1, warm
    if t == CAPSULE:
        dz = mat[0, 2] * d[0] + mat[1, 2] * d[1] + mat[2, 2] * d[2]
        line = mat[:, 2] * jnp.where(dz >= 0, size[1], -size[1]) + pos
        ld = _mul_t(mat, d)
        ls = (ld * size[0]).at[2].add(jnp.where(ld[2] >= 0, size[1], -size[1]))
        return jnp.where(core, line, _mul(mat, ls) + pos), m1, warm
    ld = _mul_t(mat, d)
    if t == ELLIPSOID:
        ls = ld * size
        n2 = ls[0] * ls[0] + ls[1] * ls[1] + ls[2] * ls[2]
        ok = n2 >= MINVAL2
        inv = 1 / jnp.sqrt(jnp.where(ok, n2, 1.0))
        p = _mul(mat, ls * (inv * size)) + pos
        return jnp.where(ok, p, mat[:, 0] * size[0] + pos), m1, warm
    if t == CYLINDER:
        n2 = ld[0] * ld[0] + ld[1] * ld[1]
        ok = n2 >= MINVAL2
        scl = jnp.where(ok, size[0] / jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)
        ls = jnp.stack([scl * ld[0], scl * ld[1], jnp.where(ld[2] >= 0, size[1], -size[1])])
        cap = jnp.where(ld[2] >= 0, 0, 1).astype(_I32)  # the cap the point lies on
        return _mul(mat, ls) + pos, cap, warm
    if t == BOX:
        up = ld >= 0
        ls = jnp.where(up, size, -size)
        idx = up[0].astype(_I32) + 2 * up[1].astype(_I32) + 4 * up[2].astype(_I32)
        return _mul(mat, ls) + pos, idx, warm
    if t == MESH:
        v = g.data.vert
        vd = ld[0] * v[:, 0] + ld[1] * v[:, 1] + ld[2] * v[:, 2]
        best = jnp.argmax(vd).astype(_I32)
        keep = (warm >= 0) & (vd[jnp.maximum(warm, 0)] >= vd[best])
        i = jnp.where(keep, warm, best)
        return _mul(mat, v[i]) + pos, i, i
    raise ValueError(f"no support function for geom type {t}")


# A vertex of the Minkowski difference is packed in one row of 11 numbers:
# [v1 - v2 (3), point on geom 1 (3), point on geom 2 (3), index 1, index 2].
_NREC = 11


class _Pair(NamedTuple):
    """Two convex objects as MuJoCo's GJK sees them.

    sup_i(d, warm, core) -> (point, index, warm); objects are inflated by margin_i/2 along
    the direction (when positive); shrink_i marks a sphere or capsule (shrunk to its core
    for a first pass, then inflated by radius_i); discrete_i marks polytopes (box, mesh,
    height-field prism). Flags are Python bools or traced bools.
    """

    sup1: Callable
    sup2: Callable
    center1: jax.Array
    center2: jax.Array
    margin1: jax.Array
    margin2: jax.Array
    shrink1: Any
    shrink2: Any
    radius1: jax.Array
    radius2: jax.Array
    discrete1: Any
    discrete2: Any


def _msupport(pr: _Pair, d, warm, core, m1, m2):
    """Support of the Minkowski difference (geom 1 along d, geom 2 along -d): packed row."""
    p1, i1, w1 = pr.sup1(d, warm[0], core)
    p2, i2, w2 = pr.sup2(-d, warm[1], core)
    p1 = p1 + d * jnp.where(m1 > 0, 0.5 * m1, 0.0)
    p2 = p2 + (-d) * jnp.where(m2 > 0, 0.5 * m2, 0.0)
    dt = p1.dtype
    rec = jnp.concatenate([p1 - p2, p1, p2, i1[None].astype(dt), i2[None].astype(dt)])
    return rec, jnp.stack([w1, w2])


# ------------------------------------------------------------------------------------- GJK


def _project_line(v1, v2):
    diff = v2 - v1
    scl = -(_dot(v2, diff) / _dot(diff, diff))
    return v2 + scl[..., None] * diff


def _project_plane(v1, v2, v3):
    """projectOriginPlane: (projection of the origin, failed)."""
    d21, d31, d32 = v2 - v1, v3 - v1, v3 - v2
    n1 = _cross(d32, d21)
    nv1, nn1 = _dot(n1, v2), _dot(n1, n1)
    n2 = _cross(d21, d31)
    nv2, nn2 = _dot(n2, v1), _dot(n2, n2)
    n3 = _cross(d31, d32)
    nv3, nn3 = _dot(n3, v3), _dot(n3, n3)
    ok1 = (nv1 != 0) & (nn1 > MINVAL)
    ok2 = (nv2 != 0) & (nn2 > MINVAL)
    r1 = n1 * (nv1 / nn1)[..., None]
    r2 = n2 * (nv2 / nn2)[..., None]
    r3 = n3 * (nv3 / nn3)[..., None]
    res = jnp.where(ok1[..., None], r1, jnp.where(ok2[..., None], r2, r3))
    fail = (nn1 == 0) | (~ok1 & (nn2 == 0))
    return jnp.where(fail[..., None], 0.0, res), fail


def _s1d(s1, s2):
    """Barycentric coordinates (..., 2) of the origin's projection on segments s1 s2."""
    p = _project_line(s1, s2)
    mu = s1 - s2
    i = jnp.where(jnp.abs(mu[..., 1]) >= jnp.abs(mu[..., 0]), 1, 0)
    i = jnp.where(jnp.abs(mu[..., 2]) >= jnp.abs(_sel3(i, mu)), 2, i)
    mu_max = _sel3(i, mu)
    c1 = _sel3(i, p) - _sel3(i, s2)
    c2 = _sel3(i, s1) - _sel3(i, p)
    same = _same_sign(mu_max, c1) & _same_sign(mu_max, c2)
    return jnp.stack([jnp.where(same, c1 / mu_max, 0.0), jnp.where(same, c2 / mu_max, 1.0)], -1)


def _minors(s1, s2, s3):
    a0, a1, a2 = s1[..., 0], s1[..., 1], s1[..., 2]
    b0, b1, b2 = s2[..., 0], s2[..., 1], s2[..., 2]
    c0, c1_, c2_ = s3[..., 0], s3[..., 1], s3[..., 2]
    m14 = b1 * c2_ - b2 * c1_ - a1 * c2_ + a2 * c1_ + a1 * b2 - a2 * b1
    m24 = b0 * c2_ - b2 * c0 - a0 * c2_ + a2 * c0 + a0 * b2 - a2 * b0
    m34 = b0 * c1_ - b1 * c0 - a0 * c1_ + a1 * c0 + a0 * b1 - a1 * b0
    u1, u2, u3 = jnp.abs(m14), jnp.abs(m24), jnp.abs(m34)
    k1 = (u1 >= u2) & (u1 >= u3)
    k2 = ~k1 & (u2 >= u3)
    m_max = jnp.where(k1, m14, jnp.where(k2, m24, m34))
    return m_max, jnp.where(k1, 1, 0), jnp.where(k1 | k2, 2, 1)


def _cofactors(s1, s2, s3, p, x, y):
    """Signed areas C31, C32, C33 of (p, s2, s3), (p, s3, s1), (p, s1, s2) in axes (x, y)."""
    px, py = _sel3(x, p), _sel3(y, p)
    ax, ay = _sel3(x, s1), _sel3(y, s1)
    bx, by = _sel3(x, s2), _sel3(y, s2)
    cx, cy = _sel3(x, s3), _sel3(y, s3)
    c31 = px * by + py * cx + bx * cy - px * cy - py * bx - cx * by
    c32 = px * cy + py * ax + cx * ay - px * ay - py * cx - ax * cy
    c33 = px * ay + py * bx + ax * by - px * by - py * ax - bx * ay
    return c31, c32, c33


def _first_min(d, cand):
    """Index of the first smallest d (last axis) among candidates (MuJoCo's `d < dmin`)."""
    return jnp.argmin(jnp.where(cand, d, jnp.inf), axis=-1)


def _s2d(s1, s2, s3):
    """Barycentric coordinates (..., 3) of the point of triangles s1 s2 s3 closest to 0.

    Also returns S1D(s1, s2) padded to 3 (the 2-simplex case of the distance algorithm).
    """
    p, fail = _project_plane(s1, s2, s3)
    m_max, x, y = _minors(s1, s2, s3)
    c31, c32, c33 = _cofactors(s1, s2, s3, p, x, y)
    k = jnp.stack([_same_sign(m_max, c31), _same_sign(m_max, c32), _same_sign(m_max, c33)], -1)
    inside = jnp.stack([c31, c32, c33], -1) / m_max[..., None]
    # the three edges (s2 s3), (s1 s3), (s1 s2), batched
    ea = jnp.stack([s2, s1, s1], -2)
    eb = jnp.stack([s3, s3, s2], -2)
    le = _s1d(ea, eb)  # (..., 3, 2)
    xe = le[..., 0:1] * ea + le[..., 1:2] * eb
    de = _dot(xe, xe)
    z = jnp.zeros_like(le[..., 0, 0])
    cand = jnp.stack([jnp.stack([z, le[..., 0, 0], le[..., 0, 1]], -1),
                      jnp.stack([le[..., 1, 0], z, le[..., 1, 1]], -1),
                      jnp.stack([le[..., 2, 0], le[..., 2, 1], z], -1)], -2)
    j = _first_min(de, ~k)
    edge = jnp.take_along_axis(cand, j[..., None, None], -2)[..., 0, :]
    lam = jnp.where(jnp.all(k, -1)[..., None], inside, edge)
    return jnp.where(fail[..., None], cand[..., 2, :], lam), cand[..., 2, :]


def _det3(a, b, c):
    return (a[..., 0] * (b[..., 1] * c[..., 2] - b[..., 2] * c[..., 1])
            + a[..., 1] * (b[..., 2] * c[..., 0] - b[..., 0] * c[..., 2])
            + a[..., 2] * (b[..., 0] * c[..., 1] - b[..., 1] * c[..., 0]))


def _subdistance(s, n):
    """Barycentric coordinates of the point of simplex s[:n] closest to the origin (S1D, S2D,
    S3D of Montanari et al. as in MuJoCo). The four faces are solved as one batch; the last
    face is also the n == 3 case and its last edge the n == 2 case."""
    s1, s2, s3, s4 = s[0], s[1], s[2], s[3]
    c = jnp.stack([-_det3(s2, s3, s4), _det3(s1, s3, s4), -_det3(s1, s2, s4), _det3(s1, s2, s3)])
    m_det = c[0] + c[1] + c[2] + c[3]
    k = _same_sign(m_det, c)
    fa = jnp.stack([s2, s1, s1, s1])
    fb = jnp.stack([s3, s3, s2, s2])
    fc = jnp.stack([s4, s4, s4, s3])
    l2, l1 = _s2d(fa, fb, fc)  # (4, 3) each
    xf = l2[:, 0:1] * fa + l2[:, 1:2] * fb + l2[:, 2:3] * fc
    slots = jnp.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])
    cand = jnp.zeros((4, 4), s.dtype).at[jnp.arange(4)[:, None], slots].set(l2)
    lam4 = jnp.where(jnp.all(k), c / m_det, cand[_first_min(_dot(xf, xf), ~k)])
    z1 = jnp.zeros(1, s.dtype)
    lam3 = jnp.concatenate([l2[3], z1])
    lam2 = jnp.concatenate([l1[3, :2], z1, z1])
    lam1 = jnp.zeros(4, s.dtype).at[0].set(1.0)
    return jnp.where(n == 4, lam4, jnp.where(n == 3, lam3, jnp.where(n == 2, lam2, lam1)))


def _lincomb(lam, v):
    return lam[0] * v[0] + lam[1] * v[1] + lam[2] * v[2] + lam[3] * v[3]


# GJK phases: an iteration, the final separation check, done.
_G, _F, _DONE = 0, 1, 2


class _GJKOut(NamedTuple):
    separated: jax.Array
    dist: jax.Array
    nsimplex: jax.Array
    simplex: jax.Array  # (4, 11) packed vertices
    x1: jax.Array
    x2: jax.Array
    warm: jax.Array


def _gjk(pr: _Pair, core, m1, m2, cutoff, tol, kmax: int, warm) -> _GJKOut:
    """MuJoCo's gjk(): distance of the two objects, or early exit once separated.

    MuJoCo 4.0 no longer switches to gjkIntersect() after a tetrahedron (the reference
    binary's iteration counts and results show the plain distance sub-algorithm)."""
    dt = pr.center1.dtype
    maxl = _maxl(dt)
    discrete = pr.discrete1 & pr.discrete2 & (m1 == 0) & (m2 == 0)
    get_dist = cutoff > 0
    eps = jnp.where(discrete, 0.0, 0.5 * tol * tol)
    min_norm = jnp.where(discrete, MINVAL, tol)
    x_k = pr.center1 - pr.center2
    # coincident centres: MuJoCo 4.0 starts from the x axis (and so finds the contact)
    x_k = jnp.where(_dot(x_k, x_k) == 0, jnp.array([1.0, 0.0, 0.0], dt), x_k)
    st = dict(phase=jnp.asarray(_G, _I32), k=jnp.asarray(0, _I32), n=jnp.asarray(0, _I32),
              s=jnp.zeros((4, _NREC), dt), x_k=x_k, x_norm=_norm(x_k), x_prev=jnp.zeros((), dt),
              lam=jnp.zeros(4, dt), warm=warm, sep=jnp.asarray(False), dist=jnp.zeros((), dt),
              nsimplex=jnp.asarray(0, _I32), x1=pr.center1, x2=pr.center2)

    def body(st):
        ph, k, n, s = st["phase"], st["k"], st["n"], st["s"]
        x_k, x_norm = st["x_k"], st["x_norm"]
        xn = jnp.where(x_norm > 0, x_norm, 1.0)
        w, warm_new = _msupport(pr, (x_k * (1 / xn)) * -1, st["warm"], core, m1, m2)
        wv = w[:3]
        # an iteration
        in_g = ph == _G
        stop = (k >= kmax) | (x_norm < min_norm) | (jnp.abs(st["x_prev"] - x_norm) < MINVAL)
        run = in_g & ~stop
        s_w = s.at[jnp.minimum(n, 3)].set(w)
        conv = _dot(x_k, x_k - wv) < eps
        lower = _dot(x_k, wv)
        sep = jnp.where(get_dist, (cutoff < maxl) & (lower > 0) & (lower >= cutoff * x_norm),
                        lower > 0)
        sep = run & ~conv & sep
        rem = run & ~conv & ~sep
        lam = _subdistance(s_w[:, :3], n + 1)
        nz = lam != 0
        order = jnp.argsort(~nz, stable=True)
        n_r = jnp.sum(nz).astype(_I32)
        lam_r = lam[order]
        s_r = s_w[order]
        xk_r = _lincomb(lam_r, s_r[:, :3])
        sep = sep | (rem & (n_r < 1))
        fin = (in_g & stop) | (run & conv) | (rem & (n_r == 4))
        nxt = rem & (n_r >= 1) & (n_r != 4)
        # final separation check and witness points
        in_f = ph == _F
        f_sep = _dot(x_k, wv) > 0
        x12 = _lincomb(st["lam"], s[:, 3:9])
        return dict(
            phase=jnp.select([sep, fin, nxt, in_f], [_DONE, _F, _G, _DONE], ph).astype(_I32),
            k=k + nxt.astype(_I32), n=jnp.where(rem, n_r, n),
            s=jnp.where(rem, s_r, jnp.where(run, s_w, s)),
            x_k=jnp.where(rem, xk_r, x_k), x_norm=jnp.where(rem, _norm(xk_r), x_norm),
            x_prev=jnp.where(rem, x_norm, st["x_prev"]), lam=jnp.where(rem, lam_r, st["lam"]),
            warm=jnp.where(run | in_f, warm_new, st["warm"]),
            sep=jnp.where(sep, True, jnp.where(in_f, f_sep, st["sep"])),
            dist=jnp.where(sep, maxl, jnp.where(in_f, jnp.where((n == 4) & ~f_sep, 0.0, x_norm),
                                                 st["dist"])),
            nsimplex=jnp.where(sep, 0, jnp.where(in_f, n, st["nsimplex"])),
            x1=jnp.where(in_f & (n > 0), x12[:3], st["x1"]),
            x2=jnp.where(in_f & (n > 0), x12[3:], st["x2"]))

    st = lax.while_loop(lambda st: st["phase"] != _DONE, body, st)
    return _GJKOut(st["sep"], st["dist"], st["nsimplex"], st["s"], st["x1"], st["x2"],
                   st["warm"])


# ------------------------------------------------------------------------------------- EPA


class _Poly(NamedTuple):
    """Expanding polytope with fixed-capacity buffers."""

    V: jax.Array  # (NV, 11) packed vertices
    nv: jax.Array
    fi: jax.Array  # (NF, 6) per face: vertex ids (3), adjacent faces across (v0v1, v1v2, v2v0)
    ff: jax.Array  # (NF, 4) per face: origin projected on the face (outward normal), its norm^2
    fidx: jax.Array  # (NF,) position in the map; -1 not in the map; -2 deleted
    mp: jax.Array  # (NF,) the map: candidate faces
    nmap: jax.Array
    nf: jax.Array
    center: jax.Array


# initial faces (vertex ids, adjacent faces) of polytope4, polytope3 (v4 = 4, v5 = 3) and
# polytope2; polytope4 is padded to six rows.
_P4 = np.array([(0, 1, 2, 1, 3, 2), (0, 3, 1, 2, 3, 0), (0, 2, 3, 0, 3, 1), (3, 2, 1, 2, 0, 1),
                (0, 1, 2, 0, 0, 0), (0, 1, 2, 0, 0, 0)], np.int32)
_P3 = np.array([(4, 0, 1, 1, 3, 2), (4, 2, 0, 2, 4, 0), (4, 1, 2, 0, 5, 1), (3, 1, 0, 5, 0, 4),
                (3, 0, 2, 3, 1, 5), (3, 2, 1, 4, 2, 3)], np.int32)
_P2 = np.array([(0, 2, 3, 1, 3, 2), (0, 4, 2, 2, 4, 0), (0, 3, 4, 0, 5, 1), (1, 3, 2, 5, 0, 4),
                (1, 2, 4, 3, 1, 5), (1, 4, 3, 4, 2, 3)], np.int32)


def _face_geom(a, b, c, center):
    """attachFace geometry of faces (a, b, c) (coordinates, batched): (v, dist2, return)."""
    v, fail = _project_plane(c, b, a)
    v = jnp.where((_dot(v, a - center) < 0)[..., None], v * -1, v)
    d2 = _dot(v, v)
    return v, d2, jnp.where(fail, 0.0, d2)


def _epa_support(pr, d, dnorm, warm, m1, m2):
    ok = dnorm > MINVAL
    unit_x = jnp.zeros_like(d).at[0].set(1.0)
    return _msupport(pr, jnp.where(ok, d / jnp.where(ok, dnorm, 1.0), unit_x), warm, False,
                     m1, m2)


def _rotmat(axis):
    n = _norm(axis)
    u1, u2, u3 = axis[0] / n, axis[1] / n, axis[2] / n
    s, c = 0.86602540378, -0.5
    return jnp.stack([
        jnp.stack([c + u1 * u1 * (1 - c), u1 * u2 * (1 - c) - u3 * s, u1 * u3 * (1 - c) + u2 * s]),
        jnp.stack([u2 * u1 * (1 - c) + u3 * s, c + u2 * u2 * (1 - c), u2 * u3 * (1 - c) - u1 * s]),
        jnp.stack([u1 * u3 * (1 - c) - u2 * s, u2 * u3 * (1 - c) + u1 * s, c + u3 * u3 * (1 - c)]),
    ])


def _tri_affine(v1, v2, v3, p):
    m_max, x, y = _minors(v1, v2, v3)
    c31, c32, c33 = _cofactors(v1, v2, v3, p, x, y)
    return jnp.stack([c31 / m_max, c32 / m_max, c33 / m_max], -1)


def _tri_point(v1, v2, v3, p):
    lam = _tri_affine(v1, v2, v3, p)
    pr = v1 * lam[0] + v2 * lam[1] + v3 * lam[2]
    return ~jnp.any(lam < 0) & (_norm(pr - p) < MINVAL)


def _same_side(p0, p1, p2, p3):
    n = _cross(p1 - p0, p2 - p0)
    return _same_sign(_dot(n, p3 - p0), _dot(n, p0 * -1))


def _test_tetra(p):
    a, b, c = jnp.array([0, 1, 2, 3]), jnp.array([1, 2, 3, 0]), jnp.array([2, 3, 0, 1])
    return jnp.all(_same_side(p[a], p[b], p[c], p[jnp.array([3, 0, 1, 2])]))


def _ray_triangle(v1, v2, v3, v4, v5):
    d12, d13, d14, d15 = v2 - v1, v3 - v1, v4 - v1, v5 - v1
    vol = jnp.stack([_det3(d13, d14, d12), _det3(d14, d15, d12), _det3(d15, d13, d12)])
    return jnp.all(vol >= 0) | jnp.all(vol <= 0)


def _polytope(pr, g: _GJKOut, warm, m1, m2, nvmax, nfmax):
    """polytope2/3/4: initial polytope from GJK's simplex; returns (polytope, error, warm)."""
    S = g.simplex
    ns = g.nsimplex
    sv = S[:, :3]
    # from a segment: hexahedron around it (three new support points)
    c2 = (sv[0] + sv[1]) * 0.5
    diff = sv[1] - sv[0]
    e = jnp.zeros_like(diff).at[jnp.argmin(jnp.abs(diff))].set(1.0)
    d1 = _cross(e, diff)
    rot = _rotmat(diff)
    d2 = _mul(rot, d1)
    d3 = _mul(rot, d2)
    w2 = warm
    new = []
    for dd in (d1, d2, d3):
        w, w2 = _epa_support(pr, dd, _norm(dd), w2, m1, m2)
        new.append(w)
    pool2 = jnp.concatenate([S[:2], jnp.stack(new)])
    c4 = (((sv[0] + sv[1]) + sv[2]) + sv[3]) * 0.25
    # faces of polytope4 and polytope2, one batch
    pool = jnp.concatenate([S, pool2])[:, :3]
    fa = np.concatenate([_P4[:4, :3], _P2[:, :3] + 4])
    cen = jnp.concatenate([jnp.broadcast_to(c4, (4, 3)), jnp.broadcast_to(c2, (6, 3))])
    fv42, _, ret42 = _face_geom(pool[fa[:, 0]], pool[fa[:, 1]], pool[fa[:, 2]], cen)
    bad4, bad2 = ret42[:4] < MINVAL2, ret42[4:] < MINVAL2
    sim4 = S[jnp.asarray(_P4[:4, :3])[jnp.argmax(bad4)]]
    sim2 = pool2[jnp.asarray(_P2[:, :3])[jnp.argmax(bad2)]]
    err4 = ~_test_tetra(sv)
    err2 = ~_ray_triangle(*pool2[:, :3])
    use2, use4 = ns == 2, ns == 4
    run3 = (ns == 3) | (use2 & jnp.any(bad2)) | (use4 & jnp.any(bad4))
    # from a triangle (directly or as a fallback)
    T = jnp.where(use2, sim2, jnp.where(use4, sim4, S[:3]))
    w3 = jnp.where(use2, w2, warm)
    tv = T[:, :3]
    c3 = ((tv[0] + tv[1]) + tv[2]) * (1.0 / 3.0)
    nrm = _cross(tv[1] - tv[0], tv[2] - tv[0])
    nn = _norm(nrm)
    v5, w3 = _epa_support(pr, nrm * -1, nn, w3, m1, m2)
    v4, w3 = _epa_support(pr, nrm, nn, w3, m1, m2)
    pool3 = jnp.concatenate([T, v5[None], v4[None]])
    p3v = pool3[:, :3]
    fv3, _, ret3 = _face_geom(p3v[_P3[:, 0]], p3v[_P3[:, 1]], p3v[_P3[:, 2]],
                              jnp.broadcast_to(c3, (6, 3)))
    err3 = ((nn < MINVAL) | _tri_point(tv[0], tv[1], tv[2], v4[:3])
            | _tri_point(tv[0], tv[1], tv[2], v5[:3]) | jnp.any(ret3 < MINVAL2))
    # assemble the chosen one
    pick = lambda a, b, c: jnp.where(run3, a, jnp.where(use2, b, c))  # noqa: E731
    verts = pick(pool3, pool2, jnp.concatenate([S, S[:1]]))
    fpat = pick(jnp.asarray(_P3), jnp.asarray(_P2), jnp.asarray(_P4))
    fv = pick(fv3, fv42[4:], jnp.concatenate([fv42[:4], fv42[:2]]))
    fd2 = pick(ret3, ret42[4:], jnp.concatenate([ret42[:4], ret42[:2]]))
    nfc = jnp.where(run3 | use2, 6, 4).astype(_I32)
    dt = sv.dtype
    ar = jnp.arange(nfmax, dtype=_I32)
    poly = _Poly(
        V=jnp.zeros((nvmax, _NREC), dt).at[:5].set(verts),
        nv=jnp.where(run3 | use2, 5, 4).astype(_I32),
        fi=jnp.zeros((nfmax, 6), _I32).at[:6].set(fpat),
        ff=jnp.zeros((nfmax, 4), dt).at[:6].set(jnp.concatenate([fv, _dot(fv, fv)[:, None]], 1)),
        fidx=jnp.where(ar < nfc, ar, -1), mp=jnp.where(ar < nfc, ar, 0), nmap=nfc, nf=nfc,
        center=pick(c3, c2, c4))
    del fd2
    err = pick(err3, err2, err4)
    return poly, err, pick(w3, w2, warm)


def _delete_face(fidx, mp, nmap, f, do):
    """deleteFace: swap-remove face f from the map and mark it deleted (where `do`)."""
    j = fidx[f]
    has = do & (j >= 0)
    jj = jnp.maximum(j, 0)
    last = mp[jnp.maximum(nmap - 1, 0)]
    mp = jnp.where(has, mp.at[jj].set(last), mp)
    fidx = jnp.where(has, fidx.at[last].set(jj), fidx)
    fidx = jnp.where(do, fidx.at[f].set(-2), fidx)
    return fidx, mp, nmap - has.astype(_I32)


def _horizon(p: _Poly, f0, w, nh: int):
    """horizon(): delete the faces visible from w (depth first, in MuJoCo's order) and list
    the boundary as (face, edge) pairs."""
    nfmax = p.ff.shape[0]
    fidx, mp, nmap = _delete_face(p.fidx, p.mp, p.nmap, f0, jnp.asarray(True))
    z = jnp.zeros(nfmax, _I32)
    # stack frames: face, next edge, edges left
    st = dict(fidx=fidx, mp=mp, nmap=nmap, sf=z.at[0].set(f0), si=z, sr=z.at[0].set(3),
              sp=jnp.asarray(1, _I32), hf=jnp.zeros(nh, _I32), he=jnp.zeros(nh, _I32),
              ne=jnp.asarray(0, _I32), it=jnp.asarray(0, _I32))

    def body(st):
        top = st["sp"] - 1
        f, i0, r = st["sf"][top], st["si"][top], st["sr"][top]
        pop = r == 0
        i = i0 % 3
        fr = p.fi[f]
        adj = _sel3(i, fr[3:])
        vtx = _sel3((i + 1) % 3, fr[:3])
        av = p.fi[adj, :3]
        e = jnp.where(av[0] == vtx, 0, jnp.where(av[1] == vtx, 1, 2))
        vis = _dot(p.ff[adj, :3], w) - p.ff[adj, 3] > MINVAL
        proc = ~pop & (st["fidx"][adj] > -2)
        push, add = proc & vis, proc & ~vis
        sp = st["sp"] - pop.astype(_I32)
        fidx, mp, nmap = _delete_face(st["fidx"], st["mp"], st["nmap"], adj, push)
        slot = jnp.where(push, sp, nfmax)
        step = (~pop).astype(_I32)
        hs = jnp.where(add, st["ne"], nh)
        return dict(fidx=fidx, mp=mp, nmap=nmap,
                    sf=st["sf"].at[slot].set(adj, mode="drop"),
                    si=st["si"].at[top].add(step).at[slot].set(e + 1, mode="drop"),
                    sr=st["sr"].at[top].add(-step).at[slot].set(2, mode="drop"),
                    sp=sp + push.astype(_I32),
                    hf=st["hf"].at[hs].set(adj, mode="drop"),
                    he=st["he"].at[hs].set(e, mode="drop"),
                    ne=st["ne"] + add.astype(_I32), it=st["it"] + 1)

    st = lax.while_loop(lambda st: (st["sp"] > 0) & (st["it"] < 4 * nfmax + 4), body, st)
    return p._replace(fidx=st["fidx"], mp=st["mp"], nmap=st["nmap"]), st["hf"], st["he"], st["ne"]


def _attach(p: _Poly, wi, hf, he, ne, lower2, upper2):
    """Attach the faces joining vertex wi to the horizon edges; returns (polytope, any face
    whose attachFace returned 0)."""
    nfmax = p.ff.shape[0]
    nh = hf.shape[0]
    s = jnp.arange(nh, dtype=_I32)
    act = s < ne
    nes = jnp.maximum(ne, 1)
    hv = p.fi[hf, :3]
    a = jnp.take_along_axis(hv, he[:, None], 1)[:, 0]
    b = jnp.take_along_axis(hv, ((he + 1) % 3)[:, None], 1)[:, 0]
    newid = p.nf + s
    pv = p.V[:, :3]
    fv, d2, ret = _face_geom(jnp.broadcast_to(pv[wi], (nh, 3)), pv[b], pv[a], p.center)
    zero = jnp.any(act & (ret == 0))
    dst = jnp.where(act, newid, nfmax)
    rows = jnp.stack([jnp.full_like(a, wi), b, a, p.nf + (s - 1) % nes, hf, p.nf + (s + 1) % nes],
                     1)
    fi = p.fi.at[dst].set(rows, mode="drop")
    fi = fi.at[jnp.where(act, hf, nfmax), 3 + he].set(newid, mode="drop")
    ins = act & (ret >= lower2) & (ret <= upper2)
    pos = p.nmap + jnp.cumsum(ins.astype(_I32)) - 1
    mp = p.mp.at[jnp.where(ins, pos, nfmax)].set(newid, mode="drop")
    fidx = p.fidx.at[dst].set(jnp.where(ins, pos, -1), mode="drop")
    ff = p.ff.at[dst].set(jnp.concatenate([fv, d2[:, None]], 1), mode="drop")
    p = p._replace(fi=fi, ff=ff, fidx=fidx, mp=mp, nmap=p.nmap + jnp.sum(ins).astype(_I32),
                   nf=p.nf + ne)
    return p, zero


def _epa(pr, p: _Poly, warm, m1, m2, tol, kmax: int, discrete):
    """epa(): expand the polytope towards the face closest to the origin.

    Returns (face index or -1, polytope, warm)."""
    dt = p.ff.dtype
    maxl = _maxl(dt)
    nfmax, nvmax = p.ff.shape[0], p.V.shape[0]
    nh = nvmax + 4
    tol_e = jnp.where(discrete, MINVAL, tol)
    kk = min(kmax, 1000)
    st = dict(p=p, face=jnp.asarray(-1, _I32), upper=maxl, upper2=maxl,
              k=jnp.asarray(0, _I32), done=jnp.asarray(kk <= 0), warm=warm)

    def body(st):
        p, pface, k = st["p"], st["face"], st["k"]
        md = jnp.where(jnp.arange(nfmax) < p.nmap, p.ff[p.mp, 3], jnp.inf)
        j = jnp.argmin(md)
        found = md[j] < maxl
        face = jnp.where(found, p.mp[j], pface)
        lower2 = jnp.where(found, md[j], maxl)
        stop1 = (lower2 > st["upper2"]) | (face < 0)
        stop2 = ~stop1 & (lower2 <= 0)
        fs = jnp.maximum(face, 0)
        lower = jnp.sqrt(jnp.maximum(lower2, 0.0))
        fv = p.ff[fs, :3]
        w, warm_new = _epa_support(pr, fv, lower, st["warm"], m1, m2)
        wi = p.nv
        rep = discrete & jnp.any((jnp.arange(nvmax) < wi) & (p.V[:, 9] == w[9])
                                 & (p.V[:, 10] == w[10]))
        p = p._replace(V=p.V.at[jnp.minimum(wi, nvmax - 1)].set(w), nv=wi + 1)
        upper_k = _dot(fv, w[:3]) / jnp.where(lower > 0, lower, 1.0)
        upper = jnp.where(upper_k < st["upper"], upper_k, st["upper"])
        upper2 = upper * upper
        # MuJoCo 4.0 stops on this iteration's bound (not the running minimum): this is what
        # reproduces the reference binary's iteration counts
        conv = upper_k - lower < tol_e
        conv_null = conv & (k == 0) & (upper < lower - 1e-10)
        ph, hf, he, ne = _horizon(p, fs, w[:3], nh)
        few = ne < 3
        full = (ne > nfmax - ph.nf) | (ne > nh)
        pa, zero = _attach(ph, wi, hf, he, ne, lower2, upper2)
        stopped = stop1 | stop2
        go = ~stopped & ~conv & ~rep & ~few & ~full & ~zero
        null = ~stopped & (conv_null | (~conv & ~rep & (few | (~full & zero))))
        p_out = jax.tree.map(lambda a, b, c: jnp.where(stopped, a, jnp.where(go, b, c)),
                             st["p"], pa, p)
        return dict(p=p_out, face=jnp.where(stop1, pface, jnp.where(null, -1, face)),
                    upper=jnp.where(stopped, st["upper"], upper),
                    upper2=jnp.where(stopped, st["upper2"], upper2), k=k + 1,
                    done=~go | (pa.nmap == 0) | (k + 1 >= kk),
                    warm=jnp.where(stopped, st["warm"], warm_new))

    st = lax.while_loop(lambda st: ~st["done"], body, st)
    return st["face"], st["p"], st["warm"]


class _CCD(NamedTuple):
    """What mjc_ccd reports for one contact."""

    dist: jax.Array  # signed distance of the (inflated) objects; contact where < 0
    x1: jax.Array  # witness points
    x2: jax.Array
    epa: jax.Array  # the contact comes from EPA (`face` valid)
    face: jax.Array  # (3, 11) packed vertices of EPA's final face
    warm: jax.Array


def _ccd(pr: _Pair, tol, kmax: int, warm, cutoff=0.0) -> _CCD:
    """mjc_ccd: penetration (EPA), or with `cutoff` > 0 also distances up to it (beyond it
    `dist` is the largest float)."""
    dt = pr.center1.dtype
    m1, m2 = pr.margin1, pr.margin2
    z = jnp.zeros((), dt)
    special = pr.shrink1 | pr.shrink2
    if special is not False:
        fm1 = jnp.where(pr.shrink1, pr.radius1 + 0.5 * m1, 0.0)
        fm2 = jnp.where(pr.shrink2, pr.radius2 + 0.5 * m2, 0.0)
        xs = (jnp.array([True, False]), jnp.stack([jnp.where(pr.shrink1, 0.0, m1), m1]),
              jnp.stack([jnp.where(pr.shrink2, 0.0, m2), m2]),
              jnp.stack([cutoff + fm1 + fm2, cutoff + z]))

        def rnd(w, x):
            core, a, b, cut = x
            cut = jnp.where(special | ~core, cut, 0.0)
            out = _gjk(pr, core & special, a, b, cut, tol, kmax, w)
            # without a sphere or capsule the first pass does not exist in MuJoCo
            return jnp.where(core & ~special, w, out.warm), out

        _, outs = lax.scan(rnd, warm, xs)
        g0 = jax.tree.map(lambda x: x[0], outs)
        g = jax.tree.map(lambda x: x[1], outs)
        shallow = special & (g0.dist > tol)
        n = _normalize(g0.x2 - g0.x1)
        x1s, x2s = g0.x1 + fm1 * n, g0.x2 - fm2 * n
        ds = g0.dist - (fm1 + fm2)
        ds = jnp.where(ds > cutoff, _maxl(dt), ds)
    else:
        g = _gjk(pr, jnp.asarray(False), m1, m2, cutoff + z, tol, kmax, warm)
    nvmax, nfmax = 5 + kmax, max(6 * kmax, 6)
    discrete = pr.discrete1 & pr.discrete2 & (m1 == 0) & (m2 == 0)
    do_epa = (g.dist <= tol) & (g.nsimplex > 1) & ~g.separated
    poly, err, w = _polytope(pr, g, g.warm, m1, m2, nvmax, nfmax)
    face, poly, w = _epa(pr, poly, w, m1, m2, tol, kmax, discrete)
    ok = do_epa & ~err & (face >= 0)
    fs = jnp.maximum(face, 0)
    frec = poly.V[poly.fi[fs, :3]]
    lam = _tri_affine(frec[0, :3], frec[1, :3], frec[2, :3], poly.ff[fs, :3])
    x12 = frec[0, 3:9] * lam[0] + frec[1, 3:9] * lam[1] + frec[2, 3:9] * lam[2]
    dist = jnp.where(do_epa, jnp.where(ok, -jnp.sqrt(poly.ff[fs, 3]), 0.0), g.dist)
    x1 = jnp.where(ok, x12[:3], g.x1)
    x2 = jnp.where(ok, x12[3:], g.x2)
    warm = jnp.where(do_epa, w, g.warm)
    if special is not False:
        dist = jnp.where(shallow, ds, dist)
        x1 = jnp.where(shallow, x1s, x1)
        x2 = jnp.where(shallow, x2s, x2)
        ok = ~shallow & ok
        warm = jnp.where(shallow, g0.warm, warm)
    return _CCD(dist, x1, x2, ok, frec, warm)


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


def _pad_rows(x, n):
    return jnp.concatenate([x, jnp.zeros((n - x.shape[0],) + x.shape[1:], x.dtype)])


def _box_axis_normals(g, sign, axes):
    """World normals mat @ (sign * e_axis) for traced axes (exact, as MuJoCo's globalcoord)."""
    return jnp.where(sign[:, None] > 0, g.mat.T[axes], -g.mat.T[axes])


def _box_normals2(g, n):
    """boxNormals2: the box face whose normal is within mjFACE_TOL of n (found, normal, id)."""
    ln = _mul_t(g.mat, n)
    ln = ln * (1 / jnp.sqrt(_dot(ln, ln)))
    d = jnp.stack([ln[0], -ln[0], ln[1], -ln[1], ln[2], -ln[2]])
    hit = d > FACE_TOL
    i = jnp.argmax(hit).astype(_I32)
    nrm = _box_axis_normals(g, jnp.where(i % 2 == 0, 1, -1)[None], (i // 2)[None])[0]
    return jnp.any(hit), nrm, i


def _box_normals(g, dim, vi, dirn, nn: int):
    """boxNormals: candidate face normals of a box feature (corner ids vi, dimension dim)."""
    bits = jnp.stack([(vi & 1) != 0, (vi & 2) != 0, (vi & 4) != 0])  # (axis, vertex)
    use = jnp.arange(3)[None, :] < dim
    all_set = jnp.all(bits | ~use, 1)
    all_clr = jnp.all(~bits | ~use, 1)
    t = all_set.astype(_I32) - all_clr.astype(_I32)  # (3,) in {-1, 0, 1}
    c = jnp.sum(t != 0)
    axes = jnp.argsort(t == 0, stable=True)[:2].astype(_I32)
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
                        jnp.where(face_like, _pad_rows(feat, 3), _pad_rows(n2[None], 3)))
    ids = jnp.where(dim == 1, id_corner,
                    jnp.where(face_like, _pad_rows(fid, 3), _pad_rows(i2[None], 3)))
    count = jnp.where(dim == 1, 3, jnp.where(face_like, cnt_face, ok2.astype(_I32)))
    return _pad_rows(normals, nn), _pad_rows(ids, nn), count


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
    count = jnp.sum(sel).astype(_I32)
    normals = jax.vmap(lambda i: _mul(g.mat, D.poly_normal[i]))(jnp.maximum(ids, 0))
    normals = _pad_rows(normals, nn) if nn > dp else normals[:nn]
    ids = _pad_rows(ids, nn) if nn > dp else ids[:nn]
    return normals, ids, count


def _box_edges(g, dim, v, vi0, nn: int):
    """boxEdgeNormals: directions (and far ends) of the box edges at the feature."""
    s = g.size
    x = jnp.where(vi0 & 1, s[0], -s[0])
    y = jnp.where(vi0 & 2, s[1], -s[1])
    z = jnp.where(vi0 & 4, s[2], -s[2])
    loc = jnp.stack([jnp.stack([-x, y, z]), jnp.stack([x, -y, z]), jnp.stack([x, y, -z])])
    ends = jax.vmap(lambda l: _mul(g.mat, l) + g.pos)(loc)
    ends = jnp.where(dim == 2, _pad_rows(v[1:2], 3), ends)
    dirs = _normalize(ends - v[0])
    count = jnp.where(dim == 2, 1, jnp.where(dim == 1, 3, 0))
    return _pad_rows(dirs, nn), _pad_rows(ends, nn), count


def _mesh_edges(g, dim, v, vi0, nn: int):
    """meshEdgeNormals: directions to the preceding vertex in each polygon at the vertex."""
    D = g.data
    dp = D.vert_poly.shape[1]
    prev = D.vert_prev[vi0]
    ends = jax.vmap(lambda i: _mul(g.mat, D.vert[i]) + g.pos)(jnp.maximum(prev, 0))
    ends = jnp.where(dim == 2, jnp.broadcast_to(v[1], ends.shape), ends)
    dirs = _normalize(ends - v[0])
    count = jnp.where(dim == 2, 1, jnp.where(dim == 1, D.vert_npoly[vi0], 0))
    dirs = _pad_rows(dirs, nn) if nn > dp else dirs[:nn]
    ends = _pad_rows(ends, nn) if nn > dp else ends[:nn]
    return dirs, ends, count


def _box_face(g, idx, pv: int):
    loc = jnp.asarray(_BOX_FACES, g.size.dtype)[idx] * g.size
    return _pad_rows(jax.vmap(lambda l: _mul(g.mat, l) + g.pos)(loc), pv), jnp.asarray(4, _I32)


def _mesh_face(g, idx, pv: int):
    """meshFace: polygon vertices in reverse order (clockwise about the outward normal)."""
    D = g.data
    n = D.poly_nvert[idx]
    j = jnp.arange(D.poly_vert.shape[1])
    ids = D.poly_vert[idx, jnp.where(j < n, n - 1 - j, 0)]
    pts = jax.vmap(lambda i: _mul(g.mat, D.vert[i]) + g.pos)(jnp.maximum(ids, 0))
    return (_pad_rows(pts, pv) if pv > pts.shape[0] else pts), n


def _by_type(t, box_fn, mesh_fn, cyl_fn=None):
    """Dispatch on a box/mesh/cylinder geom type (static or traced)."""
    if isinstance(t, (int, np.integer)):
        return {BOX: box_fn, MESH: mesh_fn, CYLINDER: cyl_fn}[int(t)]()
    fns = [(BOX, box_fn), (MESH, mesh_fn)] + ([(CYLINDER, cyl_fn)] if cyl_fn else [])
    outs = [(tt, f()) for tt, f in fns]
    res = outs[-1][1]
    for tt, o in outs[-2::-1]:
        res = jax.tree.map(lambda x, y, tt=tt: jnp.where(t == tt, x, y), o, res)
    return res


# A cylinder's cap as MuJoCo 4.0 clips it: a 16-gon inscribed in the cap circle, first vertex
# on the local x axis, clockwise about the cap's outward normal.
_COS16 = np.cos(2 * np.pi * np.arange(16) / 16)
_SIN16 = np.sin(2 * np.pi * np.arange(16) / 16)


def _cyl_normals(g, dim, vi, nn: int):
    """cylinderNormals: the cap normal when the feature is a single cap's point set."""
    sgn = jnp.where(vi[0] != 0, -1.0, 1.0)
    n = g.mat[:, 2] * sgn
    return (_pad_rows(n[None], nn), _pad_rows(vi[:1], nn),
            (dim == 1).astype(_I32))


def _cyl_edges(g, dim, v, vi0, nn: int):
    """cylinderEdgeNormals: the side line through the feature's first point, towards the
    other cap, and its far end."""
    sgn = jnp.where(vi0 != 0, 1.0, -1.0)
    d = g.mat[:, 2] * sgn
    end = v[0] + d * (2 * g.size[1])
    return _pad_rows(d[None], nn), _pad_rows(end[None], nn), (dim <= 2).astype(_I32)


def _cyl_face(g, idx, pv: int):
    """cylinderFace: the cap polygon (idx 0: top, 1: bottom)."""
    dt = g.size.dtype
    sgn = jnp.where(idx != 0, -1.0, 1.0).astype(dt)
    r, h = g.size[0], g.size[1]
    x = jnp.asarray(_COS16, dt) * r
    y = jnp.asarray(-_SIN16, dt) * r * sgn
    loc = jnp.stack([x, y, jnp.broadcast_to(sgn * h, x.shape)], -1)
    pts = jax.vmap(lambda l: _mul(g.mat, l) + g.pos)(loc)
    return (_pad_rows(pts, pv) if pv > 16 else pts), jnp.asarray(16, _I32)


def _cross_exact(a, b):
    """Cross product rounded as in C: the optimization barrier keeps XLA from fusing the
    products into FMA instructions (the quadrilateral search compares near-equal areas)."""
    p = lax.optimization_barrier(jnp.stack([a[1] * b[2], a[2] * b[1], a[2] * b[0], a[0] * b[2],
                                            a[0] * b[1], a[1] * b[0]]))
    return jnp.stack([p[0] - p[1], p[2] - p[3], p[4] - p[5]])


def _area4(a, b, c, d):
    g = _cross_exact(d - a, b - d) + _cross_exact(c - b, a - c)
    sq = lax.optimization_barrier(g * g)
    return 0.5 * jnp.sqrt(sq[0] + sq[1] + sq[2])


def _polygon_quad(poly, npg):
    """polygonQuad: a quadrilateral of (locally) maximum area, MuJoCo's search order."""
    def nxt(i):
        return jnp.where(i == npg - 1, 0, i + 1)

    def area(a, b, c, d):
        return _area4(poly[a], poly[b], poly[c], poly[d])

    i0 = jnp.asarray(0, _I32)
    st = dict(a=i0, b=i0 + 1, c=i0 + 2, d=i0 + 3, m=area(0, 1, 2, 3),
              res=jnp.arange(4, dtype=_I32), stage=i0, it=i0)

    def body(st):
        a, b, c, d, stage = st["a"], st["b"], st["c"], st["d"], st["stage"]
        nb = jnp.where(stage == 2, nxt(b), b)
        nc = jnp.where(stage == 1, nxt(c), c)
        nd = jnp.where(stage == 0, nxt(d), d)
        cand = area(a, nb, nc, nd)
        # MuJoCo 4.0 does not let the last corner wrap around onto the first one
        up = (cand > st["m"]) & ~((stage == 0) & (nd == a))
        # no improvement in stage 0: move on to the next a, fixing coinciding pointers
        fb = b == a
        b2 = jnp.where(fb, nxt(b), b)
        fc = fb & (c == b2)
        c2 = jnp.where(fc, nxt(c), c)
        d2 = jnp.where(fc & (d == c2), nxt(d), d)
        adv = (stage == 0) & ~up
        new = dict(st)
        new["a"] = a + adv.astype(_I32)
        new["b"] = jnp.where(up, nb, jnp.where(adv, b2, b))
        new["c"] = jnp.where(up, nc, jnp.where(adv, c2, c))
        new["d"] = jnp.where(up, nd, jnp.where(adv, d2, d))
        new["m"] = jnp.where(up, cand, st["m"])
        new["res"] = jnp.where(up, jnp.stack([a, nb, nc, nd]), st["res"])
        new["stage"] = jnp.where(up, jnp.where(stage == 0, 1, stage),
                                 jnp.where(stage == 0, 0, (stage + 1) % 3)).astype(_I32)
        new["it"] = st["it"] + 1
        return new

    st = lax.while_loop(lambda st: (st["a"] < npg) & (st["it"] < 64 * poly.shape[0] ** 2),
                        body, st)
    return st["res"]


def _polygon_clip(C, nc, S, ns, pnorm, n, margin):
    """polygonClip: clip polygon S (ns vertices) by the planes through the edges of polygon C
    (nc) along direction pnorm, keep the points within `margin` of C's plane (normal n);
    returns (count, points (4, 3), dist (4,))."""
    pv = C.shape[0]
    q = max(2 * pv, S.shape[0] + pv)  # clipping a convex ns-gon by nc planes: <= ns + nc
    nxt = jnp.where(jnp.arange(pv) + 1 < nc, jnp.arange(pv) + 1, 0)
    v1, v2 = C, C[nxt]
    pn = _normalize(_cross(v2 - v1, (v1 + pnorm) - v1))
    pd = _dot(pn, v1)
    poly0 = _pad_rows(S, q) if q > S.shape[0] else S[:q]

    def clip(e, carry):
        poly, npg = carry
        i = jnp.arange(q)
        P = poly
        Q = poly[jnp.where(i + 1 < npg, i + 1, 0)]
        PQ = Q - P
        in1 = _dot(P - C[e], pn[e]) > -MINVAL
        in2 = _dot(Q - C[e], pn[e]) > -MINVAL
        tmp = _dot(pn[e], PQ)
        t = (pd[e] - _dot(pn[e], P)) / jnp.where(tmp != 0, tmp, 1.0)
        inter = (in1 ^ in2) & (tmp != 0) & (t >= 0) & (t <= 1)
        cnt = jnp.where(i < npg, inter.astype(_I32) + in2.astype(_I32), 0)
        off = jnp.cumsum(cnt) - cnt
        out = jnp.zeros_like(poly)
        out = out.at[jnp.where(cnt >= 1, off, q)].set(
            jnp.where(inter[:, None], P + t[:, None] * PQ, Q), mode="drop")
        out = out.at[jnp.where(cnt == 2, off + 1, q)].set(Q, mode="drop")
        active = e < nc
        return (jnp.where(active, out, poly),
                jnp.where(active, jnp.minimum(jnp.sum(cnt), q), npg).astype(_I32))

    poly, npg = lax.fori_loop(0, pv, clip, (poly0, ns.astype(_I32)))
    # keep the points within the margin of the clipping face
    keep = (jnp.arange(q) < npg) & (_dot(poly - C[0], n) <= margin)
    poly = poly[jnp.argsort(~keep, stable=True)]
    npg = jnp.sum(keep).astype(_I32)
    # more than four points: a maximum-area quadrilateral
    quad = _polygon_quad(poly, npg)
    # the clipped feature is an edge: its two most distant points
    i, j = jnp.meshgrid(jnp.arange(q), jnp.arange(q), indexing="ij")
    dd = _dot(poly[j] - poly[i], poly[j] - poly[i])
    dd = jnp.where((i < j) & (j < npg), dd, -1.0).ravel()
    k = jnp.argmax(dd)
    far = jnp.stack([k // q, k % q, 0, 0]).astype(_I32)
    use_quad = npg > 4
    use_far = ~use_quad & (ns == 2) & (npg > 2)
    sel = jnp.where(use_quad, quad, jnp.where(use_far, far, jnp.arange(4, dtype=_I32)))
    count = jnp.where(use_quad, 4, jnp.where(use_far, 2, jnp.minimum(npg, 4)))
    count = jnp.where(nc < 3, 0, count)
    v = poly[sel]
    return count, v, _dot(v - C[0], n)


def _simplex_dim(vi, v):
    """simplexDim: number of distinct vertices of a face feature, duplicates moved last."""
    same01, same02, same12 = vi[0] == vi[1], vi[0] == vi[2], vi[1] == vi[2]
    dim = jnp.where(same01, jnp.where(same02, 1, 2), jnp.where(same02 | same12, 2, 3))
    vi = jnp.where(same01 & ~same02, vi.at[1].set(vi[2]), vi)
    v = jnp.where(same01 & ~same02, v.at[1].set(v[2]), v)
    return dim.astype(_I32), vi, v


def _cyl_raw(g, pts, vi, margin):
    """A cylinder's own support points from EPA's points `pts` (which carry the margin
    inflation margin/2 * d: it keeps the local xy direction, so the rim point is recovered)."""
    def one(p, cap):
        loc = _mul_t(g.mat, p - g.pos)
        n2 = loc[0] * loc[0] + loc[1] * loc[1]
        ok = n2 > MINVAL2
        scl = jnp.where(ok, g.size[0] / jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)
        raw = jnp.stack([loc[0] * scl, loc[1] * scl, jnp.where(cap == 0, g.size[1], -g.size[1])])
        return _mul(g.mat, raw) + g.pos
    return jnp.where(margin > 0, jax.vmap(one)(pts, vi), pts)


def _vertices(t, g, vi, pts, margin):
    """World positions of box corners (index bits) or mesh vertices; a cylinder's are EPA's
    points `pts` without the margin inflation."""
    def box():
        sgn = jnp.stack([(vi & 1) != 0, (vi & 2) != 0, (vi & 4) != 0], 1)
        return jax.vmap(lambda l: _mul(g.mat, l) + g.pos)(jnp.where(sgn, g.size, -g.size))

    def mesh():
        if g.data is None:
            return pts
        return jax.vmap(lambda i: _mul(g.mat, g.data.vert[i]) + g.pos)(jnp.maximum(vi, 0))

    return _by_type(t, box, mesh, lambda: _cyl_raw(g, pts, vi, margin))


class _Multi(NamedTuple):
    applied: jax.Array  # the contacts below replace EPA's
    count: jax.Array
    dist: jax.Array  # (4,) signed distances
    pos: jax.Array  # (4, 3)
    normal: jax.Array  # (3,) from geom 1 to geom 2


def _multicontact(t1, g1, t2, g2, frec, x1, x2, margin) -> _Multi:
    """Contacts of two aligned flat features of box or mesh geoms (MuJoCo 4.0's multicontact).

    Features come from the vertices of EPA's final face. Against a face of geom 2, the
    face (or edge) of geom 1 is clipped and its points kept; against a face of geom 1, an
    edge of geom 2 is clipped. Each point is paired with its projection on the clipping
    face; points within `margin` of it are kept (MuJoCo 4.0 keeps near points with a
    positive distance when the pair has a margin)."""
    dt = g1.pos.dtype
    dps = [g.data.vert_poly.shape[1] for g in (g1, g2) if g.data is not None]
    pvs = [g.data.poly_vert.shape[1] for g in (g1, g2) if g.data is not None]
    cyl = _is(t1, CYLINDER) is not False or _is(t2, CYLINDER) is not False
    nn, pv = max([3] + dps), max([4] + pvs + ([16] if cyl else []))
    vi1, vi2 = frec[:, 9].astype(_I32), frec[:, 10].astype(_I32)
    # the feature's vertices themselves (EPA's points carry the margin inflation)
    dim1, vi1, v1 = _simplex_dim(vi1, _vertices(t1, g1, vi1, frec[:, 3:6], margin))
    dim2, vi2, v2 = _simplex_dim(vi2, _vertices(t2, g2, vi2, frec[:, 6:9], margin))
    dirn = x2 - x1
    n1, id1, nn1 = _by_type(t1, lambda: _box_normals(g1, dim1, vi1, dirn * -1, nn),
                            lambda: _mesh_normals(g1, dim1, vi1, nn),
                            lambda: _cyl_normals(g1, dim1, vi1, nn))
    n2, id2, nn2 = _by_type(t2, lambda: _box_normals(g2, dim2, vi2, dirn, nn),
                            lambda: _mesh_normals(g2, dim2, vi2, nn),
                            lambda: _cyl_normals(g2, dim2, vi2, nn))
    ar = jnp.arange(nn)
    # aligned faces: first (i, j) with opposite normals
    dots = jnp.sum(n1[:, None, :] * n2[None, :, :], -1)
    al = (dots < -FACE_TOL) & (ar[:, None] < nn1) & (ar[None, :] < nn2)
    k = jnp.argmax(al.ravel())
    fi, fj = k // nn, k % nn
    aligned = jnp.any(al)
    # edge-face: an edge of one geom perpendicular to a face normal of the other

    def edge_face(ed, ne, fn, nf):
        pe = (jnp.abs(jnp.sum(fn[:, None, :] * ed[None, :, :], -1)) < EDGE_TOL) & (
            ar[:, None] < nf) & (ar[None, :] < ne)
        k2 = jnp.argmax(pe.ravel())
        return jnp.any(pe), k2 // nn, k2 % nn  # found, face index, edge index

    ed1, end1, ne1 = _by_type(t1, lambda: _box_edges(g1, dim1, v1, vi1[0], nn),
                              lambda: _mesh_edges(g1, dim1, v1, vi1[0], nn),
                              lambda: _cyl_edges(g1, dim1, v1, vi1[0], nn))
    ed2, end2, ne2 = _by_type(t2, lambda: _box_edges(g2, dim2, v2, vi2[0], nn),
                              lambda: _mesh_edges(g2, dim2, v2, vi2[0], nn),
                              lambda: _cyl_edges(g2, dim2, v2, vi2[0], nn))
    ok1, f1, e1 = edge_face(ed1, ne1, n2, nn2)
    ok2, f2, e2 = edge_face(ed2, ne2, n1, nn1)
    edgecon1 = ~aligned & (dim1 < 3) & ok1
    edgecon2 = ~aligned & ~edgecon1 & (dim2 < 3) & ok2
    # clipping face (of geom 2 unless an edge of geom 2 meets a face of geom 1)
    fidx2 = jnp.where(edgecon1, id2[f1], id2[fj])
    fidx1 = jnp.where(edgecon2, id1[f2], id1[fi])
    face1, nface1 = _by_type(t1, lambda: _box_face(g1, fidx1, pv), lambda: _mesh_face(g1, fidx1, pv),
                             lambda: _cyl_face(g1, fidx1, pv))
    face2, nface2 = _by_type(t2, lambda: _box_face(g2, fidx2, pv), lambda: _mesh_face(g2, fidx2, pv),
                             lambda: _cyl_face(g2, fidx2, pv))
    on2 = edgecon2  # the clipped points lie on geom 2
    C = jnp.where(on2, face1, face2)
    nc = jnp.where(on2, nface1, nface2)
    edge = jnp.where(edgecon1, _pad_rows(jnp.stack([v1[0], end1[e1]]), pv),
                     _pad_rows(jnp.stack([v2[0], end2[e2]]), pv))
    S = jnp.where(edgecon1 | edgecon2, edge, face1)
    ns = jnp.where(edgecon1 | edgecon2, 2, nface1)
    nrm = jnp.where(on2, n1[f2], jnp.where(edgecon1, n2[f1], n2[fj]))
    # face against face: the clipping planes are perpendicular to the clipped face
    pnorm = jnp.where(aligned, n1[fi] * -1, nrm)
    count, v, dist = _polygon_clip(C, nc, S, ns, pnorm, nrm, margin)
    # contact points halfway to the clipping face, normal from geom 1 to geom 2
    pos = v - nrm * (0.5 * dist)[:, None]
    normal = jnp.where(on2, nrm, nrm * -1)
    polys_ok = True
    for t, g in ((t1, g1), (t2, g2)):
        if g.data is not None:
            polys_ok = polys_ok & (jnp.logical_not(_is(t, MESH)) | (g.data.npoly > 0))
    applied = polys_ok & (aligned | edgecon1 | edgecon2) & (count > 0)
    return _Multi(applied, count.astype(_I32), dist.astype(dt), pos.astype(dt),
                  normal.astype(dt))


# ------------------------------------------------------------------------------ mjc_Convex


class CCDOptions(NamedTuple):
    """The options of `model.opt` that the convex collisions read."""

    iterations: int = 35  # ccd_iterations (static)
    tolerance: Any = 1e-6  # ccd_tolerance
    multiccd: bool = True  # not (disableflags & MULTICCD)
    nativeccd: bool = True  # not (disableflags & NATIVECCD); libccd (False) is not implemented

    @staticmethod
    def of(opt) -> CCDOptions:
        """From a model's Option (`model.opt`)."""
        flags = int(opt.disableflags)
        return CCDOptions(int(opt.ccd_iterations), opt.ccd_tolerance,
                          not flags & DisableBit.MULTICCD, not flags & DisableBit.NATIVECCD)


def max_contacts(t1: int, t2: int, opt: CCDOptions | None = None) -> int:
    """MuJoCo's mj_maxContact for the pairs handled here (margin-independent upper bound)."""
    opt = opt or CCDOptions()
    if PLANE in (t1, t2):
        return 3 if MESH in (t1, t2) else 1
    if {t1, t2} & {SPHERE, ELLIPSOID} or not opt.multiccd:
        return 1
    return 5


def _geom_pair(t1, g1, t2, g2, margin) -> _Pair:
    def sup(t, g):
        return lambda d, w, core: _support(t, g, d, w, core)

    return _Pair(sup(t1, g1), sup(t2, g2), g1.pos, g2.pos, margin, margin,
                 _is(t1, SPHERE, CAPSULE), _is(t2, SPHERE, CAPSULE), g1.size[0], g2.size[0],
                 _is(t1, BOX, MESH), _is(t2, BOX, MESH))


def _as_geom(g: Geom, dtype) -> Geom:
    data = None if g.data is None else jax.tree.map(jnp.asarray, g.data)
    return Geom(jnp.asarray(g.pos, dtype), jnp.asarray(g.mat, dtype),
                jnp.asarray(g.size, dtype), data)


def _envelope(t1, g1, t2, g2, normal, dist, pos):
    """Attaches gradients to a contact: support points at the frozen normal.

    At the solution the distance is -(s1(n) - s2(-n)).n, whose derivative with n held
    fixed is the derivative of the distance (envelope theorem); the value stays MuJoCo's.
    """
    n = lax.stop_gradient(normal)
    w = jnp.asarray(-1, _I32)
    p1 = _support(t1, g1, n, w, False)[0]
    p2 = _support(t2, g2, n * -1, w, False)[0]
    e = -_dot(p1 - p2, n)
    q = (p1 + p2) * 0.5
    return (lax.stop_gradient(dist) + (e - lax.stop_gradient(e)),
            lax.stop_gradient(pos) + (q - lax.stop_gradient(q)))


def convex(t1, t2, g1: Geom, g2: Geom, margin, opt: CCDOptions | None = None) -> Contacts:
    """mjc_Convex for geom types t1 <= t2: max_contacts(t1, t2, opt) slots.

    t1 and t2 are usually Python ints; traced int32 types make one function for several
    pairs (then both geoms carry a MeshData and there are 5 slots, or 1 without multiCCD).
    MuJoCo 4.0 has no perturbation (multiCCD) pass any more: the extra contacts of box and
    mesh pairs come from clipping aligned faces and edges, with or without a margin.
    """
    opt = opt or CCDOptions()
    dt = jnp.result_type(g1.pos, g2.pos, float)
    g1, g2 = _as_geom(g1, dt), _as_geom(g2, dt)
    margin = jnp.asarray(margin, dt)
    s1, s2 = jax.tree.map(lax.stop_gradient, (g1, g2))
    ms = lax.stop_gradient(margin)
    tol = lax.stop_gradient(jnp.asarray(opt.tolerance, dt))
    static = isinstance(t1, (int, np.integer)) and isinstance(t2, (int, np.integer))
    nslot = max_contacts(t1, t2, opt) if static else (5 if opt.multiccd else 1)
    c = _ccd(_geom_pair(t1, s1, t2, s2, ms), tol, int(opt.iterations), -jnp.ones(2, _I32))
    valid = c.dist < 0
    normal = _normalize(c.x1 - c.x2)
    dist, pos = _envelope(t1, g1, t2, g2, normal, ms + c.dist, (c.x1 + c.x2) * 0.5)
    z = jnp.zeros((nslot, 3), dt)
    base = Contacts(_pad_rows(dist[None], nslot), _pad_rows(pos[None], nslot),
                    _pad_rows(normal[None], nslot), z, _pad_rows(valid[None], nslot))
    multi_types = opt.multiccd & _is(t1, BOX, MESH, CYLINDER) & _is(t2, BOX, MESH, CYLINDER)
    if nslot == 1 or multi_types is False:
        return base
    # flat-face contacts, recomputed from the differentiable geoms
    mc = _multicontact(t1, g1, t2, g2, lax.stop_gradient(c.face), c.x1, c.x2, margin)
    use = multi_types & valid & c.epa & mc.applied
    j = jnp.arange(nslot)
    mnrm = lax.stop_gradient(jnp.broadcast_to(mc.normal, (nslot, 3)))
    multi = Contacts(_pad_rows(mc.dist, nslot), _pad_rows(mc.pos, nslot), mnrm, z,
                     j < mc.count)
    return jax.tree.map(lambda a, b: jnp.where(jnp.reshape(use, (1,) * a.ndim), a, b),
                        multi, base)


# ------------------------------------------------------------------------- mjc_PlaneConvex


def _ccd_support(t, g: Geom, d):
    """mjccd_support (libccd's support, as mjc_PlaneConvex uses it): (point, vertex id).

    Meshes with at least 10 vertices and a convex-hull graph hill-climb from graph vertex 0,
    others search all vertices (the first of equal maxima)."""
    ld = _mul_t(g.mat, d)
    if t == ELLIPSOID:
        r = _normalize(ld * g.size) * g.size
        return _mul(g.mat, r) + g.pos, jnp.asarray(-1, _I32)
    D = g.data
    v = D.vert
    vd = ld[0] * v[:, 0] + ld[1] * v[:, 1] + ld[2] * v[:, 2]
    best = jnp.argmax(jnp.where(jnp.arange(v.shape[0]) < D.nvert, vd, -jnp.inf)).astype(_I32)
    adj = D.graph_adj
    glob = D.graph_global

    def climb(st):
        ib, tmp, _ = st
        nb = adj[ib]
        vn = jnp.where(nb >= 0, vd[glob[jnp.maximum(nb, 0)]], -jnp.inf)
        j = jnp.argmax(vn)
        ch = vn[j] > tmp
        return jnp.where(ch, nb[j], ib), jnp.where(ch, vn[j], tmp), ch

    hill = (D.graph_nvert > 0) & (D.nvert >= 10)
    ib, _, _ = lax.while_loop(lambda st: st[2], climb,
                              (jnp.asarray(0, _I32), vd[glob[0]], hill))
    gid = jnp.where(hill, glob[ib], best)
    return _mul(g.mat, v[gid]) + g.pos, gid


def plane_convex(t2: int, g1: Geom, g2: Geom, margin) -> Contacts:
    """mjc_PlaneConvex: plane (g1) against an ellipsoid (1 slot) or a mesh (4 slots).

    Mesh, as MuJoCo 4.0 does it (measured against it; its source is not public): the deepest
    vertex (libccd's support) is the first contact; of the mesh polygons through it, the one
    whose outward normal points most into the plane is walked from the vertex after it, in
    steps of max(1, n // 4) for an n-gon, and up to three of the vertices visited that lie
    within the margin of the plane and below the mesh centre along the normal are added, in
    that order. Exact for polygons of up to four vertices (triangulated hulls, boxes); for
    larger polygons MuJoCo 4.0 sometimes keeps other vertices.
    """
    dt = jnp.result_type(g1.pos, g2.pos, float)
    g1, g2 = _as_geom(g1, dt), _as_geom(g2, dt)
    margin = jnp.asarray(margin, dt)
    n = g1.mat[:, 2]
    supp, gid = _ccd_support(t2, g2, n * -1)
    dist = _dot(n, supp - g1.pos)
    pos = supp + n * (-0.5 * dist)
    z = jnp.zeros(3, dt)
    first = Contacts(dist[None], pos[None], n[None], z[None], (dist <= margin)[None])
    if t2 != MESH:
        return first
    D = g2.data
    v = D.vert
    # the polygon through the deepest vertex facing the plane most
    polys = D.vert_poly[gid]  # (Dp,)
    pvalid = polys >= 0
    pn = jax.vmap(lambda q: _mul(g2.mat, q))(D.poly_normal[jnp.maximum(polys, 0)])
    score = jnp.where(pvalid, pn @ (n * -1), -jnp.inf)
    pid = jnp.maximum(polys[jnp.argmax(score)], 0)
    pverts = D.poly_vert[pid]  # (Pv,)
    nv_poly = jnp.maximum(D.poly_nvert[pid], 1)
    at = jnp.argmax(pverts == gid)
    stride = jnp.maximum(1, nv_poly // 4)
    k = jnp.arange(pverts.shape[0])
    j = 1 + k * stride
    cand = pverts[jnp.where(j < nv_poly, (at + j) % nv_poly, 0)]
    cand = jnp.maximum(cand, 0)
    pnt = jax.vmap(lambda q: _mul(g2.mat, q) + g2.pos)(v[cand])
    d2 = (pnt - g1.pos) @ n
    below_centre = (pnt - g2.pos) @ n < 0
    ok = (j < nv_poly) & (d2 < margin) & below_centre & pvalid.any() & (dist <= margin)
    ok = ok & (jnp.cumsum(ok) <= 3)
    order = jnp.argsort(~ok, stable=True)[:3]
    pnt, d2, got = pnt[order], d2[order], ok[order]
    if order.shape[0] < 3:  # polygons are padded to at least 4 vertices; keep 3 slots
        pad = 3 - order.shape[0]
        pnt = jnp.concatenate([pnt, jnp.zeros((pad, 3), dt)])
        d2 = jnp.concatenate([d2, jnp.zeros(pad, dt)])
        got = jnp.concatenate([got, jnp.zeros(pad, bool)])
    p2 = pnt + n * (-0.5 * d2)[:, None]
    return Contacts.concat([first, Contacts(d2, p2, jnp.broadcast_to(n, (3, 3)),
                                            jnp.zeros((3, 3), dt), got)])


# ------------------------------------------------------------------------------ the table

_CONVEX_PAIRS = ((SPHERE, ELLIPSOID), (SPHERE, MESH), (CAPSULE, ELLIPSOID), (CAPSULE, CYLINDER),
                 (CAPSULE, MESH), (ELLIPSOID, ELLIPSOID), (ELLIPSOID, CYLINDER),
                 (ELLIPSOID, BOX), (ELLIPSOID, MESH), (CYLINDER, CYLINDER), (CYLINDER, BOX),
                 (CYLINDER, MESH), (BOX, MESH), (MESH, MESH))


def functions(opt=None) -> dict:
    """{(type1, type2): (fn(g1, g2, margin) -> Contacts, K)} for the pairs MuJoCo sends to
    mjc_Convex and mjc_PlaneConvex; `opt` is a model's Option (MuJoCo's defaults if None)."""
    o = CCDOptions() if opt is None else CCDOptions.of(opt)

    def cvx(t1, t2):
        return lambda g1, g2, margin: convex(t1, t2, g1, g2, margin, o)

    def pln(t2):
        return lambda g1, g2, margin: plane_convex(t2, g1, g2, margin)

    table = {(a, b): (cvx(a, b), max_contacts(a, b, o)) for a, b in _CONVEX_PAIRS}
    table[(PLANE, ELLIPSOID)] = (pln(ELLIPSOID), 1)
    table[(PLANE, MESH)] = (pln(MESH), 4)
    return table


FUNCTIONS = functions()


def dummy_mesh_data(like: MeshData) -> MeshData:
    """A MeshData row shaped like `like` (one row), for primitives in traced-type calls."""
    return jax.tree.map(lambda x: jnp.zeros_like(x), like)


def penetration(support1: Callable, support2: Callable, center1, center2, margin1, margin2,
                *, iterations: int = 35, tolerance=1e-6, discrete1=False, discrete2=False,
                radius1=None, radius2=None, core1=None, core2=None):
    """Generic entry to MuJoCo's native CCD (mjc_ccd for one contact).

    support_i(d) -> (point, index) is the support point of object i in unit direction d
    (index: a vertex id for polytopes, used to detect repeated vertices, else -1); objects
    are inflated by margin_i / 2 when margin_i > 0 (MuJoCo's obj->margin). A sphere or a
    capsule passes radius_i and core_i(d) -> point (its centre or segment): MuJoCo shrinks it
    first and inflates the result. discrete_i marks polytopes (box, mesh, height-field prism).

    Returns (dist, x1, x2, found): the signed distance of the inflated objects (a contact
    where negative, i.e. `found`) and the witness points; contact pos = (x1 + x2) / 2,
    normal = normalize(x1 - x2).
    """
    c1, c2 = jnp.asarray(center1), jnp.asarray(center2)
    dt = jnp.result_type(c1, c2, float)

    def wrap(sup, core):
        def f(d, w, use_core):
            p, i = sup(d)
            if core is not None:
                p = jnp.where(use_core, core(d), p)
            return p, jnp.asarray(i, _I32), w
        return f

    z = jnp.zeros((), dt)
    pr = _Pair(wrap(support1, core1), wrap(support2, core2), c1.astype(dt), c2.astype(dt),
               jnp.asarray(margin1, dt), jnp.asarray(margin2, dt), radius1 is not None,
               radius2 is not None, z if radius1 is None else jnp.asarray(radius1, dt),
               z if radius2 is None else jnp.asarray(radius2, dt), bool(discrete1),
               bool(discrete2))
    c = _ccd(pr, jnp.asarray(tolerance, dt), int(iterations), -jnp.ones(2, _I32))
    return c.dist, c.x1, c.x2, c.dist < 0
