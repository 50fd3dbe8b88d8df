"""Time integration: Euler, implicit, implicitfast and RK4; positions, activations, time.

MuJoCo: mj_Euler, mj_implicit, mj_RungeKutta, mj_advance (engine_forward.c),
mj_integratePos / mju_quatIntegrate, mj_nextActivation (engine_support.c) and the velocity
derivatives the implicit integrators use (mjd_smooth_vel, engine_derivative.c).

Each integrator takes a state on which `forward` has run (qacc, act_dot, qfrc_smooth, qM
are current) and returns the next state. Derivatives of the smooth forces with respect to
qvel (MuJoCo's qDeriv) are dense (nv, nv), restricted to MuJoCo's sparsity (dofs on one
ancestor chain) so that the result is the same:
- damping (dofs and tendons) and actuators: closed form, as mjd_passive_vel and
  mjd_actuator_vel (the actuator term drops actuators at their forcerange or on a joint
  whose actuatorfrcrange clamps, ignores tendon force limits and uses the raw control);
- fluid forces and, for `implicit`, the RNE bias: forward-mode derivatives of the force
  functions themselves (exact, as MuJoCo's analytical ones); implicitfast symmetrises the
  fluid term except on standalone free bodies, as MuJoCo.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim import actuation, history, linalg, math, passive, rne, scan, sensor, smooth
from jaxsim import sleep as _sleep
from jaxsim.types import (
    BiasType,
    DisableBit,
    DynType,
    GainType,
    Integrator,
    JointType,
    Model,
    Stage,
    State,
    TrnType,
)


def _dtype(m: Model):
    return m.body_pos.dtype


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


# ------------------------------------------------------------------------- positions


def quat_integrate(quat: jax.Array, vel: jax.Array, dt) -> jax.Array:
    """Rotates unit quaternions by the local angular velocity vel over dt (mju_quatIntegrate).

    The rotation's vector part vel * sin(dt |vel| / 2) / |vel| is written with its limit
    vel * dt / 2 at zero velocity, so value and gradient stay finite there.
    """
    n = math.norm(vel)
    small = n < math.MINVAL
    half = 0.5 * dt * n
    scale = jnp.where(small, 0.5 * dt, jnp.sin(half) / jnp.where(small, 1.0, n))
    qrot = jnp.concatenate([jnp.cos(half)[..., None], vel * scale[..., None]], axis=-1)
    return math.quat_mul(math.normalize_quat(quat), qrot)


def integrate_pos(m: Model, qpos: jax.Array, qvel: jax.Array, dt) -> jax.Array:
    """qpos advanced by qvel over dt; quaternions of free and ball joints on the sphere.

    MuJoCo: mj_integratePos.
    """
    jnt_type = _np(m.jnt_type)
    qadr, dadr = _np(m.jnt_qposadr), _np(m.jnt_dofadr)
    out = qpos
    scalar = np.nonzero(np.isin(jnt_type, (JointType.HINGE, JointType.SLIDE)))[0]
    if len(scalar):
        out = out.at[qadr[scalar]].add(dt * qvel[dadr[scalar]])
    free = np.nonzero(jnt_type == JointType.FREE)[0]
    if len(free):
        qa, da = qadr[free][:, None] + np.arange(3), dadr[free][:, None] + np.arange(3)
        out = out.at[qa].add(dt * qvel[da])
    rot_q, rot_v = [], []
    for t, off_q, off_v in ((JointType.BALL, 0, 0), (JointType.FREE, 3, 3)):
        ids = np.nonzero(jnt_type == t)[0]
        rot_q.append(qadr[ids] + off_q)
        rot_v.append(dadr[ids] + off_v)
    rq, rv = np.concatenate(rot_q), np.concatenate(rot_v)
    if len(rq):
        qa, va = rq[:, None] + np.arange(4), rv[:, None] + np.arange(3)
        out = out.at[qa].set(quat_integrate(qpos[qa], qvel[va], dt))
    return out


# ----------------------------------------------------------------------- activations


def _next_act(m: Model, d: State, act_dot: jax.Array) -> jax.Array:
    """act after one step (mj_advance's activation part): mj_nextActivation for every
    activation variable, zero rate for disabled actuator groups, set-point wrapping of
    rotational integrators, and the re-anchoring of SO3 integrator set-points."""
    if not m.na or m.opt.disableflags & DisableBit.ACTUATION:
        return d.act
    actadr, actnum = _np(m.actuator_actadr), _np(m.actuator_actnum)
    slot2act = np.repeat(np.arange(m.nactuator), np.maximum(actnum, 0))
    off = actuation._disabled(m)  # noqa: SLF001 -- MuJoCo's mj_actuatorDisabled
    if off.any():
        act_dot = jnp.where(jnp.asarray(off[slot2act]), 0.0, act_dot)
    nxt = actuation.next_activation(m, d, act_dot)
    dyn, outnum = _np(m.actuator_dyntype), _np(m.actuator_outnum)
    integ = np.nonzero((dyn == DynType.INTEGRATOR) & (actadr >= 0) & (outnum == 1))[0]
    if len(integ):
        last = actadr[integ] + actnum[integ] - 1
        period = actuation._wrap_period(m)[integ]  # noqa: SLF001
        length = d.actuator_length[_np(m.actuator_outadr)[integ]]
        nxt = nxt.at[last].set(actuation._wrap_setpoint(nxt[last], length, period))  # noqa: SLF001
    so3 = np.nonzero((dyn == DynType.INTEGRATOR) & (actadr >= 0)
                     & (_np(m.actuator_gaintype) == GainType.SO3))[0]
    if len(so3):
        adr = actadr[so3][:, None] + np.arange(3)
        nxt = nxt.at[adr].set(actuation.so3_reanchor(nxt[adr]))
    return nxt


def _advance_history(m: Model, d: State) -> jax.Array:
    return history.advance(m, d, lambda ids: sensor.compute(m, d, ids))


def advance(m: Model, d: State, act_dot: jax.Array, qacc: jax.Array,
            qvel: jax.Array | None = None, hist: jax.Array | None = None) -> State:
    """Advances act, qvel, qpos and time by one step (mj_advance).

    Velocities first; positions then use `qvel` if given, else the new velocity
    (semi-implicit Euler). The history buffers first take this step's controls and sensor
    values, at the current time (unless `hist` gives them already updated).
    """
    h = m.opt.timestep
    if hist is None:
        hist = _advance_history(m, d)
    act = _next_act(m, d, act_dot)
    if _sleep.enabled(m):
        return _advance_sleeping(m, d, act, qacc, qvel, hist)
    new_qvel = d.qvel + h * qacc
    vel = new_qvel if qvel is None else qvel
    qpos = integrate_pos(m, d.qpos, vel, h)
    plastic = passive.plastic_update(m, d, qpos, h * vel)
    return d.replace(act=act, qvel=new_qvel, qpos=qpos, time=d.time + h,
                     qacc_warmstart=d.qacc, history=hist, plastic=plastic)


def _advance_sleeping(m: Model, d: State, act, qacc, qvel, hist) -> State:
    """advance with sleeping islands (mj_sleep inside mj_advance): islands whose trees are
    all ready fall asleep with zero velocity; if any did, the velocity and acceleration
    stages run again at the new velocities (mj_forwardSkip from the velocity stage), so the
    values a sleeping tree keeps are those at rest. Then only awake dofs and bodies are
    integrated, with the accelerations computed before."""
    from jaxsim.forward import forward_skip

    h = m.opt.timestep
    ta, went = _sleep.fall_asleep(m, d)
    ds = _sleep.dof_asleep(m, ta)
    zero = jnp.zeros_like(d.qvel)
    d = d.replace(qvel=jnp.where(ds, zero, d.qvel), act=act, history=hist)
    d = lax.cond(jnp.any(went), lambda x: forward_skip(m, x, Stage.POS), lambda x: x, d)
    new_qvel = jnp.where(ds, zero, d.qvel + h * qacc)
    vel = new_qvel if qvel is None else jnp.where(ds, zero, qvel)
    qpos = integrate_pos(m, d.qpos, vel, h)
    d = d.replace(plastic=passive.plastic_update(m, d, qpos, h * vel))
    if m.nq:
        jtree = np.asarray(m.body_treeid)[np.asarray(m.jnt_bodyid)]
        qtree = np.repeat(jtree, [JointType(int(t)).qpos_width() for t in m.jnt_type])
        qpos = jnp.where(ta[np.maximum(qtree, 0)] >= 0, d.qpos, qpos)
    return d.replace(qvel=new_qvel, qpos=qpos, time=d.time + h, qacc_warmstart=d.qacc,
                     tree_asleep=ta)


# ------------------------------------------------------------------ velocity derivatives


def _d_pattern(m: Model) -> np.ndarray:
    """MuJoCo's qDeriv sparsity: dofs where one is an ancestor of the other."""
    anc = scan.dof_ancestors(m.dof_parentid)
    return anc | anc.T


def _poly_deriv(linear, poly, x):
    """d/dx of x * (linear + poly0 |x| + poly1 x^2) (mjd_xPolyForce, odd)."""
    y = jnp.abs(x)
    return linear + 2 * poly[..., 0] * y + 3 * poly[..., 1] * y * y


def actuator_vel_deriv(m: Model, d: State) -> jax.Array:
    """d qfrc_actuator / d qvel, (nv, nv). MuJoCo: mjd_actuator_vel.

    moment' diag(b) moment with b = bias_vel + gain_vel * input per actuator, on each of its
    output rows; actuators in a disabled group, whose force sits at a forcerange bound (the
    norm bound for SO3), or on a joint whose total actuator force is clamped by
    actuatorfrcrange (probed on MuJoCo 4.0.0), contribute nothing. DC motors: the back-EMF
    and controller terms through the (thermal) resistance, the current's first-order lag,
    no controller term while the voltage limit or the current-rate limit is active, and
    the LuGre bristle damping.
    """
    dt = _dtype(m)
    if not m.nactuator or not m.nv or m.opt.disableflags & DisableBit.ACTUATION:
        return jnp.zeros((m.nv, m.nv), dt)
    gain_t, bias_t = _np(m.actuator_gaintype), _np(m.actuator_biastype)
    outadr = _np(m.actuator_outadr)
    length, velocity = d.actuator_length[outadr], d.actuator_velocity[outadr]
    affine_bias = np.isin(bias_t, (BiasType.AFFINE, BiasType.SO3))
    bias_vel = jnp.where(jnp.asarray(affine_bias), m.actuator_biasprm[:, 2], 0.0)
    gain_vel = jnp.where(jnp.asarray(gain_t == GainType.AFFINE), m.actuator_gainprm[:, 2], 0.0)
    if (gain_t == GainType.MUSCLE).any():
        def gain(v):
            return actuation.muscle_gain(length, v, m.actuator_lengthrange[outadr],
                                         m.actuator_acc0[outadr], m.actuator_gainprm)
        mg = jax.jvp(gain, (velocity,), (jnp.ones_like(velocity),))[1]
        gain_vel = jnp.where(jnp.asarray(gain_t == GainType.MUSCLE), mg, gain_vel)

    # input: the raw control (MuJoCo does not clamp it here), or the (next) activation
    inp = actuation._first(m, d.ctrl)  # noqa: SLF001
    actadr = _np(m.actuator_actadr)
    if m.na:
        last = np.maximum(actadr + _np(m.actuator_actnum) - 1, 0)
        act = d.act[last]
        early = np.asarray(m.actuator_actearly, bool)
        if early.any():
            nxt = actuation.next_activation(m, d, d.act_dot)
            act = jnp.where(jnp.asarray(early), nxt[last], act)
        inp = jnp.where(jnp.asarray(actadr >= 0), act, inp)
    b = bias_vel + gain_vel * inp
    force = d.actuator_force[outadr]

    dcm = np.nonzero(gain_t == GainType.DCMOTOR)[0]
    if len(dcm):
        b = b.at[dcm].set(_dc_vel_deriv(m, d, dcm))
        # the saturation test sees the force before the cogging and friction terms
        bp, dp = m.actuator_biasprm[dcm], m.actuator_dynprm[dcm]
        has, idx = actuation._dc_slots(m, dcm)["bristle"]  # noqa: SLF001
        mech = jnp.where(bp[:, 0] != 0, bp[:, 0] * jnp.sin(bp[:, 1] * length[dcm] + bp[:, 2]), 0.0)
        mech = mech - jnp.where(has, dp[:, 5] * actuation._act_at(d.act, idx, has)  # noqa: SLF001
                                + dp[:, 6] * actuation._act_at(d.act_dot, idx, has), 0.0)  # noqa: SLF001
        force = force.at[dcm].add(-mech)

    off = actuation._disabled(m)  # noqa: SLF001
    if off.any():
        b = jnp.where(jnp.asarray(off), 0.0, b)
    flim = np.asarray(m.actuator_forcelimited, bool)
    if flim.any():
        rng = m.actuator_forcerange
        sat = (force <= rng[:, 0]) | (force >= rng[:, 1])
        so3 = np.nonzero(gain_t == GainType.SO3)[0]
        if len(so3):
            # a clamped force has norm forcerange[1] up to rounding, which decides
            # MuJoCo's own test (|f| >= forcerange[1]) either way: take it as saturated
            nrm = math.norm(d.actuator_force[outadr[so3][:, None] + np.arange(3)])
            sat = sat.at[so3].set(nrm >= rng[so3, 1] * (1 - 1e-12))
        b = jnp.where(jnp.asarray(flim) & sat, 0.0, b)
    # actuators on a joint whose total actuator force is clamped (actuatorfrcrange)
    trn, jid = _np(m.actuator_trntype), _np(m.actuator_trnid).reshape(-1, 2)[:, 0]
    jlim = np.asarray(m.jnt_actfrclimited, bool)
    onjnt = np.isin(trn, (TrnType.JOINT, TrnType.JOINTINPARENT)) & (jid >= 0)
    sel = np.nonzero(onjnt & jlim[np.clip(jid, 0, max(m.njnt - 1, 0))])[0] if m.njnt else []
    if len(sel):
        j = jid[sel]
        tot = d.qfrc_actuator[_np(m.jnt_dofadr)[j]]
        rng = m.jnt_actfrcrange[j]
        sat = (tot <= rng[:, 0]) | (tot >= rng[:, 1])
        b = b.at[sel].set(jnp.where(sat, 0.0, b[sel]))
    # actuators on a tendon whose total actuator force is scaled to its actuatorfrcrange
    # (MuJoCo 4.0); the scaled total meets the bound up to rounding
    if m.ntendon:
        tlim = np.asarray(m.tendon_actfrclimited, bool)
        onten = (trn == TrnType.TENDON) & (jid >= 0)
        sel = np.nonzero(onten & tlim[np.clip(jid, 0, m.ntendon - 1)])[0]
        if len(sel):
            t = jid[sel]
            tot = jnp.zeros(m.ntendon, dt).at[t].add(force[sel])[t]
            rng = m.tendon_actfrcrange[t]
            tol = 1e-12 * jnp.maximum(1.0, jnp.abs(rng))
            sat = (tot <= rng[:, 0] + tol[:, 0]) | (tot >= rng[:, 1] - tol[:, 1])
            b = b.at[sel].set(jnp.where(sat, 0.0, b[sel]))
    mom = d.actuator_moment
    b = b[m.out2act()]
    return mom.T @ (b[:, None] * mom)


def _dc_vel_deriv(m: Model, d: State, dcm: np.ndarray) -> jax.Array:
    """d force / d velocity of DC motors (before the forcerange test)."""
    h = m.opt.timestep
    gp, dp = m.actuator_gainprm[dcm], m.actuator_dynprm[dcm]
    sl = actuation._dc_slots(m, dcm)  # noqa: SLF001
    outadr = _np(m.actuator_outadr)[dcm]
    ln, v = d.actuator_length[outadr], d.actuator_velocity[outadr]
    R0, K, te = gp[:, 0], gp[:, 1], dp[:, 0]
    R = jnp.maximum(math.MINVAL, actuation._dc_resistance(m, dcm, d.act, sl))  # noqa: SLF001
    spec = _np(m.actuator_ctrlspec)[dcm]
    ctl = jnp.asarray(((spec & 7) != 0) & (spec != 16))
    safe_k = jnp.where(K == 0, 1.0, K)
    dvdw = jnp.where(ctl, -gp[:, 6] * R0 / safe_k + K, 0.0)
    # the drive voltage from the raw controls, slew-limited
    first = actuation._first(m, d.ctrl)[dcm]  # noqa: SLF001
    has, idx = sl["slew"]
    a_s = actuation._act_at(d.act, idx, has)  # noqa: SLF001
    step = dp[:, 7] * h
    first = jnp.where(has, jnp.clip(first, a_s - step, a_s + step), first)
    has, idx = sl["integral"]
    xi = actuation._act_at(d.act, idx, has)  # noqa: SLF001
    inp = actuation._inputs(m, dcm, d.ctrl, first)  # noqa: SLF001
    raw = actuation._dc_drive(m, dcm, inp, ln, v, xi, clamp=False)  # noqa: SLF001
    volt_in = inp[3]
    vmax = gp[:, 7]
    dvdw = jnp.where((vmax > 0) & ctl & (jnp.abs(raw - volt_in) >= vmax), 0.0, dvdw)
    # the current-rate limit (from the clamped drive voltage)
    has_c, idx_c = sl["current"]
    cur = actuation._act_at(d.act, idx_c, has_c)  # noqa: SLF001
    volt = actuation._dc_drive(m, dcm, inp, ln, v, xi)  # noqa: SLF001
    idot = (volt / R - K / R * v - cur) / jnp.where(te > 0, te, 1.0)
    clipped = (te > 0) & (dp[:, 1] > 0) & (jnp.abs(idot) >= dp[:, 1])
    lag = 1 - jnp.exp(-h / jnp.where(te > 0, te, 1.0))
    b = jnp.where(te > 0, jnp.where(clipped, 0.0, K * (dvdw - K) * lag / R),
                  -K * K / R + K * dvdw / R)
    return b - jnp.where(dp[:, 6] > 0, dp[:, 6], 0.0)


def damping_vel_deriv(m: Model, d: State) -> jax.Array:
    """d qfrc_damper / d qvel, (nv, nv): dof and tendon damping (part of mjd_passive_vel)."""
    dt = _dtype(m)
    out = jnp.zeros((m.nv, m.nv), dt)
    if m.opt.disableflags & DisableBit.DAMPER or not m.nv:
        return out
    lin, poly = passive.actuator_damping(m, (TrnType.JOINT, TrnType.JOINTINPARENT), m.njnt)
    jnt = _np(m.dof_jntid)
    out = out - jnp.diag(_poly_deriv(m.dof_damping + lin[jnt], m.dof_dampingpoly + poly[jnt],
                                     d.qvel))
    if m.ntendon:
        lin, poly = passive.actuator_damping(m, (TrnType.TENDON,), m.ntendon)
        b = -_poly_deriv(m.tendon_damping + lin, m.tendon_dampingpoly + poly, d.ten_velocity)
        out = out + d.ten_J.T @ (b[:, None] * d.ten_J)
    return out


def _free_bodies(m: Model) -> tuple[np.ndarray, np.ndarray]:
    """Standalone free bodies: a single free joint, alone in a 6-dof tree (mj_isFreeBody).

    Returns (body ids, first dof of each). Welded children are allowed: MuJoCo 4.0.0 treats
    such trees as free bodies too (probed: its free-body solve then matches the exact
    derivative of the whole tree's bias force, which is what is used here).
    """
    jntnum, jntadr = _np(m.body_jntnum), _np(m.body_jntadr)
    jt = _np(m.jnt_type)
    bodies, dofs = [], []
    for b in range(1, m.nbody):
        if jntnum[b] != 1 or jt[jntadr[b]] != JointType.FREE:
            continue
        adr = int(m.jnt_dofadr[jntadr[b]])
        if int(_np(m.tree_dofnum)[_np(m.dof_treeid)[adr]]) != 6:
            continue
        bodies.append(b)
        dofs.append(adr)
    return np.asarray(bodies, np.int64), np.asarray(dofs, np.int64)


def _free_dof_mask(m: Model) -> np.ndarray:
    """(nv,) bool: dof belongs to a standalone free body."""
    _, dofs = _free_bodies(m)
    mask = np.zeros(m.nv, bool)
    if len(dofs):
        mask[dofs[:, None] + np.arange(6)] = True
    return mask


def qderiv(m: Model, d: State, flg_bias: bool) -> jax.Array:
    """d (qfrc_actuator + qfrc_passive - [qfrc_bias]) / d qvel, dense. MuJoCo: mjd_smooth_vel.

    `flg_bias` adds the RNE term (implicit); implicitfast leaves it out and symmetrises the
    fluid term except on standalone free bodies.
    """
    dt = _dtype(m)
    nv = m.nv
    flags = m.opt.disableflags
    D = jnp.zeros((nv, nv), dt)
    if not nv:
        return D
    D = D + actuator_vel_deriv(m, d)
    passive_on = not (flags & DisableBit.SPRING and flags & DisableBit.DAMPER)
    if passive_on:
        D = D + damping_vel_deriv(m, d)
    fluid_on = passive_on and m.nbody > 1

    def fluid(qvel):
        return passive.fluid(m, smooth.com_vel(m, d.replace(qvel=qvel)))

    def bias(qvel):
        return rne.rne_bias(m, smooth.com_vel(m, d.replace(qvel=qvel)))

    if fluid_on:
        Df = jax.jacfwd(fluid)(d.qvel)
        if m.opt.integrator == Integrator.IMPLICITFAST:
            free = _free_dof_mask(m)
            keep = jnp.asarray(free[:, None] & free[None, :])
            Df = jnp.where(keep, Df, 0.5 * (Df + Df.T))
        D = D + Df
    if flg_bias:
        D = D - jax.jacfwd(bias)(d.qvel)
    return jnp.where(jnp.asarray(_d_pattern(m)), D, 0.0)


# ------------------------------------------------------------------------ integrators


def euler(m: Model, d: State) -> State:
    """Semi-implicit Euler, implicit in joint damping. MuJoCo: mj_Euler.

    With damping and eulerdamp enabled, qacc solves (M + h B) qacc = qfrc_smooth +
    qfrc_constraint, B the diagonal derivative of dof damping. As MuJoCo, the solve is
    used only when a dof is damped (dof damping or polynomial damping, or a joint actuator
    with damping or armature: the values are leaves, so both are computed and one is
    selected); otherwise qacc is integrated as it is (which differs from the solve when the
    constraint solver stopped before convergence).
    """
    qacc = d.qacc
    b = _euler_damping(m, d)
    if b is not None:
        qH = d.qM + jnp.diag(m.opt.timestep * b)
        solved = linalg.cho_solve(linalg.cholesky(qH), d.qfrc_smooth + d.qfrc_constraint)
        qacc = jnp.where(_dof_damped(m), solved, qacc)
    return advance(m, d, d.act_dot, qacc)


def _dof_damped(m: Model) -> jax.Array:
    """Whether mj_Euler integrates implicitly: a dof has damping or polynomial damping, or
    its joint an actuator with damping, polynomial damping or armature (jnt_actuatorid)."""
    jnt = _np(m.dof_jntid)
    damped = (m.dof_damping > 0) | jnp.any(m.dof_dampingpoly != 0, axis=-1)
    if m.nactuator:
        sel = np.nonzero(np.isin(_np(m.actuator_trntype),
                                 (TrnType.JOINT, TrnType.JOINTINPARENT)))[0]
        if len(sel):
            on = ((m.actuator_damping[sel] != 0)
                  | jnp.any(m.actuator_dampingpoly[sel] != 0, axis=-1)
                  | (m.actuator_armature[sel] != 0))
            by_jnt = jnp.zeros(m.njnt, bool).at[_np(m.actuator_trnid)[sel, 0]].max(on)
            damped = damped | by_jnt[jnt]
    return jnp.any(damped)


def _implicitfast_matrix(m: Model, d: State, D: jax.Array) -> jax.Array:
    """implicitfast's symmetric M - h qDeriv (lower triangle mirrored); the rows and columns
    of standalone free bodies keep M (their blocks are solved apart, `_free_blocks`)."""
    low = jnp.tril(d.qM - m.opt.timestep * D)
    H = low + jnp.tril(low, -1).T
    if len(_free_bodies(m)[0]):
        free = _free_dof_mask(m)
        H = jnp.where(jnp.asarray(free[:, None] | free[None, :]), d.qM, H)
    return H


def _free_blocks(m: Model, d: State, D: jax.Array):
    """(dof indices (k, 6), blocks (k, 6, 6)) of the standalone free bodies: M - h qDeriv
    plus the gyroscopic derivative of their own bias force, unsymmetric (mjd_freeMhat)."""
    bodies, dofs = _free_bodies(m)
    if not len(bodies):
        return np.zeros((0, 6), np.int64), None
    h = m.opt.timestep
    idx = dofs[:, None] + np.arange(6)  # (k, 6)
    basis = jnp.zeros((idx.size, m.nv), _dtype(m)).at[np.arange(idx.size), idx.ravel()].set(1.0)

    def bias(qvel):
        return rne.rne_bias(m, smooth.com_vel(m, d.replace(qvel=qvel)))

    _, dbias = jax.vmap(lambda t: jax.jvp(bias, (d.qvel,), (t,)))(basis)  # (6k, nv)
    dbias = dbias.reshape(len(bodies), 6, m.nv)
    # dbias[k, c, i] = d bias_i / d qvel_(idx[k, c]); the block wants [i, c] on own dofs
    gather = np.broadcast_to(idx[:, None, :], (len(bodies), 6, 6))
    blk = jnp.swapaxes(jnp.take_along_axis(dbias, jnp.asarray(gather), axis=2), 1, 2)
    rows, cols = idx[:, :, None], idx[:, None, :]
    return idx, d.qM[rows, cols] - h * D[rows, cols] + h * blk


def _euler_damping(m: Model, d: State) -> jax.Array | None:
    """(nv,) derivative of the dof damping Euler integrates implicitly, or None when the
    eulerdamp or damper flag turns that off."""
    flags = m.opt.disableflags
    if not m.nv or flags & DisableBit.EULERDAMP or flags & DisableBit.DAMPER:
        return None
    lin, poly = passive.actuator_damping(m, (TrnType.JOINT, TrnType.JOINTINPARENT), m.njnt)
    jnt = _np(m.dof_jntid)
    return _poly_deriv(m.dof_damping + lin[jnt], m.dof_dampingpoly + poly[jnt], d.qvel)


def check_discrete(m: Model) -> None:
    """Rejects <flag invdiscrete> with RK4, as MuJoCo's mj_discreteAcc does."""
    if m.opt.integrator == Integrator.RK4:
        raise ValueError("discrete inverse dynamics (<flag invdiscrete>) is not supported by "
                         "the RK4 integrator (as in MuJoCo)")


def discrete_acc(m: Model, d: State) -> jax.Array:
    """The continuous-time acceleration whose integration gives the discrete-time d.qacc
    (mj_discreteAcc, for the invdiscrete flag): M^-1 H qacc, H the matrix the integrator
    solves with ((M + h B) for Euler with damping, M - h qDeriv for the implicit ones)."""
    it = m.opt.integrator
    check_discrete(m)
    if not m.nv:
        return d.qacc
    qacc = d.qacc
    if it == Integrator.EULER:
        b = _euler_damping(m, d)
        if b is None:
            return qacc
        qfrc = d.qM @ qacc + m.opt.timestep * b * qacc
    elif it == Integrator.IMPLICIT:
        qfrc = (d.qM - m.opt.timestep * qderiv(m, d, flg_bias=True)) @ qacc
    else:
        D = qderiv(m, d, flg_bias=False)
        qfrc = _implicitfast_matrix(m, d, D) @ qacc
        idx, A = _free_blocks(m, d, D)
        if len(idx):
            qfrc = qfrc.at[idx].set(jnp.einsum("kij,kj->ki", A, qacc[idx]))
    return smooth.solve_m(m, d, qfrc)


def implicit(m: Model, d: State) -> State:
    """Implicit-in-velocity integration (implicit and implicitfast). MuJoCo: mj_implicit.

    implicit: (M - h qDeriv) qacc = qfrc with the full qDeriv (RNE included), solved by LU.
    implicitfast: qDeriv without RNE, only its lower triangle used (a symmetric matrix,
    Cholesky); standalone free bodies instead solve their own 6x6 block with the
    gyroscopic derivative added (mjd_freeMhat).
    """
    if not m.nv:
        return advance(m, d, d.act_dot, d.qacc)
    h = m.opt.timestep
    qfrc = d.qfrc_smooth + d.qfrc_constraint
    full = m.opt.integrator == Integrator.IMPLICIT
    D = qderiv(m, d, flg_bias=full)
    if full:
        qacc = linalg.solve(d.qM - h * D, qfrc)
        return advance(m, d, d.act_dot, qacc)

    H = _implicitfast_matrix(m, d, D)
    qacc = linalg.cho_solve(linalg.cholesky(H), qfrc)
    idx, A = _free_blocks(m, d, D)
    if len(idx):
        x = linalg.solve(A, qfrc[idx])
        qacc = qacc.at[idx].set(x)
    return advance(m, d, d.act_dot, qacc)


# RK4 tableau (MuJoCo's RK4_A / RK4_B); C holds the row sums of A
_RK4_A = ((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0))
_RK4_B = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)


def _rot_dofs(m: Model) -> np.ndarray:
    """(k, 3) dof ids of the rotational velocities of ball and free joints."""
    jt, da = _np(m.jnt_type), _np(m.jnt_dofadr)
    starts = np.concatenate([da[jt == JointType.BALL], da[jt == JointType.FREE] + 3])
    return np.sort(starts)[:, None] + np.arange(3)


def _dexpinv(theta: jax.Array, k: jax.Array) -> jax.Array:
    """Runge-Kutta-Munthe-Kaas correction of a local angular velocity k at the rotation
    theta of its stage, dexp^-1: k + theta x k / 2 + c theta x (theta x k), c = (1 - (t/2)
    cot(t/2)) / t^2 with t = |theta| (its series 1/12 + t^2/720 near zero), as MuJoCo 4.0."""
    c = jnp.cross(theta, k)
    t2 = jnp.sum(theta * theta, axis=-1, keepdims=True)
    small = t2 < 1e-8
    ts = jnp.where(small, 1.0, t2)
    half = 0.5 * jnp.sqrt(ts)
    coef = jnp.where(small, 1.0 / 12.0 + t2 / 720.0, (1.0 - half / jnp.tan(half)) / ts)
    return k + 0.5 * c + coef * jnp.cross(theta, c)


def rungekutta4(m: Model, d: State, first_stage: bool = False):
    """Explicit 4th-order Runge-Kutta. MuJoCo: mj_RungeKutta(m, d, 4).

    Stage i sets qpos = qpos0 (+) h sum_j A_ij qvel_j (through integrate_pos), qvel and act
    by the same combination of qacc_j and act_dot_j (plain Euler, no clamping), time =
    time0 + C_i h, then reruns the whole forward pass (sensors aside). For the rotations of
    ball and free joints, each stage velocity is first corrected by the stage's rotation
    (Runge-Kutta-Munthe-Kaas, as MuJoCo 4.0), so orientations are 4th-order accurate. The
    final update is mj_advance with the B-weighted act_dot, qacc and (corrected) qvel, from
    the initial state; derived fields left in the state are those of the last stage.

    With `first_stage`, `d` has not been through forward yet: the scan runs the first
    stage too (one compiled forward pass per step instead of two; only for models whose
    forward equals forward without sensors, see forward.step), and the result is
    (state, qacc of the first stage).
    """
    from jaxsim.forward import forward_skip

    h = m.opt.timestep
    t0, q0, v0, a0 = d.time, d.qpos, d.qvel, d.act
    # MuJoCo 4.0 samples delayed sensors from the state the step starts from
    hist = _advance_history(m, d)
    rot = _rot_dofs(m)
    dt = v0.dtype
    # stage velocities (rotations RKMK-corrected), accelerations and act_dot, by stage;
    # the intermediate stages are one scanned forward pass (compiled once)
    A = np.zeros((3, 4))
    for i, row in enumerate(_RK4_A):
        A[i, :len(row)] = row
    first = 0 if first_stage else 1
    if first_stage:
        A = np.concatenate([np.zeros((1, 4)), A])
    vel = jnp.zeros((4,) + v0.shape, dt).at[0].set(v0)
    acc = jnp.zeros((4,) + v0.shape, dt).at[0].set(d.qacc)
    adot = jnp.zeros((4,) + a0.shape, dt).at[0].set(d.act_dot)

    def stage(carry, x):
        d, vel, acc, adot = carry
        i, row = x
        # one nonzero coefficient per row: the sums equal MuJoCo's exactly; the first stage
        # (all zero) is the state itself
        dq, dv, da = row @ vel, row @ acc, row @ adot
        at0 = i == 0
        d = d.replace(qpos=jnp.where(at0, q0, integrate_pos(m, q0, dq, h)),
                      qvel=jnp.where(at0, v0, v0 + h * dv), act=jnp.where(at0, a0, a0 + h * da),
                      time=jnp.where(at0, t0, t0 + jnp.sum(row) * h))
        d = forward_skip(m, d, skipsensor=True)
        if dt != jnp.float64:
            # below float64 each stage warm-starts the solver from the previous stage's
            # acceleration, closer than the step's (MuJoCo's, which float64 keeps): the
            # same solutions in fewer iterations (gymnasium ant at batch 1024: -3 % time,
            # humanoid -2.4 %)
            d = d.replace(qacc_warmstart=d.qacc)
        v = d.qvel
        if rot.size:
            v = jnp.where(at0, v, v.at[rot].set(_dexpinv(h * dq[rot], v[rot])))
        keep = (d.ten_length, d.ten_J) if plastic_ten else None
        return (d, vel.at[i].set(v), acc.at[i].set(d.qacc), adot.at[i].set(d.act_dot)), keep

    # plastic tendons move with the length at the initial state, linearised (MuJoCo
    # recomputes the tendons there in mj_advance, and leaves them in the state)
    plastic_ten = bool(m.ntendon) and bool(np.any(np.asarray(m.tendon_plasticadr) >= 0))
    ten0 = (d.ten_length, d.ten_J) if plastic_ten and not first_stage else None
    (d, vel, acc, adot), kept = lax.scan(stage, (d, vel, acc, adot),
                                         (jnp.arange(first, 4), jnp.asarray(A, dt)))
    if plastic_ten and first_stage:
        ten0 = (kept[0][0], kept[1][0])
    acc0 = acc[0]
    vel, F = list(vel), list(zip(acc, adot, strict=True))

    def comb(coef):
        dq = sum(c * v for c, v in zip(coef, vel, strict=False) if c)
        dv = sum(c * f[0] for c, f in zip(coef, F, strict=False) if c)
        da = sum(c * f[1] for c, f in zip(coef, F, strict=False) if c)
        return dq, dv, da

    dq, dv, da = comb(_RK4_B)
    d = d.replace(time=t0, qpos=q0, qvel=v0, act=a0)
    if ten0 is not None:
        d = d.replace(ten_length=ten0[0], ten_J=ten0[1])
    out = advance(m, d, da, dv, dq, hist)
    return (out, acc0) if first_stage else out
