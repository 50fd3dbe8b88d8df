"""Constraint rows: equality, friction loss, limits and contacts, with their impedance.

MuJoCo: engine_core_constraint.c: mj_makeConstraint (mj_instantiateEquality / Friction /
Limit / Contact, mj_diagApprox, mj_makeImpedance) and mj_referenceConstraint (efc_vel,
surface velocity, efc_aref, adhesion bias, the Jdot*v term of connect and weld rows).

The rows have the fixed layout of `jaxsim.efc`: every row that could exist has a slot in
MuJoCo's order and `active` marks the rows MuJoCo has now. Which slots exist is decided on
the host by `plan` (cached per model structure): equalities (connect 3 rows, weld 6, joint
and tendon couplings 1), friction loss of dofs and tendons (a slot wherever the value is
not known to be zero when tracing), limits (slide and hinge joints and tendons: a lower and
an upper row; ball joints: one), and one block of rows per contact slot.

`make_constraint` needs the position stage (kinematics, com_pos, tendon, collision, and
qLD when `<flag diagexact>` is on) and, for efc_vel / efc_aref, the velocity quantities of
`smooth.com_vel` (cvel, cdof_dot), as MuJoCo's reference stage runs after mj_comVel.

As MuJoCo with a dense Jacobian: a non-contact constraint whose Jacobian rows are all
zero is dropped, contacts are kept whenever nv > 0. (MuJoCo's sparse path decides from the
dof chains instead; the two differ only for Jacobian rows that vanish numerically.)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import math, scan, sleep
from jaxsim.collision.common import contact_bodies
from jaxsim.efc import Efc
from jaxsim.types import (
    Cone,
    ConstraintType,
    DisableBit,
    EnableBit,
    EqType,
    JointType,
    Model,
    ObjType,
    State,
)

MINVAL = 1e-15  # mjMINVAL
MINIMP = 0.0001  # mjMINIMP: solimp's dmin, dmax, midpoint are clamped to [MINIMP, MAXIMP]
MAXIMP = 0.9999  # mjMAXIMP
DEFAULT_SOLREF = (0.02, 1.0)  # what a mixed-sign solref is replaced with


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


# ------------------------------------------------------------------------------- plan


class Plan(NamedTuple):
    """Static row layout of one model (host numpy; object ids per kind of row)."""

    eq_connect: np.ndarray  # equality ids, 3 rows each
    eq_weld: np.ndarray  # 6 rows each
    eq_joint: np.ndarray  # 1 row each
    eq_tendon: np.ndarray  # 1 row each
    eq_flex: np.ndarray  # the equality id of each flex edge row (one per non-rigid edge)
    fri_dof: np.ndarray  # dof ids with a friction-loss row
    fri_ten: np.ndarray  # tendon ids with a friction-loss row
    lim_jnt: np.ndarray  # limited slide/hinge joints, 2 rows each (lower, upper)
    lim_ball: np.ndarray  # limited ball joints, 1 row each
    lim_ten: np.ndarray  # limited tendons, 2 rows each (lower, upper)
    eq_flex_edge: np.ndarray  # the flex edge of each eq_flex row
    perm: np.ndarray  # non-contact rows: MuJoCo position -> position in generation order
    nfixed: int  # number of non-contact rows
    ncon: int  # contact slots
    nrow: int  # rows of the widest contact block
    nefc: int
    crow: np.ndarray  # (ncon,) rows of each contact slot's block (its largest condim's)
    cadr: np.ndarray  # (ncon,) first row of each block


# the non-contact rows in generation order (as `_fixed_rows` emits them): kind, rows per
# object, MuJoCo section (equality, dof friction, tendon friction, joint and tendon limits)
_ROW_KINDS = (("eq_connect", 3, 0), ("eq_weld", 6, 0), ("eq_joint", 1, 0), ("eq_tendon", 1, 0),
              ("eq_flex", 1, 0), ("fri_dof", 1, 1), ("fri_ten", 1, 2), ("lim_jnt", 2, 3), ("lim_ball", 1, 3),
              ("lim_ten", 2, 4))


def row_positions(p: Plan, kind: str) -> np.ndarray:
    """(len(ids), rows each) positions in efc_* (MuJoCo's order) of the rows of one kind."""
    where = np.argsort(p.perm)  # generated row -> MuJoCo row
    start = 0
    for name, k, _ in _ROW_KINDS:
        n = len(getattr(p, name))
        if name == kind:
            return where[start + np.arange(n * k)].reshape(n, k)
        start += n * k
    raise ValueError(f"unknown row kind {kind!r}")


_KIND_TYPES = {"eq_connect": ConstraintType.EQUALITY, "eq_weld": ConstraintType.EQUALITY,
               "eq_joint": ConstraintType.EQUALITY, "eq_tendon": ConstraintType.EQUALITY,
               "eq_flex": ConstraintType.EQUALITY,
               "fri_dof": ConstraintType.FRICTION_DOF, "fri_ten": ConstraintType.FRICTION_TENDON,
               "lim_jnt": ConstraintType.LIMIT_JOINT, "lim_ball": ConstraintType.LIMIT_JOINT,
               "lim_ten": ConstraintType.LIMIT_TENDON}


def fixed_row_objects(p: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(nfixed,) type and object id of each non-contact row, in MuJoCo's order."""
    types = np.zeros(p.nfixed, np.int64)
    ids = np.zeros(p.nfixed, np.int64)
    for name, _k, _ in _ROW_KINDS:
        obj = np.asarray(getattr(p, name), np.int64)
        if len(obj):
            pos = row_positions(p, name)
            types[pos] = int(_KIND_TYPES[name])
            ids[pos] = obj[:, None]
    return types, ids


def row_flex_edges(p: Plan) -> np.ndarray:
    """(nfixed,) the flex edge of each non-contact row in MuJoCo's order (-1: not a flex
    edge equality row)."""
    out = np.full(p.nfixed, -1, np.int64)
    if len(p.eq_flex):
        out[row_positions(p, "eq_flex")[:, 0]] = p.eq_flex_edge
    return out


def _maybe(x, test) -> np.ndarray:
    """Entries whose parameter may pass `test`: all if traced, else the concrete test."""
    if isinstance(x, jax.core.Tracer):
        return np.ones(x.shape, bool)
    return np.asarray(test(np.asarray(x)), bool)


def _max_condim(m: Model) -> int:
    from jaxsim.collision import driver

    p = driver.plan(m)
    dims = [int(p.condim.max())] if len(p.condim) else []
    for sw in p.sweeps:
        dims.append(int(_np(m.geom_condim)[sw.geoms].max()))
    if p.flexplane is not None or p.elem:
        dims.append(int(driver.flex_slot_condim(m, p).max()))
    if not dims:
        dims = [int(_np(m.geom_condim).max(initial=1))]
    return max(dims)


def _slot_condim(m: Model, ncon: int) -> np.ndarray:
    """The largest condim each contact slot can hold (static): its pair's, or the model's
    largest when a cap or run-time sweep groups (sorted into MuJoCo's order) reorder the
    slots."""
    from jaxsim.collision import driver

    p = driver.plan(m)
    if ncon != p.ncon or p.ncon != p.ncand or p.sweeps:
        return np.full(ncon, _max_condim(m), np.int64)
    dims = np.zeros(ncon, np.int64)
    for g in p.groups:
        dims[g.slot] = np.asarray(p.condim)[g.pair][:, None]
    if p.flexplane is not None or p.elem:
        dims[p.nstatic:] = driver.flex_slot_condim(m, p)
    if p.order is not None:
        dims = dims[p.order]
    return dims


def block_rows(dim, elliptic: bool):
    """Constraint rows of a contact of dimension `dim`: elliptic dim, pyramidal 2 (dim - 1)
    (1 for a frictionless contact)."""
    if elliptic:
        return dim
    return np.where(dim == 1, 1, 2 * (dim - 1))


_PLANS: dict = {}


def plan(m: Model, ncon: int | None = None) -> Plan:
    """The model's constraint-row layout for a contact buffer of `ncon` slots (cached).

    ncon defaults to the collision driver's buffer size. Friction-loss rows are allocated
    for the dofs / tendons that had a friction loss when the model was compiled
    (dof_hasfrictionloss, tendon_hasfrictionloss), whether the values are concrete or
    traced, so a state's shapes never depend on tracing; a row whose value is 0 at run time
    is inactive. A concrete nonzero friction loss where no row exists is an error.
    """
    if ncon is None:
        from jaxsim.collision import driver

        ncon = driver.plan(m).ncon
    fdof = np.asarray(m.dof_hasfrictionloss, bool).reshape(m.nv)
    ften = np.asarray(m.tendon_hasfrictionloss, bool).reshape(m.ntendon)
    for name, has, vals in (("dof", fdof, m.dof_frictionloss),
                            ("tendon", ften, m.tendon_frictionloss)):
        if not isinstance(vals, jax.core.Tracer) and np.any((np.asarray(vals) != 0) & ~has):
            ids = np.nonzero((np.asarray(vals) != 0) & ~has)[0].tolist()
            raise ValueError(
                f"{name}_frictionloss is nonzero for {name}s {ids}, which had no friction "
                f"loss when the model was compiled, so no constraint rows; give them a "
                f"nonzero frictionloss in the MJCF (or set {name}_hasfrictionloss) first")
    key = (m._static_key, m.opt._static_key, int(ncon), fdof.tobytes(), ften.tobytes())
    hit = _PLANS.get(key)
    if hit is not None:
        return hit

    flags = m.opt.disableflags
    off = bool(flags & DisableBit.CONSTRAINT) or m.nv == 0
    empty = np.zeros(0, np.int64)
    eq_type = _np(m.eq_type)
    kinds = {}
    if off or flags & DisableBit.EQUALITY:
        kinds.update(eq_connect=empty, eq_weld=empty, eq_joint=empty, eq_tendon=empty,
                     eq_flex=empty)
        flex_edge = empty
    else:
        bad = sorted(set(eq_type.tolist()) - {EqType.CONNECT, EqType.WELD, EqType.JOINT,
                                               EqType.TENDON, EqType.FLEX})
        if bad:
            from jaxsim import flex

            flex.check_supported(m)  # names the flex and its source
            names = ", ".join(EqType(t).name.lower() for t in bad)
            raise NotImplementedError(f"jaxsim has no constraint rows for {names} equalities")
        for name, t in (("eq_connect", EqType.CONNECT), ("eq_weld", EqType.WELD),
                        ("eq_joint", EqType.JOINT), ("eq_tendon", EqType.TENDON)):
            kinds[name] = np.nonzero(eq_type == t)[0]
        # flex edge equalities: one row per non-rigid edge of the flex, in edge order
        eqs, edges = [empty], [empty]
        for i in np.nonzero(eq_type == EqType.FLEX)[0]:
            f = _np(m.eq_obj1id)[i]
            e = _np(m.flex_edgeadr)[f] + np.arange(_np(m.flex_edgenum)[f])
            e = e[~_np(m.flexedge_rigid).astype(bool)[e]]
            eqs.append(np.full(len(e), i, np.int64))
            edges.append(e.astype(np.int64))
        kinds["eq_flex"], flex_edge = np.concatenate(eqs), np.concatenate(edges)
    if off or flags & DisableBit.FRICTIONLOSS:
        kinds.update(fri_dof=empty, fri_ten=empty)
    else:
        kinds.update(fri_dof=np.nonzero(fdof)[0], fri_ten=np.nonzero(ften)[0])
    if off or flags & DisableBit.LIMIT:
        kinds.update(lim_jnt=empty, lim_ball=empty, lim_ten=empty)
    else:
        lim = np.asarray(m.jnt_limited, bool)
        jt = _np(m.jnt_type)
        kinds["lim_jnt"] = np.nonzero(lim & ((jt == JointType.SLIDE) | (jt == JointType.HINGE)))[0]
        kinds["lim_ball"] = np.nonzero(lim & (jt == JointType.BALL))[0]
        kinds["lim_ten"] = np.nonzero(np.asarray(m.tendon_limited, bool))[0]

    # sort key of each generated row: (section, object id, row within the object)
    keys = []

    def add(section, ids, k):
        for i in ids:
            for r in range(k):
                keys.append((section, int(i), r))

    for name, k, section in _ROW_KINDS:
        add(section, kinds[name], k)
    keys = np.asarray(keys, np.int64).reshape(-1, 3)
    perm = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0])) if len(keys) else empty
    nfixed = len(keys)

    crow = np.zeros(int(ncon), np.int64)
    if not (off or flags & DisableBit.CONTACT) and ncon:
        crow = np.asarray(block_rows(_slot_condim(m, int(ncon)),
                                     m.opt.cone == Cone.ELLIPTIC), np.int64)
    nrow = int(crow.max(initial=0))
    cadr = (nfixed + np.cumsum(crow) - crow).astype(np.int64)
    out = Plan(**kinds, eq_flex_edge=flex_edge, perm=perm, nfixed=nfixed, ncon=int(ncon), nrow=nrow,
               nefc=nfixed + int(crow.sum()), crow=crow, cadr=cadr)
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[key] = out
    return out


# ---------------------------------------------------------------------- impedance


def solparam(solref, solimp, timestep, refsafe: bool, friction: bool = False):
    """solref / solimp as MuJoCo uses them (getsolparam).

    A solref with mixed signs is replaced by the default (solreffriction: by zeros); with
    refsafe, a time constant is at least twice the time step; solimp is clamped.
    """
    mixed = (solref[..., 0] > 0) ^ (solref[..., 1] > 0)
    fallback = (jnp.zeros(2, solref.dtype) if friction
                else jnp.asarray(DEFAULT_SOLREF, solref.dtype))
    solref = jnp.where(mixed[..., None], fallback, solref)
    if refsafe:
        r0 = solref[..., 0]
        solref = solref.at[..., 0].set(jnp.where(r0 > 0, jnp.maximum(r0, 2 * timestep), r0))
    lo = jnp.asarray([MINIMP, MINIMP, 0.0, MINIMP, 1.0], solimp.dtype)
    hi = jnp.asarray([MAXIMP, MAXIMP, jnp.inf, MAXIMP, jnp.inf], solimp.dtype)
    return solref, jnp.clip(solimp, lo, hi)


def _pow(x, p):
    # MuJoCo takes exact shortcuts for the common powers 1 and 2
    return jnp.where(p == 1, x, jnp.where(p == 2, x * x, jnp.power(x, p)))


def impedance(solimp, pos, margin):
    """Impedance d(pos - margin) in (0, 1) from the five solimp numbers (getimpedance).

    solimp = (dmin, dmax, width, midpoint, power), already clamped by `solparam`.
    """
    d0, d1, width, mid, p = jnp.moveaxis(solimp, -1, 0)
    flat = (d0 == d1) | (width <= MINVAL)
    x = jnp.abs((pos - margin) / jnp.where(flat, 1.0, width))
    sat = (x >= 1) | (x <= 0)
    xs = jnp.where(sat | flat, 0.5, x)  # finite inputs for the branches not taken
    low = (1 / _pow(mid, p - 1)) * _pow(xs, p)
    high = 1 - (1 / _pow(1 - mid, p - 1)) * _pow(1 - xs, p)
    y = jnp.where(p == 1, xs, jnp.where(xs <= mid, low, high))
    imp = d0 + y * (d1 - d0)
    imp = jnp.where(sat, jnp.where(x >= 1, d1, d0), imp)
    return jnp.where(flat, 0.5 * (d0 + d1), imp)


def _kb(ref, dmax):
    """Stiffness K and damping B of the reference acceleration (mj_makeImpedance)."""
    r0, r1 = ref[..., 0], ref[..., 1]
    k = jnp.where(r0 > 0, 1 / jnp.maximum(MINVAL, dmax * dmax * r0 * r0 * r1 * r1),
                  -r0 / jnp.maximum(MINVAL, dmax * dmax))
    b = jnp.where(r1 > 0, 2 / jnp.maximum(MINVAL, dmax * r0), -r1 / jnp.maximum(MINVAL, dmax))
    return k, b


# ------------------------------------------------------------------------- Jacobians


def _jac(m: Model, d: State, point, body):
    """Jacobians (k, 3, nv) of points on bodies (mj_jac); `body` may be traced."""
    dt = point.dtype
    mask = jnp.asarray(scan.body_dof_mask(m.body_parentid, m.dof_bodyid), dt)[body]
    root = jnp.asarray(_np(m.body_rootid))[body]
    offset = point - d.subtree_com[root]
    rot, lin = d.cdof[:, :3], d.cdof[:, 3:]
    jacp = (jnp.cross(rot[None], offset[:, None]) + lin[None]) * mask[..., None]
    jacr = rot[None] * mask[..., None]
    return jnp.swapaxes(jacp, 1, 2), jnp.swapaxes(jacr, 1, 2)


def _dot3(a, b):
    """(k, 3) x (nv, 3) -> (k, nv) row-by-row dot products, as three multiply-adds (a
    batched product this small runs far slower as a dot_general on the CPU)."""
    return (a[:, None, 0] * b[None, :, 0] + a[:, None, 1] * b[None, :, 1]
            + a[:, None, 2] * b[None, :, 2])


def _row_jac(m: Model, d: State, point, b1, b2, u, w, w1=None, w2=None):
    """Rows (k, nv) of relative Jacobians of points on body pairs: the velocity of the
    point on b2 minus on b1, along u, plus their relative angular velocity along w. With
    weights w1, w2 (k, S), b1 and b2 are (k, S): each side is the weighted sum over its S
    bodies (flex element sides).

    Per dof: u . (rot x offset + lin) + w . rot = rot . (offset x u + w) + lin . u, so a
    row costs a few (k, nv) multiply-adds instead of the (k, 3, nv) Jacobians.
    """
    dt = point.dtype
    mask = jnp.asarray(scan.body_dof_mask(m.body_parentid, m.dof_bodyid), dt)
    root = jnp.asarray(_np(m.body_rootid))
    rot, lin = d.cdof[:, :3], d.cdof[:, 3:]
    lu = _dot3(u, lin)

    def lever(b):  # (k, 3): offset x u + w, component by component
        o = point - d.subtree_com[root[b]]
        return jnp.stack([o[:, 1] * u[:, 2] - o[:, 2] * u[:, 1] + w[:, 0],
                          o[:, 2] * u[:, 0] - o[:, 0] * u[:, 2] + w[:, 1],
                          o[:, 0] * u[:, 1] - o[:, 1] * u[:, 0] + w[:, 2]], axis=1)

    def side(b):
        return mask[b] * (_dot3(lever(b), rot) + lu)

    if w1 is None:
        # both sides in one elementwise expression over (k, nv)
        p1, p2 = lever(b1), lever(b2)
        m1, m2 = mask[b1], mask[b2]
        return m2 * (_dot3(p2, rot) + lu) - m1 * (_dot3(p1, rot) + lu)
    out = 0.0
    for s in range(b1.shape[1]):
        out = out + w2[:, s, None] * side(b2[:, s]) - w1[:, s, None] * side(b1[:, s])
    return out


def _jac_dot_v(m: Model, d: State, point, body: np.ndarray):
    """(Jdot_p v, Jdot_r v), each (k, 3), of points on static bodies (mj_jacDot)."""
    dt = point.dtype
    jt = _np(m.jnt_type)[_np(m.dof_jntid)]
    first = _np(m.jnt_dofadr)[_np(m.dof_jntid)]
    quat = (jt == JointType.BALL) | ((jt == JointType.FREE) & (np.arange(m.nv) >= first + 3))
    # quaternion dofs: the derivative of cdof uses the velocity of the dof's own body
    cdd = jnp.where(jnp.asarray(quat)[:, None],
                    math.cross_motion(d.cvel[_np(m.dof_bodyid)], d.cdof), d.cdof_dot)
    mask = jnp.asarray(scan.body_dof_mask(m.body_parentid, m.dof_bodyid), dt)[body]
    offset = point - d.subtree_com[_np(m.body_rootid)[body]]
    vel = d.cvel[body]
    plin = vel[:, 3:] - jnp.cross(offset, vel[:, :3])
    colp = (cdd[None, :, 3:] + jnp.cross(cdd[None, :, :3], offset[:, None])
            + jnp.cross(d.cdof[None, :, :3], plin[:, None]))
    w = mask * d.qvel[None]
    return jnp.einsum("kv,kvi->ki", w, colp), jnp.einsum("kv,vi->ki", w, cdd[:, :3])


# ----------------------------------------------------------------------- row groups


class _Rows(NamedTuple):
    """Non-contact rows of one kind, in generation order."""

    J: jax.Array  # (n, nv)
    pos: jax.Array
    margin: jax.Array
    frictionloss: jax.Array
    imppos: jax.Array  # position the impedance is evaluated at (norm for connect / weld)
    solref: jax.Array  # (n, 2)
    solimp: jax.Array  # (n, 5)
    diag: jax.Array  # diagonal approximation of A (mj_diagApprox)
    friction: np.ndarray  # static bool: friction-loss row (no stiffness)
    active: jax.Array
    type: np.ndarray
    id: np.ndarray
    jdotv: jax.Array  # Jdot * qvel, subtracted from aref


def _rep(x, k):
    return jnp.repeat(x, k, axis=0)


def _nonempty(J, k):
    """Per object of k consecutive rows: some Jacobian entry is nonzero (repeated)."""
    n = J.shape[0] // k
    ok = jnp.any(J.reshape(n, k * J.shape[1]) != 0, axis=-1)
    return _rep(ok, k)


def _anchors(m: Model, d: State, ids: np.ndarray, weld: bool):
    """Global anchor points and bodies of connect / weld equalities (mj_equalityAnchors)."""
    o1, o2 = _np(m.eq_obj1id)[ids], _np(m.eq_obj2id)[ids]
    site = _np(m.eq_objtype)[ids] == ObjType.SITE
    sb = _np(m.site_bodyid)
    s1, s2 = (np.clip(o, 0, max(m.nsite - 1, 0)) for o in (o1, o2))
    b1 = np.where(site, sb[s1] if m.nsite else 0, o1)
    b2 = np.where(site, sb[s2] if m.nsite else 0, o2)
    data = m.eq_data[ids]
    l1, l2 = (data[:, 3:6], data[:, 0:3]) if weld else (data[:, 0:3], data[:, 3:6])
    p1 = d.xpos[b1] + jnp.einsum("kij,kj->ki", d.xmat[b1], l1)
    p2 = d.xpos[b2] + jnp.einsum("kij,kj->ki", d.xmat[b2], l2)
    if m.nsite and site.any():
        sel = jnp.asarray(site)[:, None]
        p1 = jnp.where(sel, d.site_xpos[s1], p1)
        p2 = jnp.where(sel, d.site_xpos[s2], p2)
    return p1, p2, b1, b2, site, s1, s2


def _connect(m: Model, d: State, ids: np.ndarray) -> dict:
    p1, p2, b1, b2, *_ = _anchors(m, d, ids, weld=False)
    j1, _ = _jac(m, d, p1, b1)
    j2, _ = _jac(m, d, p2, b2)
    J = (j1 - j2).reshape(-1, m.nv)
    pos = (p1 - p2).reshape(-1)
    iw = m.body_invweight0
    v1, _ = _jac_dot_v(m, d, p1, b1)
    v2, _ = _jac_dot_v(m, d, p2, b2)
    return dict(J=J, pos=pos, imppos=_rep(math.norm(p1 - p2), 3),
                diag=_rep(iw[b1, 0] + iw[b2, 0], 3), jdotv=(v1 - v2).reshape(-1))


def _weld(m: Model, d: State, ids: np.ndarray) -> dict:
    p1, p2, b1, b2, site, s1, s2 = _anchors(m, d, ids, weld=True)
    jp1, jr1 = _jac(m, d, p1, b1)
    jp2, jr2 = _jac(m, d, p2, b2)
    ts = m.eq_data[ids, 10]
    relpose = m.eq_data[ids, 6:10]
    q0 = d.xquat[b1]
    q1 = d.xquat[b2]
    if m.nsite and site.any():
        sel = jnp.asarray(site)[:, None]
        q0 = jnp.where(sel, math.quat_mul(q0, m.site_quat[s1]), q0)
        q1 = jnp.where(sel, math.quat_mul(q1, m.site_quat[s2]), q1)
        rel = jnp.where(sel, jnp.asarray([1.0, 0, 0, 0], relpose.dtype), relpose)
    else:
        rel = relpose
    quat = math.quat_mul(q0, rel)  # site semantics: q0 already holds the site frame
    neg1 = math.quat_neg(q1)
    err = math.quat_mul(neg1, quat)[:, 1:] * ts[:, None]

    def axis_q(q, axis):
        # q * (0, axis)
        return math.quat_mul(q, jnp.concatenate([jnp.zeros_like(axis[..., :1]), axis], -1))

    jr = jnp.swapaxes(jr1 - jr2, 1, 2)  # (k, nv, 3)
    corr = math.quat_mul(axis_q(neg1[:, None], jr), quat[:, None])[..., 1:] * 0.5
    jrot = jnp.swapaxes(corr, 1, 2) * ts[:, None, None]
    J = jnp.concatenate([jp1 - jp2, jrot], axis=1).reshape(-1, m.nv)
    pos6 = jnp.concatenate([p1 - p2, err], -1)
    iw = m.body_invweight0
    diag = jnp.concatenate([jnp.repeat((iw[b1, 0] + iw[b2, 0])[:, None], 3, 1),
                            jnp.repeat((iw[b1, 1] + iw[b2, 1])[:, None], 3, 1)], -1)

    # Jdot * v: translation from the point Jacobians, rotation by the product rule
    v1, r1 = _jac_dot_v(m, d, p1, b1)
    v2, r2 = _jac_dot_v(m, d, p2, b2)
    w1, w2 = d.cvel[b1, :3], d.cvel[b2, :3]
    dw = w1 - w2

    def deriv(q, w):
        return 0.5 * math.quat_mul(jnp.concatenate([jnp.zeros_like(w[:, :1]), w], -1), q)

    dq0 = math.quat_mul(deriv(q0, w1), rel)
    negdq1 = math.quat_neg(deriv(q1, w2))
    t1 = math.quat_mul(axis_q(negdq1, dw), quat)
    t2 = math.quat_mul(axis_q(neg1, r1 - r2), quat)
    t3 = math.quat_mul(axis_q(neg1, dw), dq0)
    rot = 0.5 * (t1 + t2 + t3)[:, 1:] * ts[:, None]
    jdotv = jnp.concatenate([v1 - v2, rot], -1).reshape(-1)
    return dict(J=J, pos=pos6.reshape(-1), imppos=_rep(math.norm(pos6), 6),
                diag=diag.reshape(-1), jdotv=jdotv)


def coupling_slope(c: jax.Array, dif: jax.Array) -> jax.Array:
    """d poly / d x2 of a joint or tendon coupling with coefficients c (k, 5)."""
    return c[:, 1] + 2 * c[:, 2] * dif + 3 * c[:, 3] * dif * dif + 4 * c[:, 4] * dif * dif * dif


def _coupling(m: Model, d: State, ids: np.ndarray, joint: bool) -> dict:
    """Joint / tendon couplings: x1 - x1_0 = poly(x2 - x2_0) (or a constant)."""
    o1, o2 = _np(m.eq_obj1id)[ids], _np(m.eq_obj2id)[ids]
    has2 = o2 >= 0
    o2c = np.where(has2, o2, o1)
    if joint:
        qadr, dadr = _np(m.jnt_qposadr), _np(m.jnt_dofadr)
        x1, x2 = d.qpos[qadr[o1]], d.qpos[qadr[o2c]]
        r1, r2 = m.qpos0[qadr[o1]], m.qpos0[qadr[o2c]]
        eye = jnp.eye(m.nv, dtype=x1.dtype)
        J1, J2 = eye[dadr[o1]], eye[dadr[o2c]]
        w1, w2 = m.dof_invweight0[dadr[o1]], m.dof_invweight0[dadr[o2c]]
    else:
        x1, x2 = d.ten_length[o1], d.ten_length[o2c]
        r1, r2 = m.tendon_length0[o1], m.tendon_length0[o2c]
        J1, J2 = d.ten_J[o1], d.ten_J[o2c]
        w1, w2 = m.tendon_invweight0[o1], m.tendon_invweight0[o2c]
    c = m.eq_data[ids]
    dif = x2 - r2
    poly = (c[:, 1] * dif + c[:, 2] * dif * dif + c[:, 3] * dif * dif * dif
            + c[:, 4] * dif * dif * dif * dif)
    deriv = coupling_slope(c, dif)
    h = jnp.asarray(has2)
    pos = jnp.where(h, x1 - r1 - c[:, 0] - poly, x1 - r1 - c[:, 0])
    J = jnp.where(h[:, None], J1 + (-deriv)[:, None] * J2, J1)
    diag = jnp.where(h, w1 + w2, w1)
    return dict(J=J, pos=pos, imppos=pos, diag=diag, jdotv=jnp.zeros_like(pos))


def _fixed_rows(m: Model, d: State, p: Plan) -> _Rows | None:
    """All non-contact rows in MuJoCo's order."""
    dt = d.qpos.dtype
    nv = m.nv
    parts = []

    def part(n, *, J, pos, solref, solimp, diag, type_, id_, active, margin=None,
             frictionloss=None, imppos=None, friction=False, jdotv=None):
        z = jnp.zeros(n, dt)
        parts.append(_Rows(
            J=J, pos=pos, margin=z if margin is None else margin,
            frictionloss=z if frictionloss is None else frictionloss,
            imppos=pos if imppos is None else imppos, solref=solref, solimp=solimp,
            diag=diag, friction=np.full(n, friction), active=active,
            type=np.full(n, int(type_)), id=np.asarray(id_, np.int64),
            jdotv=z if jdotv is None else jdotv))

    on = jnp.asarray(d.eq_active) != 0
    for ids, fn, k in ((p.eq_connect, _connect, 3), (p.eq_weld, _weld, 6),
                       (p.eq_joint, lambda m_, d_, i: _coupling(m_, d_, i, True), 1),
                       (p.eq_tendon, lambda m_, d_, i: _coupling(m_, d_, i, False), 1)):
        if not len(ids):
            continue
        r = fn(m, d, ids)
        part(len(ids) * k, J=r["J"], pos=r["pos"], imppos=r["imppos"], diag=r["diag"],
             jdotv=r["jdotv"], solref=_rep(m.eq_solref[ids], k),
             solimp=_rep(m.eq_solimp[ids], k), type_=ConstraintType.EQUALITY,
             id_=np.repeat(ids, k), active=_rep(on[ids], k) & _nonempty(r["J"], k))

    if len(p.eq_flex):
        from jaxsim import flex

        ids, e = p.eq_flex, p.eq_flex_edge
        length, J = flex.edges(m, d, e)
        part(len(ids), J=J, pos=length - m.flexedge_length0[e], solref=m.eq_solref[ids],
             solimp=m.eq_solimp[ids], diag=m.flexedge_invweight0[e],
             type_=ConstraintType.EQUALITY, id_=ids, active=on[ids] & _nonempty(J, 1))

    if len(p.fri_dof):
        i = p.fri_dof
        fl = m.dof_frictionloss[i]
        part(len(i), J=jnp.eye(nv, dtype=dt)[i], pos=jnp.zeros(len(i), dt), frictionloss=fl,
             solref=m.dof_solref[i], solimp=m.dof_solimp[i], diag=m.dof_invweight0[i],
             type_=ConstraintType.FRICTION_DOF, id_=i, active=fl != 0, friction=True)
    if len(p.fri_ten):
        i = p.fri_ten
        fl = m.tendon_frictionloss[i]
        J = d.ten_J[i]
        part(len(i), J=J, pos=jnp.zeros(len(i), dt), frictionloss=fl,
             solref=m.tendon_solref_fri[i], solimp=m.tendon_solimp_fri[i],
             diag=m.tendon_invweight0[i], type_=ConstraintType.FRICTION_TENDON, id_=i,
             active=(fl > 0) & _nonempty(J, 1), friction=True)

    side = jnp.asarray([-1.0, 1.0], dt)
    if len(p.lim_jnt):
        i = p.lim_jnt
        value = d.qpos[_np(m.jnt_qposadr)[i]]
        dist = (side[None] * (m.jnt_range[i] - value[:, None])).reshape(-1)
        eye = jnp.eye(nv, dtype=dt)[_np(m.jnt_dofadr)[i]]
        J = (-side[None, :, None] * eye[:, None, :]).reshape(-1, nv)
        margin = _rep(m.jnt_margin[i], 2)
        part(2 * len(i), J=J, pos=dist, margin=margin, solref=_rep(m.jnt_solref[i], 2),
             solimp=_rep(m.jnt_solimp[i], 2),
             diag=_rep(m.dof_invweight0[_np(m.jnt_dofadr)[i]], 2),
             type_=ConstraintType.LIMIT_JOINT, id_=np.repeat(i, 2), active=dist < margin)
    if len(p.lim_ball):
        i = p.lim_ball
        adr = _np(m.jnt_qposadr)[i][:, None] + np.arange(4)
        rv = math.quat_to_vel(math.normalize_quat(d.qpos[adr]))
        axis, angle = math.normalize_with_norm(rv)
        dist = jnp.max(m.jnt_range[i], axis=-1) - angle
        cols = _np(m.jnt_dofadr)[i][:, None] + np.arange(3)
        J = jnp.zeros((len(i), nv), dt).at[np.arange(len(i))[:, None], cols].set(-axis)
        margin = m.jnt_margin[i]
        part(len(i), J=J, pos=dist, margin=margin, solref=m.jnt_solref[i],
             solimp=m.jnt_solimp[i], diag=m.dof_invweight0[_np(m.jnt_dofadr)[i]],
             type_=ConstraintType.LIMIT_JOINT, id_=i, active=dist < margin)
    if len(p.lim_ten):
        i = p.lim_ten
        dist = (side[None] * (m.tendon_range[i] - d.ten_length[i][:, None])).reshape(-1)
        J = (-side[None, :, None] * d.ten_J[i][:, None, :]).reshape(-1, nv)
        margin = _rep(m.tendon_margin[i], 2)
        part(2 * len(i), J=J, pos=dist, margin=margin, solref=_rep(m.tendon_solref_lim[i], 2),
             solimp=_rep(m.tendon_solimp_lim[i], 2), diag=_rep(m.tendon_invweight0[i], 2),
             type_=ConstraintType.LIMIT_TENDON, id_=np.repeat(i, 2),
             active=(dist < margin) & _nonempty(J, 1))

    if not parts:
        return None
    cat = _Rows(*(jnp.concatenate([jnp.asarray(getattr(r, f)) for r in parts])
                  if f not in ("friction", "type", "id")
                  else np.concatenate([getattr(r, f) for r in parts])
                  for f in _Rows._fields))
    return _Rows(*(x[p.perm] for x in cat))


# -------------------------------------------------------------------------- contacts


def block_index(p: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(contact, row within its block) of every contact row, in row order (static)."""
    c = np.repeat(np.arange(p.ncon), p.crow)
    return c, np.arange(len(c)) - (p.cadr[c] - p.nfixed)


class _ContactRows(NamedTuple):
    J: jax.Array  # (nc, nv): the rows of every block, in row order (block_index)
    pos: jax.Array  # (ncon, nrow)
    margin: jax.Array
    diag: jax.Array
    active: jax.Array
    type: jax.Array
    surf: jax.Array  # surface-velocity term added to efc_vel
    dim: jax.Array  # (ncon,) rows in use per contact (0: none)


def _contact_rows(m: Model, d: State, p: Plan) -> _ContactRows:
    """Contact Jacobians in the contact frame, cone rows, diagApprox (mj_instantiateContact)."""
    c = d.contact
    dt = d.qpos.dtype
    nrow = p.nrow
    pyramid = m.opt.cone == Cone.PYRAMIDAL
    g = jnp.clip(c.geom, 0, max(m.ngeom - 1, 0))
    from jaxsim.collision import driver, flexcol

    frame = c.frame
    dim = c.dim
    has = c.active & ~c.exclude
    iw = m.body_invweight0
    w1 = w2 = None
    if driver.plan(m).elem:  # flex element sides: weighted sums over their vertices
        bb, ww = flexcol.contact_sides(m, d, c)
        b1, b2, w1, w2 = bb[:, 0], bb[:, 1], ww[:, 0], ww[:, 1]
        tran = jnp.sum(iw[b1, 0] * w1 + iw[b2, 0] * w2, -1)
        rot = jnp.sum(iw[b1, 1] * w1 + iw[b2, 1] * w2, -1)
    else:
        b1, b2 = contact_bodies(m, c).T
        tran = iw[b1, 0] + iw[b2, 0]
        rot = iw[b1, 1] + iw[b2, 1]

    def sel(idx):  # the side weights of the given rows' contacts, if any
        return () if w1 is None else (w1[idx], w2[idx])

    fr = c.friction
    r = np.arange(nrow)

    # surface velocity of the geoms, relative (geom 2 minus geom 1), in the contact frame
    svel = jnp.zeros((c.dist.shape[0], 6), dt)
    if m.ngeom and np.any(_maybe(m.geom_surfacevel, lambda x: x != 0)):
        lin = jnp.zeros_like(c.pos)
        ang = jnp.zeros_like(c.pos)
        for s, sgn in ((0, -1.0), (1, 1.0)):
            gs = g[:, s]
            sv = jnp.where((c.geom[:, s] >= 0)[:, None], m.geom_surfacevel[gs], 0.0)
            xm = d.geom_xmat[gs]
            w = jnp.einsum("kij,kj->ki", xm, sv[:, 3:])
            v = jnp.einsum("kij,kj->ki", xm, sv[:, :3]) + jnp.cross(w, c.pos - d.geom_xpos[gs])
            lin = lin + sgn * v
            ang = ang + sgn * w
        cs = jnp.concatenate([frame @ lin[..., None], frame @ ang[..., None]], 1)[..., 0]
        svel = cs * jnp.asarray([0.0, 1, 1, 1, 0, 0], dt)

    bc, bj = block_index(p)
    if pyramid:
        k = np.minimum(r // 2 + 1, 5)
        sign = jnp.asarray(np.where(r % 2 == 0, 1.0, -1.0), dt)
        mu = fr[:, k - 1] * sign  # (n, nrow)
        # row j: normal + (+-) mu_k along friction direction k; a frictionless contact has
        # the normal alone
        coef = jnp.where((dim == 1)[:, None], 0.0, mu)[bc, bj][:, None]
        kr = k[bj]
        fc = frame[bc]
        u = fc[:, 0] + jnp.where(jnp.asarray(kr < 3)[:, None], coef, 0.0) * fc[
            np.arange(len(bc)), np.minimum(kr, 2)]
        w = jnp.where(jnp.asarray(kr >= 3)[:, None], coef, 0.0) * fc[
            np.arange(len(bc)), np.maximum(kr - 3, 0)]
        J = _row_jac(m, d, c.pos[bc], b1[bc], b2[bc], u, w, *sel(bc))
        nrows = jnp.where(dim == 1, 1, 2 * (dim - 1))
        pos = jnp.repeat(c.dist[:, None], nrow, 1)
        margin = jnp.repeat(c.includemargin[:, None], nrow, 1)
        f = fr[:, k - 1]
        extra = jnp.where(jnp.asarray(k < 3), tran[:, None], rot[:, None])
        diag = tran[:, None] + f * f * extra
        diag = jnp.where((dim == 1)[:, None], tran[:, None], diag)
        surf = svel[:, :1] + mu * svel[:, k]
        surf = jnp.where((dim == 1)[:, None], svel[:, :1], surf)
        kind = ConstraintType.CONTACT_PYRAMIDAL
    else:
        fc = frame[bc]
        ax = fc[np.arange(len(bc)), bj % 3]
        trans = jnp.asarray(bj < 3)[:, None]
        J = _row_jac(m, d, c.pos[bc], b1[bc], b2[bc], jnp.where(trans, ax, 0.0),
                     jnp.where(trans, 0.0, ax), *sel(bc))
        nrows = dim
        first = jnp.asarray(r == 0)
        pos = jnp.where(first, c.dist[:, None], 0.0)
        margin = jnp.where(first, c.includemargin[:, None], 0.0)
        diag = jnp.where(jnp.asarray(r < 3), tran[:, None], rot[:, None])
        surf = svel[:, :nrow]
        kind = ConstraintType.CONTACT_ELLIPTIC
    active = has[:, None] & (jnp.asarray(r)[None] < nrows[:, None])
    type_ = jnp.where(dim == 1, int(ConstraintType.CONTACT_FRICTIONLESS), int(kind))
    type_ = jnp.repeat(type_[:, None], nrow, 1).astype(jnp.int32)
    return _ContactRows(J, pos, margin, diag, active, type_, surf,
                        jnp.where(has, dim, 0).astype(jnp.int32))


# ------------------------------------------------------------------------ assembly


def _empty_efc(m: Model, d: State, p: Plan) -> Efc:
    dt = d.qpos.dtype
    n = p.ncon
    z = jnp.zeros((0,), dt)
    zi = jnp.zeros((0,), jnp.int32)
    c = d.contact
    return Efc(J=jnp.zeros((0, m.nv), dt), pos=z, margin=z, frictionloss=z, R=z, D=z, aref=z,
               vel=z, type=zi, id=zi, active=jnp.zeros((0,), bool),
               contact_adr=np.zeros(n, np.int32), contact_nrow=0,
               contact_dim=jnp.zeros(n, jnp.int32), contact_mu=jnp.zeros(n, dt),
               contact_friction=c.friction if n else jnp.zeros((0, 5), dt))


def make_constraint(m: Model, d: State) -> Efc:
    """Constraint rows, impedance and reference acceleration.

    MuJoCo: mj_makeConstraint followed by mj_referenceConstraint. `d` needs the position
    stage (with `d.contact` filled by the collision driver) and cvel / cdof_dot.
    """
    dt = d.qpos.dtype
    ncon = d.contact.dist.shape[0]
    p = plan(m, ncon)
    if p.nefc == 0:
        return _empty_efc(m, d, p)
    refsafe = not m.opt.disableflags & DisableBit.REFSAFE
    ts = m.opt.timestep

    fx = _fixed_rows(m, d, p)
    if fx is not None and sleep.enabled(m):
        fx = fx._replace(active=fx.active & sleep.rows_awake(m, d, fx.type, fx.id,
                                                             row_flex_edges(p)))
    cr = _contact_rows(m, d, p) if p.nrow else None
    nc = p.nefc - p.nfixed
    bc, bj = block_index(p)

    if m.opt.enableflags & EnableBit.DIAGEXACT:
        # exact diagonal of J M^-1 J' (mj_projectConstraint with diagexact)
        from jaxsim import smooth

        if fx is not None:
            fx = fx._replace(diag=jnp.sum(fx.J * smooth.solve_m(m, d, fx.J), -1))
        if cr is not None:
            exact = jnp.sum(cr.J * smooth.solve_m(m, d, cr.J), -1)
            cr = cr._replace(diag=jnp.zeros((p.ncon, p.nrow), dt).at[bc, bj].set(exact))

    rows = []
    if fx is not None:
        solref, solimp = solparam(fx.solref, fx.solimp, ts, refsafe)
        imp = impedance(solimp, fx.imppos, fx.margin)
        R = jnp.maximum(MINVAL, (1 - imp) * fx.diag / imp)
        k, b = _kb(solref, solimp[:, 1])
        k = jnp.where(jnp.asarray(fx.friction), 0.0, k)
        vel = fx.J @ d.qvel
        aref = -b * vel - k * imp * (fx.pos - fx.margin) - fx.jdotv
        rows.append(dict(J=fx.J, pos=fx.pos, margin=fx.margin, frictionloss=fx.frictionloss,
                         R=R, aref=aref, vel=vel, type=jnp.asarray(fx.type, jnp.int32),
                         id=jnp.asarray(fx.id, jnp.int32), active=fx.active))

    n = p.ncon
    contact_dim = jnp.zeros(n, jnp.int32)
    contact_mu = jnp.zeros(n, dt)
    if cr is not None:
        c = d.contact
        nrow = p.nrow
        solref, solimp = solparam(c.solref, c.solimp, ts, refsafe)
        sref_f, _ = solparam(c.solreffriction, c.solimp, ts, refsafe, friction=True)
        imp = impedance(solimp, c.dist, c.includemargin)  # (n,)
        Rraw = jnp.maximum(MINVAL, (1 - imp[:, None]) * cr.diag / imp[:, None])
        R0 = Rraw[:, 0]
        R1 = R0 / jnp.maximum(MINVAL, m.opt.impratio)
        f0 = c.friction[:, 0]
        mu = f0 * jnp.sqrt(R1 / R0)
        dim = c.dim
        rr = np.arange(nrow)
        if m.opt.cone == Cone.PYRAMIDAL:
            R = jnp.broadcast_to((2 * mu * mu * R0)[:, None], (n, nrow))
            fric_row = jnp.zeros((n, nrow), bool)
        else:
            fj = c.friction[:, np.clip(rr - 1, 0, 4)]
            R = jnp.where(jnp.asarray(rr == 0), R0[:, None],
                          jnp.where(jnp.asarray(rr == 1), R1[:, None],
                                    R1[:, None] * f0[:, None] * f0[:, None] / (fj * fj)))
            fric_row = jnp.asarray(rr > 0)[None] & (dim > 1)[:, None]
        R = jnp.where((dim == 1)[:, None], Rraw, R)
        # elliptic friction rows: solreffriction if set, no stiffness
        use_f = fric_row & jnp.any(sref_f != 0, -1)[:, None]
        ref = jnp.where(use_f[..., None], sref_f[:, None], solref[:, None])
        k, b = _kb(ref, solimp[:, 1:2])
        k = jnp.where(fric_row, 0.0, k)
        J = cr.J
        vel = jnp.zeros((n, nrow), dt).at[bc, bj].set(J @ d.qvel) + cr.surf
        aref = -b * vel - k * imp[:, None] * (cr.pos - cr.margin)
        # adhesion: the normal force is offset by the adhesion on the normal row(s)
        if m.opt.cone == Cone.PYRAMIDAL:
            share = jnp.where(dim == 1, c.adhesion, c.adhesion / (2 * jnp.maximum(dim - 1, 1)))
            aref = aref + R * share[:, None] * jnp.where(
                (dim == 1)[:, None], jnp.asarray(rr == 0, dt)[None], 1.0)
        else:
            aref = aref + jnp.where(jnp.asarray(rr == 0), R * c.adhesion[:, None], 0.0)
        contact_dim = cr.dim
        contact_mu = jnp.where((cr.dim > 1), mu, 0.0)
        rows.append(dict(J=J, pos=cr.pos[bc, bj], margin=cr.margin[bc, bj],
                         frictionloss=jnp.zeros(nc, dt), R=R[bc, bj], aref=aref[bc, bj],
                         vel=vel[bc, bj], type=cr.type[bc, bj],
                         id=jnp.asarray(bc, jnp.int32), active=cr.active[bc, bj]))

    cat = {key: jnp.concatenate([r[key] for r in rows]) for key in rows[0]}
    act = cat["active"]
    zero = lambda x: jnp.where(act.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0)  # noqa: E731
    R = jnp.where(act, cat["R"], 1.0)
    return Efc(
        J=zero(cat["J"]), pos=zero(cat["pos"]), margin=zero(cat["margin"]),
        frictionloss=zero(cat["frictionloss"]), R=R, D=jnp.where(act, 1 / R, 0.0),
        aref=zero(cat["aref"]), vel=zero(cat["vel"]), type=cat["type"], id=cat["id"],
        active=act,
        contact_adr=np.asarray(p.cadr, np.int32), contact_nrow=p.nrow,
        contact_rows=np.asarray(p.crow, np.int32), contact_dim=contact_dim, contact_mu=contact_mu,
        contact_friction=d.contact.friction,
    )
