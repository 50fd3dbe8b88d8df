"""Collision driver (MuJoCo: mj_collision): candidate pairs, narrow phase, contact buffer.

Structure is decided once per model on the host (`plan`): which geom pairs can ever
collide (MuJoCo's static filters: same weld body, both bodies without dofs, parent-child
unless disabled, <exclude>, contype/conaffinity, explicit <pair>s merged in), the order
of the pairs (MuJoCo's: by body-pair signature, then geom ids), and their grouping by
collision function. At run time each group is one `vmap`ped call; a bounding-sphere
test with margin masks pairs that are far apart; contact parameters are mixed from the
two geoms (or taken from the <pair>); the slots are laid out in MuJoCo's pair order.

The contact buffer has a fixed size: the sum over candidate pairs of each function's
maximum contact count, or the cap `nconmax` (`<size nconmax>` or `plan(..., nconmax=)`)
when smaller, in which case the deepest contacts are kept and `state.overflow` is set
when some are dropped. `state.maxuse_con` records the most contacts any step needed.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import linalg, loops
from jaxsim.collision import broadphase
from jaxsim.collision.common import Contacts, Geom, make_frame
from jaxsim.types import Contact, DisableBit, EnableBit, GeomType, Model, State

MINMU = 1e-5  # MuJoCo's mjMINMU: smallest friction coefficient
MINVAL = 1e-15  # MuJoCo's mjMINVAL
# slack on the detection bound of the analytic colliders (see _narrow); zero: with
# kinematics rounded as MuJoCo's (math.normalize_quat) exact touches agree to the bit
TOUCH = 0.0

_NAMES = {t.value: t.name.lower() for t in GeomType}


def _analytic() -> set:
    """Type pairs with analytic colliders: MuJoCo reports their exact touches (dist ==
    margin); the GJK-based colliders do not."""
    from jaxsim.collision import box, primitive

    return set(primitive.FUNCTIONS) | set(box.FUNCTIONS)


def _functions(m: Model | None = None) -> dict:
    """(type1, type2) -> (fn, K) from every narrow-phase module; the convex ones with the
    model's CCD options (iterations, tolerance, multiccd) when `m` is given."""
    from jaxsim.collision import box, convex, hfield, primitive

    table = {}
    table.update(primitive.FUNCTIONS)
    table.update(box.FUNCTIONS)
    table.update(convex.FUNCTIONS if m is None else convex.functions(m.opt))
    table.update(hfield.FUNCTIONS)
    return table


class Group(NamedTuple):
    """Candidate pairs that share a collision function (all arrays static numpy)."""

    types: tuple[int, int]
    k: int  # contacts per pair
    geom1: np.ndarray  # (p,)
    geom2: np.ndarray  # (p,)
    ipair: np.ndarray  # (p,) explicit <pair> id or -1
    pair: np.ndarray  # (p,) index of each pair in buffer order
    slot: np.ndarray  # (p, k) position of each contact in the (uncapped) buffer
    merged: bool = False  # several convex type pairs, one function (types per pair)


class Plan(NamedTuple):
    groups: tuple[Group, ...]
    ncand: int  # total slots before the cap
    ncon: int  # buffer size (after the cap)
    # per candidate pair, in buffer order (static): geoms, pair id, condim, param source
    geom1: np.ndarray
    geom2: np.ndarray
    ipair: np.ndarray
    condim: np.ndarray
    source: np.ndarray  # 1: geom 1's parameters, 2: geom 2's, 0: mixed (same priority)
    sweeps: tuple  # of Sweep: groups whose pairs are found at run time
    filt: object  # _Filter, for the run-time pairs
    broad: object  # broadphase.Static
    flexplane: object = None  # flexcol.PlanePlan: plane : flex vertex slots, or None
    elem: tuple = ()  # flexcol.ElemBlock: geom : element and self-collision blocks
    nstatic: int = 0  # slots of the enumerated geom pairs
    order: np.ndarray | None = None  # static permutation merging flex slots in MuJoCo order


# A group with at least SWEEP_MIN candidate pairs (automatic, between bounded geoms) is
# not enumerated: its pairs are found at run time by sweep and prune along the principal
# axis of the geom centres, with room for SWEEP_CAP1 * n overlapping projections and
# SWEEP_CAP2 * n pairs (n geoms) for the narrow phase; `state.overflow` reports a cut.
SWEEP_MIN = 1000
SWEEP_CAP1 = 256
SWEEP_CAP2 = 16


class Sweep(NamedTuple):
    types: tuple[int, int]
    k: int
    geoms: np.ndarray  # geoms of either type taking part
    cap1: int  # overlapping projections considered
    cap2: int  # pairs passed to the narrow phase


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


class _Filter(NamedTuple):
    """Per-geom structure for MuJoCo's static pair filters (numpy, host)."""

    body: np.ndarray
    weld: np.ndarray
    pweld: np.ndarray  # weld body of the weld body's parent
    dofnum: np.ndarray  # dofs of the weld body
    bct: np.ndarray  # body-level contype (OR over the body's geoms)
    bca: np.ndarray
    ct: np.ndarray
    ca: np.ndarray
    exclude: np.ndarray  # sorted exclude signatures
    explicit: np.ndarray  # sorted keys min(g)*ngeom + max(g) of the <pair>s
    ngeom: int
    filterparent: bool


def _filter_info(m: Model) -> _Filter:
    gbody = _np(m.geom_bodyid)
    nb = m.nbody
    bct = np.zeros(nb, np.int64)
    bca = np.zeros(nb, np.int64)
    np.bitwise_or.at(bct, gbody, _np(m.geom_contype))
    np.bitwise_or.at(bca, gbody, _np(m.geom_conaffinity))
    weld = _np(m.body_weldid)
    pweld = weld[_np(m.body_parentid)[weld]]
    pg1, pg2 = _np(m.pair_geom1), _np(m.pair_geom2)
    keys = np.sort(np.minimum(pg1, pg2) * m.ngeom + np.maximum(pg1, pg2))
    return _Filter(gbody, weld[gbody], pweld[gbody], _np(m.body_dofnum)[weld][gbody],
                   bct[gbody], bca[gbody], _np(m.geom_contype), _np(m.geom_conaffinity),
                   np.sort(_np(m.exclude_signature)), keys, m.ngeom,
                   not m.opt.disableflags & DisableBit.FILTERPARENT)


def _isin_sorted(xp, values, table):
    if len(table) == 0:
        return xp.zeros(values.shape, bool)
    t = xp.asarray(table)
    i = xp.clip(xp.searchsorted(t, values), 0, len(table) - 1)
    return t[i] == values


def _auto_ok(f: _Filter, a, b, xp=np):
    """MuJoCo's static filters for an automatic (not <pair>) geom pair; a, b geom ids."""
    g = lambda arr, i: xp.asarray(arr)[i]  # noqa: E731
    bct_a, bca_a, bct_b, bca_b = g(f.bct, a), g(f.bca, a), g(f.bct, b), g(f.bca, b)
    ok = ((bct_a | bca_a) != 0) & ((bct_b | bca_b) != 0)
    ok &= ((bct_a & bca_b) | (bct_b & bca_a)) != 0
    wa, wb = g(f.weld, a), g(f.weld, b)
    ok &= wa != wb
    ok &= (g(f.dofnum, a) > 0) | (g(f.dofnum, b) > 0)
    if f.filterparent:
        ok &= ~((wa != 0) & (wb != 0) & ((wa == g(f.pweld, b)) | (wb == g(f.pweld, a))))
    ba, bb = g(f.body, a), g(f.body, b)
    sig = (xp.minimum(ba, bb) << 16) + xp.maximum(ba, bb)
    ok &= ~_isin_sorted(xp, sig, f.exclude)
    ok &= ((g(f.ct, a) & g(f.ca, b)) | (g(f.ct, b) & g(f.ca, a))) != 0
    key = xp.minimum(a, b) * f.ngeom + xp.maximum(a, b)
    ok &= ~_isin_sorted(xp, key, f.explicit)
    return ok


def _geom_keys(m: Model, body, g1, g2, xp=np):
    """Sort keys of geom pairs within a body pair, from the geoms as stored (the lower type
    first): those as stored where MuJoCo's midphase sorts the pair's contacts (a body with
    several geoms, unless disabled), else the lower body's geom first."""
    b1, b2 = body[g1], body[g2]
    nge = xp.asarray(_np(m.body_geomnum))
    mid = (nge[b1] > 1) | (nge[b2] > 1)
    if m.opt.disableflags & DisableBit.MIDPHASE:
        mid = xp.zeros_like(mid)
    first = mid | (b1 <= b2)
    return xp.where(first, g1, g2), xp.where(first, g2, g1)


def candidate_pairs(m: Model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Geom pairs (g1, g2, ipair) passing MuJoCo's static filters, in MuJoCo's order.

    g1 has the lower geom type (MuJoCo swaps so that the collision table applies).
    """
    flags = m.opt.disableflags
    if flags & (DisableBit.CONSTRAINT | DisableBit.CONTACT) or m.nbody < 2:
        return (np.zeros(0, np.int64),) * 3
    gtype = _np(m.geom_type)
    f = _filter_info(m)
    a, b = np.triu_indices(m.ngeom, 1)
    ok = _auto_ok(f, a, b)
    a, b = a[ok], b[ok]
    ba, bb = f.body[a], f.body[b]
    a, b = np.where(ba <= bb, a, b), np.where(ba <= bb, b, a)  # a in the lower body
    sig = (f.body[a] << 16) + f.body[b]
    pg1, pg2 = _np(m.pair_geom1), _np(m.pair_geom2)
    g1 = np.concatenate([pg1, a])
    g2 = np.concatenate([pg2, b])
    ip = np.concatenate([np.arange(m.npair), -np.ones(len(a), np.int64)])
    sigs = np.concatenate([_np(m.pair_signature), sig])
    kind = np.concatenate([np.zeros(m.npair, np.int64), np.ones(len(a), np.int64)])
    swap = gtype[g1] > gtype[g2]
    s1, s2 = np.where(swap, g2, g1), np.where(swap, g1, g2)
    # (an explicit pair is alone with its index: its geom keys do not matter)
    k1, k2 = _geom_keys(m, f.body, s1, s2)
    order = np.lexsort((k2, k1, np.maximum(ip, 0), kind, sigs))
    return s1[order], s2[order], ip[order]


def _check_supported(m: Model, g1, g2, table) -> None:
    gtype = _np(m.geom_type)
    missing = set()
    for a, b in zip(gtype[g1], gtype[g2], strict=True):
        if (int(a), int(b)) not in table:
            if a in (GeomType.PLANE, GeomType.HFIELD) and b in (GeomType.PLANE, GeomType.HFIELD):
                continue  # MuJoCo has no function for these either: never collide
            missing.add((_NAMES[int(a)], _NAMES[int(b)]))
    if missing:
        names = ", ".join(f"{a}-{b}" for a, b in sorted(missing))
        raise NotImplementedError(f"jaxsim has no collision function for geom pair(s) {names}")


# Convex type pairs (GJK/EPA) with at most MERGE_MAX candidate pairs each share one
# compiled function per contact count when a model has several of them: geom types are
# then traced per pair (convex.convex), so GJK and EPA are compiled once instead of once per
# type pair (the tactile test model: 8 -> 3). Larger groups keep their specialised code,
# which runs faster; capsule-mesh keeps it always (its segment clipping is static-only).
MERGE_MAX = 64


def _merged_types(table, t1, t2) -> dict:
    """{(type1, type2): k} of the convex type pairs to merge, by contact count k."""
    from jaxsim.collision import convex

    counts = Counter(zip(t1.tolist(), t2.tolist(), strict=True))
    cand = {t: table[t][1] for t, n in counts.items()
            if t in convex._CONVEX_PAIRS and t != (GeomType.CAPSULE, GeomType.MESH)
            and n <= MERGE_MAX}
    per_k = Counter(cand.values())
    return {t: k for t, k in cand.items() if per_k[k] >= 2}


_PLANS: dict = {}


def plan(m: Model, nconmax: int | None = None) -> Plan:
    """The model's collision structure (cached per model structure)."""
    key = (m._static_key, m.opt._static_key, nconmax)
    hit = _PLANS.get(key)
    if hit is not None:
        return hit
    table = _functions(m)
    g1, g2, ip = candidate_pairs(m)
    _check_supported(m, g1, g2, table)
    gtype = _np(m.geom_type)
    t1, t2 = gtype[g1], gtype[g2]
    has_fn = np.array([(int(a), int(b)) in table for a, b in zip(t1, t2, strict=True)], bool)
    g1, g2, ip, t1, t2 = g1[has_fn], g2[has_fn], ip[has_fn], t1[has_fn], t2[has_fn]

    # large groups of automatic pairs between bounded geoms: run-time sweep and prune
    sweeps = []
    for types in sorted(set(zip(t1.tolist(), t2.tolist(), strict=True))):
        sel = (t1 == types[0]) & (t2 == types[1])
        if (sel.sum() < SWEEP_MIN or np.any(ip[sel] >= 0)
                or {GeomType.PLANE, GeomType.HFIELD} & set(types)
                or (types[0] != types[1] and GeomType.MESH in types)):
            continue
        geoms = np.unique(np.concatenate([g1[sel], g2[sel]]))
        n = len(geoms)
        cap1 = int(min(n * (n - 1) // 2, max(4096, SWEEP_CAP1 * n)))
        cap2 = int(min(sel.sum(), max(256, SWEEP_CAP2 * n)))
        sweeps.append(Sweep(types, table[types][1], geoms, cap1, cap2))
        g1, g2, ip, t1, t2 = g1[~sel], g2[~sel], ip[~sel], t1[~sel], t2[~sel]

    # slots: pairs in MuJoCo order, K slots each (a height field's pair: its partner's)
    ks = np.array([table[(int(a), int(b))][1] for a, b in zip(t1, t2, strict=True)], np.int64)
    hf = t1 == GeomType.HFIELD
    if hf.any():
        ks = np.where(hf, np.minimum(ks, np.asarray(m.hfield_nslot, np.int64)[g2]), ks)
    start = np.concatenate([[0], np.cumsum(ks)]).astype(np.int64)
    groups = []
    merge = _merged_types(table, t1, t2)
    for types, k in sorted({((a, b), c) for a, b, c in
                            zip(t1.tolist(), t2.tolist(), ks.tolist(), strict=True)}):
        if types in merge:
            continue
        sel = np.nonzero((t1 == types[0]) & (t2 == types[1]) & (ks == k))[0]
        slot = start[sel][:, None] + np.arange(k)[None, :]
        groups.append(Group(types, k, g1[sel], g2[sel], ip[sel], sel, slot))
    for k in sorted(set(merge.values())):
        sel = np.nonzero([merge.get((int(a), int(b))) == k
                          for a, b in zip(t1, t2, strict=True)])[0]
        slot = start[sel][:, None] + np.arange(k)[None, :]
        groups.append(Group((-1, k), k, g1[sel], g2[sel], ip[sel], sel, slot, True))
    from jaxsim.collision import flexcol

    fp = flexcol.plane_plan(m)
    eblocks = flexcol.elem_plan(m)
    nflexslot = (0 if fp is None else len(fp.geom)) + sum(b.nslot for b in eblocks)
    ncand = int(start[-1]) + sum(sw.cap2 * sw.k for sw in sweeps) + nflexslot
    cap = m.nconmax if nconmax is None else nconmax
    ncon = ncand if cap is None or cap < 0 else min(ncand, int(cap))

    # contact dimension and parameter source per pair
    pri = _np(m.geom_priority)
    cd = _np(m.geom_condim)
    p1, p2 = pri[g1], pri[g2]
    source = np.where(p1 > p2, 1, np.where(p1 < p2, 2, 0))
    condim = np.where(source == 1, cd[g1], np.where(source == 2, cd[g2],
                                                      np.maximum(cd[g1], cd[g2])))
    if m.npair:
        condim = np.where(ip >= 0, _np(m.pair_dim)[np.maximum(ip, 0)], condim)
    order = None
    if (fp is not None or eblocks) and not sweeps:
        # MuJoCo's order: by bodyflex signature (a flex counts as body nbody + f), explicit
        # pairs first within theirs, a pair's contacts together
        gb = _np(m.geom_bodyid)
        pair_sig = (np.minimum(gb[g1], gb[g2]) << 16) + np.maximum(gb[g1], gb[g2])
        sigs = [np.repeat(pair_sig, ks)]
        if fp is not None:
            sigs.append((gb[fp.geom] << 16) + m.nbody + fp.flex)
        sigs += [np.full(b.nslot, b.sig, np.int64) for b in eblocks]
        order = np.argsort(np.concatenate(sigs), kind="stable")
    out = Plan(tuple(groups), ncand, ncon, g1, g2, ip, condim, source, tuple(sweeps),
               _filter_info(m), broadphase.Static(m), fp, eblocks, int(start[-1]), order)
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[key] = out
    return out


def buffer_size(m: Model) -> int:
    """Number of contact slots the state needs for this model."""
    return plan(m).ncon


# ------------------------------------------------------------------------ run time


def _geom_data(m: Model, gids: np.ndarray):
    """Type-specific data of the given geoms (all of one type), stacked, or None."""
    gtype = int(m.geom_type[gids[0]])
    if gtype == GeomType.MESH:
        from jaxsim.collision import ccd

        return ccd.mesh_data(m, _np(m.geom_dataid)[gids])
    if gtype == GeomType.HFIELD:
        from jaxsim.collision import hfield

        return hfield.hfield_data(m, _np(m.geom_dataid)[gids])
    return None


def _margin_gap(m: Model, g1, g2, ip):
    """Per-pair margin and gap (MuJoCo: getMargin, getGap, mj_assignMargin)."""
    margin = m.geom_margin[g1] + m.geom_margin[g2]
    gap = m.geom_gap[g1] + m.geom_gap[g2]
    if m.npair and np.any(ip >= 0):
        ipc = np.maximum(ip, 0)
        margin = jnp.where(ip >= 0, m.pair_margin[ipc], margin)
        gap = jnp.where(ip >= 0, m.pair_gap[ipc], gap)
    if m.opt.enableflags & EnableBit.OVERRIDE:
        margin = jnp.broadcast_to(m.opt.o_margin, margin.shape)
    return margin, gap


def _sphere_filter(m: Model, d: State, g1, g2, bound):
    """MuJoCo's mj_filterSphere (True: keep). `bound` is margin + gap."""
    r1, r2 = m.geom_rbound[g1], m.geom_rbound[g2]
    p1, p2 = d.geom_xpos[g1], d.geom_xpos[g2]

    def dot(a, b):  # over the last axis of 3, as multiply-adds (a reduction is a kernel)
        return a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1] + a[:, 2] * b[:, 2]

    dif = p1 - p2
    far = dot(dif, dif) > (r1 + r2 + bound) ** 2
    both = (r1 > 0) & (r2 > 0)
    plane1 = np.asarray(m.geom_type)[g1] == GeomType.PLANE
    plane2 = np.asarray(m.geom_type)[g2] == GeomType.PLANE
    out = ~(both & far)
    # a plane's side: only the pairs with a plane (static), by its normal (z column)
    for plane, ga, rb, sgn in ((plane1, g1, r2, -1.0), (plane2, g2, r1, 1.0)):
        k = np.nonzero(plane)[0]
        if k.size:
            n = d.geom_xmat[ga[k], :, 2]
            beyond = (rb[k] > 0) & (sgn * dot(dif[k], n) > bound[k] + rb[k])
            out = out.at[k].set(out[k] & ~(~both[k] & beyond))
    return out


def _side_tables(m: Model):
    """(solmix, solref, solimp, friction, adhesion) of the contact sides: the geoms', then
    (rows ngeom + f) the flexes' (no adhesion)."""
    tabs = (m.geom_solmix, m.geom_solref, m.geom_solimp, m.geom_friction, m.geom_adhesion)
    if not m.nflex:
        return tabs
    flex = (m.flex_solmix, m.flex_solref, m.flex_solimp, m.flex_friction,
            jnp.zeros(m.nflex, m.geom_adhesion.dtype))
    return tuple(jnp.concatenate([a, b.astype(a.dtype)]) for a, b in zip(tabs, flex, strict=True))


def _params(m: Model, g1, g2, ip, src, dtype):
    """Per-pair friction (5), solref, solreffriction, solimp, adhesion.

    MuJoCo: mj_contactParam (geom pairs, geom : flex pairs) and the <pair> values; g1, g2
    are side ids (a geom, or ngeom + f for flex f; `_side_tables`); `src` says whose
    parameters win by priority (1, 2) or 0 to mix them (same priority).
    """
    solmix, solref_t, solimp_t, friction_t, adhesion_t = _side_tables(m)
    mix1 = solmix[g1]
    mix2 = solmix[g2]
    ok1, ok2 = mix1 >= MINVAL, mix2 >= MINVAL
    mix = jnp.where(ok1 & ok2, mix1 / jnp.where(ok1 & ok2, mix1 + mix2, 1.0),
                    jnp.where(~ok1 & ~ok2, 0.5, jnp.where(~ok1, 0.0, 1.0)))
    mix = jnp.where(src == 1, 1.0, jnp.where(src == 2, 0.0, mix))[:, None]
    sr1, sr2 = solref_t[g1], solref_t[g2]
    standard = (sr1[:, :1] > 0) & (sr2[:, :1] > 0)
    solref = jnp.where(standard, mix * sr1 + (1 - mix) * sr2, jnp.minimum(sr1, sr2))
    solref = jnp.where((src == 1)[:, None], sr1, jnp.where((src == 2)[:, None], sr2, solref))
    solimp = mix * solimp_t[g1] + (1 - mix) * solimp_t[g2]
    f1, f2 = friction_t[g1], friction_t[g2]
    fri = jnp.where((src == 1)[:, None], f1, jnp.where((src == 2)[:, None], f2,
                                                         jnp.maximum(f1, f2)))
    friction = fri[:, np.array([0, 0, 1, 2, 2])]
    a1, a2 = adhesion_t[g1], adhesion_t[g2]
    adhesion = jnp.where(src == 1, a1, jnp.where(src == 2, a2, a1 + a2))
    solreffriction = jnp.zeros_like(solref)
    if m.npair:
        e = ip >= 0
        ipc = jnp.maximum(ip, 0)
        solref = jnp.where(e[:, None], m.pair_solref[ipc], solref)
        solimp = jnp.where(e[:, None], m.pair_solimp[ipc], solimp)
        friction = jnp.where(e[:, None], m.pair_friction[ipc], friction)
        adhesion = jnp.where(e, m.pair_adhesion[ipc], adhesion)
        psf = m.pair_solreffriction[ipc]
        has = e[:, None] & jnp.any(psf != 0, -1, keepdims=True)
        solreffriction = jnp.where(has, psf, solreffriction)
    if m.opt.enableflags & EnableBit.OVERRIDE:
        n = solref.shape[0]
        solref = jnp.broadcast_to(m.opt.o_solref, (n, 2))
        solreffriction = jnp.broadcast_to(m.opt.o_solref, (n, 2))
        solimp = jnp.broadcast_to(m.opt.o_solimp, (n, 5))
        friction = jnp.broadcast_to(m.opt.o_friction, (n, 5))
    friction = jnp.maximum(friction, MINMU)
    return [jnp.asarray(x, dtype) for x in (friction, solref, solreffriction, solimp, adhesion)]


class _Slots(NamedTuple):
    """Per-slot narrow-phase results and pair attributes (one row per contact slot)."""

    dist: jax.Array
    pos: jax.Array
    frame: jax.Array
    valid: jax.Array
    geom1: jax.Array
    geom2: jax.Array
    ipair: jax.Array
    condim: jax.Array
    src: jax.Array
    margin: jax.Array  # margin (includemargin)
    flex: jax.Array  # (n, 2) flex of each side (-1: a geom)
    vert: jax.Array  # (n, 2) flex vertex of each side (-1: none)
    elem: jax.Array  # (n, 2) flex element of each side (-1: none)


# analytic groups with at least this many pairs evaluate only the pairs that pass the
# bounding filters (jaxsim.loops.masked_map); smaller ones evaluate every pair
_SPARSE_MIN = 16
# ... in chunks of 1/8 of the rows (batched: of all the worlds' rows), the iterative groups
# too: a trip runs GJK and EPA to the slowest row of its chunk, so a chunk much larger than
# the rows that pass costs more than its share (at batch 1024: models/terrain.xml's
# ellipsoid against seven geoms, one pair in bounds, 95 ms in halves, 23 in eighths; the
# bundled quadruped 20.0-20.8k -> 22.7-24.1k steps/s; the MJX barkour the same)
_CHUNK_DIV_ITERATIVE = 8


def _sparse(m: Model, analytic: bool, npair: int, g1=None, g2=None) -> bool:
    """Whether a group's narrow phase runs only on the pairs that pass the bounding filters
    (static; g1, g2 the group's geoms, None when found at run time). The analytic groups from
    `_SPARSE_MIN` pairs. The iterative ones (GJK/EPA, height fields) unless each pair has a
    geom welded to the world: a pair of moving bodies is mostly beyond its bounding spheres
    and costs far more than the chunked map's gathers (the bundled quadruped at batch 1024:
    the torso ellipsoid's eight pairs with the legs, never within their bounds at rest, took
    134 of the step's 200 ms evaluated densely), while a foot on the terrain or an object on
    a static mesh is mostly within them, and there a single dense call is cheaper (the MJX
    barkour's four feet on its height field at batch 1024: 9.8k steps/s dense, 7.0-7.8k
    through the map)."""
    if analytic:
        return npair >= _SPARSE_MIN
    if g1 is None:
        return True
    weld = _np(m.body_weldid)[_np(m.geom_bodyid)]
    return not np.all((weld[g1] == 0) | (weld[g2] == 0))


def _narrow(m: Model, d: State, fn, k: int, g1, g2, data1, data2, bound, dt, keep=None,
            types=(), chunk_div: int = 8):
    """One vmapped narrow-phase call over a group; results as (p * k,) rows.

    For analytic colliders the callers pass margin + gap + TOUCH as `bound`; a contact is
    reported where dist <= margin, as MuJoCo (whose rounding of exact touches ours follows:
    the sensors that count contacts depend on it). With `keep` (pairs that pass the bounding
    filters), the others are not evaluated and come back invalid with zero values. `types`:
    per-pair arrays passed to `fn` after the bound (the merged groups' geom types). The
    fifth result: per pair, whether it found more contacts than its k slots (None where the
    collider cannot).
    """
    ga = Geom(d.geom_xpos[g1], d.geom_xmat[g1], m.geom_size[g1], data1)
    gb = Geom(d.geom_xpos[g2], d.geom_xmat[g2], m.geom_size[g2], data2)

    def one(args, _):
        res: Contacts = fn(*args)
        out = res.dist, res.pos, jax.vmap(make_frame)(res.normal, res.tangent), res.valid
        return out if res.overflow is None else out + (res.overflow,)

    args = (ga, gb, bound) + tuple(types)
    if keep is None:
        res = jax.vmap(one, in_axes=(0, None))(args, ())
    else:
        res = loops.masked_map(one, keep, args, chunk_div=chunk_div)
    dist, pos, fr, valid = res[:4]
    n = dist.shape[0] * k
    return (dist.reshape(n).astype(dt), pos.reshape(n, 3).astype(dt),
            fr.reshape(n, 3, 3).astype(dt), valid.reshape(n), res[4] if len(res) > 4 else None)


def _merged_call(m: Model, d: State, grp: Group, bound, dt, keep=None):
    """A merged convex group (`MERGE_MAX`) through `_narrow`: one convex.convex call with
    the geom types per pair (each side's type dispatch compiled for the types on that
    side); a side's geoms carry MeshData rows when a mesh is among them (a primitive gets
    some mesh's row, which its type never reads)."""
    from jaxsim.collision import ccd, convex

    gtype = _np(m.geom_type)
    ids = np.concatenate([grp.geom1, grp.geom2])
    mesh = gtype[ids] == GeomType.MESH
    n = len(grp.geom1)
    data1 = data2 = None
    if mesh.any():
        dataid = _np(m.geom_dataid)[ids]
        rows = ccd.mesh_data(m, np.where(mesh, dataid, dataid[mesh][0]))
        if mesh[:n].any():
            data1 = jax.tree.map(lambda x: x[:n], rows)
        if mesh[n:].any():
            data2 = jax.tree.map(lambda x: x[n:], rows)
    opt = convex.CCDOptions.of(m.opt)
    opts1, opts2 = (sorted(set(gtype[g].tolist())) for g in (grp.geom1, grp.geom2))

    def typ(value, opts):  # static if one type, else traced among those present
        return opts[0] if len(opts) == 1 else ccd.TypeOf(value, opts)

    def fn(g1, g2, bnd, a, b):
        return convex.convex(typ(a, opts1), typ(b, opts2), g1, g2, bnd, opt, nslot=grp.k)

    types = (jnp.asarray(gtype[grp.geom1], jnp.int32), jnp.asarray(gtype[grp.geom2], jnp.int32))
    return _narrow(m, d, fn, grp.k, grp.geom1, grp.geom2, data1, data2, bound, dt, keep,
                   types=types, chunk_div=_CHUNK_DIV_ITERATIVE)


def group_call(m: Model, d: State, grp: Group, bound, keep, table, dt):
    """The narrow phase of one group of the plan (`_narrow`'s results): `bound` its pairs'
    margin + gap, `keep` whether they pass the bounding filters."""
    if grp.merged:
        sparse = _sparse(m, False, len(grp.pair), grp.geom1, grp.geom2)
        return _merged_call(m, d, grp, bound, dt, keep if sparse else None)
    analytic = grp.types in _analytic()
    fn = table[grp.types][0]
    if grp.types[0] == GeomType.HFIELD:
        from jaxsim.collision import hfield

        fn = hfield.function(grp.types[1], grp.k)
    sparse = _sparse(m, analytic, len(grp.pair), grp.geom1, grp.geom2)
    return _narrow(m, d, fn, grp.k, grp.geom1, grp.geom2, _geom_data(m, grp.geom1),
                   _geom_data(m, grp.geom2), bound + (TOUCH if analytic else 0.0), dt,
                   keep if sparse else None,
                   chunk_div=8 if analytic else _CHUNK_DIV_ITERATIVE)


def _static_slots(m: Model, d: State, p: Plan, table, dt, boxes):
    """Narrow phase over the statically enumerated pairs, in MuJoCo's pair order: the
    _Slots (None without pairs) and whether a pair found more contacts than its slots."""
    over = jnp.zeros((), bool)
    if not p.groups:
        return None, over
    margin, gap = _margin_gap(m, p.geom1, p.geom2, p.ipair)
    keep = _sphere_filter(m, d, p.geom1, p.geom2, margin + gap + TOUCH)  # conservative
    if boxes is not None:
        keep &= broadphase.keep(p.broad, boxes, p.geom1, p.geom2, p.ipair >= 0)
    parts, slots, pairs = [], [], []
    for grp in p.groups:
        idx = grp.pair
        out = group_call(m, d, grp, (margin + gap)[idx], keep[idx], table, dt)
        valid = out[3] & jnp.repeat(keep[idx], grp.k)
        if out[4] is not None:
            over = over | jnp.any(out[4] & keep[idx])
        parts.append(out[:3] + (valid,))
        slots.append(grp.slot.reshape(-1))
        pairs.append(np.repeat(idx, grp.k))
    # static permutation from group order to buffer (MuJoCo pair) order
    slot = np.concatenate(slots)
    perm = np.empty_like(slot)
    perm[slot] = np.arange(len(slot))
    ps = np.concatenate(pairs)[perm]
    cat = [jnp.concatenate(xs)[perm] for xs in zip(*parts, strict=True)]
    none = np.full((len(ps), 2), -1, np.int64)
    return _Slots(*cat, geom1=p.geom1[ps], geom2=p.geom2[ps], ipair=p.ipair[ps],
                  condim=p.condim[ps], src=p.source[ps], margin=margin[ps], flex=none,
                  vert=none, elem=none), over


def _needs_broadphase(p: Plan) -> bool:
    """Whether any candidate pair goes through MuJoCo's sweep (not all are explicit or
    with an always-colliding body)."""
    if p.sweeps:
        return True
    bp = p.broad
    free = bp.always[bp.gbody[p.geom1]] | bp.always[bp.gbody[p.geom2]] | (p.ipair >= 0)
    return not np.all(free)


def _finish(m: Model, d: State, s: _Slots, ncon: int, dt) -> State:
    """Contact parameters, the cap, and the state's contact fields."""
    side1, side2 = s.geom1, s.geom2
    if m.nflex:
        side1 = jnp.where(jnp.asarray(s.geom1) >= 0, s.geom1, m.ngeom + jnp.asarray(s.flex)[:, 0])
        side2 = jnp.where(jnp.asarray(s.geom2) >= 0, s.geom2, m.ngeom + jnp.asarray(s.flex)[:, 1])
    friction, solref, solreffriction, solimp, adhesion = _params(
        m, side1, side2, s.ipair, s.src, dt)
    valid = s.valid
    dist = jnp.where(valid, s.dist, 0.0)
    includemargin = jnp.asarray(s.margin, dt)
    gapped = dist >= includemargin
    dim = jnp.where((adhesion != 0) & gapped, 1, jnp.asarray(s.condim, jnp.int32))
    con = Contact(
        dist=dist, pos=jnp.where(valid[:, None], s.pos, 0.0),
        frame=jnp.where(valid[:, None, None], s.frame, jnp.eye(3, dtype=dt)),
        includemargin=includemargin, friction=friction, solref=solref,
        solreffriction=solreffriction, solimp=solimp, dim=dim.astype(jnp.int32),
        geom=jnp.stack([jnp.asarray(s.geom1, jnp.int32), jnp.asarray(s.geom2, jnp.int32)], -1),
        flex=jnp.asarray(s.flex, jnp.int32), elem=jnp.asarray(s.elem, jnp.int32),
        vert=jnp.asarray(s.vert, jnp.int32),
        efc_address=jnp.full(valid.shape, -1, jnp.int32), active=valid,
        exclude=valid & gapped & (adhesion == 0), adhesion=adhesion,
    )
    n_needed = jnp.sum(valid).astype(jnp.int32)
    overflow = d.overflow
    if ncon < valid.shape[0]:
        # keep the deepest contacts, in buffer order
        score = jnp.where(valid, -dist, -jnp.inf)
        _, top = jax.lax.top_k(score, ncon)
        top = jnp.sort(top)
        con = jax.tree_util.tree_map(lambda x: x[top], con)
        overflow = overflow | (n_needed > ncon)
    maxuse = jnp.maximum(d.maxuse_con, n_needed)
    return d.replace(contact=con, ncon=jnp.minimum(n_needed, ncon).astype(jnp.int32),
                     maxuse_con=maxuse.astype(jnp.int32), overflow=overflow)


def collision(m: Model, d: State, nconmax: int | None = None) -> State:
    """Fills `d.contact` (MuJoCo: mj_collision). Needs geom_xpos / geom_xmat."""
    p = plan(m, nconmax)
    dt = d.qpos.dtype
    if p.ncon == 0:
        return d.replace(contact=Contact.zeros(0, dt), ncon=jnp.zeros((), jnp.int32))
    table = _functions(m)
    # body boxes of MuJoCo's broad phase, once for every group
    boxes = broadphase.body_boxes(m, d, p.broad) if _needs_broadphase(p) else None
    sl, over = _static_slots(m, d, p, table, dt, boxes)
    parts = [sl]
    for sw in p.sweeps:
        sl, o = _sweep_slots(m, d, p, sw, table, dt, boxes)
        parts.append(sl)
        over = over | o
    if p.flexplane is not None:
        parts.append(_flex_plane_slots(m, d, p, dt))
    if p.elem:
        sl, o = _flex_elem_slots(m, d, p, dt)
        parts.append(sl)
        over = over | o
    parts = [x for x in parts if x is not None]
    s = _Slots(*(jnp.concatenate([jnp.asarray(x) for x in xs]) for xs in zip(*parts, strict=True)))
    if p.sweeps:
        s = _mujoco_order(m, p, s)
    elif p.order is not None:
        s = _Slots(*(x[p.order] for x in s))
    return _finish(m, d.replace(overflow=d.overflow | over), s, p.ncon, dt)


def _flex_plane_slots(m: Model, d: State, p: Plan, dt) -> _Slots:
    """The plane : flex vertex slots (jaxsim.collision.flexcol)."""
    from jaxsim import flex
    from jaxsim.collision import flexcol

    fp = p.flexplane
    dist, pos, normal, valid, margin, vert = flexcol.plane_contacts(m, d, fp,
                                                                    flex.vertex_xpos(m, d))
    frame = jax.vmap(make_frame)(normal, jnp.zeros_like(normal))
    n = len(fp.geom)
    src, condim = _flex_source(m, fp.geom, fp.flex)
    minus = np.full(n, -1, np.int64)
    return _Slots(dist.astype(dt), pos.astype(dt), frame.astype(dt), valid, fp.geom, minus,
                  minus, condim, src, margin, np.stack([minus, fp.flex], -1),
                  jnp.stack([jnp.asarray(minus), vert], -1), np.stack([minus, minus], -1))


def _flex_elem_slots(m: Model, d: State, p: Plan, dt) -> _Slots:
    """The geom : element and self-collision slots (jaxsim.collision.flexcol)."""
    from jaxsim import flex
    from jaxsim.collision import convex, flexcol

    vx = flex.vertex_xpos(m, d)
    opt = convex.CCDOptions.of(m.opt)
    parts = []
    over = jnp.zeros((), bool)
    for blk in p.elem:
        o = flexcol.block_contacts(m, d, blk, vx, opt)
        over = over | o.overflow
        n = o.dist.shape[0]
        geom = jnp.asarray(o.geom)
        src, condim = _elem_source(m, blk, geom)
        frame = jax.vmap(make_frame)(o.normal, o.tangent)
        if blk.parts[0].kind.startswith("geom"):
            margin = flexcol.margin_gap(m, jnp.maximum(geom, 0), jnp.full(n, blk.flex))[0]
        else:
            margin = jnp.zeros(n, dt)
        fl = jnp.where(geom >= 0, -1, blk.flex)
        minus = jnp.full(n, -1)
        parts.append(_Slots(o.dist.astype(dt), o.pos.astype(dt), frame.astype(dt), o.valid,
                            geom, minus, minus, condim, src,
                            jnp.asarray(margin, dt), jnp.stack([fl, jnp.full(n, blk.flex)], -1),
                            jnp.stack([minus, minus], -1),
                            jnp.stack([jnp.asarray(o.e1), jnp.asarray(o.e2)], -1)))
    return _Slots(*(jnp.concatenate([jnp.asarray(x) for x in xs])
                    for xs in zip(*parts, strict=True))), over


def _elem_source(m: Model, blk, geom):
    """(parameter source, condim) per slot of a block, `geom` the side-0 geom per slot
    (-1 in self-collisions: the flex's own parameters)."""
    f = blk.flex
    if not blk.parts[0].kind.startswith("geom"):
        n = geom.shape[0]
        return jnp.zeros(n, jnp.int32), jnp.full(n, int(m.flex_condim[f]), jnp.int32)
    src, condim = _flex_source(m, np.arange(m.ngeom), np.full(m.ngeom, f))
    g = jnp.maximum(geom, 0)
    return jnp.asarray(src, jnp.int32)[g], jnp.asarray(condim, jnp.int32)[g]


def _elem_max_condim(m: Model, blk) -> int:
    f = blk.flex
    if not blk.parts[0].kind.startswith("geom"):
        return int(m.flex_condim[f])
    gs = np.concatenate([pp.geom for pp in blk.parts])
    return int(_flex_source(m, gs, np.full(len(gs), f))[1].max())


def flex_slot_condim(m: Model, p: Plan) -> np.ndarray:
    """condim of each flex slot (before `Plan.order`)."""
    out = []
    if p.flexplane is not None:
        out.append(_flex_source(m, p.flexplane.geom, p.flexplane.flex)[1])
    out += [np.full(b.nslot, _elem_max_condim(m, b)) for b in p.elem]
    return np.concatenate(out)


def _flex_source(m: Model, g: np.ndarray, f: np.ndarray):
    """Parameter source (as `Plan.source`) and condim of geom : flex pairs."""
    p1, p2 = _np(m.geom_priority)[g], _np(m.flex_priority)[f]
    c1, c2 = _np(m.geom_condim)[g], _np(m.flex_condim)[f]
    src = np.where(p1 > p2, 1, np.where(p1 < p2, 2, 0))
    return src, np.where(src == 1, c1, np.where(src == 2, c2, np.maximum(c1, c2)))


def _mujoco_order(m: Model, p: Plan, s: _Slots) -> _Slots:
    """The slots in MuJoCo's contact order when run-time sweep groups (whose pairs come
    after the enumerated ones) are present: by body pair, explicit <pair>s first (by pair
    index), then by geom as `candidate_pairs` orders them; a pair's own contacts keep
    their order and empty slots go last. The order matters beyond bookkeeping: noslip's
    Gauss-Seidel sweeps the contacts in it."""
    body = jnp.asarray(p.filt.body, jnp.int32)
    g1, g2 = jnp.asarray(s.geom1, jnp.int32), jnp.asarray(s.geom2, jnp.int32)
    fl = jnp.asarray(s.flex, jnp.int32)
    b1 = jnp.where(g1 >= 0, body[jnp.maximum(g1, 0)], m.nbody + fl[:, 0])
    b2 = jnp.where(g2 >= 0, body[jnp.maximum(g2, 0)], m.nbody + fl[:, 1])
    k1, k2 = _geom_keys(m, body, jnp.maximum(g1, 0), jnp.maximum(g2, 0), jnp)
    k1 = jnp.where(g2 >= 0, k1, g1)  # a geom : flex vertex slot: by geom, then vertex
    k2 = jnp.where(g2 >= 0, k2, jnp.asarray(s.vert, jnp.int32)[:, 1])
    ip = jnp.asarray(s.ipair, jnp.int32)
    # jnp.lexsort: the last key is the primary one
    keys = (jnp.arange(g1.shape[0], dtype=jnp.int32), k2, k1, jnp.maximum(ip, 0),
            (ip < 0).astype(jnp.int32), jnp.maximum(b1, b2), jnp.minimum(b1, b2),
            (~jnp.asarray(s.valid)).astype(jnp.int32))
    order = jnp.lexsort(keys)
    return _Slots(*(jnp.asarray(x)[order] for x in s))


def _sweep_slots(m: Model, d: State, p: Plan, sw: Sweep, table, dt, boxes):
    """Narrow phase over the pairs of one sweep group found at run time."""
    f: _Filter = p.filt
    ids = jnp.asarray(sw.geoms)
    n = len(sw.geoms)
    g = sw.geoms
    pad = m.geom_margin[g] + m.geom_gap[g]
    if m.opt.enableflags & EnableBit.OVERRIDE:
        pad = 0.5 * m.opt.o_margin + m.geom_gap[g]
    # world boxes: the tighter of the rotated local box and the bounding sphere, padded
    # by the geom's margin (MuJoCo's makeAAMM); no gradient flows through the search
    rot = jax.lax.stop_gradient(d.geom_xmat[g])
    cs = jax.lax.stop_gradient(d.geom_xpos[g])
    aabb = jax.lax.stop_gradient(m.geom_aabb[g])
    rb = jax.lax.stop_gradient(m.geom_rbound[g])[:, None]
    bc = cs + jnp.einsum("nij,nj->ni", rot, aabb[:, :3])
    bh = jnp.einsum("nij,nj->ni", jnp.abs(rot), aabb[:, 3:])
    lo3 = jnp.maximum(cs - rb, bc - bh)
    hi3 = jnp.minimum(cs + rb, bc + bh)
    padn = jax.lax.stop_gradient(pad)[:, None]
    lo3, hi3 = lo3 - padn, hi3 + padn
    cen = cs - jnp.mean(cs, 0)
    _, vec = linalg.eigh3(cen.T @ cen + 1e-12 * jnp.eye(3, dtype=cs.dtype))
    u = vec[:, -1]
    # projection of each box on u
    mid, half = 0.5 * (lo3 + hi3), 0.5 * (hi3 - lo3)
    xm = mid @ u
    xh = half @ jnp.abs(u)
    lo, hi = xm - xh, xm + xh
    order = jnp.argsort(lo)
    lo_s, hi_s = lo[order], hi[order]
    rank = jnp.arange(n)
    cnt = jnp.maximum(jnp.searchsorted(lo_s, hi_s, side="right") - rank - 1, 0)
    cum = jnp.cumsum(cnt)
    kk = jnp.arange(sw.cap1)
    i = jnp.minimum(jnp.searchsorted(cum, kk, side="right"), n - 1)
    j = jnp.minimum(i + 1 + kk - (cum[i] - cnt[i]), n - 1)
    ok = kk < cum[-1]
    a, b = order[i], order[j]
    ga, gb = ids[a], ids[b]
    gtype = jnp.asarray(_np(m.geom_type))
    ta, tb = gtype[ga], gtype[gb]
    t1, t2 = sw.types
    if t1 == t2:
        ok &= ta == t1
        ok &= tb == t1
        swap = ga > gb  # MuJoCo keeps the lower body's geom first for equal types
    else:
        ok &= ((ta == t1) & (tb == t2)) | ((ta == t2) & (tb == t1))
        swap = ta == t2
    a, b = jnp.where(swap, b, a), jnp.where(swap, a, b)
    ga, gb = ids[a], ids[b]
    ok &= jnp.all((lo3[a] <= hi3[b]) & (lo3[b] <= hi3[a]), axis=-1)
    ok &= _auto_ok(f, ga, gb, jnp)
    ok &= broadphase.keep(p.broad, boxes, ga, gb)
    nok = jnp.sum(ok)
    sel = jnp.nonzero(ok, size=sw.cap2, fill_value=0)[0]
    live = jnp.arange(sw.cap2) < nok
    overflow = (cum[-1] > sw.cap1) | (nok > sw.cap2)
    a, b = a[sel], b[sel]
    ga, gb = ids[a], ids[b]
    margin = m.geom_margin[ga] + m.geom_margin[gb]
    gap = m.geom_gap[ga] + m.geom_gap[gb]
    if m.opt.enableflags & EnableBit.OVERRIDE:
        margin = jnp.broadcast_to(m.opt.o_margin, margin.shape)
    take = lambda data, idx: None if data is None else jax.tree_util.tree_map(  # noqa: E731
        lambda z: z[idx], data)
    data = _geom_data(m, sw.geoms) if t1 == t2 == GeomType.MESH else None
    d1, d2 = take(data, a), take(data, b)
    analytic = sw.types in _analytic()
    touch = TOUCH if analytic else 0.0
    dist, pos, frame, valid, _ = _narrow(m, d, table[sw.types][0], sw.k, ga, gb, d1, d2,
                                      margin + gap + touch, dt,
                                      live if _sparse(m, analytic, sw.cap2) else None,
                                      chunk_div=8 if analytic else _CHUNK_DIV_ITERATIVE)
    valid = valid & jnp.repeat(live, sw.k)
    rep = lambda z: jnp.repeat(z, sw.k)  # noqa: E731
    pri = jnp.asarray(_np(m.geom_priority))
    cd = jnp.asarray(_np(m.geom_condim))
    p1, p2 = pri[ga], pri[gb]
    src = jnp.where(p1 > p2, 1, jnp.where(p1 < p2, 2, 0))
    condim = jnp.where(src == 1, cd[ga], jnp.where(src == 2, cd[gb],
                                                     jnp.maximum(cd[ga], cd[gb])))
    none = np.full((valid.shape[0], 2), -1, np.int64)
    sl = _Slots(dist, pos, frame, valid, rep(ga), rep(gb), rep(jnp.full_like(ga, -1)),
                rep(condim), rep(src), rep(margin), none, none, none)
    return sl, overflow
