"""MuJoCo's native convex collision core: geom support functions, GJK and EPA (mjc_ccd).

The algorithms follow MuJoCo 4.0 step by step (iteration rules, tie breaks, polytope
bookkeeping); see `jaxsim.collision.convex` for where 4.0 departs from the 3.x sources and
for how gradients pass. Support functions per geom type (`support`, with MuJoCo's warm
start for meshes); `_gjk` (one `lax.while_loop`); `_polytope` + `_epa` (fixed-size vertex,
face, map and horizon buffers; the horizon is a depth-first search on an explicit stack);
`ccd` (mjc_ccd, sphere and capsule shrunk to a point or segment first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim.collision.common import Geom
from jaxsim.types import GeomType

PLANE, SPHERE, CAPSULE, ELLIPSOID = (int(GeomType.PLANE), int(GeomType.SPHERE),
                                     int(GeomType.CAPSULE), int(GeomType.ELLIPSOID))
CYLINDER, BOX, MESH = int(GeomType.CYLINDER), int(GeomType.BOX), int(GeomType.MESH)

MINVAL = 1e-15  # mjMINVAL
MINVAL2 = 1e-30
FACE_TOL = 0.996  # mjFACE_TOL
EDGE_TOL = 0.0888  # mjEDGE_TOL

I32 = jnp.int32


def _maxl(dtype):
    """mjMAX_LIMIT (DBL_MAX) in the working precision."""
    return jnp.asarray(jnp.finfo(dtype).max, dtype)


# -------------------------------------------------------------------- small vector helpers
# Written component by component in MuJoCo's order of operations so that rounding matches.


def dot(a, b):
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def cross(a, b):
    return jnp.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                      a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                      a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], -1)


def mul(m, v):
    """m @ v."""
    return m[:, 0] * v[0] + m[:, 1] * v[1] + m[:, 2] * v[2]


def mul_t(m, v):
    """m.T @ v."""
    return m[0] * v[0] + m[1] * v[1] + m[2] * v[2]


def _norm(v):
    return jnp.sqrt(dot(v, v))


def normalize(v):
    """mju_normalize3: unit vector, (1, 0, 0) below mjMINVAL; safe to differentiate."""
    n2 = dot(v, v)
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
    # polygon normals: the compiler's (mesh_polynormal, from the double-precision vertices
    # as MuJoCo computes them; the float32 mesh_vert are not exactly coplanar)
    pidx = np.full(st["poly_nvert"].shape, -1, np.int64)
    for k, m in enumerate(meshes):
        pidx[k, :len(m["polys"])] = int(model.mesh_polyadr[mesh_ids[k]]) + np.arange(
            len(m["polys"]))
    alln = jnp.asarray(model.mesh_polynormal).reshape(-1, 3)
    if alln.shape[0] == 0:
        alln = jnp.zeros((1, 3), vert.dtype)
    xaxis = jnp.zeros(3, vert.dtype).at[0].set(1.0)
    pnrm = jnp.where((pidx >= 0)[..., None], alln[np.maximum(pidx, 0)].astype(vert.dtype),
                     xaxis)
    i32 = {k: jnp.asarray(v) for k, v in st.items() if k != "vidx"}
    return MeshData(vert=vert, rbound=rbound, poly_normal=pnrm, **i32)


# ------------------------------------------------------------------------ support functions
# Geom types are Python ints (the usual, specialised case), traced int32 scalars (one
# compiled function for several pair types; every geom then carries a MeshData, a dummy one
# for primitives, see `dummy_mesh_data`) or TypeOf (traced among known types).

_PRIMS = (SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH)


@jax.tree_util.register_pytree_node_class
class TypeOf:
    """A traced geom type known to be one of `options` (static): the type dispatch
    (`is_type`, `support`, the flat-feature functions) is compiled for those types only."""

    def __init__(self, value, options):
        self.value = value
        self.options = tuple(sorted(int(o) for o in options))

    def tree_flatten(self):
        return (self.value,), self.options

    @classmethod
    def tree_unflatten(cls, options, children):
        return cls(children[0], options)


def type_options(t) -> tuple | None:
    """The geom types `t` may be: (t,) for a static type, the options of a TypeOf, None for
    a bare traced type (any)."""
    if isinstance(t, (int, np.integer)):
        return (int(t),)
    if isinstance(t, TypeOf):
        return t.options
    return None


def is_type(t, *types):
    """t in types: a Python bool when decided statically, a traced bool otherwise."""
    opts = type_options(t)
    if opts is not None:
        inter = [o for o in opts if o in types]
        if not inter:
            return False
        if len(inter) == len(opts):
            return True
        return jnp.isin(t.value, jnp.asarray(inter, I32))
    return jnp.isin(t, jnp.asarray(types, I32))


def support(t, g: Geom, d, warm, core):
    """MuJoCo's native support point of geom type `t` in unit direction d (no margin).

    Returns (point, index, warm): index is the box corner or mesh vertex id (-1 otherwise),
    warm the mesh's cached vertex (MuJoCo starts its search there and keeps it on ties).
    `core` shrinks a sphere to its centre and a capsule to its segment.
    """
    if not isinstance(t, (int, np.integer)):
        opts = type_options(t) or _PRIMS
        ts = [tt for tt in opts if tt != MESH or g.data is not None]
        outs = [support(tt, g, d, warm, core) for tt in ts]
        if len(outs) == 1:
            return outs[0]
        tv = t.value if isinstance(t, TypeOf) else t
        sel = [tv == tt for tt in ts]
        return tuple(jnp.select(sel, [o[i] for o in outs], outs[0][i]) for i in range(3))
    pos, mat, size = g.pos, g.mat, g.size
    m1 = jnp.asarray(-1, I32)
    if t == SPHERE:
        return jnp.where(core, pos, size[0] * d + pos), m1, warm
    if t == CAPSULE:
        dz = mat[0, 2] * d[0] + mat[1, 2] * d[1] + mat[2, 2] * d[2]
        line = mat[:, 2] * jnp.where(dz >= 0, size[1], -size[1]) + pos
        ld = mul_t(mat, d)
        ls = (ld * size[0]).at[2].add(jnp.where(ld[2] >= 0, size[1], -size[1]))
        return jnp.where(core, line, mul(mat, ls) + pos), m1, warm
    ld = mul_t(mat, d)
    if t == ELLIPSOID:
        ls = ld * size
        n2 = ls[0] * ls[0] + ls[1] * ls[1] + ls[2] * ls[2]
        ok = n2 >= MINVAL2
        inv = 1 / jnp.sqrt(jnp.where(ok, n2, 1.0))
        p = mul(mat, ls * (inv * size)) + pos
        return jnp.where(ok, p, mat[:, 0] * size[0] + pos), m1, warm
    if t == CYLINDER:
        n2 = ld[0] * ld[0] + ld[1] * ld[1]
        ok = n2 >= MINVAL2
        scl = jnp.where(ok, size[0] / jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)
        ls = jnp.stack([scl * ld[0], scl * ld[1], jnp.where(ld[2] >= 0, size[1], -size[1])])
        cap = jnp.where(ld[2] >= 0, 0, 1).astype(I32)  # the cap the point lies on
        return mul(mat, ls) + pos, cap, warm
    if t == BOX:
        up = ld >= 0
        ls = jnp.where(up, size, -size)
        idx = up[0].astype(I32) + 2 * up[1].astype(I32) + 4 * up[2].astype(I32)
        return mul(mat, ls) + pos, idx, warm
    if t == MESH:
        v = g.data.vert
        vd = ld[0] * v[:, 0] + ld[1] * v[:, 1] + ld[2] * v[:, 2]
        best = jnp.argmax(vd).astype(I32)
        keep = (warm >= 0) & (vd[jnp.maximum(warm, 0)] >= vd[best])
        i = jnp.where(keep, warm, best)
        return mul(mat, v[i]) + pos, i, i
    raise ValueError(f"no support function for geom type {t}")


# A vertex of the Minkowski difference is packed in one row of 11 numbers:
# [v1 - v2 (3), point on geom 1 (3), point on geom 2 (3), index 1, index 2].
_NREC = 11


class Pair(NamedTuple):
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


def _msupport(pr: Pair, d, warm, core, m1, m2):
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
    scl = -(dot(v2, diff) / dot(diff, diff))
    return v2 + scl[..., None] * diff


def _project_plane(v1, v2, v3):
    """projectOriginPlane: (projection of the origin, failed)."""
    d21, d31, d32 = v2 - v1, v3 - v1, v3 - v2
    n1 = cross(d32, d21)
    nv1, nn1 = dot(n1, v2), dot(n1, n1)
    n2 = cross(d21, d31)
    nv2, nn2 = dot(n2, v1), dot(n2, n2)
    n3 = cross(d31, d32)
    nv3, nn3 = dot(n3, v3), dot(n3, n3)
    ok1 = (nv1 != 0) & (nn1 > MINVAL)
    ok2 = (nv2 != 0) & (nn2 > MINVAL)
    r1 = n1 * (nv1 / nn1)[..., None]
    r2 = n2 * (nv2 / nn2)[..., None]
    r3 = n3 * (nv3 / nn3)[..., None]
    res = jnp.where(ok1[..., None], r1, jnp.where(ok2[..., None], r2, r3))
    fail = (nn1 == 0) | (~ok1 & (nn2 == 0))
    return jnp.where(fail[..., None], 0.0, res), fail


def _s1d(s1, s2):
    """Barycentric coordinates (..., 2) of the origin's projection on segments s1 s2, and
    that closest point itself (..., 3): the projection, or s2 when it falls outside."""
    p = _project_line(s1, s2)
    mu = s1 - s2
    i = jnp.where(jnp.abs(mu[..., 1]) >= jnp.abs(mu[..., 0]), 1, 0)
    i = jnp.where(jnp.abs(mu[..., 2]) >= jnp.abs(_sel3(i, mu)), 2, i)
    mu_max = _sel3(i, mu)
    c1 = _sel3(i, p) - _sel3(i, s2)
    c2 = _sel3(i, s1) - _sel3(i, p)
    same = _same_sign(mu_max, c1) & _same_sign(mu_max, c2)
    lam = jnp.stack([jnp.where(same, c1 / mu_max, 0.0), jnp.where(same, c2 / mu_max, 1.0)], -1)
    return lam, jnp.where(same[..., None], p, s2)


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
    """Barycentric coordinates (..., 3) of the point of triangles s1 s2 s3 closest to 0, and
    that point (..., 3): the projection on the plane when inside, else the nearest edge's.

    Also returns S1D(s1, s2) padded to 3 and its point (the 2-simplex case of the distance
    algorithm).
    """
    p, fail = _project_plane(s1, s2, s3)
    m_max, x, y = _minors(s1, s2, s3)
    c31, c32, c33 = _cofactors(s1, s2, s3, p, x, y)
    k = jnp.stack([_same_sign(m_max, c31), _same_sign(m_max, c32), _same_sign(m_max, c33)], -1)
    inside = jnp.stack([c31, c32, c33], -1) / m_max[..., None]
    # the three edges (s2 s3), (s1 s3), (s1 s2), batched
    ea = jnp.stack([s2, s1, s1], -2)
    eb = jnp.stack([s3, s3, s2], -2)
    le, xe = _s1d(ea, eb)  # (..., 3, 2), (..., 3, 3)
    de = dot(xe, xe)
    z = jnp.zeros_like(le[..., 0, 0])
    cand = jnp.stack([jnp.stack([z, le[..., 0, 0], le[..., 0, 1]], -1),
                      jnp.stack([le[..., 1, 0], z, le[..., 1, 1]], -1),
                      jnp.stack([le[..., 2, 0], le[..., 2, 1], z], -1)], -2)
    j = _first_min(de, ~k)
    edge = jnp.take_along_axis(cand, j[..., None, None], -2)[..., 0, :]
    xedge = jnp.take_along_axis(xe, j[..., None, None], -2)[..., 0, :]
    full = jnp.all(k, -1)[..., None]
    lam = jnp.where(full, inside, edge)
    xk = jnp.where(full, p, xedge)
    failed = fail[..., None]
    return (jnp.where(failed, cand[..., 2, :], lam), jnp.where(failed, xe[..., 2, :], xk),
            cand[..., 2, :], xe[..., 2, :])


def _det3(a, b, c):
    return (a[..., 0] * (b[..., 1] * c[..., 2] - b[..., 2] * c[..., 1])
            + a[..., 1] * (b[..., 2] * c[..., 0] - b[..., 0] * c[..., 2])
            + a[..., 2] * (b[..., 0] * c[..., 1] - b[..., 1] * c[..., 0]))


def _subdistance(s, n):
    """Barycentric coordinates of the point of simplex s[:n] closest to the origin (S1D, S2D,
    S3D of Montanari et al. as in MuJoCo), and that point. The four faces are solved as one
    batch; the last face is also the n == 3 case and its last edge the n == 2 case.

    MuJoCo 4.0 takes the point from the projections (of the origin on a segment or a
    plane) rather than combining the vertices with the coordinates; its support directions
    agree with this bit for bit, where the combination differs in the last bits (and then,
    near a stopping test, by an iteration)."""
    s1, s2, s3, s4 = s[0], s[1], s[2], s[3]
    c = jnp.stack([-_det3(s2, s3, s4), _det3(s1, s3, s4), -_det3(s1, s2, s4), _det3(s1, s2, s3)])
    m_det = c[0] + c[1] + c[2] + c[3]
    k = _same_sign(m_det, c)
    fa = jnp.stack([s2, s1, s1, s1])
    fb = jnp.stack([s3, s3, s2, s2])
    fc = jnp.stack([s4, s4, s4, s3])
    l2, x2, l1, x1 = _s2d(fa, fb, fc)  # (4, 3) each
    slots = jnp.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])
    cand = jnp.zeros((4, 4), s.dtype).at[jnp.arange(4)[:, None], slots].set(l2)
    face = _first_min(dot(x2, x2), ~k)
    inside = c / m_det
    lam4 = jnp.where(jnp.all(k), inside, cand[face])
    x4 = jnp.where(jnp.all(k), _lincomb(inside, s), x2[face])
    z1 = jnp.zeros(1, s.dtype)
    lam3 = jnp.concatenate([l2[3], z1])
    lam2 = jnp.concatenate([l1[3, :2], z1, z1])
    lam1 = jnp.zeros(4, s.dtype).at[0].set(1.0)
    lam = jnp.where(n == 4, lam4, jnp.where(n == 3, lam3, jnp.where(n == 2, lam2, lam1)))
    x = jnp.where(n == 4, x4, jnp.where(n == 3, x2[3], jnp.where(n == 2, x1[3], s1)))
    return lam, x


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


def _gjk(pr: Pair, core, m1, m2, cutoff, tol, kmax: int, warm, skip=False) -> _GJKOut:
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
    x_k = jnp.where(dot(x_k, x_k) == 0, jnp.array([1.0, 0.0, 0.0], dt), x_k)
    st = dict(phase=jnp.where(skip, _DONE, _G).astype(I32), k=jnp.asarray(0, I32), n=jnp.asarray(0, I32),
              s=jnp.zeros((4, _NREC), dt), x_k=x_k, x_norm=_norm(x_k), x_prev=jnp.zeros((), dt),
              lam=jnp.zeros(4, dt), warm=warm, sep=jnp.asarray(False), dist=jnp.zeros((), dt),
              nsimplex=jnp.asarray(0, I32), x1=pr.center1, x2=pr.center2)

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
        conv = dot(x_k, x_k - wv) < eps
        lower = dot(x_k, wv)
        sep = jnp.where(get_dist, (cutoff < maxl) & (lower > 0) & (lower >= cutoff * x_norm),
                        lower > 0)
        sep = run & ~conv & sep
        rem = run & ~conv & ~sep
        lam, xk_r = _subdistance(s_w[:, :3], n + 1)
        nz = lam != 0
        order = jnp.argsort(~nz, stable=True)
        n_r = jnp.sum(nz).astype(I32)
        lam_r = lam[order]
        s_r = s_w[order]
        sep = sep | (rem & (n_r < 1))
        fin = (in_g & stop) | (run & conv) | (rem & (n_r == 4))
        nxt = rem & (n_r >= 1) & (n_r != 4)
        # final separation check and witness points
        in_f = ph == _F
        f_sep = dot(x_k, wv) > 0
        x12 = _lincomb(st["lam"], s[:, 3:9])
        return dict(
            phase=jnp.select([sep, fin, nxt, in_f], [_DONE, _F, _G, _DONE], ph).astype(I32),
            k=k + nxt.astype(I32), n=jnp.where(rem, n_r, n),
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
    v = jnp.where((dot(v, a - center) < 0)[..., None], v * -1, v)
    d2 = dot(v, v)
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
    n = cross(p1 - p0, p2 - p0)
    return _same_sign(dot(n, p3 - p0), dot(n, p0 * -1))


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
    d1 = cross(e, diff)
    rot = _rotmat(diff)
    d2 = mul(rot, d1)
    d3 = mul(rot, d2)
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
    nrm = cross(tv[1] - tv[0], tv[2] - tv[0])
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
    nfc = jnp.where(run3 | use2, 6, 4).astype(I32)
    dt = sv.dtype
    ar = jnp.arange(nfmax, dtype=I32)
    poly = _Poly(
        V=jnp.zeros((nvmax, _NREC), dt).at[:5].set(verts),
        nv=jnp.where(run3 | use2, 5, 4).astype(I32),
        fi=jnp.zeros((nfmax, 6), I32).at[:6].set(fpat),
        ff=jnp.zeros((nfmax, 4), dt).at[:6].set(jnp.concatenate([fv, dot(fv, fv)[:, None]], 1)),
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
    return fidx, mp, nmap - has.astype(I32)


def _horizon(p: _Poly, f0, w, nh: int):
    """horizon(): delete the faces visible from w (depth first, in MuJoCo's order) and list
    the boundary as (face, edge) pairs."""
    nfmax = p.ff.shape[0]
    fidx, mp, nmap = _delete_face(p.fidx, p.mp, p.nmap, f0, jnp.asarray(True))
    z = jnp.zeros(nfmax, I32)
    # stack frames: face, next edge, edges left
    st = dict(fidx=fidx, mp=mp, nmap=nmap, sf=z.at[0].set(f0), si=z, sr=z.at[0].set(3),
              sp=jnp.asarray(1, I32), hf=jnp.zeros(nh, I32), he=jnp.zeros(nh, I32),
              ne=jnp.asarray(0, I32), it=jnp.asarray(0, I32))

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
        vis = dot(p.ff[adj, :3], w) - p.ff[adj, 3] > MINVAL
        proc = ~pop & (st["fidx"][adj] > -2)
        push, add = proc & vis, proc & ~vis
        sp = st["sp"] - pop.astype(I32)
        fidx, mp, nmap = _delete_face(st["fidx"], st["mp"], st["nmap"], adj, push)
        slot = jnp.where(push, sp, nfmax)
        step = (~pop).astype(I32)
        hs = jnp.where(add, st["ne"], nh)
        return dict(fidx=fidx, mp=mp, nmap=nmap,
                    sf=st["sf"].at[slot].set(adj, mode="drop"),
                    si=st["si"].at[top].add(step).at[slot].set(e + 1, mode="drop"),
                    sr=st["sr"].at[top].add(-step).at[slot].set(2, mode="drop"),
                    sp=sp + push.astype(I32),
                    hf=st["hf"].at[hs].set(adj, mode="drop"),
                    he=st["he"].at[hs].set(e, mode="drop"),
                    ne=st["ne"] + add.astype(I32), it=st["it"] + 1)

    st = lax.while_loop(lambda st: (st["sp"] > 0) & (st["it"] < 4 * nfmax + 4), body, st)
    return p._replace(fidx=st["fidx"], mp=st["mp"], nmap=st["nmap"]), st["hf"], st["he"], st["ne"]


def _attach(p: _Poly, wi, hf, he, ne, lower2, upper2):
    """Attach the faces joining vertex wi to the horizon edges; returns (polytope, any face
    whose attachFace returned 0)."""
    nfmax = p.ff.shape[0]
    nh = hf.shape[0]
    s = jnp.arange(nh, dtype=I32)
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
    pos = p.nmap + jnp.cumsum(ins.astype(I32)) - 1
    mp = p.mp.at[jnp.where(ins, pos, nfmax)].set(newid, mode="drop")
    fidx = p.fidx.at[dst].set(jnp.where(ins, pos, -1), mode="drop")
    ff = p.ff.at[dst].set(jnp.concatenate([fv, d2[:, None]], 1), mode="drop")
    p = p._replace(fi=fi, ff=ff, fidx=fidx, mp=mp, nmap=p.nmap + jnp.sum(ins).astype(I32),
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
    st = dict(p=p, face=jnp.asarray(-1, I32), upper=maxl, upper2=maxl,
              k=jnp.asarray(0, I32), done=jnp.asarray(kk <= 0), warm=warm)

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
        upper_k = dot(fv, w[:3]) / jnp.where(lower > 0, lower, 1.0)
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


def ccd(pr: Pair, tol, kmax: int, warm, cutoff=0.0) -> _CCD:
    """mjc_ccd: penetration (EPA), or with `cutoff` > 0 also distances up to it (beyond it
    `dist` is the largest float)."""
    dt = pr.center1.dtype
    m1, m2 = pr.margin1, pr.margin2
    z = jnp.zeros((), dt)
    # MuJoCo 4.0 runs a first GJK on the objects without their margins (spheres and
    # capsules shrunk to their cores), with the cutoff widened by the margins and radii;
    # a distance above the tolerance is a shallow contact: the witness points are moved
    # out by them. Otherwise (deep, or neither a margin nor a radius) GJK runs again on
    # the full objects and EPA follows. Seen in the 4.0 binary's support calls
    # (ellipsoids, cylinders, boxes and meshes with a margin all start without it).
    special = pr.shrink1 | pr.shrink2 | (m1 > 0) | (m2 > 0)
    if special is not False:
        fm1 = jnp.where(pr.shrink1, pr.radius1 + 0.5 * m1, 0.5 * jnp.maximum(m1, 0.0))
        fm2 = jnp.where(pr.shrink2, pr.radius2 + 0.5 * m2, 0.5 * jnp.maximum(m2, 0.0))
        xs = (jnp.array([True, False]), jnp.stack([z, m1]), jnp.stack([z, m2]),
              jnp.stack([cutoff + fm1 + fm2, cutoff + z]))

        def rnd(w, x):
            core, a, b, cut = x
            skip = core & ~special  # without a margin or radius there is no first pass
            out = _gjk(pr, core & special, a, b, cut, tol, kmax, w, skip=skip)
            return jnp.where(skip, w, out.warm), out

        _, outs = lax.scan(rnd, warm, xs)
        g0 = jax.tree.map(lambda x: x[0], outs)
        g = jax.tree.map(lambda x: x[1], outs)
        shallow = special & (g0.dist > tol)
        n = normalize(g0.x2 - g0.x1)
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
        # a shallow contact of a sphere or capsule has no EPA face; other objects keep the
        # EPA of their inflated shapes for the flat-face contacts (MuJoCo 4.0 clips those
        # faces for shallow box, mesh and cylinder pairs too)
        ok = (~shallow | ~(pr.shrink1 | pr.shrink2)) & ok
        warm = jnp.where(shallow, g0.warm, warm)
    return _CCD(dist, x1, x2, ok, frec, warm)
