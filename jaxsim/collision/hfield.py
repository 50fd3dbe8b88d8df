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

The convex collision of a prism P with a geom G is solved exactly instead of by GJK/EPA
(`jaxsim.collision.prism`).
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
from jaxsim.collision.prism import (
    _G,
    _both,
    _dots,
    _evaluate,
    _hsup,
    _max,
    _mv,
    _prism_faces,
    _rbound,
    _search,
    _unit,
)
from jaxsim.types import EnableBit, GeomType

HFIELD, SPHERE, CAPSULE = int(GeomType.HFIELD), int(GeomType.SPHERE), int(GeomType.CAPSULE)
ELLIPSOID, CYLINDER = int(GeomType.ELLIPSOID), int(GeomType.CYLINDER)
BOX, MESH = int(GeomType.BOX), int(GeomType.MESH)

MAXCONPAIR = 50  # mjMAXCONPAIR: contacts per geom pair


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
