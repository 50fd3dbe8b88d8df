"""Flex collisions (MuJoCo: the flex branches of mj_collision).

MuJoCo treats each flex as one more collision object next to the bodies ("bodyflex"), with
its own contype/conaffinity, margin, gap and contact parameters (flex_priority, solmix,
friction, solref, solimp; `mj_contactParam` mixes a geom's with a flex's exactly as two
geoms'). Implemented here:

- plane : flex vertex (`mj_collidePlaneFlex`): every vertex of the flex is a sphere of
  radius flex_radius; dist = n.(v - p) - radius, a contact where n.(v - p) <= margin + gap
  + radius, at pos = v - n (dist/2 + radius), with the plane normal as the frame's normal.
  (corpus shark_22: 245 contacts of one plane and one deformable flex). A plane
  collides with a flex when the plane's body has no dofs (mj_collideTree calls
  mj_collidePlaneFlex for such bodies), or on any body when the midphase is disabled.

- geom : element (`mj_collideGeomElem`) for spheres, capsules and boxes: an edge of a 1D
  flex is a capsule of radius flex_radius between its vertices (mj_makeCapsule) for the
  primitive routines (the box's normal reversed, as MuJoCo does); a triangle goes through
  mjraw_SphereTriangle, CapsuleTriangle (both ends, then each vertex against the segment)
  and BoxTriangle (each vertex in the box, then each corner against the triangle); and
  through MuJoCo's native CCD (mjc_ConvexElem, one contact: the geom and the element, this
  inflated by its radius, both by half the margin) for triangles against meshes,
  ellipsoids and cylinders and tetrahedra against boxes, meshes, ellipsoids and cylinders
  (a triangle's contact normal is then the ellipsoid's or cylinder's own surface normal at
  the contact point, MuJoCo's mjc_fixNormal for 2D flexes). Elements with a vertex on
  the geom's body are skipped, and so are pairs where neither the geom nor any vertex can
  move.
- MuJoCo 4.0 thins (filterFlexContacts: the deepest, then repeatedly the farthest from those
  kept, MAXCONPAIR = 50) the contacts of a rigid flex with each geom, planes included, and
  keeps all of a deformable flex's (checked against the binary). In a regular grid the
  farthest points tie, and which survive then depends on the last bit of the positions.
- self-collisions (`selfcollide` not none, non-rigid flex, contype & conaffinity): element
  pairs without a vertex body in common (3D: only the first `activelayers` layers), after
  MuJoCo's box test without margin: edges as capsule pairs, triangles and tetrahedra
  inflated by the radius through the native CCD (GJK/EPA, `mjc_ConvexElem`: one contact
  per pair at the midpoint of the witness points, oriented as for geom pairs). The
  sweep-and-prune orientation of a pair (which element is side 0) is reproduced; the BVH
  mode's is the static (lower element first) one. MuJoCo 4.0 keeps every self-contact;
  jaxsim's buffer holds the deepest 4 per vertex (at least 50) and sets `state.overflow`
  beyond.

Contacts carry MuJoCo's ids: geom (-1 on a flex side), flex, vert (a vertex, local to the
flex), elem (an element, local). The constraint Jacobian of an element side spreads over
its vertices with the barycentric coordinates of the element point closest to the contact
(MuJoCo 4.0; `contact_sides`), also in the diagonal approximation (body_invweight0).
Element pairs are enumerated at compile time: `jaxsim.flex.check_supported` refuses, naming
the flex, what is not implemented (tetrahedra against spheres and capsules, 4.0's new
analytic routines; any element against a height field; flex : flex pairs) and
self-collisions over more than ELEM_PAIRS_MAX pairs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim.math import MINVAL, safe_sqrt
from jaxsim.types import DisableBit, EnableBit, GeomType, Model, State


def _i(x) -> np.ndarray:
    return np.asarray(x, np.int64)


def bitmask_ok(ct1, ca1, ct2, ca2) -> bool:
    """MuJoCo's contype/conaffinity test (not filterBitmask's negation)."""
    return bool((int(ct1) & int(ca2)) or (int(ct2) & int(ca1)))


def body_bits(m: Model) -> tuple[np.ndarray, np.ndarray]:
    """(body_contype, body_conaffinity): the OR over each body's geoms."""
    bct = np.zeros(m.nbody, np.int64)
    bca = np.zeros(m.nbody, np.int64)
    np.bitwise_or.at(bct, _i(m.geom_bodyid), _i(m.geom_contype))
    np.bitwise_or.at(bca, _i(m.geom_bodyid), _i(m.geom_conaffinity))
    return bct, bca


def geom_flex_pairs(m: Model) -> tuple[np.ndarray, np.ndarray]:
    """(geom, flex) pairs that pass MuJoCo's bodyflex and geom-flex bitmask filters, in
    MuJoCo's order (by body, then geom, then flex)."""
    if not m.nflex or m.opt.disableflags & (DisableBit.CONSTRAINT | DisableBit.CONTACT):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    bct, bca = body_bits(m)
    gb = _i(m.geom_bodyid)
    dofs = _i(m.body_dofnum)[_i(m.body_weldid)]
    vdofs = dofs[_i(m.flex_vertbodyid)]
    fixed = [not vdofs[int(m.flex_vertadr[f]):][:int(m.flex_vertnum[f])].any()
             for f in range(m.nflex)]
    gs, fs = [], []
    for g in np.argsort(gb, kind="stable"):
        b = gb[g]
        for f in range(m.nflex):
            if fixed[f] and not dofs[b]:
                continue  # nothing can move (as MuJoCo's filter of two dof-less bodies)
            fct, fca = m.flex_contype[f], m.flex_conaffinity[f]
            if not bitmask_ok(bct[b], bca[b], fct, fca):
                continue
            if not bitmask_ok(m.geom_contype[g], m.geom_conaffinity[g], fct, fca):
                continue
            gs.append(g)
            fs.append(f)
    order = np.lexsort((np.asarray(fs, np.int64), gb[np.asarray(gs, np.int64)]))
    return np.asarray(gs, np.int64)[order], np.asarray(fs, np.int64)[order]


def plane_collides(m: Model, g: int) -> bool:
    """Whether plane geom g takes part in plane : flex collisions (see module doc)."""
    weld = _i(m.body_weldid)[int(m.geom_bodyid[g])]
    return bool(_i(m.body_dofnum)[weld] == 0 or m.opt.disableflags & DisableBit.MIDPHASE)


class PlanePlan(NamedTuple):
    """Static layout of the plane : flex vertex slots: one per vertex per pair, or for a
    rigid flex with more vertices MAXCONPAIR (MuJoCo 4.0 thins a rigid flex's contacts
    with a geom, not a deformable one's: checked against the binary)."""

    geom: np.ndarray  # (n,) plane geom of each output slot
    flex: np.ndarray  # (n,) flex of each output slot
    vert: np.ndarray  # (N,) vertex of each computed slot, local to the flex
    cgeom: np.ndarray  # (N,) plane geom of each computed slot
    cflex: np.ndarray  # (N,) flex of each computed slot
    pair_geom: np.ndarray  # (p,) the pairs
    pair_flex: np.ndarray
    thinned: tuple  # (start, count) of the computed slots of each thinned pair


def plane_plan(m: Model) -> PlanePlan | None:
    g, f = geom_flex_pairs(m)
    if not len(g):
        return None
    keep = np.array([int(m.geom_type[x]) == GeomType.PLANE and plane_collides(m, x) for x in g],
                    bool)
    g, f = g[keep], f[keep]
    if not len(g):
        return None
    num = _i(m.flex_vertnum)[f]
    rigid = _i(m.flex_rigid)[f].astype(bool)
    out = np.where(rigid, np.minimum(num, MAXCONPAIR), num)
    start = np.concatenate([[0], np.cumsum(num)[:-1]])
    thinned = tuple((int(a), int(n)) for a, n, r in zip(start, num, rigid, strict=True)
                    if r and n > MAXCONPAIR)
    return PlanePlan(np.repeat(g, out), np.repeat(f, out), np.concatenate(
        [np.arange(n) for n in num]), np.repeat(g, num), np.repeat(f, num), g, f, thinned)


def margin_gap(m: Model, g, f):
    """mj_assignMargin(geom_margin + flex_margin) and geom_gap + flex_gap."""
    margin = m.geom_margin[g] + m.flex_margin[f]
    if m.opt.enableflags & EnableBit.OVERRIDE:
        margin = jnp.broadcast_to(m.opt.o_margin, margin.shape)
    return margin, m.geom_gap[g] + m.flex_gap[f]


def plane_contacts(m: Model, d: State, pp: PlanePlan, vert_xpos):
    """(dist, pos, normal, valid, margin, vert) of the plane : vertex output slots."""
    g, f = pp.cgeom, pp.cflex
    v = vert_xpos[_i(m.flex_vertadr)[f] + pp.vert]
    p = d.geom_xpos[g]
    n = d.geom_xmat[g][:, :, 2]
    radius = m.flex_radius[f]
    margin, gap = margin_gap(m, g, f)
    dif = v - p
    h = dif[:, 0] * n[:, 0] + dif[:, 1] * n[:, 1] + dif[:, 2] * n[:, 2]  # MuJoCo's order
    valid = h <= margin + gap + radius
    dist = h - radius
    pos = v + n * (-dist * 0.5 - radius)[:, None]
    vert = jnp.asarray(pp.vert)
    if pp.thinned:  # thin each such pair to MAXCONPAIR, compacted in vertex order
        idx, live, a0 = [], [], 0
        for a, cnt in pp.thinned:
            idx.append(jnp.arange(a0, a))
            live.append(valid[a0:a])
            k, ok = keep_far(dist[a:a + cnt], pos[a:a + cnt], valid[a:a + cnt])
            idx.append(a + k)
            live.append(ok)
            a0 = a + cnt
        idx.append(jnp.arange(a0, dist.shape[0]))
        live.append(valid[a0:])
        idx = jnp.concatenate(idx)
        valid = jnp.concatenate(live)
        dist, pos, n, margin, vert = dist[idx], pos[idx], n[idx], margin[idx], vert[idx]
    return dist, pos, n, valid, margin, vert


# ------------------------------------------------------------------ flex elements

MAXCONPAIR = 50  # mjMAXCONPAIR: contacts kept per geom : flex and per flex self-collision


def elem_vertices(m: Model, f: int, elems: np.ndarray) -> np.ndarray:
    """(p, dim + 1) global vertex ids of elements `elems` (local ids) of flex f."""
    dim = int(m.flex_dim[f])
    rows = _i(m.flex_elem)[int(m.flex_elemadr[f]) + np.asarray(elems, np.int64), :dim + 1]
    return int(m.flex_vertadr[f]) + rows


def elem_boxes(m: Model, f: int, vid: np.ndarray, vx):
    """Element AABBs as MuJoCo's flexelem_aabb: (center, half size + radius)."""
    p = vx[vid]  # (n, k, 3)
    lo, hi = jnp.min(p, 1), jnp.max(p, 1)
    return 0.5 * (hi + lo), 0.5 * (hi - lo) + m.flex_radius[f]


def boxes_apart(c1, h1, c2, h2, margin):
    """MuJoCo's filterBox: the boxes are farther apart than margin along some axis."""
    return jnp.any((c1 + h1 + margin < c2 - h2) | (c2 + h2 + margin < c1 - h1), -1)


def capsule_geom(m: Model, f: int, p1, p2):
    """An edge element as MuJoCo's mj_makeCapsule: centre, axis from the second vertex to
    the first, half length, radius flex_radius (a Geom with the axis as the z column)."""
    from jaxsim.collision.common import Geom

    dif = p1 - p2
    n2 = jnp.sum(dif * dif, -1, keepdims=True)
    ok = n2 > 1e-30
    ln = jnp.sqrt(jnp.where(ok, n2, 1.0))
    z = jnp.where(ok, dif / ln, jnp.array([0.0, 0.0, 1.0], dif.dtype))
    ln = jnp.where(ok, ln, 0.0)[..., 0]
    # any frame whose third column is z (capsule functions read the axis only)
    a = jnp.where(jnp.abs(z[..., :1]) < 0.9, jnp.array([1.0, 0, 0], z.dtype),
                  jnp.array([0.0, 1.0, 0], z.dtype))
    x = a - z * jnp.sum(a * z, -1, keepdims=True)
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    y = jnp.cross(z, x)
    mat = jnp.stack([x, y, z], -1)
    radius = jnp.broadcast_to(m.flex_radius[f], ln.shape)
    size = jnp.stack([radius, 0.5 * ln, jnp.zeros_like(ln)], -1)
    return Geom(0.5 * (p1 + p2), mat, size, None)


def _elem_support(pts, radius):
    """MuJoCo's mjc_flexSupport of one element: the first vertex farthest along d, pushed
    out by the radius (no margin: self and geom : element margins are passed to CCD)."""
    def sup(d, warm, core):
        del core
        i = jnp.argmax(pts @ d)
        return pts[i] + radius * d, jnp.asarray(-1, jnp.int32), warm
    return sup


def _ccd_contact(pr, sup1, sup2, margin, opt):
    """One mjc_penetration contact of the pair `pr` (built from stopped-gradient objects):
    (dist, pos, normal, valid), the distance and point re-expressed through the
    differentiable inflated supports sup1, sup2 at the frozen normal (envelope theorem, as
    `convex.convex`), their values MuJoCo's."""
    from jax import lax

    from jaxsim.collision import ccd

    dt = pr.center1.dtype
    c = ccd.ccd(pr, jnp.asarray(opt.tolerance, dt), int(opt.iterations),
                -jnp.ones(2, jnp.int32))
    normal = ccd.normalize(c.x1 - c.x2)
    n = lax.stop_gradient(normal)
    q1, q2 = sup1(n), sup2(-n)
    e = -jnp.dot(q1 - q2, n)
    q = 0.5 * (q1 + q2)
    dist = lax.stop_gradient(margin + c.dist) + (e - lax.stop_gradient(e))
    pos = lax.stop_gradient(0.5 * (c.x1 + c.x2)) + (q - lax.stop_gradient(q))
    return dist, pos, normal, c.dist < 0


def _elem_point(pts, sp, inflate):
    """The differentiable inflated support of an element (first farthest vertex of the
    stopped-gradient copy sp)."""
    return lambda d: pts[jnp.argmax(sp @ d)] + inflate * d


def elem_elem_ccd(pts1, pts2, c1, c2, radius1, radius2, margin, opt):
    """mjc_ConvexElem for two elements (vertex arrays (k, 3)): one contact or none, with
    gradients through the supports at the frozen normal (as `convex.convex`)."""
    from jax import lax

    from jaxsim.collision import ccd

    s1, s2 = lax.stop_gradient(pts1), lax.stop_gradient(pts2)
    dt = s1.dtype
    hm = lax.stop_gradient(0.5 * margin)
    z = jnp.zeros((), dt)
    pr = ccd.Pair(_elem_support(s1, radius1 + hm), _elem_support(s2, radius2 + hm),
                  lax.stop_gradient(c1), lax.stop_gradient(c2), z, z, False, False, z, z,
                  False, False)
    return _ccd_contact(pr, _elem_point(pts1, s1, radius1 + 0.5 * margin),
                        _elem_point(pts2, s2, radius2 + 0.5 * margin), margin, opt)


def geom_elem_ccd(t: int, geo, pts, center, radius, margin, opt):
    """mjc_ConvexElem for a geom of type t (box, mesh, ellipsoid, cylinder: no sphere or
    capsule core) and an element: MuJoCo's native CCD with both objects inflated by half
    the margin (the element also by its radius); one contact or none; gradients through
    the supports at the frozen normal."""
    from jax import lax

    from jaxsim.collision import ccd

    dt = pts.dtype
    sg = jax.tree.map(lax.stop_gradient, geo)
    sp = lax.stop_gradient(pts)
    ms = lax.stop_gradient(margin)
    z = jnp.zeros((), dt)

    def gsup(d, warm, core):
        return ccd.support(t, sg, d, warm, core)

    def gpoint(d):
        return ccd.support(t, geo, d, jnp.asarray(-1, jnp.int32), False)[0] + 0.5 * margin * d

    pr = ccd.Pair(gsup, _elem_support(sp, radius + 0.5 * ms), sg.pos,
                  lax.stop_gradient(center), ms, z, False, False, z, z,
                  t in (ccd.BOX, ccd.MESH), False)
    return _ccd_contact(pr, gpoint, _elem_point(pts, sp, radius + 0.5 * margin), margin, opt)


def _ellipsoid_inside(nrm, pos, size):
    """mjc_ellipsoidInside: the normal of an ellipsoid (local frame, semi-axes `size`) at the
    point where the ray from `pos` (inside) along `nrm` leaves it, iterated to a fixed point
    (at most 30 times, tolerance 1e-6); (normal, processed)."""
    from jax import lax

    from jaxsim.collision import ccd

    s2inv = 1 / (size * size)
    c = jnp.sum(pos * pos * s2inv) - 1
    nrm = ccd.normalize(nrm)

    def body(it, st):
        n, done, ok = st
        a = jnp.sum(n * n * s2inv)
        b = jnp.sum(pos * n * s2inv)
        det = b * b - a * c
        stop = (det < MINVAL) | (a < MINVAL)
        x = (-b + jnp.sqrt(jnp.where(stop, 1.0, det))) / jnp.where(stop, 1.0, a)
        stop = stop | (x < 0)
        new = ccd.normalize((pos + x * n) * s2inv)
        change = safe_sqrt(jnp.sum((n - new) ** 2))
        step = ~done & ~stop
        # stopping before any update leaves the contact unprocessed (MuJoCo: iter > 0)
        ok = jnp.where(~done & stop, it > 0, ok)
        return (jnp.where(step, new, n), done | stop | (step & (change < 1e-6)), ok)

    n, _, ok = lax.fori_loop(0, 30, body, (nrm, c > 0, c <= 0))
    return n, ok


def _ellipsoid_outside(pos, size):
    """mjc_ellipsoidOutside: the normal of an ellipsoid at the point closest to `pos`
    (outside), by Newton's method on the Lagrange multiplier (at most 30 steps)."""
    from jax import lax

    from jaxsim.collision import ccd

    s2 = size * size
    ps2 = pos * pos * s2

    def body(_, st):
        la, done = st
        r = 1 / (s2 + la)
        val = jnp.sum(ps2 * r * r) - 1
        der = -2 * jnp.sum(ps2 * r * r * r)
        stop = (val < 1e-6) | (der > -MINVAL)
        delta = -val / jnp.where(stop, -1.0, der)
        stop = stop | (delta < 1e-6)
        return jnp.where(done | stop, la, la + delta), done | stop

    la, _ = lax.fori_loop(0, 30, body, (jnp.zeros((), pos.dtype), jnp.asarray(False)))
    return ccd.normalize(pos / (s2 + la))  # normalized here and again by fix_normal


def fix_normal(t: int, geo, pos, normal):
    """mjc_fixNormal for a contact of an ellipsoid or cylinder geom (side 1) with a 2D flex
    element: the normal becomes the geom's own surface normal at the contact point
    (ellipsoid: by ray projection from inside, by the closest point from outside; cylinder:
    the radial direction, unless the point is within 5% of a flat end or the flat end is
    less than four times farther than the round wall)."""
    from jaxsim.collision import ccd

    mat = geo.mat
    loc = ccd.mul_t(mat, pos - geo.pos)
    nloc = ccd.mul_t(mat, normal)
    size = geo.size
    if t == GeomType.ELLIPSOID:
        ok_size = jnp.all(size >= MINVAL)
        sz = jnp.where(ok_size, size, 1.0)
        inside = jnp.sum(loc * loc / (sz * sz)) <= 1
        n_in, ok_in = _ellipsoid_inside(nloc, loc, sz)
        n_out = _ellipsoid_outside(loc, sz)
        nrm = jnp.where(inside, n_in, n_out)
        ok = ok_size & jnp.where(inside, ok_in, True)
    else:
        z = jnp.abs(loc[2])
        rxy = safe_sqrt(loc[0] * loc[0] + loc[1] * loc[1])
        ok = (z <= 0.95 * size[1]) & (jnp.abs(size[1] - z) >= 0.25 * jnp.abs(size[0] - rxy))
        nrm = loc.at[2].set(0.0)
    fixed = ccd.mul(mat, ccd.normalize(nrm))
    return jnp.where(ok, fixed, normal)


def keep_far(dist, pos, valid, cap: int = MAXCONPAIR):
    """MuJoCo's filterFlexContacts over one block of slots: with more than `cap` valid
    contacts, the deepest, then repeatedly the one farthest from those kept (the first of
    equals; MuJoCo 4.0's choice, checked against the binary). Returns (slot index, live)
    of `cap` slots: the kept ones, or with at most `cap` valid contacts those, in slot
    order."""
    from jax import lax

    n = dist.shape[0]
    x = lax.stop_gradient(pos)
    big = jnp.asarray(jnp.finfo(dist.dtype).max, dist.dtype)
    first = jnp.argmax(jnp.where(valid, -lax.stop_gradient(dist), -big))

    def body(_, st):
        sel, mind, best = st
        sel = sel.at[best].set(True)
        d2 = jnp.sum((x - x[best]) ** 2, -1)
        mind = jnp.minimum(mind, d2)
        return sel, mind, jnp.argmax(jnp.where(sel | ~valid, -1.0, mind))

    sel, _, _ = lax.fori_loop(0, cap, body, (jnp.zeros(n, bool), jnp.full(n, big), first))
    keep = jnp.where(jnp.sum(valid) > cap, valid & sel, valid)
    idx = jnp.nonzero(keep, size=cap, fill_value=0)[0]
    return idx, jnp.arange(cap) < jnp.sum(keep)


def bary_weights(p, verts, k: int):
    """(n, 4) weights of the element vertices (k of them used) for contact points p:
    barycentric coordinates of the point of the element closest to p (MuJoCo 4.0's
    contact Jacobian of a flex element side)."""
    from jaxsim.math import safe_div

    if k == 2:
        a, b = verts[:, 0], verts[:, 1]
        ab = b - a
        t = jnp.clip(safe_div(jnp.sum((p - a) * ab, -1), jnp.sum(ab * ab, -1)), 0.0, 1.0)
        w = jnp.stack([1 - t, t], -1)
    elif k == 3:
        w = _tri_bary(p, verts[:, 0], verts[:, 1], verts[:, 2])
    else:
        w = _tet_bary(p, verts)
    return jnp.pad(w, ((0, 0), (0, 4 - k)))


def _tri_bary(p, a, b, c):
    """Barycentric coordinates of the closest point of triangle abc to p (Ericson 5.1.5)."""
    from jaxsim.math import safe_div

    def dot(u, v):
        return jnp.sum(u * v, -1)

    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = dot(ab, ap), dot(ac, ap)
    bp = p - b
    d3, d4 = dot(ab, bp), dot(ac, bp)
    cp = p - c
    d5, d6 = dot(ab, cp), dot(ac, cp)
    va = d3 * d6 - d5 * d4
    vb = d5 * d2 - d1 * d6
    vc = d1 * d4 - d3 * d2
    one, zero = jnp.ones_like(d1), jnp.zeros_like(d1)

    def w3(x, y, z):
        return jnp.stack([x, y, z], -1)

    t_ab = safe_div(d1, d1 - d3)
    t_ac = safe_div(d2, d2 - d6)
    t_bc = safe_div(d4 - d3, (d4 - d3) + (d5 - d6))
    den = va + vb + vc
    v = safe_div(vb, den)
    w = safe_div(vc, den)
    conds = [
        (d1 <= 0) & (d2 <= 0),
        (d3 >= 0) & (d4 <= d3),
        (d6 >= 0) & (d5 <= d6),
        (vc <= 0) & (d1 >= 0) & (d3 <= 0),
        (vb <= 0) & (d2 >= 0) & (d6 <= 0),
        (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0),
    ]
    vals = [w3(one, zero, zero), w3(zero, one, zero), w3(zero, zero, one),
            w3(1 - t_ab, t_ab, zero), w3(1 - t_ac, zero, t_ac), w3(zero, 1 - t_bc, t_bc)]
    out = w3(1 - v - w, v, w)
    for cnd, val in zip(conds[::-1], vals[::-1], strict=True):
        out = jnp.where(cnd[..., None], val, out)
    return out


def _tet_bary(p, v):
    """Barycentric coordinates of the closest point of tetrahedron v (n, 4, 3) to p."""
    from jaxsim.math import safe_div

    a = v[:, 0]
    mat = jnp.stack([v[:, 1] - a, v[:, 2] - a, v[:, 3] - a], -1)  # (n, 3, 3)
    det = jnp.linalg.det(mat)
    ok = jnp.abs(det) > 1e-30
    safe = jnp.where(ok[:, None, None], mat, jnp.eye(3, dtype=mat.dtype))
    lam = jnp.linalg.solve(safe, (p - a)[..., None])[..., 0]
    inside = ok & jnp.all(lam >= 0, -1) & (jnp.sum(lam, -1) <= 1)
    win = jnp.concatenate([1 - jnp.sum(lam, -1, keepdims=True), lam], -1)
    best_d = jnp.full(p.shape[0], jnp.inf, p.dtype)
    best_w = jnp.zeros((p.shape[0], 4), p.dtype)
    for face in ((0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)):
        w3 = _tri_bary(p, v[:, face[0]], v[:, face[1]], v[:, face[2]])
        q = jnp.einsum("nk,nkj->nj", w3, v[:, list(face)])
        dd = jnp.sum((p - q) ** 2, -1)
        full = jnp.zeros((p.shape[0], 4), p.dtype).at[:, list(face)].set(w3)
        better = dd < best_d
        best_d = jnp.where(better, dd, best_d)
        best_w = jnp.where(better[:, None], full, best_w)
    del safe_div
    return jnp.where(inside[:, None], win, best_w)


class ElemPart(NamedTuple):
    """Pairs of one collision routine inside a block."""

    kind: str  # "capcap": two edge capsules; "ccd": two elements; "geom1": geom : edge
    geom: np.ndarray  # (p,) geom on side 0 (-1: an element of the flex)
    e1: np.ndarray  # (p,) element on side 0 (-1: the geom)
    e2: np.ndarray  # (p,) element on side 1
    k: int  # slots per pair


class ElemBlock(NamedTuple):
    """One geom against a rigid flex (MuJoCo thins the contacts to MAXCONPAIR:
    filterFlexContacts), or one geom body against a deformable flex, or one flex's
    self-collisions (MuJoCo 4.0 keeps all of those; jaxsim's buffer holds the deepest
    `nslot` and reports more in `state.overflow`)."""

    flex: int
    sig: int  # bodyflex signature (MuJoCo's pair order)
    parts: tuple[ElemPart, ...]
    nslot: int  # slots of the block in the contact buffer
    filtered: bool  # MuJoCo's MAXCONPAIR filter applies


# slots of a deformable flex's self-collisions, and of its contacts with one geom body:
# SLOTS_PER_VERT per vertex (at least MAXCONPAIR), or every pair's when fewer
SLOTS_PER_VERT = 4


# contact slots of geom : element routines, by element dim and geom type
# (MuJoCo's CCD, mjc_ConvexElem, for the pairs of one slot: triangles against meshes,
# ellipsoids and cylinders, tetrahedra against boxes, meshes, ellipsoids and cylinders)
_SLOTS = {1: {GeomType.SPHERE: 1, GeomType.CAPSULE: 2, GeomType.BOX: 4},
          2: {GeomType.SPHERE: 1, GeomType.CAPSULE: 5, GeomType.BOX: 11, GeomType.MESH: 1,
              GeomType.ELLIPSOID: 1, GeomType.CYLINDER: 1},
          3: {GeomType.BOX: 1, GeomType.MESH: 1, GeomType.ELLIPSOID: 1, GeomType.CYLINDER: 1}}
_CCD_TYPES = {2: (GeomType.MESH, GeomType.ELLIPSOID, GeomType.CYLINDER),
              3: (GeomType.BOX, GeomType.MESH, GeomType.ELLIPSOID, GeomType.CYLINDER)}


def _active_elems(m: Model, f: int) -> np.ndarray:
    adr, num = int(m.flex_elemadr[f]), int(m.flex_elemnum[f])
    if int(m.flex_dim[f]) == 3 and not m.opt.disableflags & DisableBit.MIDPHASE:
        return np.nonzero(_i(m.flex_elemlayer)[adr:adr + num] < int(m.flex_activelayers[f]))[0]
    return np.arange(num)


def elem_plan(m: Model) -> tuple[ElemBlock, ...]:
    """Static layout of the geom : element and self-collision contacts jaxsim computes."""
    from jaxsim import flex

    if m.opt.disableflags & (DisableBit.CONSTRAINT | DisableBit.CONTACT):
        return ()  # no contacts at all (mj_collision returns first), self-collisions included
    blocks = []
    g, fl = geom_flex_pairs(m)
    gtype, gbody = _i(m.geom_type), _i(m.geom_bodyid)
    vbody = _i(m.flex_vertbodyid)
    for b in dict.fromkeys(gbody[g].tolist()):
        for f in dict.fromkeys(fl[gbody[g] == b].tolist()):
            sel = g[(gbody[g] == b) & (fl == f)]
            sel = sel[gtype[sel] != GeomType.PLANE]
            dim = int(m.flex_dim[f])
            sel = sel[np.isin(gtype[sel], [t for t in _SLOTS[dim]])]
            if not len(sel):
                continue
            el = _active_elems(m, f)
            ebody = vbody[elem_vertices(m, f, el)]  # (ne, dim + 1)
            gg, ee = np.meshgrid(sel, np.arange(len(el)), indexing="ij")
            gg, ee = gg.reshape(-1), el[ee.reshape(-1)]
            ok = ~np.any(ebody[np.searchsorted(el, ee)] == gbody[gg][:, None], -1)
            gg, ee = gg[ok], ee[ok]
            sig = (int(b) << 16) + m.nbody + int(f)
            rigid = bool(_i(m.flex_rigid)[f])
            # MuJoCo 4.0 thins the contacts of a rigid flex per geom (MAXCONPAIR) and keeps
            # all of a deformable one's (checked against the binary)
            for grp in ([np.array([x]) for x in np.unique(gg)] if rigid else [np.unique(gg)]):
                parts = []
                for t in _SLOTS[dim]:
                    s = (gtype[gg] == t) & np.isin(gg, grp)
                    if s.any():
                        parts.append(ElemPart(f"geom{dim}:{int(t)}", gg[s],
                                              -np.ones(s.sum(), np.int64), ee[s], _SLOTS[dim][t]))
                if not parts:
                    continue
                n = sum(len(p.geom) * p.k for p in parts)
                room = MAXCONPAIR if rigid else max(MAXCONPAIR, SLOTS_PER_VERT * int(
                    m.flex_vertnum[f]))
                blocks.append(ElemBlock(int(f), sig, tuple(parts), min(n, room), rigid))
    for f in range(m.nflex):
        pairs = flex.self_pairs(m, f)
        if not len(pairs):
            continue
        dim = int(m.flex_dim[f])
        part = ElemPart("capcap" if dim == 1 else "ccd", -np.ones(len(pairs), np.int64),
                        pairs[:, 0], pairs[:, 1], 2 if dim == 1 else 1)
        sig = ((m.nbody + f) << 16) + m.nbody + f
        room = max(MAXCONPAIR, SLOTS_PER_VERT * int(m.flex_vertnum[f]))
        blocks.append(ElemBlock(f, sig, (part,), min(len(pairs) * part.k, room), False))
    return tuple(blocks)


class ElemOut(NamedTuple):
    dist: object
    pos: object
    normal: object
    tangent: object
    valid: object
    overflow: object  # more contacts than the block's slots (self-collisions only)
    geom: np.ndarray  # (n,) side-0 geom (-1: element)
    e1: object  # (n,) side-0 element (-1: geom)
    e2: object


def sphere_triangle(s, rs, t1, t2, t3, rt, margin):
    """MuJoCo's mjraw_SphereTriangle: a sphere (centre s, radius rs) against a triangle
    inflated by rt; (dist, pos, normal from the sphere to the triangle, valid)."""
    from jaxsim.collision import ccd

    dot = ccd.dot
    rbound = margin + rs + rt
    S, A, B = s - t1, t2 - t1, t3 - t1
    N = ccd.normalize(ccd.cross(A, B))
    dsts = dot(N, S)
    P = S - N * dsts
    lena = jnp.sqrt(dot(A, A))
    V1 = ccd.normalize(A)
    V2 = ccd.normalize(ccd.cross(N, A))
    o = jnp.zeros(2, s.dtype)
    a = jnp.stack([lena, jnp.zeros_like(lena)])
    b = jnp.stack([dot(V1, B), dot(V2, B)])
    p = jnp.stack([dot(V1, P), dot(V2, P)])

    def area_sign(p1, p2, p3):
        return jnp.sign((p1[0] - p3[0]) * (p2[1] - p3[1]) - (p2[0] - p3[0]) * (p1[1] - p3[1]))

    def point_segment(u, v):
        uv, up = v - u, p - u
        t = (uv[0] * up[0] + uv[1] * up[1]) / jnp.maximum(1e-15, uv[0] * uv[0] + uv[1] * uv[1])
        r = jnp.where(t <= 0, u, jnp.where(t >= 1, v, u + uv * t))
        d2 = (r[0] - p[0]) * (r[0] - p[0]) + (r[1] - p[1]) * (r[1] - p[1])
        return r, jnp.where(d2 > 0, jnp.sqrt(jnp.where(d2 > 0, d2, 1.0)), 0.0)

    s1, s2, s3 = area_sign(p, o, a), area_sign(p, a, b), area_sign(p, b, o)
    inside = (s1 == s2) & (s2 == s3)
    (x0, d0), (x1, d1), (x2, d2) = point_segment(o, a), point_segment(a, b), point_segment(b, o)
    best = jnp.where((d0 < d1) & (d0 < d2), 0, jnp.where(d1 < d2, 1, 2))
    xb = jnp.stack([x0, x1, x2])[best]
    X = jnp.where(inside, P, V1 * xb[0] + V2 * xb[1])
    nrm = X - S
    dst = jnp.sqrt(dot(nrm, nrm))
    nrm = ccd.normalize(nrm)
    valid = (jnp.abs(dsts) <= rbound) & (dst <= rbound)
    dist = dst - rs - rt
    pos = s + nrm * (rs + dist / 2)
    return dist, pos, nrm, valid


def _contacts(dist, pos, normal, valid):
    from jaxsim.collision.common import Contacts

    return Contacts(dist, pos, normal, jnp.zeros_like(normal), valid)


def _sphere_tri(g, tri, rt, margin):
    dist, pos, nrm, ok = sphere_triangle(g.pos, g.size[0], tri[0], tri[1], tri[2], rt, margin)
    return _contacts(dist[None], pos[None], nrm[None], ok[None])


def _capsule_tri(g, tri, rt, margin):
    """mjraw_CapsuleTriangle: both segment ends as spheres against the triangle, then each
    triangle vertex against the segment's interior (5 slots)."""
    from jaxsim.collision import ccd

    r, half = g.size[0], g.size[1]
    axis = g.mat[:, 2]
    p1, p2 = g.pos - axis * half, g.pos + axis * half
    ends = [sphere_triangle(q, r, tri[0], tri[1], tri[2], rt, margin) for q in (p1, p2)]
    ab = p2 - p1
    den = 4 * half * half
    vec = tri - p1
    t = ccd.dot(vec, ab) / jnp.where(den > 0, den, 1.0)
    inner = (t > 1e-15) & (t < 1 - 1e-15) & (den > 0)
    closest = p1 + ab * t[:, None]
    vec = tri - closest
    dst = jnp.sqrt(ccd.dot(vec, vec))
    n = ccd.normalize(vec)
    ok = inner & (dst <= r + rt + margin)
    dv = dst - r - rt
    pv = (closest + tri + n * (r - rt)) * 0.5
    dist = jnp.concatenate([jnp.stack([e[0] for e in ends]), dv])
    pos = jnp.concatenate([jnp.stack([e[1] for e in ends]), pv])
    nrm = jnp.concatenate([jnp.stack([e[2] for e in ends]), n])
    valid = jnp.concatenate([jnp.stack([e[3] for e in ends]), ok])
    return _contacts(dist, pos, nrm, valid)


def _box_tri(g, tri, rt, margin):
    """mjraw_BoxTriangle: each triangle vertex inside the (inflated) box, on the face of
    least penetration, then each box corner as a point against the triangle (11 slots)."""
    from jaxsim.collision import ccd

    size, mat = g.size, g.mat
    local = jax.vmap(lambda v: ccd.mul_t(mat, v - g.pos))(tri)  # (3, 3)
    pen = jnp.abs(local) - size
    axis = jnp.where(pen[:, 1] > pen[:, 0], 1, 0)  # the first largest, as MuJoCo's loop
    axis = jnp.where(pen[:, 2] > jnp.take_along_axis(pen, axis[:, None], 1)[:, 0], 2, axis)
    maxval = jnp.take_along_axis(pen, axis[:, None], 1)[:, 0]
    ok = (maxval - rt <= margin) & jnp.all(jnp.abs(local) <= size + margin + rt, -1)
    sgn = jnp.where(jnp.take_along_axis(local, axis[:, None], 1)[:, 0] > 0, 1.0, -1.0)
    nrm = mat[:, axis].T * sgn[:, None]
    dv = maxval - rt
    pv = tri - nrm * (rt + dv * 0.5)[:, None]
    bits = np.array([[(i >> k) & 1 for k in range(3)] for i in range(8)], bool)
    corners = jax.vmap(lambda b: ccd.mul(mat, jnp.where(b, size, -size)) + g.pos)(bits)
    cd, cp, cn, cv = jax.vmap(lambda c: sphere_triangle(c, 0.0, tri[0], tri[1], tri[2], rt,
                                                        margin))(corners)
    return _contacts(jnp.concatenate([dv, cd]), jnp.concatenate([pv, cp]),
                     jnp.concatenate([nrm, cn]), jnp.concatenate([ok, cv]))


def _sap_swap(m: Model, f: int, vx, c1, h1, c2, h2):
    """Which self-collision pairs MuJoCo meets as (e2, e1): its sweep and prune (selfcollide
    sap, or auto below 3D, with the midphase on) lists a pair with the element whose box
    starts first (float32, along the longest axis of the flex's box) on side 0, ties in
    element order. None where the orientation is the static (e1 < e2) one."""
    mode = int(m.flex_selfcollide[f])
    if m.opt.disableflags & DisableBit.MIDPHASE or not (
            mode == 3 or (mode == 4 and int(m.flex_dim[f]) < 3)):
        return None
    ca, ha = elem_boxes(m, f, elem_vertices(m, f, np.arange(int(m.flex_elemnum[f]))), vx)
    half = 0.5 * (jnp.max(ca + ha, 0) - jnp.min(ca - ha, 0))  # the flex's box
    axis = jnp.where((half[0] > half[1]) & (half[0] > half[2]), 0,
                     jnp.where(half[1] > half[2], 1, 2))
    m1 = jnp.take(c1 - h1, axis, axis=1).astype(jnp.float32)
    m2 = jnp.take(c2 - h2, axis, axis=1).astype(jnp.float32)
    return m2 < m1


def block_contacts(m: Model, d: State, blk: ElemBlock, vx, opt) -> ElemOut:
    """The contacts of one block, filtered to at most MAXCONPAIR (kept in slot order)."""
    import jax

    from jaxsim.collision import box, primitive
    from jaxsim.collision.common import Geom

    f = blk.flex
    outs = []
    for part in blk.parts:
        v2 = elem_vertices(m, f, part.e2)
        c2, h2 = elem_boxes(m, f, v2, vx)
        if part.kind.startswith("geom"):
            t = int(part.kind.split(":")[1])
            g = part.geom
            margin, gap = margin_gap(m, g, np.full(len(g), f))
            bound = m.geom_rbound[g] + margin + gap
            near = ~jnp.any((d.geom_xpos[g] + bound[:, None] < c2 - h2)
                            | (d.geom_xpos[g] - bound[:, None] > c2 + h2), -1)
            geo = Geom(d.geom_xpos[g], d.geom_xmat[g], m.geom_size[g], None)
            lim = margin + gap
            if t in _CCD_TYPES.get(int(part.kind[4]), ()):
                data = None
                if t == GeomType.MESH:
                    from jaxsim.collision import ccd as _ccd

                    data = _ccd.mesh_data(m, _i(m.geom_dataid)[g])
                geo = geo._replace(data=data)

                fix = (int(part.kind[4]) == 2 and t in (GeomType.ELLIPSOID, GeomType.CYLINDER)
                       and not m.opt.disableflags & DisableBit.NATIVECCD)

                def one(gi, pts, cen, r, mg, t=t, fix=fix):
                    dd, pp, nn, vv = geom_elem_ccd(t, gi, pts, cen, r, mg, opt)
                    if fix:  # MuJoCo fixes the normals of 2D flexes (mjc_fixNormal)
                        nn = fix_normal(t, gi, pp, nn)
                    return _contacts(dd[None], pp[None], nn[None], vv[None])

                res = jax.vmap(one, in_axes=(0, 0, 0, None, 0))(geo, vx[v2], c2,
                                                                 m.flex_radius[f], margin)
            elif part.kind.startswith("geom2"):
                tri = vx[v2]  # (p, 3, 3)
                fn = {GeomType.SPHERE: _sphere_tri, GeomType.CAPSULE: _capsule_tri,
                      GeomType.BOX: _box_tri}[t]
                res = jax.vmap(fn, in_axes=(0, 0, None, 0))(geo, tri, m.flex_radius[f], lim)
            else:
                cap = capsule_geom(m, f, vx[v2[:, 0]], vx[v2[:, 1]])
                if t == GeomType.SPHERE:
                    res = jax.vmap(primitive.sphere_capsule)(geo, cap, lim)
                elif t == GeomType.CAPSULE:
                    res = jax.vmap(primitive.capsule_capsule)(geo, cap, lim)
                else:
                    res = jax.vmap(box.capsule_box)(cap, geo, lim)
                    res = res._replace(normal=-res.normal)
            k = part.k
            outs.append((res.dist.reshape(-1), res.pos.reshape(-1, 3), res.normal.reshape(-1, 3),
                         res.tangent.reshape(-1, 3),
                         (res.valid & near[:, None]).reshape(-1),
                         np.repeat(g, k), np.repeat(part.e1, k), np.repeat(part.e2, k)))
            continue
        v1 = elem_vertices(m, f, part.e1)
        c1, h1 = elem_boxes(m, f, v1, vx)
        near = ~boxes_apart(c1, h1, c2, h2, 0.0)  # self: no margin, no gap
        swap = _sap_swap(m, f, vx, c1, h1, c2, h2)
        if swap is not None:  # MuJoCo's sweep puts the element met first on side 0
            v1, v2 = (jnp.where(swap[:, None], b, a) for a, b in ((v1, v2), (v2, v1)))
            c1, c2 = (jnp.where(swap[:, None], b, a) for a, b in ((c1, c2), (c2, c1)))
        if part.kind == "capcap":
            g1 = capsule_geom(m, f, vx[v1[:, 0]], vx[v1[:, 1]])
            g2 = capsule_geom(m, f, vx[v2[:, 0]], vx[v2[:, 1]])
            res = jax.vmap(primitive.capsule_capsule, in_axes=(0, 0, None))(g1, g2, 0.0)
            dist, pos, nrm, tan, val = (res.dist, res.pos, res.normal, res.tangent, res.valid)
        else:
            def one(p1, p2, a, b, r):
                return elem_elem_ccd(p1, p2, a, b, r, r, jnp.zeros((), p1.dtype), opt)

            dist, pos, nrm, val = jax.vmap(one, in_axes=(0, 0, 0, 0, None))(
                vx[v1], vx[v2], c1, c2, m.flex_radius[f])
            dist, pos, nrm, val = dist[:, None], pos[:, None], nrm[:, None], val[:, None]
            tan = jnp.zeros_like(nrm)
        k = part.k
        e1, e2 = part.e1, part.e2
        if swap is not None:
            e1, e2 = (jnp.where(swap, b, a) for a, b in ((e1, e2), (e2, e1)))
        outs.append((dist.reshape(-1), pos.reshape(-1, 3), nrm.reshape(-1, 3),
                     tan.reshape(-1, 3), (val & near[:, None]).reshape(-1),
                     np.repeat(part.geom, k), jnp.repeat(e1, k), jnp.repeat(e2, k)))
    dist, pos, nrm, tan, val = (jnp.concatenate([o[i] for o in outs]) for i in range(5))
    geom = np.concatenate([o[5] for o in outs])
    e1, e2 = (jnp.concatenate([jnp.asarray(o[i]) for o in outs]) for i in (6, 7))
    n = dist.shape[0]
    over = jnp.zeros((), bool)
    if n > blk.nslot:
        if blk.filtered:
            idx, live = keep_far(dist, pos, val, blk.nslot)
        else:  # the deepest, in slot order
            over = jnp.sum(val) > blk.nslot
            score = jnp.where(val, -jax.lax.stop_gradient(dist), -jnp.inf)
            idx = jnp.sort(jax.lax.top_k(score, blk.nslot)[1])
        if not blk.filtered:
            live = val[idx]
        return ElemOut(dist[idx], pos[idx], nrm[idx], tan[idx], live, over,
                       jnp.asarray(geom)[idx], jnp.asarray(e1)[idx], jnp.asarray(e2)[idx])
    return ElemOut(dist, pos, nrm, tan, val, over, geom, e1, e2)


def contact_sides(m: Model, d: State, c):
    """(bodies, weights), each (ncon, 2, 4): the bodies whose Jacobians at the contact point
    make each side's Jacobian, and their weights (MuJoCo: mj_contactJacobian and the
    contact case of mj_diagApprox). A geom side is its body, a vertex side the vertex's
    body, an element side its vertices' bodies weighted by `bary_weights`."""
    from jaxsim import flex

    n = c.dist.shape[0]
    dt = c.pos.dtype
    from jaxsim.collision.common import contact_bodies

    rep = contact_bodies(m, c)  # geom and vertex sides
    bodies = jnp.zeros((n, 2, 4), jnp.int32).at[:, :, 0].set(rep)
    weights = jnp.zeros((n, 2, 4), dt).at[:, :, 0].set(1.0)
    if not m.nflex:
        return bodies, weights
    vx = flex.vertex_xpos(m, d)
    fl = jnp.clip(c.flex, 0, m.nflex - 1)
    ge = jnp.asarray(_i(m.flex_elemadr), jnp.int32)[fl] + jnp.maximum(c.elem, 0)
    ge = jnp.clip(ge, 0, max(m.nflexelem - 1, 0))
    local = jnp.asarray(_i(m.flex_elem), jnp.int32)[ge]  # (n, 2, 4)
    vid = jnp.asarray(_i(m.flex_vertadr), jnp.int32)[fl][..., None] + jnp.maximum(local, 0)
    vid = jnp.clip(vid, 0, m.nflexvert - 1)
    vb = jnp.asarray(_i(m.flex_vertbodyid), jnp.int32)[vid]
    pts = vx[vid]  # (n, 2, 4, 3)
    dims = _i(m.flex_dim)
    w = jnp.zeros((n, 2, 4), dt)
    for dim in sorted(set(dims.tolist())):
        ws = jnp.stack([bary_weights(c.pos, pts[:, s], dim + 1) for s in range(2)], 1)
        w = jnp.where((jnp.asarray(dims, jnp.int32)[fl] == dim)[..., None], ws, w)
    el = (c.elem >= 0) & (c.geom < 0)
    bodies = jnp.where(el[..., None], vb, bodies)
    weights = jnp.where(el[..., None], w.astype(dt), weights)
    return bodies, weights
