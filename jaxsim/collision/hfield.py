"""Height-field collisions (MuJoCo: mjc_ConvexHField) with sphere, capsule, ellipsoid,
cylinder, box and mesh geoms.

MuJoCo works in the height field's frame. The other geom's axis-aligned bounding box there
(from its support function), grown by the margin as MuJoCo 4.0 does, selects the grid cells
it covers; each cell is split into two triangles along its diagonal, and each triangle,
extruded down to the base (z = -size[3]), is a triangular prism that is collided with the
geom as a convex body: one contact per prism whose signed distance to the geom is below
the margin, in the order rows, columns, triangles, up to mjMAXCONPAIR (50) contacts (a
pair has `Model.hfield_nslot` of its partner geom slots, fewer when that geom can only
cover fewer prisms: see `slots`).
Contacts are reported as MuJoCo 4.0 does: `dist` the signed distance between the prism and
the geom (minus the penetration depth in penetration), `pos` halfway between the two
witness points, `normal` from the prism to the geom.

Layout of the grid (MuJoCo's): elevation samples are row-major with rows along y; sample
(r, c) sits at x = c * dx - size[0], y = r * dy - size[1], z = data[r, c] * size[2], with
dx = 2 size[0] / (ncol - 1) and dy = 2 size[1] / (nrow - 1). Cell (r, c) gives the
triangles {(c, r+1), (c, r), (c+1, r+1)} and {(c, r), (c+1, r+1), (c+1, r)}.

The convex collision of a prism P with a geom G is solved exactly instead of by GJK/EPA.
Their signed distance is -min over unit n of F(n), F(n) = h_P(n) + h_G(-n) (h the support
function), whether they overlap or not, and the minimiser is a stationary direction of one
pair of features of P and G (face, edge, vertex, or a smooth patch of G). Each geom type
enumerates these directions in closed form (face normals, edge cross products,
vertex-vertex and vertex-edge directions for polytopes; for an ellipsoid the normals from
the prism's vertices and edge lines to its surface, found by bracketed root finding; for a
cylinder its cap, side and rim cases, the edge-rim ones as roots of a trigonometric
quartic), F is evaluated at all of them and the smallest value wins. Extra directions only
cost time: F is an upper bound of the minimum everywhere, so a spurious direction never
wins wrongly. Where the minimiser is a smooth stationary point, an error in the direction
changes F only to second order, so the root finding needs no extreme accuracy.

Where MuJoCo differs from the exact answer: its EPA stops within its tolerance, which for
ellipsoids and cylinders, for a sphere's centre or a capsule's segment inside the prism,
and for deep penetrations, can leave the depth short by 1e-5 or more (the normal and the
position off by 1e-5 to 1e-3); and for boxes and meshes at zero margin it runs in a
"discrete" mode that stops early on prisms. At zero margin all are reproduced by running
MuJoCo's CCD itself on the prisms found (see MATCH_DISCRETE; for spheres, capsules,
ellipsoids and cylinders in float64 only, the CCD being costly under vmap); with a margin
the answer is exact.

Shapes are static: the grid of each height field is padded to the largest one. Each pair
scans its covered cells in a `while_loop` (B cells per chunk, B from the largest bounding
radius and margin of the geoms that can touch the field, at most CHUNK), until all are
seen or 50 contacts are found. Of a chunk's 2B prisms, those the geom lies beyond (by the
margin) along a prism face normal or one of the geom's axes cannot touch it (the distance
is at least the separation along any direction) and are skipped; the others are searched
PRISMS at a time, in order. The scan runs on stopped values and keeps, per contact, its
prism and normal. Where MuJoCo's CCD gives the contacts (MATCH_DISCRETE), it runs after
the scan on the prisms the scan found (`_discrete_after`), once per contact (a mesh's still
in the scan). The contacts are then evaluated again with gradients at those frozen
normals (envelope theorem), so `grad` never goes through the loop.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim import hostnp, loops
from jaxsim.collision.common import Contacts, Geom
from jaxsim.types import EnableBit, GeomType

HFIELD, SPHERE, CAPSULE = int(GeomType.HFIELD), int(GeomType.SPHERE), int(GeomType.CAPSULE)
ELLIPSOID, CYLINDER = int(GeomType.ELLIPSOID), int(GeomType.CYLINDER)
BOX, MESH = int(GeomType.BOX), int(GeomType.MESH)

MAXCONPAIR = 50  # mjMAXCONPAIR: contacts per geom pair


def _tiny(dt, power=1.0):
    """Smallest normal number of dtype dt, to a power (1/3: its cube stays normal)."""
    return float(np.finfo(dt).tiny) ** power


# At zero margin MuJoCo collides a box or a mesh with a prism in its "discrete" mode, in
# which EPA stops as soon as a support point repeats the vertex ids of an earlier one; the
# prism's support reports no vertex id, so EPA often stops early and underestimates the
# depth (and tilts the normal). An ellipsoid's or a cylinder's EPA stops within its
# tolerance, its normal off by up to ~1e-3 from the exact one, which moves the contact
# forces as much; so does the EPA of a sphere whose centre (a capsule whose segment) is
# inside the prism (the barkour foot spheres in the MJX test models: contact positions
# 8e-5 from the exact ones). True reproduces all of these with convex.penetration
# (MuJoCo's CCD step by step; costs compile and run time: spheres and capsules take it in
# float64 only); False gives the exact distances.
MATCH_DISCRETE = True
CHUNK = 16  # most cells examined per step of a pair's scan
PRISMS = 4  # most prisms searched per step of the scan (those that can touch)
# `_discrete_after`'s masked map: chunks of this fraction of the candidate slots (of all
# pairs and worlds; models/terrain.xml's two boxes at batch 64: 69 ms at 2, 29 at 8, 26 at
# 32; the whole step at batch 1024: 571 steps/s at 8, 825 at 32)
_AFTER_CHUNK_DIV = 32
CCD_ITERATIONS = 35  # MuJoCo's default ccd_iterations and ccd_tolerance
CCD_TOLERANCE = 1e-6

# prism vertices: 0-2 bottom, 3-5 top (same order); its edges
_EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 3], [0, 3], [1, 4], [2, 5]])
# cell triangles as (row, column) offsets of their three corners
_TRI_DR = np.array([[1, 0, 1], [0, 1, 0]])
_TRI_DC = np.array([[0, 0, 1], [0, 1, 1]])


class HFieldData(NamedTuple):
    """Static-shaped data of a height field geom (leading axis: one row per geom)."""

    elev: jax.Array  # (R, C) elevation samples in [0, 1], row r along y; padded with 0
    nrow: jax.Array  # () int32
    ncol: jax.Array  # () int32
    size: jax.Array  # (4,) x, y half sizes, z top, z bottom (base thickness)
    cells: jax.Array  # (B,) 0..B-1: the cells examined per step of the scan of a pair


# ---------------------------------------------------------------------------- host data


def _pair_reach(model):
    """(height field geoms, partner geoms, bounding radius plus margin and gap of the
    partner) of the candidate pairs with a height field; None when unknown (traced values,
    or not a jaxsim Model)."""
    rb = hostnp.concrete(model.geom_rbound)
    gm, gg = hostnp.concrete(model.geom_margin), hostnp.concrete(model.geom_gap)
    if rb is None or gm is None or gg is None:
        return None
    rb, gm, gg = (np.asarray(x, np.float64) for x in (rb, gm, gg))
    gtype = np.asarray(model.geom_type)
    try:
        from jaxsim.collision import driver

        g1, g2, ip = driver.candidate_pairs(model)
        sel = (gtype[g1] == HFIELD) & (gtype[g2] >= SPHERE) & (gtype[g2] <= MESH)
        g1, g2, ip = g1[sel], g2[sel], ip[sel]
        margin = gm[g1] + gm[g2] + gg[g1] + gg[g2]
        if np.any(ip >= 0):
            pm = hostnp.concrete(model.pair_margin)
            pg = hostnp.concrete(model.pair_gap)
            if pm is None or pg is None:
                return None
            ipc = np.maximum(ip, 0)
            margin = np.where(ip >= 0, np.asarray(pm, np.float64)[ipc]
                              + np.asarray(pg, np.float64)[ipc], margin)
        if int(model.opt.enableflags) & int(EnableBit.OVERRIDE):
            om = hostnp.concrete(model.opt.o_margin)
            if om is None:
                return None
            margin = np.maximum(margin, float(om) + gg[g1] + gg[g2])
    except Exception:  # e.g. a mujoco.MjModel
        return None
    return g1, g2, rb[g2] + np.maximum(margin, 0)


def _partner_reach(model, hids: np.ndarray):
    """Largest bounding radius plus margin (and gap) of the geoms that can collide with
    these height fields, or None when unknown (traced values, no partners)."""
    pr = _pair_reach(model)
    if pr is None:  # e.g. a mujoco.MjModel: every geom that can touch a height field
        rb = hostnp.concrete(model.geom_rbound)
        gm, gg = hostnp.concrete(model.geom_margin), hostnp.concrete(model.geom_gap)
        if rb is None or gm is None or gg is None:
            return None
        gtype = np.asarray(model.geom_type)
        g2 = np.nonzero((gtype >= SPHERE) & (gtype <= MESH))[0]
        reach = np.asarray(rb, np.float64)[g2] + 2 * max(
            np.max(gm, initial=0), 0) + 2 * np.max(gg, initial=0)
    else:
        g1, _, reach = pr
        reach = reach[np.isin(np.asarray(model.geom_dataid)[g1], hids)]
    if len(reach) == 0:
        return None
    return float(np.max(reach))


def _cells(reach, hsize, nrow, ncol):
    """Most rows and columns of cells (arrays, one per height field) that a bounding box of
    half size `reach` can cover."""
    dx = 2 * hsize[:, 0] / (ncol - 1)
    dy = 2 * hsize[:, 1] / (nrow - 1)
    # cmax - cmin <= ceil(span / dx) + 1 for a box of half size rbound + margin
    span = 2 * reach * (1 + 1e-6) + 1e-9
    wr = np.minimum(nrow - 1, np.floor(span / dy) + 2)
    wc = np.minimum(ncol - 1, np.floor(span / dx) + 2)
    return np.maximum(wr, 1).astype(np.int64), np.maximum(wc, 1).astype(np.int64)


def _window(model, ids, nrow, ncol) -> tuple[int, int]:
    """Most rows and columns of cells a partner geom's bounding box can cover (static)."""
    full = int(max(nrow.max() - 1, 1)), int(max(ncol.max() - 1, 1))
    hsize = hostnp.concrete(model.hfield_size)
    reach = _partner_reach(model, ids)
    if hsize is None or reach is None:
        return full
    wr, wc = _cells(reach, np.asarray(hsize, np.float64).reshape(-1, 4)[ids], nrow, ncol)
    return int(wr.max()), int(wc.max())


def slots(model) -> tuple:
    """Contact slots of each geom's pairs with height fields (`Model.hfield_nslot`, one per
    geom, set by the compiler): two per cell that the geom's bounding box, grown by the
    margin, can cover, at most mjMAXCONPAIR (which geoms that touch no height field keep).
    A foot on a fine terrain covers a few cells (the MJX barkour's spheres: 2 x 2 cells, 8
    slots instead of 50, which every stage after the collision pays for); a robot's body
    that can touch the terrain too gets its own bound. A pair that finds more (a geom or a
    margin made larger, or a field made finer, after compiling) keeps the first ones in
    MuJoCo's order and sets `state.overflow`."""
    out = np.full(model.ngeom, MAXCONPAIR, np.int64)
    pr = _pair_reach(model) if model.nhfield else None
    hsize = hostnp.concrete(model.hfield_size)
    if pr is None or hsize is None or len(pr[0]) == 0:
        return tuple(int(x) for x in out)
    g1, g2, reach = pr
    hid = np.asarray(model.geom_dataid)[g1]
    nrow = np.asarray(model.hfield_nrow, np.int64)[hid]
    ncol = np.asarray(model.hfield_ncol, np.int64)[hid]
    wr, wc = _cells(reach, np.asarray(hsize, np.float64).reshape(-1, 4)[hid], nrow, ncol)
    most = np.zeros(model.ngeom, np.int64)
    np.maximum.at(most, g2, 2 * wr * wc)
    out[g2] = np.minimum(most[g2], MAXCONPAIR)
    return tuple(int(x) for x in out)


def hfield_data(model, hfield_ids) -> HFieldData:
    """Host-side builder: HFieldData of the height fields `hfield_ids` (one row each).

    Only the integer structure (hfield_adr, nrow, ncol) is read with numpy; elevations and
    sizes are gathered with jnp, so the model's leaves may be traced (the scan then takes
    CHUNK cells per step, not knowing how many a geom covers).
    """
    ids = np.asarray(hfield_ids, np.int64).reshape(-1)
    nrow = np.asarray(model.hfield_nrow, np.int64)[ids]
    ncol = np.asarray(model.hfield_ncol, np.int64)[ids]
    adr = np.asarray(model.hfield_adr, np.int64)[ids]
    nr, nc = int(nrow.max()), int(ncol.max())
    r = np.arange(nr)[None, :, None]
    c = np.arange(nc)[None, None, :]
    inside = (r < nrow[:, None, None]) & (c < ncol[:, None, None])
    flat = np.where(inside, adr[:, None, None] + r * ncol[:, None, None] + c, 0)
    data = jnp.asarray(model.hfield_data)
    elev = jnp.where(jnp.asarray(inside), data[flat], 0)
    size = jnp.asarray(model.hfield_size).reshape(-1, 4)[ids]
    wr, wc = _window(model, ids, nrow, ncol)
    b = max(1, min(wr * wc, CHUNK))
    return HFieldData(
        elev=elev, nrow=jnp.asarray(nrow, jnp.int32), ncol=jnp.asarray(ncol, jnp.int32),
        size=size, cells=jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32), (len(ids), b)))


# ------------------------------------------------------------------------ small helpers


def _sum(x):
    """Sum over a short last axis, written out: XLA:CPU hands short reductions and products
    to a library (YNNPACK) whose calls cost far more than the arithmetic here (the MJX
    barkour at batch 1024: the three largest took 33 of the collider's 62 ms per step;
    docs/performance.md)."""
    if x.shape[-1] > 8:
        return jnp.sum(x, -1)
    out = x[..., 0]
    for i in range(1, x.shape[-1]):
        out = out + x[..., i]
    return out


def _max(x):
    """Maximum over a short last axis, written out (see _sum)."""
    if x.shape[-1] > 16:
        return jnp.max(x, -1)
    out = x[..., 0]
    for i in range(1, x.shape[-1]):
        out = jnp.maximum(out, x[..., i])
    return out


def _min(x):
    """Minimum over a short last axis, written out (see _sum)."""
    return -_max(-x)


def _mv(x, m):
    """x (..., k) @ m (k, n) for a short k, written out (see _sum)."""
    out = x[..., 0, None] * m[0]
    for i in range(1, m.shape[0]):
        out = out + x[..., i, None] * m[i]
    return out


def _dots(a, b):
    """a (..., A, 3) . b (..., B, 3) -> (..., A, B), written out (see _sum)."""
    return _sum(a[..., :, None, :] * b[..., None, :, :])


def _dot(a, b):
    return _sum(a * b)


def _len(v):
    """|v| along the last axis, with finite gradients at 0."""
    return jnp.sqrt(jnp.maximum(_sum(v * v), _tiny(v.dtype)))


def _unit(v):
    """v / |v| along the last axis; (0, 0, 1) (or (1, 0)) for a zero vector."""
    n2 = _sum(v * v)[..., None]
    ok = n2 > _tiny(v.dtype)
    alt = jnp.zeros(v.shape[-1], v.dtype).at[-1].set(1.0)
    return jnp.where(ok, v / jnp.sqrt(jnp.where(ok, n2, 1.0)), alt)


def _perp(v, e):
    """Component of v orthogonal to the unit vector e (broadcast)."""
    return v - _dot(v, e)[..., None] * e


def _both(n):
    return jnp.concatenate([n, -n], 0)


class _G(NamedTuple):
    """The other geom in the height field's frame."""

    pos: jax.Array
    mat: jax.Array  # columns: its axes
    size: jax.Array
    vert: jax.Array | None  # mesh vertices (local), else None


def _hsup(t: int, g: _G, m):
    """Support function h_G(m) = max over G of x . m for directions m (..., 3)."""
    base = _dot(m, g.pos)
    lm = _mv(m, g.mat)
    s = g.size
    if t == SPHERE:
        return base + s[0] * _len(m)
    if t == CAPSULE:
        return base + s[0] * _len(m) + s[1] * jnp.abs(lm[..., 2])
    if t == ELLIPSOID:
        return base + _len(lm * s)
    if t == CYLINDER:
        return base + s[0] * _len(lm[..., :2]) + s[1] * jnp.abs(lm[..., 2])
    if t == BOX:
        return base + _sum(s * jnp.abs(lm))
    return base + jnp.max(lm @ g.vert.T, -1)


def _spoint(t: int, g: _G, m):
    """A support point of G in unit direction m (3,)."""
    lm = g.mat.T @ m
    s = g.size
    if t == SPHERE:
        loc = s[0] * lm
    elif t == CAPSULE:
        loc = s[0] * lm + jnp.array([0.0, 0.0, 1.0], m.dtype) * jnp.where(lm[2] >= 0, s[1],
                                                                         -s[1])
    elif t == ELLIPSOID:
        q = lm * s
        loc = q * s / _len(q)
    elif t == CYLINDER:
        r2 = lm[0] * lm[0] + lm[1] * lm[1]
        ok = r2 > 1e-30
        scl = jnp.where(ok, s[0] / jnp.sqrt(jnp.where(ok, r2, 1.0)), 0.0)
        loc = jnp.stack([scl * lm[0], scl * lm[1], jnp.where(lm[2] >= 0, s[1], -s[1])])
    elif t == BOX:
        loc = jnp.where(lm >= 0, s, -s)
    else:
        loc = g.vert[jnp.argmax(g.vert @ lm)]
    return g.pos + g.mat @ loc


def _rbound(t: int, size, vert):
    if t == SPHERE:
        return size[0]
    if t == CAPSULE:
        return size[0] + size[1]
    if t == ELLIPSOID:
        return jnp.max(size)
    if t == CYLINDER:
        return jnp.sqrt(size[0] * size[0] + size[1] * size[1])
    if t == BOX:
        return jnp.sqrt(jnp.sum(size * size))
    return jnp.max(_len(vert))


def _seg_closest(p0, p1, q0, q1):
    """Closest points of segments [p0, p1] and [q0, q1] (finite gradients throughout)."""
    d1, d2, r = p1 - p0, q1 - q0, p0 - q0
    a, e, f = _dot(d1, d1), _dot(d2, d2), _dot(d2, r)
    c, b = _dot(d1, r), _dot(d1, d2)
    eps = 1e-30
    ok_a, ok_e = a > eps, e > eps
    a1, e1 = jnp.where(ok_a, a, 1.0), jnp.where(ok_e, e, 1.0)
    den = a * e - b * b
    ok = ok_a & ok_e & (den > 1e-14 * a1 * e1)
    s = jnp.where(ok, jnp.clip((b * f - c * e) / jnp.where(ok, den, 1.0), 0.0, 1.0), 0.0)
    t = jnp.clip(jnp.where(ok_e, (b * s + f) / e1, 0.0), 0.0, 1.0)
    s = jnp.where(ok_a, jnp.clip((b * t - c) / a1, 0.0, 1.0), 0.0)
    return p0 + s * d1, q0 + t * d2


# ----------------------------------------------------------------- candidate directions


def _prism_faces(v):
    """Outward unit normals of the prism's faces (top, bottom, three sides)."""
    top = jnp.cross(v[4] - v[3], v[5] - v[3])
    top = top * jnp.where(top[2] < 0, -1.0, 1.0)
    bottom = jnp.array([0.0, 0.0, -1.0], v.dtype)
    sides = []
    for a, b, o in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        d = v[b] - v[a]
        nrm = jnp.stack([d[1], -d[0], jnp.zeros((), v.dtype)])
        sides.append(nrm * jnp.where(_dot(nrm, v[o] - v[a]) > 0, -1.0, 1.0))
    return _unit(jnp.stack([top, bottom] + sides))


def _edges(v):
    """(start points, unit directions) of the prism's 9 edges."""
    p0 = v[_EDGES[:, 0]]
    return p0, _unit(v[_EDGES[:, 1]] - p0)


def _point_dirs(v, pts):
    """Directions from the prism's vertices and edge lines to points pts (k, 3)."""
    p0, e = _edges(v)
    vv = pts[:, None, :] - v[None, :, :]  # (k, 6, 3)
    ve = _perp(pts[:, None, :] - p0[None], e[None])  # (k, 9, 3)
    return jnp.concatenate([vv.reshape(-1, 3), ve.reshape(-1, 3)], 0)


def _segment_dirs(v, s0, s1, axes=None):
    """Stationary directions between the prism and segments [s0, s1] (k, 3) each, beyond
    those of their endpoints, as (two-sided, one-sided): edge x segment normals (both
    ways), and from prism vertices to the segments' lines. `axes`: the segments' distinct
    directions when fewer (a box's three); the prism's three vertical edges share one
    direction, so it is crossed once."""
    p0, e = _edges(v)
    a = _unit(s1 - s0)  # (k, 3)
    u = a if axes is None else axes
    cr = jnp.cross(e[None, :7, :], u[:, None, :]).reshape(-1, 3)
    return cr, _perp(s0[:, None, :] - v[None], a[:, None, :]).reshape(-1, 3)


# Iterations of the root finders by precision (False: below float64). Below float64 fewer
# reach the same answers: 20000 random prisms near an ellipsoid or a cylinder, the float32
# distances' largest difference from float64's (30, 10) and 40 iterations' is the same with
# (12, 6) and 14 (1.9e-7 and 2.0e-4; with (12, 4) and 10: 3.5e-5 and 2.0e-3). Each
# iteration is a pass over every prism searched (terrain.xml's cylinder at batch 1024:
# `_trig_roots` took 59 of its collider's 98 ms).
_ROOT_ITERS = {True: {"conic": (30, 10), "trig": 40}, False: {"conic": (12, 6), "trig": 14}}


def _bisect(fn, lo, hi, iters: int):
    """Root of an increasing function fn in [lo, hi] (elementwise)."""

    def body(_, s):
        lo, hi = s
        mid = 0.5 * (lo + hi)
        up = fn(mid) > 0
        return jnp.where(up, lo, mid), jnp.where(up, mid, hi)

    lo, hi = lax.fori_loop(0, iters, body, (lo, hi))
    return 0.5 * (lo + hi)


def _conic_normals(y, a2, iters: int = 30, newton: int = 10):
    """Normals (unnormalised) of the ellipse/ellipsoid sum x_i^2 / a2_i = 1 at the points
    where the normal passes through y, i.e. the stationary points of the distance from y to
    its surface (a2 sorted descending; y, a2 with shape (..., d)). Returns (..., 4d, d).

    Those points are x_i = a2_i y_i / (t + a2_i) for the roots t of
    g(t) = sum (a_i y_i / (t + a2_i))^2 - 1: one left of the first pole -a2_0, one right of
    the last, none or two between consecutive poles (g is convex there). Each root is found
    from its neighbouring pole -a2_k by a bracketed Newton iteration on
    |t + a2_k| / sqrt((a_k y_k)^2 + (t + a2_k)^2 sum_(j != k) (a_j y_j / (t + a2_j))^2) - 1,
    nearly linear near the pole. Degenerate points (y_k = 0, t = -a2_k) are added as well;
    every returned direction is finite.
    """
    d = y.shape[-1]
    c2 = a2 * y * y
    cn = jnp.sqrt(jnp.sum(c2, -1, keepdims=True))
    poles = -a2  # ascending
    tiny, tiny3 = _tiny(y.dtype), _tiny(y.dtype, 1 / 3)

    def den(t):  # t (..., m) -> t + a2 (..., m, d), kept away from 0
        s = t[..., None] + a2[..., None, :]
        return jnp.where(jnp.abs(s) < tiny3, tiny3, s)

    # the minimum of g between consecutive poles separates its two roots there
    lo, hi = [poles[..., :1] - cn - 1e-12], [poles[..., :1]]
    kk, side = [0], [-1.0]
    if d > 1:
        tmin = _bisect(lambda t: jnp.sum(-2 * c2[..., None, :] / den(t) ** 3, -1),
                       poles[..., :-1], poles[..., 1:], iters)
        lo += [poles[..., :-1], tmin]
        hi += [tmin, poles[..., 1:]]
        kk += list(range(d - 1)) + list(range(1, d))
        side += [1.0] * (d - 1) + [-1.0] * (d - 1)
    lo.append(poles[..., -1:])
    hi.append(poles[..., -1:] + cn + 1e-12)
    kk.append(d - 1)
    side.append(1.0)
    lo, hi = jnp.concatenate(lo, -1), jnp.concatenate(hi, -1)  # (..., 2d)
    onehot = jnp.asarray(np.eye(d)[kk], y.dtype)  # (2d, d): the anchoring pole
    sgn = jnp.asarray(side, y.dtype)
    ak2 = onehot @ a2[..., :, None]  # (..., 2d, 1)
    ck2 = (onehot @ c2[..., :, None])[..., 0]
    pole = -ak2[..., 0]

    def psi(t):
        s = t + ak2[..., 0]
        q = jnp.sum(jnp.where(onehot > 0, 0.0, c2[..., None, :] / den(t) ** 2), -1)
        dq = jnp.sum(jnp.where(onehot > 0, 0.0, -2 * c2[..., None, :] / den(t) ** 3), -1)
        dn2 = jnp.maximum(ck2 + s * s * q, tiny)
        dn = jnp.sqrt(dn2)
        val = sgn * s / dn - 1
        der = (sgn * dn - sgn * s * (2 * s * q + s * s * dq) / (2 * dn)) / dn2
        return val, der

    # bracket [near, far] with psi(near) < 0 (the pole); psi(far) > 0 iff there is a root
    def newton_step(_, st):
        t, near, far = st
        val, der = psi(t)
        near = jnp.where(val < 0, t, near)
        far = jnp.where(val < 0, far, t)
        step = t - val / jnp.where(jnp.abs(der) > tiny, der, tiny)
        inside = (step - near) * (step - far) <= 0
        return jnp.where(inside, step, 0.5 * (near + far)), near, far

    near = jnp.where(sgn > 0, lo, hi)
    far = jnp.where(sgn > 0, hi, lo)
    t = lax.fori_loop(0, newton, newton_step, (jnp.broadcast_to(pole, lo.shape), near, far))[0]
    # degenerate points: t = -a2_k with y_k = 0 (k along the second last axis)
    eye = jnp.asarray(np.eye(d), bool)
    dk = a2[..., None, :] - a2[..., :, None]  # (..., k, j)
    dk = jnp.where(jnp.abs(dk) < 1e-12 * jnp.max(a2, -1)[..., None, None], 1e-12, dk)
    nu = jnp.where(eye, 0.0, y[..., None, :] / dk)
    rad = jnp.maximum(1 - jnp.sum(a2[..., None, :] * nu * nu, -1), 0.0)
    nk = jnp.sqrt(rad / a2)[..., None]  # (..., k, 1)
    nrm = [y[..., None, :] / den(t), jnp.where(eye, nk, nu), jnp.where(eye, -nk, nu)]
    return jnp.concatenate(nrm, -2)


def _ellipsoid_dirs(v, g: _G):
    """Normals of the ellipsoid through the prism's vertices and edge lines (to be taken
    both ways)."""
    s2 = g.size * g.size
    order = jnp.argsort(-s2)
    a2 = s2[order]
    # vertices: in the ellipsoid's frame, axes sorted by decreasing size
    y = ((v - g.pos) @ g.mat)[:, order]  # (6, 3)
    it = _ROOT_ITERS[jnp.dtype(v.dtype) == jnp.float64]["conic"]
    nu = _conic_normals(y, jnp.broadcast_to(a2, y.shape), *it)  # (6, 12, 3)
    nu = jnp.zeros_like(nu).at[..., order].set(nu)
    vdirs = (nu @ g.mat.T).reshape(-1, 3)
    # edge lines: the ellipsoid projected on the plane normal to the edge
    p0, e = _edges(v)
    helper = jnp.where((jnp.abs(e[:, 0]) < 0.6)[:, None], jnp.array([1.0, 0.0, 0.0], v.dtype),
                       jnp.array([0.0, 1.0, 0.0], v.dtype))
    u = _unit(jnp.cross(e, helper))
    w = jnp.cross(e, u)
    amat = (g.mat * s2) @ g.mat.T
    a11 = _dot(u @ amat, u)
    a22 = _dot(w @ amat, w)
    a12 = _dot(u @ amat, w)
    phi = 0.5 * jnp.arctan2(2 * a12, a11 - a22)
    cs, sn = jnp.cos(phi), jnp.sin(phi)
    l1 = a11 * cs * cs + 2 * a12 * sn * cs + a22 * sn * sn
    l2 = a11 * sn * sn - 2 * a12 * sn * cs + a22 * cs * cs
    q1 = cs[:, None] * u + sn[:, None] * w  # eigen-directions in 3D
    q2 = -sn[:, None] * u + cs[:, None] * w
    rel = p0 - g.pos
    y2 = jnp.stack([_dot(rel, q1), _dot(rel, q2)], -1)
    a22v = jnp.maximum(jnp.stack([l1, l2], -1), _tiny(v.dtype))
    nu2 = _conic_normals(y2, a22v, *it)  # (9, 8, 2)
    edirs = (nu2[..., :1] * q1[:, None, :] + nu2[..., 1:] * q2[:, None, :]).reshape(-1, 3)
    return jnp.concatenate([vdirs, edirs], 0)


def _trig_roots(ca, cb, cc, cd, newton: int, iters: int = 40):
    """Angles th where ca cos th + cb sin th + cc cos 2th + cd sin 2th = 0 (elementwise).

    With z = exp(i th) the zeros are those on the unit circle of the quartic
    (cc - i cd) z^4 + (ca - i cb) z^3 + (ca + i cb) z + (cc + i cd), found together by
    Durand-Kerner iterations and polished by Newton steps on the real function. Returns
    (..., 6): the four roots' angles and the two zeros of the first harmonic alone (the
    roots when the second harmonic vanishes); angles of complex roots are harmless junk.
    """
    cdt = jnp.complex128 if ca.dtype == jnp.float64 else jnp.complex64
    c4 = (cc - 1j * cd).astype(cdt)
    c3 = (ca - 1j * cb).astype(cdt)
    c1 = (ca + 1j * cb).astype(cdt)
    c0 = (cc + 1j * cd).astype(cdt)
    tiny = _tiny(ca.dtype, 0.25)
    scale = jnp.abs(c3) + jnp.abs(c4) + tiny
    c4 = jnp.where(jnp.abs(c4) < 1e-13 * scale, 1e-13 * scale, c4)
    b3, b1, b0 = c3 / c4, c1 / c4, c0 / c4
    z = jnp.exp(1j * (0.4 + jnp.arange(4, dtype=ca.dtype) * (np.pi / 2))).astype(cdt)
    z = jnp.broadcast_to(z, ca.shape + (4,))
    off = ~np.eye(4, dtype=bool)

    def body(_, z):
        pz = ((z + b3[..., None]) * z * z + b1[..., None]) * z + b0[..., None]
        diff = z[..., :, None] - z[..., None, :]
        den = jnp.prod(jnp.where(off, diff, 1.0), -1)
        den = jnp.where(jnp.abs(den) < tiny, tiny, den)
        return z - pz / den

    z = lax.fori_loop(0, iters, body, z)
    first = jnp.arctan2(ca, -cb)[..., None] + jnp.array([0.0, np.pi], ca.dtype)
    th = jnp.concatenate([jnp.angle(z).astype(ca.dtype), first], -1)
    ca, cb, cc, cd = (x[..., None] for x in (ca, cb, cc, cd))
    for _ in range(newton):
        cth, sth = jnp.cos(th), jnp.sin(th)
        c2, s2 = cth * cth - sth * sth, 2 * sth * cth
        f1 = ca * cth + cb * sth + cc * c2 + cd * s2
        f2 = -ca * sth + cb * cth - 2 * cc * s2 + 2 * cd * c2
        step = f1 / jnp.where(jnp.abs(f2) > tiny, f2, tiny)
        th = th - jnp.clip(step, -0.05, 0.05)
    return th


def _cylinder_dirs(v, g: _G, newton: int = 3):
    """Stationary directions between the prism and a cylinder (to be taken both ways): its
    axis (caps), edge x axis (edge on the side), radial (vertex on the side), vertex to
    nearest and farthest rim points, and the common normals of edge lines and rim
    circles."""
    a, e1, e2 = g.mat[:, 2], g.mat[:, 0], g.mat[:, 1]
    r, h = g.size[0], g.size[1]
    p0, e = _edges(v)
    out = [a[None], _unit(jnp.cross(e, a[None]))]
    rad = _unit(_perp(v - g.pos, a))  # (6, 3) radial direction of each vertex
    out.append(rad)
    rims = jnp.stack([g.pos + h * a, g.pos - h * a])  # (2, 3)
    q = rims[None, :, None, :] + r * jnp.stack([rad, -rad], 1)[:, None, :, :]  # (6, 2, 2, 3)
    out.append((q - v[:, None, None, :]).reshape(-1, 3))
    # edge line (p0, e) against rim circle c + r (cos th e1 + sin th e2): the derivative of
    # their squared distance is 2 r (A cos th + B sin th + C cos 2th + D sin 2th)
    d0 = _perp(rims[None, :, :] - p0[:, None, :], e[:, None, :])  # (9, 2, 3)
    al, be = (e @ e1)[:, None], (e @ e2)[:, None]
    ca, cb = d0 @ e2, -(d0 @ e1)
    cc, cd = -r * al * be, 0.5 * r * (al * al - be * be)
    ca, cb, cc, cd = (jnp.broadcast_to(x, (9, 2)) for x in (ca, cb, cc, cd))

    th = _trig_roots(ca, cb, cc, cd, newton,
                     _ROOT_ITERS[jnp.dtype(v.dtype) == jnp.float64]["trig"])
    cth, sth = jnp.cos(th)[..., None], jnp.sin(th)[..., None]
    qq = rims[None, :, None, :] + r * (cth * e1 + sth * e2)
    out.append(_perp(qq - p0[:, None, None, :], e[:, None, None, :]).reshape(-1, 3))
    return jnp.concatenate(out, 0)


def _box_geometry(g: _G):
    """Corners (8, 3) and edges (12 start points, 12 directions) of a box."""
    sg = np.array([[(i >> k & 1) * 2 - 1 for k in range(3)] for i in range(8)], float)
    corners = g.pos + (jnp.asarray(sg, g.pos.dtype) * g.size) @ g.mat.T
    starts, dirs = [], []
    for k in range(3):
        for i in range(8):
            if not i >> k & 1:
                starts.append(i)
                dirs.append(k)
    return corners, corners[np.array(starts)], g.mat.T[np.array(dirs)]


def _mesh_geometry(g: _G, data):
    """Vertices (V, 3), polygon normals (P, 3) and polygon edges (starts, ends) of a mesh."""
    vert = g.pos + g.vert @ g.mat.T
    pv = data.poly_vert
    npv = data.poly_nvert
    k = jnp.arange(pv.shape[1])
    nxt = jnp.where(k[None, :] + 1 < npv[:, None], k[None, :] + 1, 0)
    i0 = jnp.maximum(pv, 0)
    i1 = jnp.maximum(jnp.take_along_axis(pv, nxt, 1), 0)
    normals = data.poly_normal.astype(g.pos.dtype) @ g.mat.T
    return vert, normals, vert[i0.reshape(-1)], vert[i1.reshape(-1)]


def _candidates(t: int, v, g: _G, data):
    """Candidate directions for the prism v (6, 3) and geom g, unnormalised, as
    (one-sided (k1, 3), two-sided (k2, 3): each to be taken both ways)."""
    faces = _prism_faces(v)
    if t == SPHERE:
        return jnp.concatenate([faces, _point_dirs(v, g.pos[None])], 0), None
    if t == CAPSULE:
        a = g.mat[:, 2] * g.size[1]
        s0, s1 = (g.pos - a)[None], (g.pos + a)[None]
        cr, lines = _segment_dirs(v, s0, s1)
        return jnp.concatenate([faces, _point_dirs(v, jnp.concatenate([s0, s1])), lines],
                               0), cr
    if t == ELLIPSOID:
        return faces, _ellipsoid_dirs(v, g)
    if t == CYLINDER:
        return faces, _cylinder_dirs(v, g)
    if t == BOX:
        corners, starts, dirs = _box_geometry(g)
        cr, lines = _segment_dirs(v, starts, starts + dirs, axes=g.mat.T)
        return (jnp.concatenate([faces, _point_dirs(v, corners), lines], 0),
                jnp.concatenate([g.mat.T, cr], 0))
    vert, normals, q0, q1 = _mesh_geometry(g, data)
    cr, lines = _segment_dirs(v, q0, q1)
    return (jnp.concatenate([faces, _point_dirs(v, vert), lines], 0),
            jnp.concatenate([normals, cr], 0))


# ---------------------------------------------------------------------- one prism


def _features(vals, tol):
    """Indices of the best and second best values and how many are within tol of the best
    (1, 2 or 3 for 'three or more')."""
    i1 = jnp.argmax(vals)
    idx = jnp.arange(vals.shape[0])
    v2 = jnp.where(idx == i1, -jnp.inf, vals)
    i2 = jnp.argmax(v2)
    v3 = jnp.where(idx == i2, -jnp.inf, v2)
    best = vals[i1]
    cnt = 1 + (v2[i2] >= best - tol).astype(jnp.int32) + (jnp.max(v3) >= best - tol)
    return i1, i2, cnt


def _witness(t: int, v, g: _G, data, n, dist, tol):
    """Contact position for direction n: halfway between the witness points of prism and
    geom, taken from whichever side touches with a single point (else edge-edge closest
    points, else the middle of the geom's touching feature)."""
    xg = _spoint(t, g, -n)
    if t in (SPHERE, ELLIPSOID):
        return xg - 0.5 * dist * n
    pi1, pi2, pcnt = _features(lax.stop_gradient(v @ n), tol)
    if t == CAPSULE:
        a = g.mat[:, 2] * g.size[1]
        ends = jnp.stack([g.pos - a, g.pos + a]) - g.size[0] * n
        ev = -(ends @ n)
        g_unique = jnp.abs(ev[0] - ev[1]) > tol
        g0, g1 = ends[0], ends[1]
        mid_g = 0.5 * (g0 + g1)
    elif t == CYLINDER:
        lm = g.mat.T @ -n
        side = jnp.abs(lm[2]) * g.size[1] <= tol
        cap = jnp.sqrt(lm[0] * lm[0] + lm[1] * lm[1]) * g.size[0] <= tol
        a = g.mat[:, 2] * g.size[1]
        sgn = jnp.where(lm[2] >= 0, 1.0, -1.0)
        radial = xg - a * sgn  # support point on the middle circle
        g0, g1 = radial - a, radial + a  # the side line (meaningful when `side`)
        g_unique = ~side & ~cap
        mid_g = jnp.where(side, radial, g.pos + a * sgn)
    else:
        pts = _box_geometry(g)[0] if t == BOX else _mesh_geometry(g, data)[0]
        gv = lax.stop_gradient(-(pts @ n))
        gi1, gi2, gcnt = _features(gv, tol)
        g_unique = gcnt == 1
        g0, g1 = pts[gi1], pts[gi2]
        near = (gv >= gv[gi1] - tol)[:, None]
        mid_g = jnp.sum(jnp.where(near, pts, 0.0), 0) / jnp.maximum(jnp.sum(near), 1)
    from_g = xg - 0.5 * dist * n
    p_unique = pcnt == 1
    c1, c2 = _seg_closest(v[pi1], v[pi2], g0, g1)
    from_p = v[pi1] + 0.5 * dist * n
    edges = 0.5 * (c1 + c2)
    fallback = mid_g - 0.5 * dist * n
    both_edges = (pcnt == 2) & ~g_unique
    if t in (BOX, MESH):
        both_edges = both_edges & (gcnt == 2)
    if t == CYLINDER:
        both_edges = both_edges & side
    return jnp.where(g_unique, from_g, jnp.where(p_unique, from_p,
                                                 jnp.where(both_edges, edges, fallback)))


def _search(t: int, v, g: _G, data):
    """Signed distance and unit normal (prism to geom) of one prism (stopped inputs)."""
    one, two = _candidates(t, v, g, data)
    if two is not None and t == MESH:  # not symmetric about its centre
        one, two = jnp.concatenate([one, _both(two)], 0), None
    one = _unit(one)
    f = [_max(_dots(one, v)) + _hsup(t, g, -one)]
    cand = [one]
    if two is not None:
        # F(n) and F(-n) from one product with the vertices: G is symmetric about g.pos
        two = _unit(two)
        dots = _dots(two, v)
        base = _dot(two, g.pos)
        sym = _hsup(t, g, two) - base
        f += [_max(dots) - base + sym, base + sym - _min(dots)]
        cand += [two, -two]
    f = jnp.concatenate(f)
    i = _argmin(f)
    return -f[i], jnp.concatenate(cand)[i]


def _argmin(f):
    """First index of the minimum of a 1-D array, as two plain reductions: XLA:CPU's
    variadic argmin reduce is several times slower (terrain.xml's cylinder at batch 1024:
    7.5 of its collider's 57 ms)."""
    n = f.shape[0]
    f = lax.optimization_barrier(f)  # else XLA may compute f twice, rounding it differently
    return jnp.minimum(jnp.min(jnp.where(f == jnp.min(f), jnp.arange(n, dtype=jnp.int32), n)),
                       n - 1)


def _evaluate(t: int, v, g: _G, data, n):
    """Signed distance along the frozen normal n, and the contact position (with gradients
    through the prism v and the geom g)."""
    dist = -(_max(_dot(v, n)) + _hsup(t, g, -n))
    scale = lax.stop_gradient(jnp.max(jnp.abs(v)) + _rbound(t, g.size, g.vert))
    # ties within rounding: mesh vertices are single precision
    tol = (1e-6 if t == MESH else 1e-9) * scale
    return dist, _witness(t, v, g, data, n, dist, tol)


def _discrete(t: int, v, g: _G, data):
    """MuJoCo's native CCD of the prism v and the geom at zero margin (stopped inputs): a
    sphere or capsule shrunk to its core first, as mjc_ccd does. Returns (dist, unit
    normal, position), dist >= 0 without contact."""
    from jaxsim.collision import ccd, convex

    def sup_prism(d):
        vals = v @ d
        low = d[2] < 0
        j = jnp.argmax(jnp.where(low, vals[:3], vals[3:]))
        return v[jnp.where(low, 0, 3) + j], -1

    shrink = t in (SPHERE, CAPSULE)
    geom = Geom(g.pos, g.mat, g.size)

    def core(d):
        return ccd.support(t, geom, d, jnp.int32(-1), True)[0]

    def sup_geom(d):
        if t in (SPHERE, CAPSULE, ELLIPSOID, CYLINDER):
            return ccd.support(t, geom, d, jnp.int32(-1), False)[0], -1
        lm = g.mat.T @ d
        if t == BOX:
            up = lm >= 0
            idx = up[0].astype(jnp.int32) + 2 * up[1].astype(jnp.int32) + 4 * up[2].astype(
                jnp.int32)
            return g.pos + g.mat @ jnp.where(up, g.size, -g.size), idx
        i = jnp.argmax(g.vert @ lm).astype(jnp.int32)
        return g.pos + g.mat @ g.vert[i], i

    center = jnp.sum(v, 0) * (1.0 / 6.0)
    dist, x1, x2, found = convex.penetration(
        sup_prism, sup_geom, center, g.pos, 0.0, 0.0, iterations=CCD_ITERATIONS,
        tolerance=CCD_TOLERANCE, discrete1=True, discrete2=t in (BOX, MESH),
        radius2=g.size[0] if shrink else None, core2=core if shrink else None)
    dist = jnp.where(found & jnp.isfinite(dist), dist, 1.0)
    return dist, _unit(x1 - x2), 0.5 * (x1 + x2)


# ------------------------------------------------------------------------- one pair


def _prisms(elev, size, nrow, ncol, r, c, i):
    """Vertices (..., 6, 3) of triangle i of cells (r, c): bottom then top."""
    dt = size.dtype
    fr, fc = (nrow - 1).astype(dt), (ncol - 1).astype(dt)
    dx, dy = 2 * size[0] / fc, 2 * size[1] / fr
    dr = jnp.asarray(_TRI_DR)[i]  # (..., 3)
    dc = jnp.asarray(_TRI_DC)[i]
    ri, ci = r[..., None] + dr, c[..., None] + dc
    z = elev[jnp.clip(ri, 0, elev.shape[0] - 1), jnp.clip(ci, 0, elev.shape[1] - 1)] * size[2]
    x = dx * ci.astype(dt) - size[0]
    y = dy * ri.astype(dt) - size[1]
    top = jnp.stack([x, y, z], -1)
    bottom = jnp.stack([x, y, jnp.broadcast_to(-size[3], z.shape)], -1)
    return jnp.concatenate([bottom, top], -2)


def _collide(t: int, g1: Geom, g2: Geom, margin, nslot: int = MAXCONPAIR) -> Contacts:
    hd: HFieldData = g1.data
    dt = jnp.result_type(g1.pos, g2.pos, float)
    margin = jnp.asarray(margin, dt)
    size = jnp.asarray(hd.size, dt)
    elev = jnp.asarray(hd.elev, dt)
    r1 = jnp.asarray(g1.mat, dt)
    pos1 = jnp.asarray(g1.pos, dt)
    vert = None
    if t == MESH:
        vert = jnp.asarray(g2.data.vert, dt)
    g = _G(r1.T @ (jnp.asarray(g2.pos, dt) - pos1), r1.T @ jnp.asarray(g2.mat, dt),
           jnp.asarray(g2.size, dt), vert)

    # the search runs on stopped values
    gs, ss, es, ms, data = jax.tree.map(lax.stop_gradient, (g, size, elev, margin, g2.data))
    s0, s1, s2, s3 = ss[0], ss[1], ss[2], ss[3]
    nrow, ncol = hd.nrow, hd.ncol

    # bounding sphere and box of the geom in the height field's frame
    eye = jnp.eye(3, dtype=dt)
    hi = _hsup(t, gs, eye)
    lo = -_hsup(t, gs, -eye)
    p = gs.pos
    rad = _rbound(t, gs.size, gs.vert) + ms
    keep = ~((s0 < p[0] - rad) | (-s0 > p[0] + rad) | (s1 < p[1] - rad) | (-s1 > p[1] + rad)
             | (s2 < p[2] - rad) | (-s3 > p[2] + rad))
    keep &= ~((lo[0] - ms > s0) | (hi[0] + ms < -s0) | (lo[1] - ms > s1)
              | (hi[1] + ms < -s1) | (lo[2] - ms > s2) | (hi[2] + ms < -s3))

    # cells covered by the bounding box grown by the margin, in rows then columns
    def index(x, half, n):
        return jnp.clip(x / (2 * half) * (n - 1).astype(dt), -2.0, n.astype(dt) + 2.0)

    cmin = jnp.maximum(0, jnp.floor(index(lo[0] - ms + s0, s0, ncol)).astype(jnp.int32))
    cmax = jnp.minimum(ncol - 1, jnp.ceil(index(hi[0] + ms + s0, s0, ncol)).astype(jnp.int32))
    rmin = jnp.maximum(0, jnp.floor(index(lo[1] - ms + s1, s1, nrow)).astype(jnp.int32))
    rmax = jnp.minimum(nrow - 1, jnp.ceil(index(hi[1] + ms + s1, s1, nrow)).astype(jnp.int32))
    ncols = jnp.maximum(cmax - cmin, 0)
    ncells = jnp.where(keep, jnp.maximum(rmax - rmin, 0) * ncols, 0)
    # MuJoCo's CCD costs several times the exact contact under vmap (GJK and EPA run to
    # the slowest prism of the batch). Spheres, capsules, ellipsoids and cylinders take it
    # in float64 only, where MuJoCo's numbers are the target; below it the exact contact
    # stands (as deep or deeper than MuJoCo's, whose EPA stops within its tolerance:
    # positions within ~2e-4 of MuJoCo's for resting geoms). Boxes and meshes always take
    # it: MuJoCo's discrete mode differs from the exact contact by far more (a box resting
    # on a random field: distances 6e-3 and positions 4e-2 apart).
    discrete = MATCH_DISCRETE and (t in (BOX, MESH) or dt == jnp.float64)
    zero = ms == 0
    # MuJoCo's CCD after the scan, on the prisms the exact search finds touching (those it
    # finds touching are among them, up to ties; `_discrete_after`), except for meshes,
    # whose vertices a row of that map would copy: theirs runs in the scan
    after = discrete and t != MESH
    # ties: the exact distance of a prism MuJoCo's CCD finds touching is below this
    tie = jnp.where(discrete & zero, 100 * float(np.finfo(dt).eps) * (
        jnp.max(jnp.abs(ss[:3])) + _rbound(t, gs.size, gs.vert)), 0.0) if after else 0.0

    nb = hd.cells.shape[0]
    kp = min(2 * nb, PRISMS)  # prisms searched per step of the scan

    def chunk(j):
        """The prisms of cells j*B .. j*B+B-1 (2B, in MuJoCo's order), their ids and which
        can touch the geom. Cheap: a prism is ruled out when the geom lies beyond the
        margin along one of its face normals (the search would find so too, the faces
        being among its directions) or one of the geom's axes, or wholly above its top."""
        k = j * nb + hd.cells
        cell_r = rmin + k // jnp.maximum(ncols, 1)
        cell_c = cmin + k % jnp.maximum(ncols, 1)
        rr = jnp.repeat(cell_r, 2)
        cc = jnp.repeat(cell_c, 2)
        ii = jnp.tile(jnp.arange(2, dtype=jnp.int32), nb)
        v = _prisms(es, ss, nrow, ncol, rr, cc, ii)
        # directions: the prism's face normals and the geom's axes (both ways); along any
        # unit n the distance is at least -(h_P(n) + h_G(-n))
        axes = jnp.broadcast_to(_both(gs.mat.T), (v.shape[0], 6, 3))
        dirs = jnp.concatenate([jax.vmap(_prism_faces)(v), axes], 1)  # (2B, 11, 3)
        gap = -(_max(_dots(dirs, v)) + _hsup(t, gs, -dirs))
        live = ((jnp.repeat(k, 2) < ncells) & (_max(v[:, 3:, 2]) + ms >= lo[2])
                & (_max(gap) < ms))
        return v, 2 * jnp.repeat(k, 2) + ii, live

    def body(st):
        """Searches the next kp prisms that can touch, in order, of the current chunk; moves
        to the next chunk when they are all seen."""
        j, off, count, ids, dist, nrm, ext = st
        v, pid, live = chunk(j)
        nlive = jnp.sum(live, dtype=jnp.int32)
        order = jnp.argsort(~live, stable=True)
        slot_k = off + jnp.arange(kp, dtype=jnp.int32)
        pick = order[jnp.minimum(slot_k, order.shape[0] - 1)]
        v, i2 = v[pick], pid[pick]
        d2, n2 = jax.vmap(lambda v: _search(t, v, gs, data))(v)
        e2 = jnp.zeros((kp, 3), dt)
        if discrete and not after:
            dd, dn, e2 = jax.vmap(lambda v: _discrete(t, v, gs, data))(v)
            d2 = jnp.where(zero, dd, d2)
            n2 = jnp.where(zero, dn, n2)
        valid = (slot_k < nlive) & (d2 < ms + tie)
        rank = count + jnp.cumsum(valid, dtype=jnp.int32) - 1
        slot = jnp.where(valid & (rank < nslot), rank, nslot)
        put = lambda buf, x: buf.at[slot].set(x.astype(buf.dtype), mode="drop")  # noqa: E731
        done = off + kp >= nlive
        return (j + done.astype(jnp.int32), jnp.where(done, 0, off + kp).astype(jnp.int32),
                count + jnp.sum(valid, dtype=jnp.int32), put(ids, i2), put(dist, d2),
                put(nrm, n2), put(ext, e2))

    def cond(st):
        j, count = st[0], st[2]
        return (j * nb < ncells) & (count < MAXCONPAIR)

    k = nslot  # the scan still stops at MAXCONPAIR: more than nslot is an overflow
    init = (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32),
            jnp.zeros(k, jnp.int32), jnp.zeros(k, dt),
            jnp.tile(jnp.array([0.0, 0.0, 1.0], dt), (k, 1)), jnp.zeros((k, 3), dt))
    _, _, count, ids, sdist, nrm, ext = lax.while_loop(cond, body, init)
    ok = jnp.arange(k) < count
    over = None if nslot >= MAXCONPAIR else count > nslot
    if after:
        ok, ids, sdist, nrm, ext = _discrete_after(t, ok & zero, ok, ids, sdist, nrm, ext,
                                                   es, ss, nrow, ncol, rmin, cmin, ncols, gs)

    # the contacts again, with gradients, at the frozen normals
    cell = ids // 2
    cell_r = rmin + cell // jnp.maximum(ncols, 1)
    cell_c = cmin + cell % jnp.maximum(ncols, 1)
    v = _prisms(elev, size, nrow, ncol, cell_r, cell_c, ids % 2)
    dist, pos = jax.vmap(lambda v, n: _evaluate(t, v, g, g2.data, n))(v, nrm)
    if discrete:
        # MuJoCo's early-stopped depth and its witness points, moving with the overlap
        dist = jnp.where(zero, sdist + (dist - lax.stop_gradient(dist)), dist)
        pos = jnp.where(zero, ext + (pos - lax.stop_gradient(pos)), pos)
    dist = jnp.where(ok, dist, 0.0)
    pos = _mv(jnp.where(ok[:, None], pos, 0.0), r1.T) + pos1
    return Contacts(dist, pos, _mv(nrm, r1.T), jnp.zeros_like(pos), ok, over)


def _discrete_after(t, run, ok, ids, sdist, nrm, ext, es, ss, nrow, ncol, rmin, cmin, ncols,
                    gs: _G):
    """MuJoCo's CCD (`_discrete`) on the prisms the scan found (`run`: the slots to run it
    on, those of a zero margin; stopped values), the slots it finds touching kept in order.

    The scan keeps the prisms whose exact distance is below the margin (plus a tie
    tolerance): every prism MuJoCo's CCD finds touching is among them (its GJK decides the
    overlap as the exact distance does, and its EPA only stops short of the depth), so the
    CCD runs once per contact, not once per prism the scan searches. It runs as a masked
    map: batched, over the slots of all pairs and worlds that need it, in chunks (a box on
    a height field: models/terrain.xml's two boxes at batch 64, 65 -> 26 ms per step)."""
    k = ids.shape[0]
    cell = ids // 2
    v = _prisms(es, ss, nrow, ncol, rmin + cell // jnp.maximum(ncols, 1),
                cmin + cell % jnp.maximum(ncols, 1), ids % 2)
    rows = (v, jnp.broadcast_to(gs.pos, (k, 3)), jnp.broadcast_to(gs.mat, (k, 3, 3)),
            jnp.broadcast_to(gs.size, (k, 3)))

    def one(row, _):
        v, pos, mat, size = row
        return _discrete(t, v, _G(pos, mat, size, None), None)

    dd, dn, de = loops.masked_map(one, run, rows, chunk_div=_AFTER_CHUNK_DIV)
    keep = jnp.where(run, dd < 0, ok)
    pick = loops.true_first(keep, k)
    sel = lambda x: x[pick]  # noqa: E731
    sdist = jnp.where(run, dd, sdist)
    nrm = jnp.where(run[:, None], dn, nrm)
    ext = jnp.where(run[:, None], de, ext)
    ok = jnp.arange(k) < jnp.sum(keep, dtype=jnp.int32)
    return ok, sel(ids), sel(sdist), sel(nrm), sel(ext)


@functools.cache
def _make(t: int, nslot: int):
    def fn(g1: Geom, g2: Geom, margin) -> Contacts:
        return _collide(t, g1, g2, margin, nslot)

    fn.__name__ = f"hfield_{GeomType(t).name.lower()}"
    return fn


FUNCTIONS = {(HFIELD, t): (_make(t, MAXCONPAIR), MAXCONPAIR)
             for t in (SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH)}


def function(t: int, nslot: int):
    """The collider of a height field with geom type t, for pairs of `nslot` slots."""
    return _make(t, int(min(max(nslot, 1), MAXCONPAIR)))
