"""Passive forces: springs, dampers, gravity compensation and fluid forces.

MuJoCo: engine_passive.c. `passive(m, d)` fills qfrc_spring, qfrc_damper, qfrc_gravcomp,
qfrc_fluid and their sum qfrc_passive exactly as mj_passive splits them (gravity
compensation routed through actuators, `jnt_actgravcomp`, is left out of qfrc_passive and
added to qfrc_actuator by `actuation.actuation`).

Every term is computed for all joints, tendons, bodies or geoms at once; which joints are
free/ball/hinge/slide and which options are disabled is static structure. Values MuJoCo
tests at run time (fluid density and viscosity, the per-geom fluid flag, the body mass
threshold) are leaves, so both branches are computed and selected with masks; the branch
not taken is fed finite numbers so gradients stay finite. When the model is a constant of
the traced function (closed over, not an argument), zero density and viscosity are known
at trace time and the fluid stage is left out, as MuJoCo's mj_fluid returns early.

Flex edge spring-dampers and flex elasticity come from `jaxsim.flex`. Not covered: passive
contact forces and adhesion (contacts are not part of these stages), passive plugins and
the mjcb_passive callback.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import flex, hostnp, math, scan
from jaxsim.types import DisableBit, GeomType, JointType, Model, State, TrnType

# ---------------------------------------------------------------------------- helpers


def _dtype(m: Model):
    return m.body_pos.dtype


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def poly_force(linear: jax.Array, poly: jax.Array, x: jax.Array, odd: bool) -> jax.Array:
    """Polynomial force coefficient: force = -x * poly_force(...) (mju_polyForce).

    linear + poly[0] y + poly[1] y^2 with y = x, or y = |x| when `odd` (damping, so that
    the force stays an odd function of the velocity).
    """
    y = jnp.abs(x) if odd else x
    return linear + poly[..., 0] * y + poly[..., 1] * y * y


def actuator_damping(m: Model, trn: tuple, n: int) -> tuple[jax.Array, jax.Array]:
    """Damping and polynomial damping that joints or tendons inherit from their actuators.

    MuJoCo: mj_actuatorDamping. Each actuator with a matching transmission adds
    damping * gear[0]^2 (and dampingpoly * gear[0]^2) to its target.
    """
    dt = _dtype(m)
    lin = jnp.zeros(n, dt)
    poly = jnp.zeros((n, 2), dt)
    if not m.nactuator or not n:
        return lin, poly
    sel = np.nonzero(np.isin(_np(m.actuator_trntype), trn))[0]
    if not len(sel):
        return lin, poly
    tgt = _np(m.actuator_trnid)[sel, 0]
    g2 = m.actuator_gear[_np(m.actuator_outadr)[sel], 0] ** 2
    lin = lin.at[tgt].add(m.actuator_damping[sel] * g2)
    poly = poly.at[tgt].add(m.actuator_dampingpoly[sel] * g2[:, None])
    return lin, poly


def apply_ft(m: Model, d: State, force: jax.Array, torque: jax.Array, point: jax.Array,
             body: np.ndarray) -> jax.Array:
    """Generalized force of Cartesian forces/torques at points on bodies (sum of mj_applyFT).

    Args:
      force, torque, point: (k, 3) global vectors; body: (k,) static body ids.

    Returns:
      (nv,) the sum over k of J(body_k, point_k)' [force_k; torque_k].

    Instead of one Jacobian per point, each wrench is moved to the com of its tree
    (subtree_com of the root, the point cdof refers to), summed per body, and projected on
    the cdof of every dof that moves the body: one (nbody, 6) x (6, nv) product.
    """
    dt = _dtype(m)
    if not m.nv:
        return jnp.zeros(0, dt)
    body = _np(body)
    ref = d.subtree_com[_np(m.body_rootid)[body]]
    wrench = jnp.concatenate([torque + jnp.cross(point - ref, force), force], axis=-1)
    acc = jnp.zeros((m.nbody, 6), dt).at[body].add(wrench)
    mask = jnp.asarray(scan.body_dof_mask(m.body_parentid, m.dof_bodyid))
    # a select, not a product with the mask: XLA would make a (slow, tiny) dot of that
    return jnp.sum(jnp.where(mask, math.mm(acc, d.cdof.T), 0.0), axis=0)


def object_velocity(d: State, body: np.ndarray, pos: jax.Array, mat: jax.Array,
                    rootid: np.ndarray) -> jax.Array:
    """6D velocity (rot:lin) of frames (pos, mat) rigidly attached to bodies, in the frames'
    local coordinates (mj_objectVelocity with flg_local=1)."""
    cvel = d.cvel[body]
    ang, lin = cvel[:, :3], cvel[:, 3:]
    lin = lin + jnp.cross(ang, pos - d.subtree_com[rootid[body]])
    ang_l = jnp.einsum("kji,kj->ki", mat, ang)
    lin_l = jnp.einsum("kji,kj->ki", mat, lin)
    return jnp.concatenate([ang_l, lin_l], axis=-1)


def tendon_actuator_velocity(m: Model, d: State) -> State:
    """Tendon and actuator velocities: ten_J qvel and actuator_moment qvel.

    MuJoCo: the first lines of mj_fwdVelocity (actuator_velocity is zero when actuation is
    disabled).
    """
    dt = _dtype(m)
    ten_velocity = d.ten_J @ d.qvel if m.ntendon else jnp.zeros(0, dt)
    if m.nout and not m.opt.disableflags & DisableBit.ACTUATION:
        act_velocity = d.actuator_moment @ d.qvel
    else:
        act_velocity = jnp.zeros(m.nout, dt)
    return d.replace(ten_velocity=ten_velocity, actuator_velocity=act_velocity)


# ---------------------------------------------------------------------- springs, dampers


def _plastic_index(m: Model):
    """(qpos indices, plastic indices) of the joint springs with a plastic reference, and
    (tendon ids, plastic indices (k, 2)) of the tendons with one (static)."""
    jadr = _np(m.jnt_plasticadr) if m.njnt else np.zeros(0, np.int64)
    jid = np.nonzero(jadr >= 0)[0]
    width = np.where(_np(m.jnt_type)[jid] == JointType.BALL, 4, 1)
    q = np.concatenate([_np(m.jnt_qposadr)[j] + np.arange(w) for j, w in zip(jid, width, strict=True)]
                       ) if len(jid) else np.zeros(0, np.int64)
    pj = np.concatenate([jadr[j] + np.arange(w) for j, w in zip(jid, width, strict=True)]
                        ) if len(jid) else np.zeros(0, np.int64)
    tadr = _np(m.tendon_plasticadr) if m.ntendon else np.zeros(0, np.int64)
    tid = np.nonzero(tadr >= 0)[0]
    return q, pj, tid, tadr[tid][:, None] + np.arange(2)


def plastic_reset(m: Model) -> jax.Array:
    """The plastic state of a reset (mj_resetData): the spring references of the model."""
    out = jnp.zeros(m.nplastic, _dtype(m))
    if not m.nplastic:
        return out
    q, pj, tid, pt = _plastic_index(m)
    out = out.at[pj].set(m.qpos_spring[q])
    return out.at[pt].set(m.tendon_lengthspring[tid])


def spring_refs(m: Model, d: State) -> tuple[jax.Array, jax.Array]:
    """The spring references (qpos_spring, tendon_lengthspring) with the plastic ones of
    `d` in place of the model's."""
    if not m.nplastic:
        return m.qpos_spring, m.tendon_lengthspring
    q, pj, tid, pt = _plastic_index(m)
    return (m.qpos_spring.at[q].set(d.plastic[pj]),
            m.tendon_lengthspring.at[tid].set(d.plastic[pt]))


def plastic_update(m: Model, d: State, qpos: jax.Array, dq: jax.Array) -> jax.Array:
    """The plastic state after a step to `qpos` (ideal elasto-plasticity): a spring whose
    displacement exceeds its yield drags its reference along, to the yield distance. Joints
    use the new position (a ball the rotation from its reference quaternion); tendons their
    length moved on by ten_J dq (`dq`: the step's displacement in velocity space)."""
    p = d.plastic
    if not m.nplastic:
        return p
    jadr = _np(m.jnt_plasticadr)
    jt, qadr = _np(m.jnt_type), _np(m.jnt_qposadr)
    scalar = np.nonzero((jadr >= 0) & (jt != JointType.BALL))[0]
    if len(scalar):
        x, ref, y = qpos[qadr[scalar]], p[jadr[scalar]], m.jnt_springyield[scalar]
        dif = x - ref
        new = jnp.where(dif > y, x - y, jnp.where(dif < -y, x + y, ref))
        p = p.at[jadr[scalar]].set(new)
    ball = np.nonzero((jadr >= 0) & (jt == JointType.BALL))[0]
    if len(ball):
        q = math.normalize_quat(qpos[qadr[ball][:, None] + np.arange(4)])
        ref = p[jadr[ball][:, None] + np.arange(4)]
        r = math.sub_quat(q, ref)  # log(ref^-1 q)
        n = math.norm(r)
        y = m.jnt_springyield[ball]
        over = n > y
        back = -r * (y / jnp.where(over, n, 1.0))[:, None]
        new = math.quat_mul(q, math.vel_to_quat(back))
        p = p.at[jadr[ball][:, None] + np.arange(4)].set(jnp.where(over[:, None], new, ref))
    tadr = _np(m.tendon_plasticadr) if m.ntendon else np.zeros(0, np.int64)
    ten = np.nonzero(tadr >= 0)[0]
    if len(ten):
        length = d.ten_length[ten] + d.ten_J[ten] @ dq
        lo, hi, y = p[tadr[ten]], p[tadr[ten] + 1], m.tendon_springyield[ten]
        shift = jnp.where(length > hi + y, length - y - hi,
                          jnp.where(length < lo - y, length + y - lo, 0.0))
        p = p.at[tadr[ten]].set(lo + shift).at[tadr[ten] + 1].set(hi + shift)
    return p



def _joint_springs(m: Model, d: State) -> jax.Array:
    dt = _dtype(m)
    qpos_spring, _ = spring_refs(m, d)
    out = jnp.zeros(m.nv, dt)
    jnt_type = _np(m.jnt_type)
    qadr = _np(m.jnt_qposadr)
    dadr = _np(m.jnt_dofadr)
    k, poly = m.jnt_stiffness, m.jnt_stiffnesspoly

    def ball(ids, qa, da):
        quat = math.normalize_quat(d.qpos[qa[:, None] + np.arange(4)])
        dif = math.sub_quat(quat, qpos_spring[qa[:, None] + np.arange(4)])
        r = math.norm(dif)
        return out.at[da[:, None] + np.arange(3)].add(-poly_force(k[ids], poly[ids], r, False)[:, None] * dif)

    for t in (JointType.HINGE, JointType.SLIDE, JointType.BALL, JointType.FREE):
        ids = np.nonzero(jnt_type == t)[0]
        if not len(ids):
            continue
        qa, da = qadr[ids], dadr[ids]
        if t in (JointType.HINGE, JointType.SLIDE):
            x = d.qpos[qa] - qpos_spring[qa]
            out = out.at[da].add(-x * poly_force(k[ids], poly[ids], x, False))
        elif t == JointType.BALL:
            out = ball(ids, qa, da)
        else:
            dif = d.qpos[qa[:, None] + np.arange(3)] - qpos_spring[qa[:, None] + np.arange(3)]
            r = math.norm(dif)
            out = out.at[da[:, None] + np.arange(3)].add(
                -poly_force(k[ids], poly[ids], r, False)[:, None] * dif)
            out = ball(ids, qa + 3, da + 3)
    return out


def _dof_dampers(m: Model, d: State) -> jax.Array:
    lin, poly = actuator_damping(m, (TrnType.JOINT, TrnType.JOINTINPARENT), m.njnt)
    jnt = _np(m.dof_jntid)
    damping = m.dof_damping + lin[jnt]
    dpoly = m.dof_dampingpoly + poly[jnt]
    return -d.qvel * poly_force(damping, dpoly, d.qvel, True)


def tendon_passive(m: Model, d: State, spring: bool, damper: bool):
    """(spring, damper) force along each tendon (ntendon,): springs with the lengthspring
    dead band, dampers with the actuators' damping on tendons."""
    dt = _dtype(m)
    zero = jnp.zeros(m.ntendon, dt)
    fs, fd = zero, zero
    if spring:
        length = d.ten_length
        _, lengthspring = spring_refs(m, d)
        lower, upper = lengthspring[:, 0], lengthspring[:, 1]
        x = jnp.where(length > upper, length - upper, jnp.where(length < lower, length - lower, 0.0))
        fs = -x * poly_force(m.tendon_stiffness, m.tendon_stiffnesspoly, x, False)
    if damper:
        lin, poly = actuator_damping(m, (TrnType.TENDON,), m.ntendon)
        v = d.ten_velocity
        fd = -v * poly_force(m.tendon_damping + lin, m.tendon_dampingpoly + poly, v, True)
    return fs, fd


def _tendon_forces(m: Model, d: State, spring: bool, damper: bool):
    """Tendon spring and damper forces along ten_J."""
    dt = _dtype(m)
    zero = jnp.zeros(m.nv, dt)
    if not m.ntendon:
        return zero, zero
    fs, fd = tendon_passive(m, d, spring, damper)
    return (fs @ d.ten_J if spring else zero), (fd @ d.ten_J if damper else zero)


# ------------------------------------------------------------------- gravity compensation


def gravcomp(m: Model, d: State) -> jax.Array:
    """Anti-gravity force body_gravcomp * mass * (-gravity) at each body's com (mj_gravcomp).

    Zero when the model has no gravity-compensated body or gravity is disabled.
    """
    if not m.ngravcomp or m.opt.disableflags & DisableBit.GRAVITY or not m.nv:
        return jnp.zeros(m.nv, _dtype(m))
    bodies = np.arange(1, m.nbody)
    force = -m.opt.gravity[None, :] * (m.body_mass[bodies] * m.body_gravcomp[bodies])[:, None]
    return apply_ft(m, d, force, jnp.zeros_like(force), d.xipos[bodies], bodies)


# ------------------------------------------------------------------------------ fluid


def _inertia_box(m: Model, d: State, bodies: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Local force/torque of the inertia-box fluid model (mj_inertiaBoxFluidModel)."""
    rho, mu = m.opt.density, m.opt.viscosity
    inertia = m.body_inertia[bodies]
    mass = m.body_mass[bodies]
    safe_mass = jnp.where(mass < math.MINVAL, 1.0, mass)
    i0, i1, i2 = inertia[:, 0], inertia[:, 1], inertia[:, 2]
    box = jnp.stack([i1 + i2 - i0, i0 + i2 - i1, i0 + i1 - i2], axis=-1)
    box = jnp.sqrt(jnp.maximum(math.MINVAL, box) / safe_mass[:, None] * 6.0)

    lvel = object_velocity(d, bodies, d.xipos[bodies], d.ximat[bodies], _np(m.body_rootid))
    lwind = jnp.einsum("kji,j->ki", d.ximat[bodies], m.opt.wind)
    ang, lin = lvel[:, :3], lvel[:, 3:] - lwind

    diam = jnp.mean(box, axis=-1, keepdims=True)
    visc = mu > 0
    torque = jnp.where(visc, -jnp.pi * diam**3 * mu * ang, 0.0)
    force = jnp.where(visc, -3.0 * jnp.pi * diam * mu * lin, 0.0)

    b0, b1, b2 = box[:, 0], box[:, 1], box[:, 2]
    area = jnp.stack([b1 * b2, b0 * b2, b0 * b1], axis=-1)
    arm = jnp.stack([b0 * (b1**4 + b2**4), b1 * (b0**4 + b2**4), b2 * (b0**4 + b1**4)], axis=-1)
    dens = rho > 0
    force = force - jnp.where(dens, 0.5 * rho * area * jnp.abs(lin) * lin, 0.0)
    torque = torque - jnp.where(dens, rho * arm * jnp.abs(ang) * ang / 64.0, 0.0)
    return force, torque


def _semi_axes(m: Model) -> jax.Array:
    """Semi-axes of each geom's equivalent ellipsoid (mju_geomSemiAxes)."""
    size = m.geom_size
    gt = _np(m.geom_type)[:, None]
    r = size[:, :1]
    sphere = jnp.concatenate([r, r, r], -1)
    capsule = jnp.concatenate([r, r, size[:, 1:2] + r], -1)
    cylinder = jnp.concatenate([r, r, size[:, 1:2]], -1)
    out = jnp.where(gt == GeomType.SPHERE, sphere, size)
    out = jnp.where(gt == GeomType.CAPSULE, capsule, out)
    return jnp.where(gt == GeomType.CYLINDER, cylinder, out)


def _ellipsoid(m: Model, d: State) -> tuple[jax.Array, jax.Array]:
    """Per-geom global force/torque of the ellipsoid fluid model (mj_ellipsoidFluidModel).

    Added-mass forces (mj_addedMassForces without the acceleration term, as in MuJoCo),
    viscous and quadratic drag, Kutta lift and Magnus lift (mj_viscousForces).
    """
    rho, mu = m.opt.density, m.opt.viscosity
    fl = m.geom_fluid
    coef, blunt, slender, angdrag, kutta, magnus = (fl[:, k] for k in range(6))
    vmass, vinert = fl[:, 6:9], fl[:, 9:12]
    size = _semi_axes(m)
    gb = _np(m.geom_bodyid)

    lvel = object_velocity(d, gb, d.geom_xpos, d.geom_xmat, _np(m.body_rootid))
    lwind = jnp.einsum("kji,j->ki", d.geom_xmat, m.opt.wind)
    w, v = lvel[:, :3], lvel[:, 3:] - lwind

    # added mass
    lin_mom = rho * vmass * v
    ang_mom = rho * vinert * w
    torque = jnp.cross(lin_mom, v) + jnp.cross(ang_mom, w)
    force = jnp.cross(lin_mom, w)

    # viscous forces and lift
    s0, s1, s2 = size[:, 0], size[:, 1], size[:, 2]
    volume = 4.0 / 3.0 * jnp.pi * s0 * s1 * s2
    d_max = jnp.max(size, axis=-1)
    d_min = jnp.min(size, axis=-1)
    d_mid = s0 + s1 + s2 - d_max - d_min
    a_max = jnp.pi * d_max * d_mid

    magnus_force = jnp.cross(w, v) * (magnus * rho * volume)[:, None]

    # Kutta lift and projected area, written in the velocity direction and in semi-axes
    # scaled by the largest one (as MuJoCo 4.0 does), so thin geoms do not fall under
    # mjMINVAL in the intermediate products
    speed = math.norm(v)
    moving = speed > math.MINVAL
    vhat = jnp.where(moving[:, None], v / jnp.where(moving, speed, 1.0)[:, None], 0.0)
    shat = size / jnp.where(d_max > math.MINVAL, d_max, 1.0)[:, None]
    shat = jnp.where((d_max > math.MINVAL)[:, None], shat, 0.0)
    q = jnp.stack([shat[:, 1] * shat[:, 2], shat[:, 2] * shat[:, 0], shat[:, 0] * shat[:, 1]], -1) ** 2
    pn = jnp.sum(q * vhat**2, axis=-1)
    a = jnp.where((pn > math.MINVAL)[:, None], q / jnp.where(pn > math.MINVAL, pn, 1.0)[:, None], 0.0)
    pd = jnp.sum(a**2 * vhat**2, axis=-1)
    a_proj = jnp.pi * d_max**2 * math.safe_sqrt(pn * pd)
    cos_alpha = jnp.where(pd > math.MINVAL, 1.0 / jnp.where(pd > math.MINVAL, pd, 1.0), 0.0)
    normal = a * vhat
    lift = (rho > 0) & (kutta != 0) & moving
    circ = jnp.cross(normal, v) * (kutta * rho * cos_alpha * a_proj)[:, None]
    kutta_force = jnp.where(lift[:, None], jnp.cross(circ, v), 0.0)

    eq_d = 2.0 / 3.0 * (s0 + s1 + s2)
    lin_visc_force = 3.0 * jnp.pi * eq_d
    lin_visc_torque = jnp.pi * eq_d**3
    i_max = 8.0 / 15.0 * jnp.pi * d_mid * d_max**4
    # moment about axis k: 8/15 pi s_k max(s_{k+1}, s_{k+2})^4
    other = jnp.maximum(jnp.roll(size, -1, axis=-1), jnp.roll(size, -2, axis=-1))
    ii = 8.0 / 15.0 * jnp.pi * size * other**4
    mom_visc = w * (angdrag[:, None] * ii + slender[:, None] * (i_max[:, None] - ii))
    drag_lin = mu * lin_visc_force + rho * speed * (a_proj * blunt + slender * (a_max - a_proj))
    drag_ang = mu * lin_visc_torque + rho * math.norm(mom_visc)

    torque = torque - drag_ang[:, None] * w
    force = force + magnus_force + kutta_force - drag_lin[:, None] * v

    torque = torque * coef[:, None]
    force = force * coef[:, None]
    gforce = jnp.einsum("kij,kj->ki", d.geom_xmat, force)
    gtorque = jnp.einsum("kij,kj->ki", d.geom_xmat, torque)
    return gforce, gtorque


def fluid(m: Model, d: State) -> jax.Array:
    """Fluid forces on all bodies (mj_fluid): the ellipsoid model on bodies with any geom
    whose geom_fluid[0] > 0, the inertia-box model on the others; massless bodies skipped.
    """
    dt = _dtype(m)
    rho, mu = hostnp.concrete(m.opt.density), hostnp.concrete(m.opt.viscosity)
    if not m.nv or m.nbody < 2 or (rho is not None and mu is not None and not rho and not mu):
        return jnp.zeros(m.nv, dt)
    bodies = np.arange(1, m.nbody)
    heavy = (m.body_mass[bodies] >= math.MINVAL)[:, None]
    use_ell = jnp.zeros(m.nbody, bool)
    if m.ngeom:
        use_ell = use_ell.at[_np(m.geom_bodyid)].max(m.geom_fluid[:, 0] > 0)

    lf, lt = _inertia_box(m, d, bodies)
    xmat = d.ximat[bodies]
    keep = heavy & ~use_ell[bodies][:, None]
    force = jnp.where(keep, jnp.einsum("kij,kj->ki", xmat, lf), 0.0)
    torque = jnp.where(keep, jnp.einsum("kij,kj->ki", xmat, lt), 0.0)
    qfrc = apply_ft(m, d, force, torque, d.xipos[bodies], bodies)

    if m.ngeom:
        gb = _np(m.geom_bodyid)
        gf, gt = _ellipsoid(m, d)
        keep = ((m.body_mass[gb] >= math.MINVAL) & use_ell[gb] & (gb > 0))[:, None]
        gf = jnp.where(keep, gf, 0.0)
        gt = jnp.where(keep, gt, 0.0)
        qfrc = qfrc + apply_ft(m, d, gf, gt, d.geom_xpos, gb)
    return qfrc


# ------------------------------------------------------------------------------ stage


def passive(m: Model, d: State) -> State:
    """Passive forces: springs, dampers, gravity compensation, fluid. MuJoCo: mj_passive.

    Needs kinematics, com_pos, tendon (ten_J, ten_length), com_vel (cvel) and
    ten_velocity (`tendon_actuator_velocity`).
    """
    dt = _dtype(m)
    zero = jnp.zeros(m.nv, dt)
    flags = m.opt.disableflags
    spring = not flags & DisableBit.SPRING
    damper = not flags & DisableBit.DAMPER
    if not (spring or damper) or not m.nv:
        return d.replace(qfrc_spring=zero, qfrc_damper=zero, qfrc_gravcomp=zero,
                         qfrc_fluid=zero, qfrc_passive=zero)

    qfrc_spring = _joint_springs(m, d) if spring and m.njnt else zero
    qfrc_damper = _dof_dampers(m, d) if damper else zero
    ts, td = _tendon_forces(m, d, spring, damper)
    fs, fd = flex.passive(m, d, spring, damper)
    es, ed = flex.elasticity(m, d, spring, damper)
    qfrc_spring = qfrc_spring + ts + fs + es
    qfrc_damper = qfrc_damper + td + fd + ed
    qfrc_gravcomp = gravcomp(m, d)
    qfrc_fluid = fluid(m, d)

    qfrc_passive = qfrc_spring + qfrc_damper + qfrc_fluid
    if m.ngravcomp and m.njnt:
        # gravity compensation routed through actuators is added by `actuation` instead
        passive_gc = ~np.asarray(m.jnt_actgravcomp, bool)[_np(m.dof_jntid)]
        qfrc_passive = qfrc_passive + jnp.where(jnp.asarray(passive_gc), qfrc_gravcomp, 0.0)
    return d.replace(qfrc_spring=qfrc_spring, qfrc_damper=qfrc_damper,
                     qfrc_gravcomp=qfrc_gravcomp, qfrc_fluid=qfrc_fluid,
                     qfrc_passive=qfrc_passive)
