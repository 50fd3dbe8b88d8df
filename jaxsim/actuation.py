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

MuJoCo 4.0's multi-input multi-output actuators: PID servos (position, velocity and
feed-forward inputs, slew-rate limit, integral with anti-windup), DC motors (voltage or
controller inputs, electrical, thermal and LuGre friction states, cogging, voltage and
current limits) and SO(3) orientation servos (three output rows each, expmap or
quaternion set-points, integrator set-points re-anchored in mj_advance, the force-norm
limit). Per-actuator data of an actuator with several outputs is replicated over its rows
(`Model.out2act`); the activation slots of pid and dcmotor actuators are located from
their parameters at run time, as MuJoCo does, so parameters may vary per world.

Not supported, raising at trace time: user dynamics with several activation variables.
Callbacks and actuator plugins are out of scope.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import history, math
from jaxsim.types import (
    BiasType,
    CtrlChart,
    CtrlInput,
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
    dyn, num = _np(m.actuator_dyntype), _np(m.actuator_actnum)
    for i in range(m.nactuator):
        if num[i] > 1 and dyn[i] == DynType.USER:
            name = m.id2name(ObjType.ACTUATOR, i) or f"#{i}"
            raise NotImplementedError(
                f"actuator '{name}' (id {i}): user dynamics with {num[i]} activation variables "
                "is not supported by jaxsim.actuation")


def _disabled(m: Model) -> np.ndarray:
    """Actuators whose group is disabled by opt.disableactuator (mj_actuatorDisabled)."""
    group = _np(m.actuator_group)
    inrange = (group >= 0) & (group <= 30)
    bits = np.where(inrange, np.left_shift(1, np.clip(group, 0, 30)), 0)
    return inrange & ((int(m.opt.disableactuator) & bits) != 0)


def _kind(m: Model, gain=None, dyn=None, trn=None) -> np.ndarray:
    """Ids of the actuators of a gain type / dynamics type / transmission type (static)."""
    sel = np.ones(m.nactuator, bool)
    if gain is not None:
        sel &= _np(m.actuator_gaintype) == gain
    if dyn is not None:
        sel &= _np(m.actuator_dyntype) == dyn
    if trn is not None:
        sel &= _np(m.actuator_trntype) == trn
    return np.nonzero(sel)[0]


def _first(m: Model, ctrl: jax.Array) -> jax.Array:
    """The first control input of each actuator, 0 for actuators without inputs."""
    if not m.nu:
        return jnp.zeros(m.nactuator, _dtype(m))
    adr = np.minimum(_np(m.actuator_ctrladr), m.nu - 1)
    return jnp.where(jnp.asarray(_np(m.actuator_ctrlnum) > 0), ctrl[adr], 0.0)


def _inputs(m: Model, ids: np.ndarray, ctrl: jax.Array, first: jax.Array):
    """(pos, vel, ff, voltage) inputs (k,) of pid/dcmotor actuators `ids` (0 if absent);
    `first` (k,) replaces the first input (the slew-limited set-point)."""
    spec = _np(m.actuator_ctrlspec)[ids]
    spec = np.where(spec == CtrlInput.NONE, 0, spec)
    adr = _np(m.actuator_ctrladr)[ids]
    out, k = [], np.zeros(len(ids), np.int64)
    safe = max(m.nu - 1, 0)
    for bit in (CtrlInput.POS, CtrlInput.VEL, CtrlInput.FF, CtrlInput.VOLTAGE):
        has = (spec & bit) != 0
        val = ctrl[np.minimum(adr + k, safe)] if m.nu else jnp.zeros(len(ids), _dtype(m))
        val = jnp.where(jnp.asarray(k == 0), first, val)
        out.append(jnp.where(jnp.asarray(has), val, 0.0))
        k = k + has
    return out


def _act_at(act: jax.Array, idx: jax.Array, has: jax.Array) -> jax.Array:
    """act[idx] where the slot exists, else 0."""
    if not act.shape[0]:
        return jnp.zeros(idx.shape, act.dtype)
    return jnp.where(has, act[jnp.clip(idx, 0, act.shape[0] - 1)], 0.0)


def _put(x: jax.Array, idx: jax.Array, has: jax.Array, val: jax.Array) -> jax.Array:
    """x with x[idx] = val where the slot exists."""
    return x.at[jnp.where(has, idx, x.shape[0])].set(val, mode="drop")


def _pid_slots(m: Model, ids: np.ndarray):
    """(has, index) of the slew and integral slots of pid actuators (slew first)."""
    dp, gp = m.actuator_dynprm[ids], m.actuator_gainprm[ids]
    a0 = jnp.asarray(_np(m.actuator_actadr)[ids])
    slew, integ = dp[:, 1] > 0, gp[:, 0] > 0
    return (slew, a0), (integ, a0 + slew.astype(a0.dtype))


_DC_SLOTS = ("slew", "integral", "temperature", "bristle", "current")


def _dc_slots(m: Model, ids: np.ndarray) -> dict:
    """{name: (has, index)} of the activation slots of dcmotor actuators, in MuJoCo's order:
    slew (dynprm[7] > 0), integral (gainprm[5] > 0), temperature (dynprm[2] > 0), bristle
    (dynprm[5] > 0), current (dynprm[0] > 0)."""
    dp, gp = m.actuator_dynprm[ids], m.actuator_gainprm[ids]
    cur = jnp.asarray(_np(m.actuator_actadr)[ids])
    out = {}
    for name, has in zip(_DC_SLOTS, (dp[:, 7] > 0, gp[:, 5] > 0, dp[:, 2] > 0, dp[:, 5] > 0,
                                     dp[:, 0] > 0), strict=True):
        out[name] = (has, cur)
        cur = cur + has.astype(cur.dtype)
    return out


def _stribeck_rate(m: Model, ids: np.ndarray, v: jax.Array) -> jax.Array:
    """LuGre bristle rate coefficient -sigma0 |v| / g(v) of dcmotor actuators."""
    dp, bp = m.actuator_dynprm[ids], m.actuator_biasprm[ids]
    r = v / jnp.maximum(math.MINVAL, bp[:, 5])
    g = bp[:, 3] + (bp[:, 4] - bp[:, 3]) * jnp.exp(-r * r)
    return -dp[:, 5] * jnp.abs(v) / jnp.maximum(math.MINVAL, g)


def _dc_drive(m: Model, ids: np.ndarray, inp, length, velocity, xi, clamp: bool = True):
    """Drive voltage of dcmotor actuators: the controller's (R0/K tau + K v, clamped to
    Vmax) plus the voltage input."""
    gp = m.actuator_gainprm[ids]
    spec = _np(m.actuator_ctrlspec)[ids]
    ctl = jnp.asarray(((spec & (CtrlInput.POS | CtrlInput.VEL | CtrlInput.FF)) != 0)
                      & (spec != CtrlInput.NONE))
    pos, vel, ff, volt = inp
    tau = gp[:, 4] * (pos - length) + gp[:, 6] * (vel - velocity) + gp[:, 5] * xi + ff
    k = gp[:, 1]
    v = gp[:, 0] / jnp.where(k == 0, 1.0, k) * tau + k * velocity
    vmax = gp[:, 7]
    if clamp:
        v = jnp.where(vmax > 0, jnp.clip(v, -vmax, vmax), v)
    return jnp.where(ctl, v, 0.0) + volt


def _dc_resistance(m: Model, ids: np.ndarray, act: jax.Array, slots: dict) -> jax.Array:
    """Terminal resistance, adjusted by the temperature state when there is one."""
    gp, dp = m.actuator_gainprm[ids], m.actuator_dynprm[ids]
    has, idx = slots["temperature"]
    T = _act_at(act, idx, has)
    return jnp.where(has, gp[:, 0] * (1 + gp[:, 2] * (T + dp[:, 4] - gp[:, 3])), gp[:, 0])


# ------------------------------------------------------------------------------ stage


def next_activation(m: Model, d: State, act_dot: jax.Array) -> jax.Array:
    """Every activation variable after one step of act_dot (mj_nextActivation), (na,).

    filterexact integrates exactly, the others with Euler, then the actrange clamp; the
    slots of DC motors as MuJoCo: the current exactly (first-order lag), the LuGre bristle
    state by zero-order hold, the integral clamped to +-Imax, no actrange.
    """
    if not m.na:
        return jnp.zeros(0, _dtype(m))
    h = m.opt.timestep
    slot2act = np.repeat(np.arange(m.nactuator), np.maximum(_np(m.actuator_actnum), 0))
    act, adot = d.act, act_dot
    tau = jnp.maximum(math.MINVAL, m.actuator_dynprm[slot2act, 0])
    exact = jnp.asarray(_np(m.actuator_dyntype)[slot2act] == DynType.FILTEREXACT)
    nxt = jnp.where(exact, act + adot * tau * (1 - jnp.exp(-h / tau)), act + adot * h)
    limited = jnp.asarray(np.asarray(m.actuator_actlimited, bool)[slot2act])
    rng = m.actuator_actrange[slot2act]
    nxt = jnp.where(limited, jnp.clip(nxt, rng[:, 0], rng[:, 1]), nxt)
    dc = _kind(m, dyn=DynType.DCMOTOR)
    dc = dc[_np(m.actuator_actnum)[dc] > 0]
    if len(dc):
        slots = _dc_slots(m, dc)
        dp = m.actuator_dynprm[dc]
        euler = act + adot * h
        sel = np.isin(slot2act, dc)
        nxt = jnp.where(jnp.asarray(sel), euler, nxt)
        # integral: clamp to +-Imax
        has, idx = slots["integral"]
        imax = dp[:, 8]
        val = _act_at(euler, idx, has)
        nxt = _put(nxt, idx, has, jnp.where(imax > 0, jnp.clip(val, -imax, imax), val))
        # bristle: zero-order hold of z' = a z + v
        has, idx = slots["bristle"]
        v = d.actuator_velocity[_np(m.actuator_outadr)[dc]]
        a = _stribeck_rate(m, dc, v)
        e = jnp.exp(a * h)
        big = jnp.abs(a) > math.MINVAL
        factor = jnp.where(big, (e - 1) / jnp.where(big, a, 1.0), h)
        nxt = _put(nxt, idx, has, e * _act_at(act, idx, has) + factor * v)
        # current: exact first-order lag
        has, idx = slots["current"]
        te = jnp.maximum(math.MINVAL, dp[:, 0])
        val = _act_at(act, idx, has) + _act_at(adot, idx, has) * te * (1 - jnp.exp(-h / te))
        nxt = _put(nxt, idx, has, val)
    return nxt


def _wrap_period(m: Model) -> jax.Array:
    """Period of rotational servos (2 pi |gear|), 0 for other actuators, (nactuator,).

    Servo shape: fixed gain, affine bias with gainprm[0] == -biasprm[1], no or integrator
    dynamics, or a PID; on a ball-joint transmission or a purely rotational site
    transmission with a reference site.
    """
    dt = _dtype(m)
    trn, trnid = _np(m.actuator_trntype), _np(m.actuator_trnid).reshape(-1, 2)
    dyn, gain_t = _np(m.actuator_dyntype), _np(m.actuator_gaintype)
    pid = gain_t == GainType.PID
    shape = ((gain_t == GainType.FIXED)
             & (_np(m.actuator_biastype) == BiasType.AFFINE)
             & np.isin(dyn, (DynType.NONE, DynType.INTEGRATOR))) | pid
    jnt_type = _np(m.jnt_type)
    ball = np.isin(trn, (TrnType.JOINT, TrnType.JOINTINPARENT)) & (
        jnt_type[np.clip(trnid[:, 0], 0, max(m.njnt - 1, 0))] == JointType.BALL
        if m.njnt else False)
    site = (trn == TrnType.SITE) & (trnid[:, 1] >= 0)
    cand = np.nonzero(shape & (ball | site))[0]
    period = jnp.zeros(m.nactuator, dt)
    if not len(cand):
        return period
    gear = m.actuator_gear[_np(m.actuator_outadr)[cand]]
    servo = (m.actuator_gainprm[cand, 0] == -m.actuator_biasprm[cand, 1]) | jnp.asarray(pid[cand])
    is_site = jnp.asarray(site[cand])
    rotational = jnp.all(gear[:, :3] == 0, axis=-1)
    p = jnp.where(is_site, 2 * jnp.pi * math.norm(gear[:, 3:6]), 2 * jnp.pi * math.norm(gear[:, :3]))
    ok = servo & jnp.where(is_site, rotational, True)
    return period.at[cand].set(jnp.where(ok, p, 0.0))


def _round(x):
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)  # C round(): half away from zero


def _wrap_setpoint(u, length, period):
    """Representative of u nearest to length for a rotational period (0: no wrapping)."""
    wrap = period > 0
    x = (u - length) / jnp.where(wrap, period, 1.0)
    return jnp.where(wrap, u - period * _round(x), u)


def so3_reanchor(v: jax.Array) -> jax.Array:
    """Rotation vectors (k, 3) of angle above pi mapped to the equivalent one of angle at
    most pi on the same axis (mj_advance, SO3 integrator set-points)."""
    th = math.norm(v)
    big = th > jnp.pi
    safe = jnp.where(big, th, 1.0)
    scale = (safe - 2 * jnp.pi * _round(safe / (2 * jnp.pi))) / safe
    return jnp.where(big[..., None], v * scale[..., None], v)


def _so3_force(m: Model, d: State, ids: np.ndarray, ctrl: jax.Array, act_dot: jax.Array):
    """(k, 3) forces of SO3 actuators: kp log(q_cur^-1 q_tgt) + bias, norm-limited."""
    uadr = _np(m.actuator_ctrladr)[ids]
    rows = _np(m.actuator_outadr)[ids][:, None] + np.arange(3)
    quat = _np(m.actuator_ctrlspec)[ids] == CtrlChart.QUAT
    integ = _np(m.actuator_dyntype)[ids] == DynType.INTEGRATOR
    cq = ctrl[np.minimum(uadr[:, None] + np.arange(4), max(m.nu - 1, 0))]
    target = ctrl[uadr[:, None] + np.arange(3)]
    if integ.any():
        adr = np.maximum(_np(m.actuator_actadr)[ids], 0)[:, None] + np.arange(3)
        a = d.act[adr]
        early = np.asarray(m.actuator_actearly, bool)[ids]
        if early.any():
            a = jnp.where(jnp.asarray(early)[:, None], next_activation(m, d, act_dot)[adr], a)
        target = jnp.where(jnp.asarray(integ)[:, None], a, target)
    q_tgt = jnp.where(jnp.asarray(quat)[:, None], math.normalize_quat(cq),
                      math.vel_to_quat(target))
    q_cur = math.vel_to_quat(d.actuator_length[rows])
    err = math.sub_quat(q_tgt, q_cur)
    gp, bp = m.actuator_gainprm[ids], m.actuator_biasprm[ids]
    f = gp[:, :1] * err + bp[:, :1] + bp[:, 2:3] * d.actuator_velocity[rows]
    lim = np.asarray(m.actuator_forcelimited, bool)[ids]
    if lim.any():
        hi = m.actuator_forcerange[ids, 1]
        n = math.norm(f)
        over = jnp.asarray(lim) & (n > hi)
        f = jnp.where(over[:, None], f * (hi / jnp.where(over, n, 1.0))[:, None], f)
    return rows, f


def actuation(m: Model, d: State) -> State:
    """Actuator forces and activation rates. MuJoCo: mj_fwdActuation.

    Needs actuator_length / actuator_moment (`transmission`), actuator_velocity
    (`passive.tendon_actuator_velocity`) and qfrc_gravcomp (`passive.passive`). Fills
    act_dot, actuator_force and qfrc_actuator. With actuation disabled, act_dot is left
    unchanged, as in MuJoCo.
    """
    dt = _dtype(m)
    na_, nv = m.nactuator, m.nv
    if not na_ or m.opt.disableflags & DisableBit.ACTUATION:
        return d.replace(actuator_force=jnp.zeros(m.nout, dt), qfrc_actuator=jnp.zeros(nv, dt))
    _check_supported(m)

    h = m.opt.timestep
    dyn = _np(m.actuator_dyntype)
    gain_t = _np(m.actuator_gaintype)
    bias_t = _np(m.actuator_biastype)
    trn, trnid = _np(m.actuator_trntype), _np(m.actuator_trnid).reshape(-1, 2)
    outadr = _np(m.actuator_outadr)
    actadr, actnum = _np(m.actuator_actadr), _np(m.actuator_actnum)
    ctrlnum = _np(m.actuator_ctrlnum)
    length, velocity = d.actuator_length[outadr], d.actuator_velocity[outadr]  # first rows

    # controls: clamp, then zero all of them if any is bad
    ctrl_all = history.delayed_ctrl(m, d, d.ctrl)
    if m.nu and not m.opt.disableflags & DisableBit.CLAMPCTRL:
        lim = np.asarray(m.actuator_ctrllimited, bool)
        if lim.any():
            clipped = jnp.clip(ctrl_all, m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1])
            ctrl_all = jnp.where(jnp.asarray(lim), clipped, ctrl_all)
    bad = jnp.any(jnp.isnan(ctrl_all) | (jnp.abs(ctrl_all) > MAXVAL))
    ctrl_all = jnp.where(bad, 0.0, ctrl_all)
    warning = d.warning.at[6].add(bad.astype(d.warning.dtype))
    ctrl = _first(m, ctrl_all)  # the first input; pid and dcmotor slew-limit it below

    # activation dynamics of the single-state kinds (on the last slot)
    act_dot = d.act_dot
    simple = np.nonzero((actadr >= 0) & (ctrlnum <= 1) & np.isin(
        dyn, (DynType.INTEGRATOR, DynType.FILTER, DynType.FILTEREXACT, DynType.MUSCLE,
              DynType.USER)))[0]
    if len(simple):
        last = actadr[simple] + actnum[simple] - 1
        a = d.act[last]
        c = ctrl[simple]
        dy = dyn[simple]
        prm = m.actuator_dynprm[simple]
        filt = (c - a) / jnp.maximum(math.MINVAL, prm[:, 0])
        rate = jnp.zeros_like(a)
        rate = jnp.where(jnp.asarray(dy == DynType.INTEGRATOR), c, rate)
        rate = jnp.where(jnp.asarray(np.isin(dy, (DynType.FILTER, DynType.FILTEREXACT))), filt, rate)
        if (dy == DynType.MUSCLE).any():
            rate = jnp.where(jnp.asarray(dy == DynType.MUSCLE), muscle_dynamics(c, a, prm), rate)
        act_dot = act_dot.at[last].set(rate)
    # integrators of several controls (SO3): control j into slot last - ctrlnum + 1 + j
    multi = np.nonzero((actadr >= 0) & (ctrlnum > 1) & (dyn == DynType.INTEGRATOR))[0]
    if len(multi):
        k = np.concatenate([np.arange(n) for n in ctrlnum[multi]])
        owner = np.repeat(multi, ctrlnum[multi])
        slot = actadr[owner] + actnum[owner] - ctrlnum[owner] + k
        act_dot = act_dot.at[slot].set(ctrl_all[_np(m.actuator_ctrladr)[owner] + k])

    # pid: slew-rate limited set-point, integral of the error with anti-windup
    pid = _kind(m, gain=GainType.PID)
    period = _wrap_period(m)
    if len(pid):
        (has_s, i_s), (has_i, i_i) = _pid_slots(m, pid)
        dp = m.actuator_dynprm[pid]
        c, per = ctrl[pid], period[pid]
        a_s = _act_at(d.act, i_s, has_s)
        step = dp[:, 1] * h
        ue = jnp.clip(_wrap_setpoint(c, a_s, per), a_s - step, a_s + step)
        act_dot = _put(act_dot, i_s, has_s, (ue - a_s) / h)
        c = jnp.where(has_s, ue, c)
        err = c - length[pid]
        err = jnp.where(per > 0, err - per * _round(err / jnp.where(per > 0, per, 1.0)), err)
        z = _act_at(d.act, i_i, has_i)
        imax = dp[:, 0]
        err = jnp.where((imax > 0) & (z >= imax), jnp.minimum(err, 0.0),
                        jnp.where((imax > 0) & (z <= -imax), jnp.maximum(err, 0.0), err))
        act_dot = _put(act_dot, i_i, has_i, err)
        ctrl = ctrl.at[pid].set(c)

    # dc motors: slew, integral, temperature, bristle and current states
    dcm = _kind(m, gain=GainType.DCMOTOR)
    if len(dcm):
        sl = _dc_slots(m, dcm)
        dp, gp = m.actuator_dynprm[dcm], m.actuator_gainprm[dcm]
        c, v, ln = ctrl[dcm], velocity[dcm], length[dcm]
        has, idx = sl["slew"]
        a_s = _act_at(d.act, idx, has)
        step = dp[:, 7] * h
        ue = jnp.clip(c, a_s - step, a_s + step)
        act_dot = _put(act_dot, idx, has, (ue - a_s) / h)
        c = jnp.where(has, ue, c)
        has, idx = sl["integral"]
        xi = _act_at(d.act, idx, has)
        err = c - ln
        imax = dp[:, 8]
        err = jnp.where((imax > 0) & (xi >= imax), jnp.minimum(err, 0.0),
                        jnp.where((imax > 0) & (xi <= -imax), jnp.maximum(err, 0.0), err))
        act_dot = _put(act_dot, idx, has, err)
        volt = _dc_drive(m, dcm, _inputs(m, dcm, ctrl_all, c), ln, v, xi)
        R = _dc_resistance(m, dcm, d.act, sl)
        K = gp[:, 1]
        te = dp[:, 0]
        has_c, idx_c = sl["current"]
        cur = _act_at(d.act, idx_c, has_c)
        i_alg = (volt - K * v) / R
        has, idx = sl["temperature"]
        T = _act_at(d.act, idx, has)
        i_now = jnp.where(te > 0, cur, i_alg)
        rt, cap = dp[:, 2], dp[:, 3]
        tdot = (R * i_now * i_now - T / jnp.where(has, rt, 1.0)) / jnp.where(has, cap, 1.0)
        act_dot = _put(act_dot, idx, has, tdot)
        has, idx = sl["bristle"]
        act_dot = _put(act_dot, idx, has,
                       _stribeck_rate(m, dcm, v) * _act_at(d.act, idx, has) + v)
        dc_volt, dc_R = volt, R  # the force below uses the same drive and resistance
        didt = (volt / R - K / R * v - cur) / jnp.where(te > 0, te, 1.0)
        didt = jnp.where(dp[:, 1] > 0, jnp.clip(didt, -dp[:, 1], dp[:, 1]), didt)
        act_dot = _put(act_dot, idx_c, has_c, didt)
        ctrl = ctrl.at[dcm].set(c)

    # gain
    row = outadr
    gainprm, biasprm = m.actuator_gainprm, m.actuator_biasprm
    lr, acc0 = m.actuator_lengthrange[row], m.actuator_acc0[row]
    gain = jnp.ones(na_, dt)  # user gain without a callback
    gain = jnp.where(jnp.asarray(gain_t == GainType.FIXED), gainprm[:, 0], gain)
    affine = gainprm[:, 0] + gainprm[:, 1] * length + gainprm[:, 2] * velocity
    gain = jnp.where(jnp.asarray(gain_t == GainType.AFFINE), affine, gain)
    if (gain_t == GainType.MUSCLE).any():
        mg = muscle_gain(length, velocity, lr, acc0, gainprm)
        gain = jnp.where(jnp.asarray(gain_t == GainType.MUSCLE), mg, gain)

    # input: ctrl for stateless actuators, (next) activation for the others
    inp = ctrl
    nxt = None
    if m.na:
        last = np.maximum(actadr + actnum - 1, 0)
        act = d.act[last]
        early = np.asarray(m.actuator_actearly, bool)
        if early.any():
            nxt = next_activation(m, d, act_dot)
            act = jnp.where(jnp.asarray(early), nxt[last], act)
        inp = jnp.where(jnp.asarray(actadr >= 0), act, ctrl)
    inp = _wrap_setpoint(inp, length, period)
    force = gain * inp

    # bias
    bias = jnp.zeros(na_, dt)
    aff = biasprm[:, 0] + biasprm[:, 1] * length + biasprm[:, 2] * velocity
    bias = jnp.where(jnp.asarray(bias_t == BiasType.AFFINE), aff, bias)
    if (bias_t == BiasType.MUSCLE).any():
        mb = muscle_bias(length, lr, acc0, biasprm)
        bias = jnp.where(jnp.asarray(bias_t == BiasType.MUSCLE), mb, bias)
    force = force + bias

    if len(pid):  # kp (qref - l) + kv (vref - v) + ff + ki z + bias
        pos, vel, ff, _ = _inputs(m, pid, ctrl_all, ctrl[pid])
        gp, bp = gainprm[pid], biasprm[pid]
        qref = _wrap_setpoint(pos, length[pid], period[pid])
        f = -bp[:, 1] * qref - bp[:, 2] * vel + ff
        early = jnp.asarray(np.asarray(m.actuator_actearly, bool)[pid])
        z = _act_at(d.act, i_i, has_i)
        if nxt is not None:
            z = jnp.where(early, _act_at(nxt, i_i, has_i), z)
        f = f + jnp.where(has_i & jnp.asarray(actnum[pid] > 0), gp[:, 0] * z, 0.0)
        force = force.at[pid].set(f + bias[pid])
    if len(dcm):  # without controls the drive voltage is 0
        K, te = gainprm[dcm, 1], m.actuator_dynprm[dcm, 0]
        g = K / jnp.maximum(math.MINVAL, dc_R)
        f = g * dc_volt - g * K * velocity[dcm]
        has, idx = sl["current"]
        if nxt is None:
            nxt = next_activation(m, d, act_dot)
        f = jnp.where(te > 0, K * _act_at(nxt, idx, has), f)
        force = force.at[dcm].set(f)

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

    if len(dcm):  # cogging and LuGre friction, after the limit
        bp, dp = biasprm[dcm], m.actuator_dynprm[dcm]
        ln = length[dcm]
        f = force[dcm] + jnp.where(bp[:, 0] != 0, bp[:, 0] * jnp.sin(bp[:, 1] * ln + bp[:, 2]), 0.0)
        has, idx = sl["bristle"]
        z, zdot = _act_at(d.act, idx, has), _act_at(act_dot, idx, has)
        f = f - jnp.where(has, dp[:, 5] * z + dp[:, 6] * zdot, 0.0)
        if off.any():
            f = jnp.where(jnp.asarray(off[dcm]), 0.0, f)
        force = force.at[dcm].set(f)

    # per-output rows: the scalar kinds' force on their row, SO3 three rows each
    out = jnp.zeros(m.nout, dt)
    siso = np.nonzero(_np(m.actuator_outnum) == 1)[0]
    if len(siso):
        out = out.at[outadr[siso]].set(force[siso])
    so3 = _kind(m, gain=GainType.SO3)
    if len(so3):
        rows, f3 = _so3_force(m, d, so3, ctrl_all, act_dot)
        if off.any():
            f3 = jnp.where(jnp.asarray(off[so3])[:, None], 0.0, f3)
        out = out.at[rows].set(f3)
    force = out

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
