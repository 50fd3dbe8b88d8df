"""Box-box and capsule-box narrow phase, with the semantics of MuJoCo's engine_collision_box.c.

Box-box (up to 8 contacts): separating-axis test over the 15 candidate axes (3 face normals
of each box and the 9 edge-edge cross products, the near-parallel ones left out), with
MuJoCo's tie rules: the first best face axis wins among faces, an edge axis has to beat the
best axis so far by a small relative bias and the best face outright, and a winning edge
axis within ~8 degrees of the best face normal gives way to that face unless it is 5% better.
A face axis clips the incident face of the other box against the side planes of the
reference face (Sutherland-Hodgman, here on fixed-size masked polygons) and keeps each
clipped vertex within the margin, minus near-duplicates; an edge axis gives one contact at
the midpoint of the closest points of the two supporting edges.

Capsule-box (2 contacts at most, 4 slots as mj_maxContact allots): the point of the capsule
segment closest to the box is searched among the two segment ends (against the faces) and
the twelve box edges; a second point along the segment is then chosen from the relative
orientation of segment and box, and each of the two points is collided as a sphere.

MuJoCo takes the decisions (which axis, which face, which vertex survives) on exact float
comparisons, so the arithmetic here follows MuJoCo's operation order, and every product that
feeds a sum goes through `_rn`, which keeps XLA from fusing it into an FMA (MuJoCo's build has
none) and from rewriting 1/sqrt as rsqrt; otherwise ties in symmetric poses could go the
other way.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxsim.collision.common import Contacts, Geom
from jaxsim.math import no_fma

_MINVAL = 1e-15  # mjMINVAL
_MAXVAL = 1e10  # mjMAXVAL
_SEPEPS = 1e-13  # separation slack per unit of summed half-sizes
_PAREPS = 1e-16  # squared sine below which an edge-cross axis is ignored
_SGNEPS = 1e-9  # axis component below which a supporting edge is ambiguous
_DUPEPS = 1e-14  # squared relative radius for dropping duplicate clipped vertices
_EDGEBIAS = 1e-6  # relative handicap of edge axes against the best axis so far

_AR3 = np.arange(3)


# ------------------------------------------------------------------------------ arithmetic


_rn = no_fma  # x rounded here: no FMA, no rsqrt rewrite


def _mul(a, b):
    return _rn(a * b)


def _dot3(a, b):
    """Sum over the last axis of a*b, as ((a0 b0 + a1 b1) + a2 b2)."""
    return _mul(a[..., 0], b[..., 0]) + _mul(a[..., 1], b[..., 1]) + _mul(a[..., 2], b[..., 2])


def _mv(m, v):
    """m @ v for v of shape (..., 3)."""
    return _dot3(m, v[..., None, :])


def _mtv(m, v):
    """m.T @ v for v of shape (..., 3)."""
    return _dot3(m.T, v[..., None, :])


def _ratio(num, den):
    """num / den for den >= 0, +inf where den == 0 (finite gradients)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.inf)


def _clip(x, lo, hi):
    return jnp.where(x < lo, lo, jnp.where(x > hi, hi, x))


# ------------------------------------------------------------------------------ box : box

# edge-cross axes k = 3 i + j: edge i of box 1 (box-1 frame) crossed with edge j of box 2
_EI = np.repeat(_AR3, 3)
_EJ = np.tile(_AR3, 3)
_EI1, _EI2 = (_EI + 1) % 3, (_EI + 2) % 3
_EJ1, _EJ2 = (_EJ + 1) % 3, (_EJ + 2) % 3
# corner signs of the incident face, in winding order (float32: exact, and they promote to
# the working dtype instead of pulling float32 models up to float64)
_SU = np.array([1.0, -1.0, -1.0, 1.0], np.float32)
_SV = np.array([1.0, 1.0, -1.0, -1.0], np.float32)
# (v1, v2): whether the ambiguous supporting-corner component of box 1 / box 2 is flipped
_V1 = np.array([False, False, True, True])
_V2 = np.array([False, True, False, True])


def _clip_side(poly, n, coord: int, sign: float, limit, cap: int):
    """Clips the polygon `poly[:n]` (cyclic) to sign * v[coord] <= limit.

    Vertices inside are kept, and a new vertex is inserted where an edge strictly crosses the
    line. Returns the first `cap` rows of the result (valid rows first) and its vertex count.
    """
    m = poly.shape[0]
    idx = np.arange(m)
    valid = idx < n
    d = sign * poly[:, coord] - limit
    nxt = jnp.where(idx + 1 < n, idx + 1, 0)
    q, dq = poly[nxt], d[nxt]
    keep = valid & (d <= 0)
    cross = valid & (((d < 0) & (dq > 0)) | ((d > 0) & (dq < 0)))
    t = d / jnp.where(cross, d - dq, 1.0)
    x = poly + _mul(t[:, None], q - poly)
    # each vertex is followed by the crossing on its outgoing edge
    cand = jnp.stack([poly, x], axis=1).reshape(2 * m, 3)
    mask = jnp.stack([keep, cross], axis=1).reshape(2 * m)
    order = jnp.argsort(jnp.logical_not(mask).astype(jnp.int32), stable=True)[:cap]
    return cand[order], jnp.minimum(jnp.sum(mask), cap)


def box_box(g1: Geom, g2: Geom, margin) -> Contacts:
    """Box : box, up to 8 contacts (MuJoCo's mjc_BoxBox)."""
    p1, m1, s1 = (jnp.asarray(x) for x in (g1.pos, g1.mat, g1.size))
    p2, m2, s2 = (jnp.asarray(x) for x in (g2.pos, g2.mat, g2.size))
    dtype = jnp.result_type(p1, p2, m1, m2, s1, s2, margin)
    p1, m1, s1, p2, m2, s2 = (x.astype(dtype) for x in (p1, m1, s1, p2, m2, s2))
    margin = jnp.asarray(margin, dtype)

    pos21 = _mtv(m1, p2 - p1)  # centre of box 2 in the frame of box 1
    pos12 = _mtv(m2, p1 - p2)  # centre of box 1 in the frame of box 2
    rot = _dot3(m1.T[:, None, :], m2.T[None, :, :])  # axes of box 2 (columns) in frame 1
    rabs = jnp.abs(rot)
    ssum = s1[0] + s1[1] + s1[2] + s2[0] + s2[1] + s2[2]
    septol = margin + _mul(_SEPEPS, ssum)

    # ---- separating axes: faces of box 1, faces of box 2
    face_sep = jnp.concatenate([
        jnp.abs(pos21) - s1 - _dot3(rabs, s2),
        jnp.abs(pos12) - s2 - _dot3(rabs.T, s1),
    ])
    code_face = jnp.argmax(face_sep)  # first of the largest
    sep_face = face_sep[code_face]
    apart = jnp.any(face_sep > septol) | ~(sep_face > -_MAXVAL)

    # ---- edge-cross axes, in the frame of box 1 (component i is zero)
    ax1 = -rot[_EI2, _EJ]
    ax2 = rot[_EI1, _EJ]
    norm2 = _mul(ax1, ax1) + _mul(ax2, ax2)
    parallel = norm2 < _PAREPS
    inv = 1.0 / _rn(jnp.sqrt(jnp.where(parallel, 1.0, norm2)))
    u1, u2 = ax1 * inv, ax2 * inv
    rad1 = _mul(s1[_EI1], jnp.abs(u1)) + _mul(s1[_EI2], jnp.abs(u2))
    b1 = _mul(u1, rot[_EI1, _EJ1]) + _mul(u2, rot[_EI2, _EJ1])
    b2 = _mul(u1, rot[_EI1, _EJ2]) + _mul(u2, rot[_EI2, _EJ2])
    rad2 = _mul(s2[_EJ1], jnp.abs(b1)) + _mul(s2[_EJ2], jnp.abs(b2))
    edge_sep = jnp.abs(_mul(u1, pos21[_EI1]) + _mul(u2, pos21[_EI2])) - rad1 - rad2
    apart = apart | jnp.any(~parallel & (edge_sep > septol))

    best, code = sep_face, code_face
    for k in range(9):  # sequential: each edge competes with the best axis so far
        e = edge_sep[k]
        take = ~parallel[k] & (e - _mul(_EDGEBIAS, jnp.abs(e)) > best) & (e > sep_face)
        best = jnp.where(take, e, best)
        code = jnp.where(take, 6 + k, code)

    # unit edge axes embedded in 3d (box-1 frame)
    axes = jnp.stack([jnp.where(_EI1 == c, u1, jnp.where(_EI2 == c, u2, 0.0)) for c in range(3)],
                     axis=-1)
    ke = jnp.clip(code - 6, 0, 8)
    axis = axes[ke]

    # an edge axis close to the best face normal yields to it unless clearly deeper
    face_dot = jnp.concatenate([jnp.abs(axis), jnp.abs(_dot3(rot.T, axis))])[code_face]
    yield_face = ((code >= 6) & (face_dot > 0.99)
                  & (best < sep_face + _mul(0.05, jnp.abs(sep_face)) + _MINVAL))
    code = jnp.where(yield_face, code_face, code)
    is_edge = code >= 6

    # ---- edge-edge contact for the axis ke
    ei, ej = ke // 3, ke % 3
    ei1, ei2 = (ei + 1) % 3, (ei + 2) % 3
    ej1, ej2 = (ej + 1) % 3, (ej + 2) % 3
    axis = jnp.where(_dot3(axis, pos21) < 0, -axis, axis)  # from box 1 toward box 2
    a2 = _dot3(rot.T, axis)  # the axis in the frame of box 2
    amb1_first = jnp.abs(axis[ei1]) < _SGNEPS
    has_amb1 = amb1_first | (jnp.abs(axis[ei2]) < _SGNEPS)
    amb1 = jnp.where(amb1_first, ei1, ei2)
    amb2_first = jnp.abs(a2[ej1]) < _SGNEPS
    has_amb2 = amb2_first | (jnp.abs(a2[ej2]) < _SGNEPS)
    amb2 = jnp.where(amb2_first, ej1, ej2)

    d2 = rot[:, ej]  # edge direction of box 2; box 1's is the unit vector e_i
    b = d2[ei]
    denom = 1.0 - _mul(b, b)
    # supporting corners: box 1 along +axis, box 2 along -axis
    c1 = jnp.where(_AR3 == ei1, jnp.where(axis[ei1] >= 0, s1[ei1], -s1[ei1]),
                   jnp.where(_AR3 == ei2, jnp.where(axis[ei2] >= 0, s1[ei2], -s1[ei2]), 0.0))
    cc = jnp.where(_AR3 == ej1, jnp.where(a2[ej1] >= 0, -s2[ej1], s2[ej1]),
                   jnp.where(_AR3 == ej2, jnp.where(a2[ej2] >= 0, -s2[ej2], s2[ej2]), 0.0))
    flip1 = _V1[:, None] & has_amb1 & (_AR3 == amb1)[None, :]
    flip2 = _V2[:, None] & has_amb2 & (_AR3 == amb2)[None, :]
    c1 = jnp.where(flip1, -c1, c1)  # (4, 3)
    cc = jnp.where(flip2, -cc, cc)
    c2 = _mv(rot, cc) + pos21
    ev = c2 - c1
    d1e = ev[:, ei]
    d2e = _dot3(d2, ev)
    small = denom < _MINVAL
    sp = jnp.where(small, 0.0, (d1e - _mul(b, d2e)) / jnp.where(small, 1.0, denom))
    sp = _clip(sp, -s1[ei], s1[ei])
    tp = _clip(_mul(b, sp) - d2e, -s2[ej], s2[ej])
    sp = _clip(d1e + _mul(b, tp), -s1[ei], s1[ei])
    w1 = jnp.where(_AR3 == ei, c1 + sp[:, None], c1)
    w2 = c2 + _mul(d2, tp[:, None])
    gap = w2 - w1
    gap2 = _dot3(gap, gap)
    combo_ok = (~_V1 | has_amb1) & (~_V2 | has_amb2) & (gap2 < _MAXVAL)
    pick = jnp.argmin(jnp.where(combo_ok, gap2, jnp.inf))
    w1, w2 = w1[pick], w2[pick]
    edge_dist = _dot3(w2 - w1, axis)
    edge_pos = _mv(m1, 0.5 * (w1 + w2)) + p1
    edge_normal = _mv(m1, axis)
    edge_ok = ~(edge_dist > septol)

    # ---- face contact: reference face `code` (or the best face when an edge won)
    f = jnp.where(is_edge, code_face, code)
    ref1 = f < 3
    a = f % 3
    sref = jnp.where(ref1, s1, s2)
    sinc = jnp.where(ref1, s2, s1)
    pref = jnp.where(ref1, p1, p2)
    mref = jnp.where(ref1, m1, m2)
    poi = jnp.where(ref1, pos21, pos12)  # incident centre in the reference frame
    rinc = jnp.where(ref1, rot, rot.T)  # incident axes (columns) in the reference frame
    sgn = jnp.where(poi[a] >= 0, 1.0, -1.0)
    binc = jnp.argmax(jnp.abs(rinc[a]))  # incident face most opposed to the reference normal
    tinc = jnp.where(sgn * rinc[a, binc] > 0, -1.0, 1.0)
    ax, ay = (a + 1) % 3, (a + 2) % 3
    bu, bv = (binc + 1) % 3, (binc + 2) % 3
    cidx = jnp.stack([ax, ay, a])
    rc = rinc[cidx]  # rows in (x, y, normal) order
    cx = poi[cidx] + _mul(tinc * sinc[binc], rc[:, binc])
    du = _mul(sinc[bu], rc[:, bu])
    dv = _mul(sinc[bv], rc[:, bv])
    zsgn = jnp.stack([jnp.ones_like(sgn), jnp.ones_like(sgn), sgn])
    cx = jnp.concatenate([cx[:2], (sgn * cx[2] - sref[a])[None]])
    du, dv = du * zsgn, dv * zsgn
    poly = cx + _SU[:, None] * du + _SV[:, None] * dv  # (4, 3): x, y, height above the face

    n = jnp.asarray(4)
    sx, sy = sref[ax], sref[ay]
    poly, n = _clip_side(poly, n, 0, 1.0, sx, 5)
    poly, n = _clip_side(poly, n, 0, -1.0, sx, 6)
    poly, n = _clip_side(poly, n, 1, 1.0, sy, 7)
    poly, n = _clip_side(poly, n, 1, -1.0, sy, 8)

    dupe2 = _mul(_DUPEPS, _mul(sx, sx) + _mul(sy, sy))
    cand = (np.arange(8) < n) & ~(poly[:, 2] > margin)
    acc = []
    for k in range(8):  # sequential: a vertex near an accepted one is dropped
        ok = cand[k]
        for q in range(k):
            dx = poly[q, 0] - poly[k, 0]
            dy = poly[q, 1] - poly[k, 1]
            ok = ok & ~(acc[q] & (_mul(dx, dx) + _mul(dy, dy) < dupe2))
        acc.append(ok)
    acc = jnp.stack(acc)

    height = sgn * (sref[a] + 0.5 * poly[:, 2])
    posc = jnp.where(_AR3 == ax, poly[:, :1], jnp.where(_AR3 == ay, poly[:, 1:2], height[:, None]))
    face_pos = _mv(mref, posc) + pref
    nsign = jnp.where(ref1, sgn, -sgn)
    face_normal = jnp.broadcast_to(nsign * mref[:, a], (8, 3))

    first = np.arange(8) == 0
    dist = jnp.where(is_edge, jnp.where(first, edge_dist, 0.0), poly[:, 2])
    pos = jnp.where(is_edge, edge_pos[None], face_pos)
    normal = jnp.where(is_edge, edge_normal[None], face_normal)
    valid = ~apart & jnp.where(is_edge, first & edge_ok, acc)
    return Contacts(dist, pos, normal, jnp.zeros_like(pos), valid)


# ------------------------------------------------------------------------------ capsule : box

# the 12 box edges as (axis j, corner i with bit j clear), MuJoCo's search order
_CAP_EDGES = [(j, i) for j in range(3) for i in range(8) if not i & (1 << j)]
_CJ = np.array([j for j, _ in _CAP_EDGES])
_CI = np.array([i for _, i in _CAP_EDGES])
_CSIGN = np.array([[0.0 if c == j else (1.0 if i & (1 << c) else -1.0) for c in range(3)]
                   for j, i in _CAP_EDGES], np.float32)  # exact; follows the working dtype
_ENDS = np.array([[-1.0], [1.0]], np.float32)  # the two segment ends


def _sphere_box(center, radius, m2, p2, s2, margin):
    """Sphere (world centre) against the box (MuJoCo's mjraw_SphereBox): one contact."""
    c = _mtv(m2, center - p2)
    clamped = jnp.where(s2 > 0, _clip(c, -s2, s2), c)
    tmp = clamped - c
    dd = _dot3(tmp, tmp)
    pos_dd = dd > 0
    dist = jnp.where(pos_dd, jnp.sqrt(jnp.where(pos_dd, dd, 1.0)), 0.0)
    inside = dist <= _MINVAL
    ok = ~(dist - radius > margin)

    # centre inside the box: push out through the nearest face
    fdist = jnp.abs(jnp.stack([-s2, s2], axis=-1).reshape(6) - jnp.repeat(c, 2))
    k = jnp.argmin(fdist)
    closest = fdist[k]
    nearest = jnp.where(_AR3 == k // 2, jnp.where(k % 2 == 1, -1.0, 1.0), 0.0)
    in_pos = c + nearest * ((radius - closest) / 2)
    # centre outside: midway between the box surface and the deepest sphere point
    inv = 1.0 / _rn(jnp.where(inside, 1.0, dist))
    dirn = tmp * inv
    out_pos = clamped * 0.5 + (c + _mul(dirn, radius)) * 0.5

    local = jnp.where(inside, in_pos, out_pos)
    normal = _mv(m2, jnp.where(inside, nearest, dirn))
    d = jnp.where(inside, -closest, dist) - radius
    return d, _mv(m2, local) + p2, normal, ok


def capsule_box(g1: Geom, g2: Geom, margin) -> Contacts:
    """Capsule : box (MuJoCo's mjc_CapsuleBox): up to 2 contacts, in 4 slots."""
    p1, m1, sz1 = (jnp.asarray(x) for x in (g1.pos, g1.mat, g1.size))
    p2, m2, s2 = (jnp.asarray(x) for x in (g2.pos, g2.mat, g2.size))
    dtype = jnp.result_type(p1, p2, m1, m2, sz1, s2, margin)
    p1, m1, sz1, p2, m2, s2 = (x.astype(dtype) for x in (p1, m1, sz1, p2, m2, s2))
    margin = jnp.asarray(margin, dtype)
    radius, hl = sz1[0], sz1[1]

    pos = _mtv(m2, p1 - p2)  # capsule centre in the box frame
    axis = _mtv(m2, m1[:, 2])
    h = axis * hl  # half segment
    axisdir = (h[0] > 0).astype(jnp.int32) + 2 * (h[1] > 0) + 4 * (h[2] > 0)
    # the search starts from this squared distance (MuJoCo 4.0.0's binary squares the bound;
    # the older source compared squared distances with the unsquared bound)
    bound = margin + 2 * (radius + hl + s2[0] + s2[1] + s2[2])
    bestmax = bound * bound

    # ---- candidates 1, 2: a segment end against the faces (at most one coordinate clamped)
    ends = pos[None] + h[None] * _ENDS
    lo, hi = ends < -s2, ends > s2
    clamped = jnp.where(lo, -s2, jnp.where(hi, s2, ends))
    out = lo | hi
    end_ok = jnp.sum(out, axis=1) <= 1
    end_face = jnp.max(jnp.where(out, _AR3, -1), axis=1)
    dif = clamped - ends
    end_d2 = _dot3(dif, dif)

    # ---- candidates 3..14: the segment against each box edge
    tmp3 = _CSIGN * s2  # edge midpoints
    dif = tmp3 - pos
    sj, hj = s2[_CJ], h[_CJ]
    difj = dif[np.arange(12), _CJ]
    ma = _mul(sj, sj)
    mb = -sj * hj
    mc = _mul(hl, hl)
    u = -sj * difj
    v = _dot3(h, dif)
    det = _mul(ma, mc) - _mul(mb, mb)
    det_ok = ~(jnp.abs(det) < _MINVAL)
    idet = 1.0 / jnp.where(det_ok, det, 1.0)
    imc = 1.0 / jnp.where(mc != 0, mc, 1.0)
    ima = 1.0 / jnp.where(ma != 0, ma, 1.0)
    x1 = (_mul(mc, u) - _mul(mb, v)) * idet  # along the edge, in [-1, 1]
    x2 = (_mul(ma, v) - _mul(mb, u)) * idet  # along the segment, in [-1, 1]
    # clamp the edge parameter and re-solve the segment one, then the other way round;
    # k1, k2: 0 low end, 1 interior, 2 high end (k1 keeps its value if the re-solved x1
    # falls inside)
    hi1 = x1 > 1
    lo1 = ~hi1 & (x1 < -1)
    x2 = jnp.where(hi1, (v - mb) * imc, jnp.where(lo1, (v + mb) * imc, x2))
    x1 = jnp.where(hi1, 1.0, jnp.where(lo1, -1.0, x1))
    k1 = jnp.where(hi1, 2, jnp.where(lo1, 0, 1))
    hi2 = x2 > 1
    lo2 = ~hi2 & (x2 < -1)
    x1r = jnp.where(hi2, (u - mb) * ima, (u + mb) * ima)
    rhi = x1r > 1
    rlo = ~rhi & (x1r < -1)
    re = hi2 | lo2
    x1 = jnp.where(re, jnp.where(rhi, 1.0, jnp.where(rlo, -1.0, x1r)), x1)
    k1 = jnp.where(re, jnp.where(rhi, 2, jnp.where(rlo, 0, k1)), k1)
    k2 = jnp.where(hi2, 2, jnp.where(lo2, 0, 1))
    x2 = jnp.where(hi2, 1.0, jnp.where(lo2, -1.0, x2))
    dif = dif + _mul(h[None], -x2[:, None])
    dif = jnp.where(_AR3[None] == _CJ[:, None], dif + _mul(sj, x1)[:, None], dif)
    edge_d2 = _dot3(dif, dif)
    edge_type = 3 * k1 + k2
    edge_corner = _CI + (1 << _CJ) * (k1 // 2)

    # ---- closest candidate, in MuJoCo's order
    best = bestmax
    bsp = jnp.zeros((), dtype)  # position on the segment, in [-1, 1]
    bbp = jnp.zeros((), dtype)  # position on the edge, in [-1, 1]
    cltype = jnp.asarray(-4)
    clface = jnp.asarray(-1)
    corner = jnp.asarray(0)
    edge = jnp.asarray(0)
    for e, sgn in enumerate((-1, 1)):
        take = end_ok[e] & (end_d2[e] < best)
        best = jnp.where(take, end_d2[e], best)
        bsp = jnp.where(take, float(sgn), bsp)
        cltype = jnp.where(take, sgn - 2, cltype)
        clface = jnp.where(take, end_face[e], clface)
    for k in range(12):
        take = det_ok[k] & (edge_d2[k] < best - _MINVAL)
        best = jnp.where(take, edge_d2[k], best)
        bsp = jnp.where(take, x2[k], bsp)
        bbp = jnp.where(take, x1[k], bbp)
        cltype = jnp.where(take, edge_type[k], cltype)
        corner = jnp.where(take, edge_corner[k], corner)
        edge = jnp.where(take, int(_CJ[k]), edge)

    ah = jnp.abs(h)

    # ---- second point, closest feature a box corner
    c = axisdir ^ corner
    skip_a = (c == 0) | (c == 7)
    flip = (c == 3) | (c == 5) | (c == 6)
    mul_a = jnp.where(flip, -1.0, 1.0)
    c = jnp.where(flip, 7 - c, c)
    de = jnp.where(flip, 1 + bsp, 1 - bsp)
    dp = jnp.where(flip, 1 - bsp, 1 + bsp)
    k0 = jnp.where(c == 2, 1, jnp.where(c == 4, 2, 0))
    ka, kb = (k0 + 1) % 3, (k0 + 2) % 3
    along = axis[k0] * axis[k0] > 0.5
    sec_a = jnp.where(
        along,
        jnp.minimum(de, _ratio(2 * s2[k0], ah[k0])) * mul_a,
        jnp.minimum(jnp.minimum(dp, _ratio(2 * s2[ka], ah[ka])), _ratio(2 * s2[kb], ah[kb]))
        * -mul_a)

    # ---- second point, closest feature the interior of a box edge
    c = (axisdir ^ corner) & (7 - (1 << edge))
    skip_b = ~((c == 1) | (c == 2) | (c == 4))
    ka, kb = (edge + 1) % 3, (edge + 2) % 3
    ka = jnp.where(jnp.abs(axis[ka]) > jnp.abs(axis[kb]), kb, ka)
    kb = 3 - edge - ka
    bit = ((c >> kb) & 1) == 1
    mul_b = jnp.where(bit, 1.0, -1.0)
    sec_b = jnp.minimum(jnp.where(bit, 1 - bsp, 1 + bsp), _ratio(2 * s2[kb], ah[kb]))
    e2 = jnp.where((((axisdir >> edge) & 1) == 1) == bit, 1 - bbp, 1 + bbp)
    sec_b = jnp.minimum(sec_b, _ratio(s2[edge] * e2, ah[edge])) * mul_b

    # ---- second point, closest feature a face (one end outside it)
    skip_c = clface == -1
    mul_c = jnp.where(cltype == -3, 1.0, -1.0)
    near = pos + h * -mul_c
    hnz = h != 0
    hsafe = jnp.where(hnz, h, 1.0)
    bounds = jnp.stack([(s2 - near) / hsafe, (-s2 - near) / hsafe]) * mul_c
    use = hnz[None] & (_AR3 != clface)[None] & (bounds > 0)
    sec_c = jnp.minimum(2.0, jnp.min(jnp.where(use, bounds, jnp.inf))) * mul_c

    is_face = cltype < 0
    is_corner = (cltype >= 0) & (cltype // 3 != 1)
    second = jnp.where(is_face, jnp.where(skip_c, -4.0, sec_c),
                       jnp.where(is_corner, jnp.where(skip_a, -4.0, sec_a),
                                 jnp.where(skip_b, -4.0, sec_b)))
    has2 = second > -3
    second = jnp.where(has2, second, 0.0)
    found = cltype != -4

    out = []
    for tt in (bsp, second + bsp):
        centre = _mv(m2, pos + _mul(h, tt)) + p2
        out.append(_sphere_box(centre, radius, m2, p2, s2, margin))
    d = jnp.stack([out[0][0], out[1][0], out[0][0], out[0][0]])
    pos_ = jnp.stack([out[0][1], out[1][1], out[0][1], out[0][1]])
    normal = jnp.stack([out[0][2], out[1][2], out[0][2], out[0][2]])
    valid = jnp.stack([found & out[0][3], found & has2 & out[1][3],
                       jnp.zeros((), bool), jnp.zeros((), bool)])
    return Contacts(d, pos_, normal, jnp.zeros_like(pos_), valid)


FUNCTIONS = {(3, 6): (capsule_box, 4), (6, 6): (box_box, 8)}
