"""Actuation: activation dynamics, gains and biases, muscles, actuator forces.

MuJoCo: mj_fwdActuation (engine_forward.c), mj_nextActivation (engine_support.c) and the
muscle model of engine_util_misc.c. Actuator types, transmission types, limit flags and
disabled groups are static structure: every actuator kind is one vectorised expression
over the actuators of that kind, selected by masks built with numpy at trace time.

Supported: dynamics none / integrator / filter / filterexact / muscle / user (no
callback: act_dot = 0); gains fixed / affine / muscle / user (no callback: gain 1); biases
none / affine / muscle / user (no callback: 0); actearly; actlimited; ctrl clamping and
MuJoCo's reset of all controls when one is bad; forcerange; tendon and joint actuator
force limits; gravity compensation routed through actuators; opt.disableactuator; the
rotational set-point wrapping of servos on ball joints and rotational site transmissions;
delayed controls, read from the history buffer at time - delay (jaxsim.history).

Not supported, raising at trace time: DC-motor and PID actuators, SO(3) actuators
(several outputs per actuator). Callbacks and
actuator plugins are out of scope.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import history, math
from jaxsim.types import (
    BiasType,
    DisableBit,
    DynType,
    GainType,
    JointType,
    Model,
    ObjType,
    State,
    TrnType,
)

MAXVAL = 1e10  # mjMAXVAL: larger controls are "bad" (mju_isBad)


def _dtype(m: Model):
    return m.body_pos.dtype


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _where_div(a, b):
    """a / max(MINVAL, b), MuJoCo's guarded division."""
    return a / jnp.maximum(math.MINVAL, b)


# ------------------------------------------------------------------------------ muscles


def muscle_gain_length(length: jax.Array, lmin: jax.Array, lmax: jax.Array) -> jax.Array:
    """Normalized active force-length curve, peak 1 at length 1 (mju_muscleGainLength)."""
    a = 0.5 * (lmin + 1)
    b = 0.5 * (1 + lmax)
    x1 = _where_div(length - lmin, a - lmin)
    x2 = _where_div(1 - length, 1 - a)
    x3 = _where_div(length - 1, b - 1)
    x4 = _where_div(lmax - length, lmax - b)
    out = jnp.where(length <= a, 0.5 * x1 * x1,
                    jnp.where(length <= 1, 1 - 0.5 * x2 * x2,
                              jnp.where(length <= b, 1 - 0.5 * x3 * x3, 0.5 * x4 * x4)))
    return jnp.where((lmin <= length) & (length <= lmax), out, 0.0)


def _muscle_scale(lengthrange, acc0, prm):
    """Peak force (scale / acc0 when prm force < 0) and optimal length L0."""
    force = jnp.where(prm[..., 2] < 0, _where_div(prm[..., 3], acc0), prm[..., 2])
    l0 = _where_div(lengthrange[..., 1] - lengthrange[..., 0], prm[..., 1] - prm[..., 0])
    return force, l0


def muscle_gain(length, velocity, lengthrange, acc0, prm) -> jax.Array:
    """Active muscle force per unit activation, negative (mju_muscleGain).

    prm: (range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax).
    """
    force, l0 = _muscle_scale(lengthrange, acc0, prm)
    lmin, lmax, vmax, fvmax = prm[..., 4], prm[..., 5], prm[..., 6], prm[..., 8]
    L = prm[..., 0] + _where_div(length - lengthrange[..., 0], l0)
    V = _where_div(velocity, l0 * vmax)
    fl = muscle_gain_length(L, lmin, lmax)
    y = fvmax - 1
    fv = jnp.where(V <= -1, 0.0,
                   jnp.where(V <= 0, (V + 1) ** 2,
                             jnp.where(V <= y, fvmax - _where_div((y - V) ** 2, y), fvmax)))
    return -force * fl * fv


def muscle_bias(length, lengthrange, acc0, prm) -> jax.Array:
    """Passive muscle force, negative (mju_muscleBias)."""
    force, l0 = _muscle_scale(lengthrange, acc0, prm)
    lmax, fpmax = prm[..., 5], prm[..., 7]
    L = prm[..., 0] + _where_div(length - lengthrange[..., 0], l0)
    b = 0.5 * (1 + lmax)
    x1 = _where_div(L - 1, b - 1)
    x2 = _where_div(L - b, b - 1)
    return jnp.where(L <= 1, 0.0,
                     jnp.where(L <= b, -force * fpmax * 0.5 * x1 * x1,
                               -force * fpmax * (0.5 + x2)))


def _sigmoid(x):
    """Quintic smooth step on [0, 1] (mju_sigmoid)."""
    xc = jnp.clip(x, 0.0, 1.0)
    return xc**3 * (3 * xc * (2 * xc - 5) + 10)


def muscle_dynamics(ctrl, act, prm) -> jax.Array:
    """Muscle activation rate (mju_muscleDynamics); prm: (tau_act, tau_deact, smoothing)."""
    ctrlclamp = jnp.clip(ctrl, 0.0, 1.0)
    actclamp = jnp.clip(act, 0.0, 1.0)
    tau_act = prm[..., 0] * (0.5 + 1.5 * actclamp)
    tau_deact = prm[..., 1] / (0.5 + 1.5 * actclamp)
    width = prm[..., 2]
    dctrl = ctrlclamp - act
    hard = jnp.where(dctrl > 0, tau_act, tau_deact)
    smooth_w = width >= math.MINVAL
    x = dctrl / jnp.where(smooth_w, width, 1.0) + 0.5
    smooth = tau_deact + (tau_act - tau_deact) * _sigmoid(x)
    tau = jnp.where(smooth_w, smooth, hard)
    return _where_div(dctrl, tau)


# ---------------------------------------------------------------------------- checks


def _check_supported(m: Model) -> None:
    def fail(i, what):
        name = m.id2name(ObjType.ACTUATOR, i) or f"#{i}"
        raise NotImplementedError(f"actuator '{name}' (id {i}): {what} is not supported by "
                                  "jaxsim.actuation yet")

    dyn, gain, bias = _np(m.actuator_dyntype), _np(m.actuator_gaintype), _np(m.actuator_biastype)
    for i in range(m.nu):
        if dyn[i] in (DynType.DCMOTOR, DynType.PID):
            fail(i, f"dyntype {DynType(dyn[i]).name.lower()}")
        if gain[i] in (GainType.DCMOTOR, GainType.PID, GainType.SO3):
            fail(i, f"gaintype {GainType(gain[i]).name.lower()}")
        if bias[i] in (BiasType.DCMOTOR, BiasType.SO3):
            fail(i, f"biastype {BiasType(bias[i]).name.lower()}")
        if int(m.actuator_trntype[i]) == TrnType.SO3:
            fail(i, "an SO(3) transmission")
        if int(m.actuator_ctrlnum[i]) != 1:
            fail(i, f"{int(m.actuator_ctrlnum[i])} control inputs")
        if int(m.actuator_actnum[i]) > 1:
            fail(i, f"{int(m.actuator_actnum[i])} activation variables")


def _disabled(m: Model) -> np.ndarray:
    """Actuators whose group is disabled by opt.disableactuator (mj_actuatorDisabled)."""
    group = _np(m.actuator_group)
    inrange = (group >= 0) & (group <= 30)
    bits = np.where(inrange, np.left_shift(1, np.clip(group, 0, 30)), 0)
    return inrange & ((int(m.opt.disableactuator) & bits) != 0)


# ------------------------------------------------------------------------------ stage


def next_activation(m: Model, d: State, act_dot: jax.Array) -> jax.Array:
    """Activation after one step of act_dot, clamped to actrange (mj_nextActivation).

    Returns (nu,): the last activation of each stateful actuator (finite filler for the
    stateless ones). filterexact integrates exactly, the others with Euler.
    """
    dt = _dtype(m)
    adr = _np(m.actuator_actadr)
    last = np.maximum(adr + _np(m.actuator_actnum) - 1, 0)
    if not m.na:
        return jnp.zeros(m.nu, dt)
    act, adot = d.act[last], act_dot[last]
    h = m.opt.timestep
    tau = jnp.maximum(math.MINVAL, m.actuator_dynprm[:, 0])
    exact = jnp.asarray(_np(m.actuator_dyntype) == DynType.FILTEREXACT)
    nxt = jnp.where(exact, act + adot * tau * (1 - jnp.exp(-h / tau)), act + adot * h)
    limited = jnp.asarray(np.asarray(m.actuator_actlimited, bool))
    clamped = jnp.clip(nxt, m.actuator_actrange[:, 0], m.actuator_actrange[:, 1])
    return jnp.where(limited, clamped, nxt)


def _wrap_period(m: Model) -> jax.Array:
    """Period of rotational servos (2 pi |gear|), 0 for other actuators.

    Servo shape: fixed gain, affine bias with gainprm[0] == -biasprm[1], no or integrator
    dynamics; on a ball-joint transmission or a purely rotational site transmission with
    a reference site.
    """
    dt = _dtype(m)
    trn, trnid = _np(m.actuator_trntype), _np(m.actuator_trnid)
    dyn = _np(m.actuator_dyntype)
    shape = ((_np(m.actuator_gaintype) == GainType.FIXED)
             & (_np(m.actuator_biastype) == BiasType.AFFINE)
             & np.isin(dyn, (DynType.NONE, DynType.INTEGRATOR)))
    jnt_type = _np(m.jnt_type)
    ball = np.isin(trn, (TrnType.JOINT, TrnType.JOINTINPARENT)) & (
        jnt_type[np.clip(trnid[:, 0], 0, max(m.njnt - 1, 0))] == JointType.BALL
        if m.njnt else False)
    site = (trn == TrnType.SITE) & (trnid[:, 1] >= 0)
    cand = np.nonzero(shape & (ball | site))[0]
    period = jnp.zeros(m.nu, dt)
    if not len(cand):
        return period
    gear = m.actuator_gear[cand]
    servo = m.actuator_gainprm[cand, 0] == -m.actuator_biasprm[cand, 1]
    is_site = jnp.asarray(site[cand])
    rotational = jnp.all(gear[:, :3] == 0, axis=-1)
    p = jnp.where(is_site, 2 * jnp.pi * math.norm(gear[:, 3:6]), 2 * jnp.pi * math.norm(gear[:, :3]))
    ok = servo & jnp.where(is_site, rotational, True)
    return period.at[cand].set(jnp.where(ok, p, 0.0))


def _wrap_setpoint(u, length, period):
    """Representative of u nearest to length for a rotational period (0: no wrapping)."""
    wrap = period > 0
    x = (u - length) / jnp.where(wrap, period, 1.0)
    rounded = jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)  # C round(): half away from zero
    return jnp.where(wrap, u - period * rounded, u)


def actuation(m: Model, d: State) -> State:
    """Actuator forces and activation rates. MuJoCo: mj_fwdActuation.

    Needs actuator_length / actuator_moment (`transmission`), actuator_velocity
    (`passive.tendon_actuator_velocity`) and qfrc_gravcomp (`passive.passive`). Fills
    act_dot, actuator_force and qfrc_actuator. With actuation disabled, act_dot is left
    unchanged, as in MuJoCo.
    """
    dt = _dtype(m)
    nu, nv = m.nu, m.nv
    if not nu or m.opt.disableflags & DisableBit.ACTUATION:
        return d.replace(actuator_force=jnp.zeros(nu, dt), qfrc_actuator=jnp.zeros(nv, dt))
    _check_supported(m)

    dyn = _np(m.actuator_dyntype)
    gain_t = _np(m.actuator_gaintype)
    bias_t = _np(m.actuator_biastype)
    trn, trnid = _np(m.actuator_trntype), _np(m.actuator_trnid)
    uadr = _np(m.actuator_ctrladr)
    actadr, actnum = _np(m.actuator_actadr), _np(m.actuator_actnum)
    length, velocity = d.actuator_length, d.actuator_velocity

    # controls: clamp, then zero all of them if any is bad
    ctrl = history.delayed_ctrl(m, d, d.ctrl)[uadr]
    if not m.opt.disableflags & DisableBit.CLAMPCTRL:
        lim = np.asarray(m.actuator_ctrllimited, bool)
        if lim.any():
            clipped = jnp.clip(ctrl, m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1])
            ctrl = jnp.where(jnp.asarray(lim), clipped, ctrl)
    bad = jnp.any(jnp.isnan(ctrl) | (jnp.abs(ctrl) > MAXVAL))
    ctrl = jnp.where(bad, 0.0, ctrl)
    warning = d.warning.at[6].add(bad.astype(d.warning.dtype))

    # activation dynamics
    act_dot = d.act_dot
    stateful = np.nonzero(actadr >= 0)[0]
    if len(stateful):
        last = actadr[stateful] + actnum[stateful] - 1
        a = d.act[last]
        c = ctrl[stateful]
        dy = dyn[stateful]
        prm = m.actuator_dynprm[stateful]
        filt = (c - a) / jnp.maximum(math.MINVAL, prm[:, 0])
        rate = jnp.zeros_like(a)
        rate = jnp.where(jnp.asarray(dy == DynType.INTEGRATOR), c, rate)
        rate = jnp.where(jnp.asarray(np.isin(dy, (DynType.FILTER, DynType.FILTEREXACT))), filt, rate)
        if (dy == DynType.MUSCLE).any():
            rate = jnp.where(jnp.asarray(dy == DynType.MUSCLE), muscle_dynamics(c, a, prm), rate)
        act_dot = act_dot.at[last].set(rate)

    # gain
    gainprm, biasprm = m.actuator_gainprm, m.actuator_biasprm
    gain = jnp.ones(nu, dt)  # user gain without a callback
    gain = jnp.where(jnp.asarray(gain_t == GainType.FIXED), gainprm[:, 0], gain)
    affine = gainprm[:, 0] + gainprm[:, 1] * length + gainprm[:, 2] * velocity
    gain = jnp.where(jnp.asarray(gain_t == GainType.AFFINE), affine, gain)
    if (gain_t == GainType.MUSCLE).any():
        mg = muscle_gain(length, velocity, m.actuator_lengthrange, m.actuator_acc0, gainprm)
        gain = jnp.where(jnp.asarray(gain_t == GainType.MUSCLE), mg, gain)

    # input: ctrl for stateless actuators, (next) activation for the others
    inp = ctrl
    if m.na and len(stateful):
        last = np.maximum(actadr + actnum - 1, 0)
        act = d.act[last]
        early = np.asarray(m.actuator_actearly, bool)
        if early.any():
            act = jnp.where(jnp.asarray(early), next_activation(m, d, act_dot), act)
        inp = jnp.where(jnp.asarray(actadr >= 0), act, ctrl)
    inp = _wrap_setpoint(inp, length, _wrap_period(m))
    force = gain * inp

    # bias
    bias = jnp.zeros(nu, dt)
    aff = biasprm[:, 0] + biasprm[:, 1] * length + biasprm[:, 2] * velocity
    bias = jnp.where(jnp.asarray(bias_t == BiasType.AFFINE), aff, bias)
    if (bias_t == BiasType.MUSCLE).any():
        mb = muscle_bias(length, m.actuator_lengthrange, m.actuator_acc0, biasprm)
        bias = jnp.where(jnp.asarray(bias_t == BiasType.MUSCLE), mb, bias)
    force = force + bias

    off = _disabled(m)
    if off.any():
        force = jnp.where(jnp.asarray(off), 0.0, force)

    # tendon actuator force limits: scale every actuator of a tendon by the same factor
    if m.ntendon:
        ten_lim = np.asarray(m.tendon_actfrclimited, bool)
        on_ten = (trn == TrnType.TENDON) & ten_lim[np.clip(trnid[:, 0], 0, m.ntendon - 1)]
        sel = np.nonzero(on_ten)[0]
        if len(sel):
            tid = trnid[sel, 0]
            total = jnp.zeros(m.ntendon, dt).at[tid].add(force[sel])[tid]
            lo, hi = m.tendon_actfrcrange[tid, 0], m.tendon_actfrcrange[tid, 1]
            # MuJoCo leaves a zero total alone; the guard also keeps the gradient finite
            safe = jnp.where(total == 0, 1.0, total)
            scale = jnp.where(total < lo, lo / safe, jnp.where(total > hi, hi / safe, 1.0))
            scale = jnp.where(total == 0, 1.0, scale)
            force = force.at[sel].set(force[sel] * scale)

    # actuator force range
    flim = np.asarray(m.actuator_forcelimited, bool)
    if flim.any():
        clipped = jnp.clip(force, m.actuator_forcerange[:, 0], m.actuator_forcerange[:, 1])
        force = jnp.where(jnp.asarray(flim), clipped, force)

    qfrc = force @ d.actuator_moment if nv else jnp.zeros(0, dt)

    # gravity compensation routed through actuators
    if m.ngravcomp and nv and not m.opt.disableflags & DisableBit.GRAVITY:
        route = np.asarray(m.jnt_actgravcomp, bool)[_np(m.dof_jntid)]
        if route.any():
            qfrc = qfrc + jnp.where(jnp.asarray(route), d.qfrc_gravcomp, 0.0)

    # joint actuator force limits (on the joint's first dof, as MuJoCo)
    jlim = np.nonzero(np.asarray(m.jnt_actfrclimited, bool))[0]
    if len(jlim):
        da = _np(m.jnt_dofadr)[jlim]
        qfrc = qfrc.at[da].set(jnp.clip(qfrc[da], m.jnt_actfrcrange[jlim, 0], m.jnt_actfrcrange[jlim, 1]))

    return d.replace(act_dot=act_dot, actuator_force=force, qfrc_actuator=qfrc, warning=warning)
