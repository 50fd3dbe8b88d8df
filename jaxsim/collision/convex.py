"""General convex collisions: MuJoCo's native CCD and plane-convex.

MuJoCo routes the pairs without a dedicated primitive function to `mjc_Convex` (GJK for the
distance, EPA for the penetration depth, then flat-face contacts) and the plane pairs with an
ellipsoid or a mesh to `mjc_PlaneConvex`. This module follows the algorithms step by step
(same iteration rules, tie breaks and polytope bookkeeping), so that contacts agree with
MuJoCo to rounding rather than to the CCD tolerance. The reference is the MuJoCo 4.0 binary;
where it departs from the 3.x sources it was checked against (found by running it):

- GJK never switches to `gjkIntersect`: after a tetrahedron it keeps running the distance
  sub-algorithm; coincident centres start from the x axis (and find the contact);
- a margin is treated as spheres' and capsules' radii are: a first GJK runs on the bare
  shapes with the cutoff widened by half of each margin, and a distance above the
  tolerance is a shallow contact (witness points moved out by the half margins); only a
  deeper one reruns GJK on the inflated shapes and goes on to EPA (the support directions
  of every geom type with a margin start without it). Shallow box, mesh and cylinder pairs
  still get their flat-face contacts; here they come from EPA on the inflated shapes;
- EPA stops when this iteration's upper bound (not the running minimum) is within the
  tolerance of the lower bound;
- there is no multiCCD perturbation pass: box and mesh pairs get their extra contacts by
  clipping aligned faces or edges also when the pair has a margin (points within the margin
  are kept, with their positive distance). Of the face pairs at the EPA feature within
  mjFACE_TOL of opposite, the most nearly opposite is taken (3.x took the first, so the
  order of the mesh polygons, which 4.0 emits from an unordered map, would matter). Face
  against face, geom 2's face is clipped by the planes through geom 1's edges along geom
  1's normal (3.x's polygon order, which decides the quadrilateral), and each kept point is
  then taken down onto geom 1's face, its distance measured to geom 2's face; an edge is
  clipped by the other geom's face. Feature vertices are the geoms' own (not EPA's
  margin-inflated points). The quadrilateral search maximises the true area (half the norm
  of the diagonals' cross product; 3.x's area4 is not an area) and never lets its last
  corner wrap onto the first (its buffer holds the clipped polygon's ns + nc points). Cap
  on cap (two cylinders) a corner moves only on a gain beyond rounding (1000 ulp): the equal
  areas of a cap's regular 16-gon are ties, of which MuJoCo 4.0 keeps the first found (its
  rounding of the cap's points is not ours, so the last bits cannot decide).
  Measured over random box-on-mesh poses whose clipped polygon has 5 or 6 points: MuJoCo's
  four contacts reproduced in 54 of 55 (the other an exact tie of two areas, decided by
  rounding);
- cylinders take part in those flat-feature contacts (with boxes, meshes and cylinders): a
  cylinder's support point carries the id of its cap (0 top, 1 bottom); an EPA face whose
  three points lie on one cap has that cap's normal as face normal, and the cap is clipped
  as a 16-gon inscribed in its circle (first vertex on the local x axis, clockwise about the
  outward normal, like mesh faces); a cylinder feature also offers one edge, the side line
  from its first point towards the other cap (length 2 * half-height). An edge of the other
  geom lying on a cap counts only when EPA's direction is within mjFACE_TOL of the cap normal
  (a rim point pressed into a tilted face gives EPA's single contact); two caps within
  mjFACE_TOL of opposite are clipped whatever EPA's direction.

- a capsule lying along a mesh face or a cylinder cap gets up to two contacts
  (`_capsule_face`): its axis ends offset towards the other geom by radius times the part
  of the contact normal perpendicular to the axis, clipped by the edges of the polygon at
  EPA's feature that the axis is parallel to (|n.u| < mjEDGE_TOL; the most nearly opposite
  the normal; a cap is the 16-gon below), also when the capsule lies across an edge (the
  normal then tilted from the face's); the clipped points above the face are dropped, and
  an end cut by an edge counts twice (two equal contacts when it is alone below the face),
  as in MuJoCo's polygon clipping; for static geom types (the driver's groups).

Not reproduced from MuJoCo 4.0 (the single EPA contact is returned instead): the same
clipping of capsules in one compiled function for traced geom types; its face/edge
contacts of plane-mesh (MuJoCo 3's deepest vertex plus two graph neighbours are kept) and
libccd (NATIVECCD disabled). A deep, tilted capsule on a mesh face: MuJoCo's EPA normal
keeps a small error that ours does not (its contacts sit up to 1e-4 aside, distances 4e-6
apart). A cylinder cap on a box or mesh face: MuJoCo 4.0 often keeps another of the
clipped polygon's quadrilaterals than ours (an inscribed square where our search stops at a
smaller local maximum; measured over random turns of a cap resting on a box face, 7 of 20
the same, tilted 13 of 20; cap on cap 19 of 20 and 13 of 20).

Structure: `jaxsim.collision.ccd` holds the support functions per geom type, GJK, EPA and
`ccd` (mjc_ccd); `jaxsim.collision.multicontact` the flat-feature contacts (`multicontact`,
`_polygon_clip`, `_polygon_quad`); this module the pair functions `convex`, `plane_convex`,
the table `functions` and `penetration`.

Geom types are Python ints (specialised code), traced int32 scalars (one compiled
function for every pair; then each geom carries a MeshData, a dummy one for primitives), or
`ccd.TypeOf` (traced among a static set of types: the driver's merged groups, whose type
dispatch is compiled for those types only; a geom without MeshData is then not a mesh).

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

from jaxsim.collision.ccd import (
    BOX,
    CAPSULE,
    CYLINDER,
    EDGE_TOL,
    ELLIPSOID,
    I32,
    MESH,
    PLANE,
    SPHERE,
    MeshData,
    Pair,
    ccd,
    cross,
    dot,
    is_type,
    mul,
    mul_t,
    normalize,
    support,
)
from jaxsim.collision.common import Contacts, Geom
from jaxsim.collision.multicontact import (
    _cyl_face,
    _cyl_normals,
    _mesh_normals,
    _simplex_dim,
    multicontact,
    pad_rows,
)
from jaxsim.types import DisableBit

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


def _geom_pair(t1, g1, t2, g2, margin) -> Pair:
    def sup(t, g):
        return lambda d, w, core: support(t, g, d, w, core)

    return Pair(sup(t1, g1), sup(t2, g2), g1.pos, g2.pos, margin, margin,
                 is_type(t1, SPHERE, CAPSULE), is_type(t2, SPHERE, CAPSULE), g1.size[0], g2.size[0],
                 is_type(t1, BOX, MESH), is_type(t2, BOX, MESH))


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
    w = jnp.asarray(-1, I32)
    p1 = support(t1, g1, n, w, False)[0]
    p2 = support(t2, g2, n * -1, w, False)[0]
    e = -dot(p1 - p2, n)
    q = (p1 + p2) * 0.5
    return (lax.stop_gradient(dist) + (e - lax.stop_gradient(e)),
            lax.stop_gradient(pos) + (q - lax.stop_gradient(q)))


def convex(t1, t2, g1: Geom, g2: Geom, margin, opt: CCDOptions | None = None,
           nslot: int | None = None) -> Contacts:
    """mjc_Convex for geom types t1 <= t2: max_contacts(t1, t2, opt) slots.

    t1 and t2 are usually Python ints; traced int32 types make one function for several
    pairs (then a mesh geom carries its MeshData, and there are 5 slots, or 1 without
    multiCCD, or `nslot`: 1 when every pair involves a sphere or an ellipsoid).
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
    if nslot is None:
        nslot = max_contacts(t1, t2, opt) if static else (5 if opt.multiccd else 1)
    c = ccd(_geom_pair(t1, s1, t2, s2, ms), tol, int(opt.iterations), -jnp.ones(2, I32))
    valid = c.dist < 0
    normal = normalize(c.x1 - c.x2)
    dist, pos = _envelope(t1, g1, t2, g2, normal, ms + c.dist, (c.x1 + c.x2) * 0.5)
    z = jnp.zeros((nslot, 3), dt)
    base = Contacts(pad_rows(dist[None], nslot), pad_rows(pos[None], nslot),
                    pad_rows(normal[None], nslot), z, pad_rows(valid[None], nslot))
    if nslot > 1 and static and t1 == CAPSULE and t2 in (MESH, CYLINDER):
        cap = _capsule_face(g1, t2, g2, lax.stop_gradient(normal), c.face, margin)
        use = valid & cap.applied
        two = Contacts(pad_rows(cap.dist, nslot), pad_rows(cap.pos, nslot),
                       pad_rows(jnp.broadcast_to(cap.normal, (2, 3)), nslot), z,
                       jnp.arange(nslot) < cap.count)
        return jax.tree.map(lambda a, b: jnp.where(jnp.reshape(use, (1,) * a.ndim), a, b),
                            two, base)
    multi_types = opt.multiccd & is_type(t1, BOX, MESH, CYLINDER) & is_type(t2, BOX, MESH, CYLINDER)
    if nslot == 1 or multi_types is False:
        return base
    # flat-face contacts, recomputed from the differentiable geoms
    mc = multicontact(t1, g1, t2, g2, lax.stop_gradient(c.face), c.x1, c.x2, margin)
    use = multi_types & valid & c.epa & mc.applied
    j = jnp.arange(nslot)
    mnrm = lax.stop_gradient(jnp.broadcast_to(mc.normal, (nslot, 3)))
    multi = Contacts(pad_rows(mc.dist, nslot), pad_rows(mc.pos, nslot), mnrm, z,
                     j < mc.count)
    return jax.tree.map(lambda a, b: jnp.where(jnp.reshape(use, (1,) * a.ndim), a, b),
                        multi, base)


class _CapsuleFace(NamedTuple):
    applied: jax.Array
    count: jax.Array  # 1 or 2 contacts
    dist: jax.Array  # (2,)
    pos: jax.Array  # (2, 3)
    normal: jax.Array  # (3,) from the capsule to the mesh


def _capsule_face(g1: Geom, t2: int, g2: Geom, normal, face, margin) -> _CapsuleFace:
    """MuJoCo 4.0's two contacts of a capsule lying along a mesh face or a cylinder cap
    (measured against the binary). The capsule offers an edge: its axis ends offset towards
    the other geom by (radius + margin / 2) times the part of the contact normal
    perpendicular to the axis u. Of the faces at EPA's feature (`face`): the mesh polygons
    through its vertices, or the cap its points lie on (a 16-gon, as `multicontact` clips
    it), those whose outward normal n has |n.u| < EDGE_TOL are candidates and the one most
    nearly opposite the contact normal is taken (so also a face beside an edge the capsule
    lies across). The edge is clipped by the polygon's edges as MuJoCo's polygon clipping
    does it (the two-point polygon P, Q: an end cut by an edge comes out twice), then the
    points above the face (inflated by margin / 2) are dropped: none left, EPA's contact
    stands; more than two, the two ends; else the one or two points left (an end cut by an
    edge, alone below the face, gives two equal contacts). Each contact: the distance to
    the face plane, the position halfway to the inflated face, the face's normal."""
    sg = lax.stop_gradient
    vi = sg(face)[:, 10].astype(I32)
    dim, vi, _ = _simplex_dim(vi, jnp.zeros((3, 3), g1.pos.dtype))
    if t2 == MESH:
        D = g2.data
        nn = max(3, D.vert_poly.shape[1])
        cand_n, cand_id, ncand = _mesh_normals(g2, dim, vi, nn)
    else:
        nn = 3
        cand_n, cand_id, ncand = _cyl_normals(g2, dim, vi, nn)
    u = g1.mat[:, 2]
    r, h = g1.size[0], g1.size[1]
    ok_c = (jnp.arange(nn) < ncand) & (jnp.abs(sg(cand_n) @ sg(u)) < EDGE_TOL)
    score = jnp.where(ok_c, sg(cand_n) @ (sg(normal) * -1), -jnp.inf)
    k = jnp.argmax(score)
    pid = jnp.maximum(cand_id[k], 0)
    n = cand_n[k]
    ne = normal * -1  # towards the capsule
    half = 0.5 * margin  # MuJoCo inflates both objects by half the pair's margin
    off = (ne - u * dot(ne, u)) * (r + half)
    ends = jnp.stack([g1.pos - u * h - off, g1.pos + u * h - off])
    # the polygon, counter-clockwise about its outward normal
    if t2 == MESH:
        ids = D.poly_vert[pid]
        nv = D.poly_nvert[pid]
        F = jax.vmap(lambda i: mul(g2.mat, D.vert[i]) + g2.pos)(jnp.maximum(ids, 0))
        has_faces = D.npoly > 0
    else:
        F, nv = _cyl_face(g2, pid, 16)
        F = F[::-1]  # cylinderFace is clockwise
        has_faces = True
    # clip the segment by the planes through the polygon's edges, perpendicular to it
    k = jnp.arange(F.shape[0])
    Fn = F[jnp.where(k + 1 < nv, k + 1, 0)]
    inward = jax.vmap(lambda a, b: cross(n, b - a))(F, Fn)
    s0 = jnp.sum((ends[0] - F) * inward, -1)
    s1 = jnp.sum((ends[1] - F) * inward, -1)
    edge = k < nv
    out0, out1 = s0 < 0, s1 < 0
    den = jnp.where(s0 == s1, 1.0, s0 - s1)
    t = s0 / den
    t0 = jnp.max(jnp.where(edge & out0 & ~out1, t, 0.0))
    t1 = jnp.min(jnp.where(edge & out1 & ~out0, t, 1.0))
    empty = jnp.any(edge & out0 & out1) | (sg(t1) <= sg(t0))
    q = jnp.stack([ends[0] + (ends[1] - ends[0]) * t0, ends[0] + (ends[1] - ends[0]) * t1])
    gap = (q - F[0]) @ n - half  # from the inflated face
    below = sg(gap) <= 0
    cut = jnp.stack([jnp.any(edge & out0 & ~out1), jnp.any(edge & out1 & ~out0)])
    mult = jnp.where(below, jnp.where(cut, 2, 1), 0)
    both = jnp.all(below)
    one = jnp.where(below[0], 0, 1)  # the end left when only one is below
    count = jnp.where(both, 2, mult[one])
    q = jnp.where(both, q, q[jnp.stack([one, one])])
    gap = jnp.where(both, gap, gap[jnp.stack([one, one])])
    dist = gap + margin
    pos = q - n[None, :] * (0.5 * gap)[:, None]
    ok = jnp.any(ok_c) & ~empty & (count > 0) & has_faces
    return _CapsuleFace(ok, count, dist, pos, sg(n) * -1)


# ------------------------------------------------------------------------- mjc_PlaneConvex


def _ccd_support(t, g: Geom, d):
    """mjccd_support (libccd's support, as mjc_PlaneConvex uses it): (point, vertex id).

    Meshes with at least 10 vertices and a convex-hull graph hill-climb from graph vertex 0,
    others search all vertices (the first of equal maxima)."""
    ld = mul_t(g.mat, d)
    if t == ELLIPSOID:
        r = normalize(ld * g.size) * g.size
        return mul(g.mat, r) + g.pos, jnp.asarray(-1, I32)
    D = g.data
    v = D.vert
    vd = ld[0] * v[:, 0] + ld[1] * v[:, 1] + ld[2] * v[:, 2]
    best = jnp.argmax(jnp.where(jnp.arange(v.shape[0]) < D.nvert, vd, -jnp.inf)).astype(I32)
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
                              (jnp.asarray(0, I32), vd[glob[0]], hill))
    gid = jnp.where(hill, glob[ib], best)
    return mul(g.mat, v[gid]) + g.pos, gid


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
    dist = dot(n, supp - g1.pos)
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
    pn = jax.vmap(lambda q: mul(g2.mat, q))(D.poly_normal[jnp.maximum(polys, 0)])
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
    pnt = jax.vmap(lambda q: mul(g2.mat, q) + g2.pos)(v[cand])
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
            return p, jnp.asarray(i, I32), w
        return f

    z = jnp.zeros((), dt)
    pr = Pair(wrap(support1, core1), wrap(support2, core2), c1.astype(dt), c2.astype(dt),
               jnp.asarray(margin1, dt), jnp.asarray(margin2, dt), radius1 is not None,
               radius2 is not None, z if radius1 is None else jnp.asarray(radius1, dt),
               z if radius2 is None else jnp.asarray(radius2, dt), bool(discrete1),
               bool(discrete2))
    c = ccd(pr, jnp.asarray(tolerance, dt), int(iterations), -jnp.ones(2, I32))
    return c.dist, c.x1, c.x2, c.dist < 0
