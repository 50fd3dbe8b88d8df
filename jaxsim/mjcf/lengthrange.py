"""Actuator length ranges found by simulation (MuJoCo: mj_setLengthRange).

For actuators that `<compiler><lengthrange>` selects and that have neither an explicit
range nor (with uselimit) a limited joint or tendon, MuJoCo finds the range by simulating
the model from qpos0 while a force along the actuator's moment drives it first towards
short and then towards long lengths: gravity, contacts, springs, dampers, friction loss
and actuation disabled; equality and limit constraints active; velocity decayed each step
by exp(-timestep / timeconst); force chosen for the acceleration `accel` along the moment
(capped at `maxforce`). The extreme length over the last `interval` seconds of `inttotal`
is the range end. We run the same procedure with jaxsim's own step, all actuators and both
directions in one vmapped scan, in float64.
"""

from __future__ import annotations

import numpy as np

_MINVAL = 1e-15


def _step_times(dt: float, total: float) -> np.ndarray:
    """The simulation times after each step of `while time < total: time += dt`."""
    times = []
    t = 0.0
    while t < total:
        t = t + dt
        times.append(t)
    return np.asarray(times)


def simulate(model, actuators: list[int], opt: dict) -> np.ndarray:
    """The lengths reached driving each actuator short (side 0) and long (side 1).

    Returns (lo, hi, ok), each (len(actuators), 2): per side, the least and greatest
    length over the final interval (MuJoCo checks both against tolrange), and whether the
    simulation stayed finite.
    """
    import jax
    import jax.numpy as jnp

    from jaxsim.forward import (
        fwd_acceleration,
        fwd_constraint,
        fwd_position,
        fwd_velocity,
        integrate,
    )
    from jaxsim.smooth import solve_m
    from jaxsim.state import make_state
    from jaxsim.types import DisableBit

    flags = (DisableBit.FRICTIONLOSS | DisableBit.CONTACT | DisableBit.SPRING
             | DisableBit.DAMPER | DisableBit.GRAVITY | DisableBit.ACTUATION)
    dt = float(opt["timestep"]) if float(opt["timestep"]) > 0 else float(model.opt.timestep)
    m = model.replace(opt=model.opt.replace(disableflags=int(flags),
                                            timestep=jnp.asarray(dt, jnp.float64)))
    times = _step_times(dt, float(opt["inttotal"]))
    record = jnp.asarray(times > float(opt["inttotal"]) - float(opt["interval"]))
    decay = float(np.exp(-dt / max(0.01, float(opt["timeconst"]))))
    accel, maxforce = float(opt["accel"]), float(opt["maxforce"])
    d0 = make_state(m)

    def one(m, d0, aid, side):
        sign = 2.0 * side - 1.0

        def body(d, rec):
            d = d.replace(qvel=d.qvel * decay)
            d = fwd_velocity(m, fwd_position(m, d))  # mj_step1 without sensors
            moment = d.actuator_moment[aid]
            nrm = jnp.linalg.norm(solve_m(m, d, moment))
            qfrc = moment * (sign * accel / jnp.maximum(_MINVAL, nrm))
            if maxforce > 0:
                nrm = jnp.linalg.norm(qfrc)
                qfrc = jnp.where(nrm > maxforce,
                                 qfrc * (maxforce / jnp.maximum(_MINVAL, nrm)), qfrc)
            length = d.actuator_length[aid]
            d = d.replace(qfrc_applied=qfrc)  # mj_step2 (actuation is disabled)
            d = fwd_constraint(m, fwd_acceleration(m, d))
            d = integrate(m, d, rk4_as_euler=True)
            ok = jnp.all(jnp.isfinite(d.qpos)) & jnp.all(jnp.isfinite(d.qvel))
            return d, (length, rec, ok)

        _, (lens, rec, ok) = jax.lax.scan(body, d0, record)
        lo = jnp.min(jnp.where(rec, lens, jnp.inf))
        hi = jnp.max(jnp.where(rec, lens, -jnp.inf))
        return lo, hi, jnp.all(ok)

    # the first output row of each actuator (MuJoCo's evalAct reads that row only)
    rows = np.asarray(model.actuator_outadr, np.int32)[np.asarray(actuators, np.int64)]
    aids = np.repeat(rows, 2)
    sides = np.tile(np.asarray([0.0, 1.0]), len(actuators))
    run = jax.jit(jax.vmap(one, in_axes=(None, None, 0, 0)))
    lo, hi, ok = run(m, d0, jnp.asarray(aids), jnp.asarray(sides))
    lo, hi, ok = np.asarray(lo), np.asarray(hi), np.asarray(ok)
    return lo.reshape(-1, 2), hi.reshape(-1, 2), ok.reshape(-1, 2)


def resolve(model, actuators: list[int], opt: dict, error) -> np.ndarray:
    """actuator_lengthrange with the simulated entries filled in; `error(aid, msg)` (an
    MJCFError naming the actuator element) is raised when MuJoCo's checks fail: a stable
    simulation, a positive range, convergence within tolrange.
    """
    import jax

    with jax.enable_x64(True):
        lo, hi, ok = simulate(model, actuators, opt)
    lr = np.asarray(model.actuator_lengthrange, np.float64).copy()
    for k, aid in enumerate(actuators):
        if not ok[k].all():
            raise error(aid, "unstable lengthrange simulation")
        row = int(model.actuator_outadr[aid])
        lr[row] = (lo[k, 0], hi[k, 1])
        dif = lr[row, 1] - lr[row, 0]
        if dif <= 0:
            raise error(aid, f"invalid lengthrange ({lr[row, 0]:g}, {lr[row, 1]:g}) "
                            "from the lengthrange simulation")
        for side in (0, 1):
            if hi[k, side] - lo[k, side] > float(opt["tolrange"]) * dif:
                raise error(aid,
                    f"lengthrange simulation did not converge (side {side}: "
                    f"lengths ({lo[k, side]:g}, {hi[k, side]:g}) in the final interval, "
                    f"range ({lr[row, 0]:g}, {lr[row, 1]:g}))")
    return lr
