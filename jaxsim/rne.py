"""Recursive Newton-Euler: bias forces, inverse-dynamics forces and body interaction forces.

MuJoCo: mj_rne, mj_rnePostConstraint, mj_tendonBias (engine_core_smooth.c).

Both recursions run by tree depth level (`jaxsim.scan`): accelerations root to leaf, one
vectorised add per level; forces leaf to root, one scatter-add per level. Per-body terms
(inertia times acceleration, gyroscopic forces) are computed for all bodies at once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import hostnp, math, scan
from jaxsim.types import Cone, DisableBit, Model, State, TrnType, WrapType


def _dtype(m: Model):
    return m.body_pos.dtype


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _world_acc(m: Model) -> jax.Array:
    """Acceleration of the world: -gravity in the linear part (zero when disabled)."""
    acc = jnp.zeros(6, _dtype(m))
    if not m.opt.disableflags & DisableBit.GRAVITY:
        acc = acc.at[3:].set(-m.opt.gravity)
    return acc


def body_acc(m: Model, d: State, qacc: jax.Array | None) -> jax.Array:
    """Com-based body accelerations cacc (nbody, 6), with gravity as a world acceleration.

    cacc_b = cacc_parent + cdof_dot qvel + cdof qacc over the body's own dofs; without
    `qacc` the last term is left out (mj_rne with flg_acc = 0).
    """
    dt = _dtype(m)
    init = jnp.zeros((m.nbody, 6), dt).at[0].set(_world_acc(m))
    if not m.nv:
        return jnp.broadcast_to(init[0], (m.nbody, 6))
    contrib = d.cdof_dot * d.qvel[:, None]
    if qacc is not None:
        contrib = contrib + d.cdof * qacc[:, None]
    local = jnp.zeros((m.nbody, 6), dt).at[_np(m.dof_bodyid)].add(contrib)
    return scan.body_forward(m.body_parentid, lambda prow, ids: prow + local[ids], init)


def body_force(d: State, cacc: jax.Array) -> jax.Array:
    """cinert cacc + cvel x* (cinert cvel) for every body; the world's row is zero."""
    frc = math.mul_inert_vec(d.cinert, cacc)
    frc = frc + math.cross_force(d.cvel, math.mul_inert_vec(d.cinert, d.cvel))
    return frc.at[0].set(0.0)


def _rne(m: Model, d: State, qacc: jax.Array | None) -> jax.Array:
    if not m.nv:
        return jnp.zeros(0, _dtype(m))
    cfrc = body_force(d, body_acc(m, d, qacc))
    cfrc = scan.subtree_sum(m.body_parentid, cfrc, into_world=False)
    return jnp.sum(d.cdof * cfrc[_np(m.dof_bodyid)], axis=-1)


def rne_bias(m: Model, d: State) -> jax.Array:
    """Coriolis, centrifugal and gravity forces C(qpos, qvel) (mj_rne with flg_acc = 0)."""
    return _rne(m, d, None)


def rne_acc(m: Model, d: State, qacc: jax.Array | None = None) -> jax.Array:
    """M qacc + C(qpos, qvel): inverse-dynamics force (mj_rne with flg_acc = 1).

    Uses d.qacc unless `qacc` is given.
    """
    return _rne(m, d, d.qacc if qacc is None else qacc)


# ------------------------------------------------------------------------ tendon bias


def _spatial_armature_tendons(m: Model) -> np.ndarray:
    """Tendons whose Jacobian depends on qpos (spatial); fixed tendons have dJ/dt = 0."""
    if not m.ntendon:
        return np.zeros(0, np.int64)
    wt = _np(m.wrap_type)
    adr, num = _np(m.tendon_adr), _np(m.tendon_num)
    spatial = [i for i in range(m.ntendon) if num[i] and wt[adr[i]] != WrapType.JOINT]
    return np.asarray(spatial, np.int64)


def tendon_dot(m: Model, d: State, tendons: np.ndarray) -> jax.Array:
    """(d/dt ten_J) qvel of the given tendons at the current qpos, qvel (mj_tendonDot).

    The derivative of ten_J(q(t)) qvel along the motion q(t) that integrates the constant
    velocity qvel from qpos (forward-mode, through kinematics, com_pos and tendon).
    """
    from jaxsim import integrator, smooth

    def jv(t):
        q = integrator.integrate_pos(m, d.qpos, d.qvel, t)
        dd = smooth.kinematics(m, d.replace(qpos=q))
        dd = smooth.com_pos(m, dd)
        dd = smooth.tendon(m, dd)
        return dd.ten_J[tendons] @ d.qvel

    zero = jnp.zeros((), _dtype(m))
    return jax.jvp(jv, (zero,), (jnp.ones_like(zero),))[1]


def tendon_bias(m: Model, d: State) -> jax.Array:
    """Bias force of tendon armature: ten_J' armature (dJ/dt qvel) (mj_tendonBias)."""
    from jaxsim import smooth

    dt = _dtype(m)
    sel = _spatial_armature_tendons(m)
    with jax.ensure_compile_time_eval():  # concrete when the model is
        arm_all = smooth.tendon_armature(m)
    known = hostnp.concrete(arm_all)
    if known is not None:  # a model closed over: only the tendons with armature, as MuJoCo
        sel = sel[np.asarray(known)[sel] != 0]
    if not len(sel) or not m.nv:
        return jnp.zeros(m.nv, dt)
    arm = arm_all[sel]
    coef = arm * tendon_dot(m, d, sel)
    return coef @ d.ten_J[sel]


# ------------------------------------------------------------------------------ stages


def rne(m: Model, d: State) -> State:
    """qfrc_bias: RNE without acceleration plus tendon-armature bias. MuJoCo: mj_rne (flg_acc=0)
    followed by mj_tendonBias, as in mj_fwdVelocity."""
    bias = rne_bias(m, d)
    if m.ntendon and m.nv:
        bias = bias + tendon_bias(m, d)
    return d.replace(qfrc_bias=bias)


def contact_force(m: Model, d: State) -> jax.Array:
    """Force:torque of every contact slot in its contact frame, (ncon, 6). MuJoCo:
    mj_contactForce (pyramidal forces decoded with mju_decodePyramid).

    Slots without constraint rows (efc_address < 0) give zero. As MuJoCo, the adhesion of
    the pair is subtracted from the normal force.
    """
    from jaxsim import constraint

    c = d.contact
    dt = _dtype(m)
    n = c.dist.shape[0]
    out = jnp.zeros((n, 6), dt)
    p = constraint.plan(m, n)
    if not n or not p.nrow or d.efc_force.shape[0] != p.nefc:
        return out
    j = np.arange(p.nrow)
    rows = np.minimum(p.cadr[:, None] + j, p.nefc - 1)
    # (n, nrow); rows beyond a contact's dim hold 0, beyond its block belong to the next
    f = jnp.where(jnp.asarray(j < p.crow[:, None]), d.efc_force[rows], 0.0)
    if m.opt.cone == Cone.PYRAMIDAL:
        nt = p.nrow // 2
        normal = jnp.sum(f, -1) if p.nrow > 1 else f[:, 0]
        out = out.at[:, 0].set(normal)
        if nt:
            tang = (f[:, 0:2 * nt:2] - f[:, 1:2 * nt:2]) * c.friction[:, :nt]
            tang = jnp.where((c.dim > 1)[:, None], tang, 0.0)  # frictionless: one row
            out = out.at[:, 1:1 + nt].set(tang)
    else:
        out = out.at[:, :p.nrow].set(f)
    out = out.at[:, 0].add(-c.adhesion)
    return jnp.where((c.efc_address >= 0)[:, None], out, 0.0)


def _weld_torque(m: Model, d: State, ids: np.ndarray, f: jax.Array) -> jax.Array:
    """World torque of weld rotation-row forces f (k, 3): tau with jr' tau = Jrot' f.

    The rotation rows are 0.5 ts Im(q1^-1 (0, jr w) q0 rel), linear in the angular
    velocity w: tau = 0.5 ts M' f with M's columns the images of the unit axes.
    """
    from jaxsim.constraint import _anchors

    *_, b1, b2, site, s1, s2 = _anchors(m, d, ids, True)
    q0, q1 = d.xquat[b1], d.xquat[b2]
    rel = m.eq_data[ids, 6:10]
    if m.nsite and site.any():
        sel = jnp.asarray(site)[:, None]
        q0 = jnp.where(sel, math.quat_mul(q0, m.site_quat[s1]), q0)
        q1 = jnp.where(sel, math.quat_mul(q1, m.site_quat[s2]), q1)
        rel = jnp.where(sel, jnp.asarray([1.0, 0, 0, 0], rel.dtype), rel)
    quat = math.quat_mul(q0, rel)
    neg1 = math.quat_neg(q1)
    axes = jnp.concatenate([jnp.zeros((3, 1), f.dtype), jnp.eye(3, dtype=f.dtype)], 1)
    cols = math.quat_mul(math.quat_mul(neg1[:, None], axes[None]), quat[:, None])[..., 1:]
    ts = m.eq_data[ids, 10]
    return 0.5 * ts[:, None] * jnp.einsum("kji,ki->kj", cols, f)


def _constraint_ext(m: Model, d: State) -> jax.Array:
    """cfrc_ext of contact, connect and weld forces (part of mj_rnePostConstraint)."""
    from jaxsim import constraint

    dt = _dtype(m)
    ext = jnp.zeros((m.nbody, 6), dt)
    n = d.contact.dist.shape[0]
    p = constraint.plan(m, n)
    if p.nefc == 0 or d.efc_force.shape[0] != p.nefc:
        return ext
    root = _np(m.body_rootid)
    broot = jnp.asarray(root)

    def add(body, wrench, point, sign):
        # world-oriented torque:force at `point`, moved to the com of the body's tree
        ref = d.subtree_com[broot[body]]
        tor = wrench[:, :3] - jnp.cross(ref - point, wrench[:, 3:])
        return ext.at[body].add(sign * jnp.concatenate([tor, wrench[:, 3:]], -1))

    if p.nrow and n:
        c = d.contact
        lfrc = contact_force(m, d)
        frame_t = jnp.swapaxes(c.frame, 1, 2)
        wrench = jnp.concatenate([frame_t @ lfrc[:, 3:, None], frame_t @ lfrc[:, :3, None]],
                                 1)[..., 0]
        if m.nflex:  # MuJoCo leaves contacts involving a flex out of cfrc_ext
            wrench = jnp.where(jnp.all(c.geom >= 0, -1)[:, None], wrench, 0.0)
        gb = jnp.asarray(_np(m.geom_bodyid))
        g = jnp.clip(c.geom, 0, max(m.ngeom - 1, 0))
        ext = add(gb[g[:, 0]], wrench, c.pos, -1.0)
        ext = add(gb[g[:, 1]], wrench, c.pos, 1.0)

    # connect (3 rows: force) and weld (6 rows: force, torque) equalities, by eq id order
    kinds = [(i, 3) for i in p.eq_connect] + [(i, 6) for i in p.eq_weld]
    kinds += [(i, 1) for i in p.eq_joint] + [(i, 1) for i in p.eq_tendon]
    kinds += [(i, 1) for i in p.eq_flex]
    kinds.sort()
    adr, first = {}, 0
    for i, k in kinds:
        adr[int(i)] = first
        first += k
    for ids, weld in ((p.eq_connect, False), (p.eq_weld, True)):
        if not len(ids):
            continue
        from jaxsim.constraint import _anchors

        p1, p2, b1, b2, *_ = _anchors(m, d, ids, weld)
        start = np.asarray([adr[int(i)] for i in ids])
        frc = d.efc_force[start[:, None] + np.arange(3)]
        if weld:
            tor = _weld_torque(m, d, ids, d.efc_force[start[:, None] + np.arange(3, 6)])
        else:
            tor = jnp.zeros_like(frc)
        wrench = jnp.concatenate([tor, frc], -1)
        ext = add(jnp.asarray(b1), wrench, p1, 1.0)
        ext = add(jnp.asarray(b2), wrench, p2, -1.0)
    return ext.at[0].set(0.0)


def tendon_force(m: Model, d: State) -> jax.Array:
    """Total force along each tendon (ntendon,): passive springs and dampers, actuators
    with tendon transmissions (force x gear), and the constraint rows acting through the
    tendon (friction loss, limits, tendon equalities)."""
    from jaxsim import constraint, passive

    flags = m.opt.disableflags
    fs, fd = passive.tendon_passive(m, d, not flags & DisableBit.SPRING,
                                    not flags & DisableBit.DAMPER)
    F = fs + fd
    if m.nactuator:
        trn, tid = _np(m.actuator_trntype), _np(m.actuator_trnid).reshape(-1, 2)[:, 0]
        sel = np.nonzero(trn == TrnType.TENDON)[0]
        if len(sel):
            row = _np(m.actuator_outadr)[sel]
            F = F.at[tid[sel]].add(d.actuator_force[row] * m.actuator_gear[row, 0])
    p = constraint.plan(m, d.contact.dist.shape[0])
    if p.nfixed == 0 or d.efc_force.shape[0] != p.nefc:
        return F
    f = d.efc_force
    if len(p.fri_ten):
        F = F.at[p.fri_ten].add(f[constraint.row_positions(p, "fri_ten")[:, 0]])
    if len(p.lim_ten):
        rows = constraint.row_positions(p, "lim_ten")
        F = F.at[p.lim_ten].add(f[rows[:, 0]] - f[rows[:, 1]])  # lower +J, upper -J
    if len(p.eq_tendon):
        ids = p.eq_tendon
        fe = f[constraint.row_positions(p, "eq_tendon")[:, 0]]
        o1, o2 = _np(m.eq_obj1id)[ids], _np(m.eq_obj2id)[ids]
        F = F.at[o1].add(fe)
        has2 = o2 >= 0
        if has2.any():  # the second tendon carries -slope times the row's force
            o2c = np.where(has2, o2, o1)
            dif = d.ten_length[o2c] - m.tendon_length0[o2c]
            slope = constraint.coupling_slope(m.eq_data[ids], dif)
            F = F.at[o2c].add(jnp.where(jnp.asarray(has2), -slope * fe, 0.0))
    return F


def _tendon_ext(m: Model, d: State) -> jax.Array:
    """cfrc_ext of spatial tendons (MuJoCo 4.0): each straight piece of a tendon path pulls
    the bodies at its two ends towards each other with the tendon's force (divided below
    a pulley); pieces within one body cancel."""
    from jaxsim.smooth import _tendon_plan, wrap_divisor, wrap_tangents

    dt = _dtype(m)
    ext = jnp.zeros((m.nbody, 6), dt)
    p = _tendon_plan(m)
    if not (len(p.st_ten) or len(p.wr_ten)):
        return ext
    F = tendon_force(m, d)
    site_body, geom_body = _np(m.site_bodyid), _np(m.geom_bodyid)
    pieces = []  # (tendon, p0, b0, p1, b1, div, on)
    if len(p.st_ten):
        pieces.append((p.st_ten, d.site_xpos[p.st_s0], site_body[p.st_s0],
                       d.site_xpos[p.st_s1], site_body[p.st_s1], wrap_divisor(m, p.st_div),
                       None))
    if len(p.wr_ten):
        x0, x1 = d.site_xpos[p.wr_s0], d.site_xpos[p.wr_s1]
        wlen, tangent = wrap_tangents(m, d, p)
        w = wlen >= 0
        b0, b1, bg = site_body[p.wr_s0], site_body[p.wr_s1], geom_body[p.wr_geom]
        div = wrap_divisor(m, p.wr_div)
        t0 = jnp.where(w[:, None], tangent[:, :3], x1)
        t1 = jnp.where(w[:, None], tangent[:, 3:], x0)
        # wrapped: x0 -> t0 (site body to geom body) and t1 -> x1; else x0 -> x1 directly
        pieces.append((p.wr_ten, x0, b0, t0, jnp.where(w, bg, b1), div, None))
        pieces.append((p.wr_ten, t1, jnp.where(w, bg, b0), x1, b1, div, w))
    root = jnp.asarray(_np(m.body_rootid))
    for ten, p0, b0, p1, b1, div, on in pieces:
        b0, b1 = jnp.asarray(b0), jnp.asarray(b1)
        frc = -(F[ten] / div)[:, None] * math.normalize(p1 - p0)  # on b0 at p0, towards p1
        live = b0 != b1
        if on is not None:
            live = live & on
        frc = jnp.where(live[:, None], frc, 0.0)
        for body, point, sign in ((b0, p0, 1.0), (b1, p1, -1.0)):
            ref = d.subtree_com[root[body]]
            wrench = jnp.concatenate([jnp.cross(point - ref, sign * frc), sign * frc], -1)
            ext = ext.at[body].add(wrench)
    return ext.at[0].set(0.0)


def rne_post_constraint(m: Model, d: State) -> State:
    """Body accelerations and forces: cacc, cfrc_int, cfrc_ext. MuJoCo: mj_rnePostConstraint.

    cfrc_ext holds xfrc_applied, contact forces and connect / weld constraint forces, each
    moved to the com of its body's tree; cfrc_int the force each body receives from its
    parent.
    """
    dt = _dtype(m)
    nbody = m.nbody
    xfrc = d.xfrc_applied
    force, torque = xfrc[:, :3], xfrc[:, 3:]
    # torque about the tree's com: torque + (xipos - com) x force
    ref = d.subtree_com[_np(m.body_rootid)]
    cfrc_ext = jnp.concatenate([torque + jnp.cross(d.xipos - ref, force), force], axis=-1)
    cfrc_ext = cfrc_ext.at[0].set(0.0)
    if m.nv:
        cfrc_ext = cfrc_ext + _constraint_ext(m, d)
    if m.ntendon and m.nv:
        cfrc_ext = cfrc_ext + _tendon_ext(m, d)

    cacc = body_acc(m, d, d.qacc if m.nv else None)
    if not m.nv:
        cacc = jnp.broadcast_to(_world_acc(m), (nbody, 6)).astype(dt)
    cfrc_int = body_force(d, cacc) - cfrc_ext
    cfrc_int = cfrc_int.at[0].set(0.0)
    cfrc_int = scan.subtree_sum(m.body_parentid, cfrc_int, into_world=True)
    return d.replace(cacc=cacc, cfrc_int=cfrc_int, cfrc_ext=cfrc_ext)


__all__ = ["body_acc", "contact_force", "rne", "rne_acc", "rne_bias", "rne_post_constraint", "tendon_bias"]
