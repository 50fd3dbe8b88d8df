"""The forward pipeline and the step: fwd_position, fwd_velocity, fwd_actuation,
fwd_acceleration, forward, step, step1/step2. MuJoCo: engine_forward.c.

Collision detection runs in fwd_position and fills `state.contact`. The constraint
solver (equality, friction loss, limits, contact forces) is not implemented yet:
`qacc = qacc_smooth` and `qfrc_constraint = 0`. A model that would produce constraint
rows gets a `ConstraintsIgnoredWarning` when traced, naming what is ignored, unless the
constraints (or the kinds it has) are disabled with `<option><flag .../></option>`.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import actuation as _actuation
from jaxsim import integrator as _integrator
from jaxsim import passive as _passive
from jaxsim import rne as _rne
from jaxsim import smooth
from jaxsim.collision import driver as _collision
from jaxsim.types import DisableBit, Integrator, Model, Stage, State


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


# ----------------------------------------------------------------- constraint guard


def _any_positive(x) -> bool:
    """True when x is concrete and has a positive entry; False for traced values.

    Friction loss is a parameter, not structure: inside `jit` its value is unknown at
    trace time, so only concrete models can be checked.
    """
    if isinstance(x, jax.core.Tracer):
        return False
    return bool(np.any(np.asarray(x) > 0))


def _contacts_possible(m: Model) -> bool:
    """Whether any geom pair can pass MuJoCo's static collision filters (or npair > 0)."""
    if m.npair:
        return True
    if m.ngeom < 2:
        return False
    gb = _np(m.geom_bodyid)
    weld = _np(m.body_weldid)[gb]
    ct, ca = _np(m.geom_contype), _np(m.geom_conaffinity)
    i, j = np.triu_indices(m.ngeom, 1)
    dofnum = _np(m.body_dofnum)[weld]
    ok = (weld[i] != weld[j]) & (((ct[i] & ca[j]) | (ct[j] & ca[i])) != 0)
    ok &= (dofnum[i] > 0) | (dofnum[j] > 0)
    if not m.opt.disableflags & DisableBit.FILTERPARENT:
        pw = _np(m.body_weldid)[_np(m.body_parentid)[_np(m.body_weldid)]]
        wi, wj = weld[i], weld[j]
        parent = (wi > 0) & (wj > 0) & ((pw[wi] == wj) | (pw[wj] == wi))
        ok &= ~parent
    if m.nexclude:
        bi, bj = gb[i], gb[j]
        sig = (np.minimum(bi, bj) << 16) + np.maximum(bi, bj)
        ok &= ~np.isin(sig, _np(m.exclude_signature))
    return bool(ok.any())


class ConstraintsIgnoredWarning(UserWarning):
    """The model has constraints and the constraint solver is not implemented yet."""


def check_constraints(m: Model) -> None:
    """Warns (ConstraintsIgnoredWarning) if the model would have constraint rows in MuJoCo."""
    flags = m.opt.disableflags
    if flags & DisableBit.CONSTRAINT:
        return
    missing = []
    if not flags & DisableBit.CONTACT and _contacts_possible(m):
        missing.append("contacts (disable with <flag contact=\"disable\"/>)")
    if m.neq and not flags & DisableBit.EQUALITY:
        missing.append(f"{m.neq} equality constraint(s) (<flag equality=\"disable\"/>)")
    if not flags & DisableBit.LIMIT:
        nj = int(np.asarray(m.jnt_limited, bool).sum())
        nt = int(np.asarray(m.tendon_limited, bool).sum()) if m.ntendon else 0
        if nj or nt:
            missing.append(f"limits on {nj} joint(s) and {nt} tendon(s) (<flag limit=\"disable\"/>)")
    if not flags & DisableBit.FRICTIONLOSS:
        if _any_positive(m.dof_frictionloss) or (m.ntendon and _any_positive(m.tendon_frictionloss)):
            missing.append("friction loss (<flag frictionloss=\"disable\"/>)")
    if missing:
        warnings.warn(
            "jaxsim does not implement the constraint solver yet: qacc ignores the model's "
            + "; ".join(missing)
            + ". Disable them all with <option><flag constraint=\"disable\"/></option>.",
            ConstraintsIgnoredWarning, stacklevel=3,
        )


# ----------------------------------------------------------------------------- stages


def fwd_position(m: Model, d: State) -> State:
    """Position-dependent quantities. MuJoCo: mj_fwdPosition (without constraint
    construction, which is not implemented yet)."""
    check_constraints(m)
    d = smooth.kinematics(m, d)
    d = smooth.com_pos(m, d)
    d = smooth.camlight(m, d)
    d = smooth.tendon(m, d)
    d = smooth.make_m(m, d)
    d = smooth.factor_m(m, d)
    d = _collision.collision(m, d)
    return smooth.transmission(m, d)


def fwd_velocity(m: Model, d: State) -> State:
    """Velocity-dependent quantities. MuJoCo: mj_fwdVelocity.

    ten_velocity, actuator_velocity, cvel / cdof_dot, passive forces, and qfrc_bias (RNE
    without acceleration plus the tendon-armature bias).
    """
    d = _passive.tendon_actuator_velocity(m, d)
    d = smooth.com_vel(m, d)
    d = _passive.passive(m, d)
    return _rne.rne(m, d)


def fwd_actuation(m: Model, d: State) -> State:
    """Actuator forces and activation rates. MuJoCo: mj_fwdActuation."""
    return _actuation.actuation(m, d)


def xfrc_accumulate(m: Model, d: State) -> jax.Array:
    """Generalized force of xfrc_applied, each wrench acting at its body's com.

    MuJoCo: mj_xfrcAccumulate.
    """
    if not m.nv or m.nbody < 2:
        return jnp.zeros(m.nv, d.qpos.dtype)
    b = np.arange(1, m.nbody)
    x = d.xfrc_applied[b]
    return _passive.apply_ft(m, d, x[:, :3], x[:, 3:], d.xipos[b], b)


def fwd_acceleration(m: Model, d: State) -> State:
    """Net smooth force and the unconstrained acceleration. MuJoCo: mj_fwdAcceleration.

    qfrc_smooth = qfrc_passive - qfrc_bias + qfrc_applied + qfrc_actuator + J' xfrc_applied;
    qacc_smooth = M^-1 qfrc_smooth.
    """
    qfrc = d.qfrc_passive - d.qfrc_bias + d.qfrc_applied + d.qfrc_actuator
    qfrc = qfrc + xfrc_accumulate(m, d)
    return d.replace(qfrc_smooth=qfrc, qacc_smooth=smooth.solve_m(m, d, qfrc))


def fwd_constraint(m: Model, d: State) -> State:
    """Constraint forces. MuJoCo: mj_fwdConstraint.

    No constraints yet (see `check_constraints`): qacc = qacc_smooth, qfrc_constraint = 0.
    """
    return d.replace(qacc=d.qacc_smooth, qfrc_constraint=jnp.zeros_like(d.qacc_smooth))


# --------------------------------------------------------------------------- pipeline


def forward_skip(m: Model, d: State, skipstage: int = Stage.NONE,
                 skipsensor: bool = False) -> State:
    """Forward dynamics, skipping the stages up to `skipstage`. MuJoCo: mj_forwardSkip.

    skipstage (static): Stage.NONE runs everything, Stage.POS reuses the position stage
    already in `d`, Stage.VEL also the velocity stage. Sensors and energy are not
    implemented yet, so `skipsensor` has no effect.
    """
    del skipsensor
    if skipstage < Stage.POS:
        d = fwd_position(m, d)
    if skipstage < Stage.VEL:
        d = fwd_velocity(m, d)
    d = fwd_actuation(m, d)
    d = fwd_acceleration(m, d)
    return fwd_constraint(m, d)


def forward(m: Model, d: State) -> State:
    """Forward dynamics: every derived quantity and qacc. MuJoCo: mj_forward."""
    return forward_skip(m, d, Stage.NONE)


def integrate(m: Model, d: State, rk4_as_euler: bool = False) -> State:
    """The integrator the model selects, on a state after `forward` (mj_step's second half).

    With `rk4_as_euler`, RK4 falls back to Euler (as mj_step2).
    """
    it = m.opt.integrator
    if it == Integrator.EULER or (it == Integrator.RK4 and rk4_as_euler):
        return _integrator.euler(m, d)
    if it == Integrator.RK4:
        return _integrator.rungekutta4(m, d)
    if it in (Integrator.IMPLICIT, Integrator.IMPLICITFAST):
        return _integrator.implicit(m, d)
    raise NotImplementedError(f"integrator {Integrator(it).name.lower()} is not supported")


def step(m: Model, d: State) -> State:
    """Advances the simulation by one time step. MuJoCo: mj_step.

    forward followed by the integrator the model selects (opt.integrator). MuJoCo's
    bad-value checks (mj_checkPos/Vel/Acc) are not applied yet.
    """
    return integrate(m, forward(m, d))


def step1(m: Model, d: State) -> State:
    """First half of a step: position and velocity stages. MuJoCo: mj_step1.

    Set ctrl, qfrc_applied or xfrc_applied on the result, then call `step2`.
    """
    return fwd_velocity(m, fwd_position(m, d))


def step2(m: Model, d: State) -> State:
    """Second half of a step: actuation, acceleration, integration. MuJoCo: mj_step2.

    As MuJoCo, RK4 falls back to Euler here (the stages need the whole pipeline).
    """
    d = fwd_actuation(m, d)
    d = fwd_acceleration(m, d)
    d = fwd_constraint(m, d)
    return integrate(m, d, rk4_as_euler=True)


def euler(m: Model, d: State) -> State:
    """Euler integration of a state on which `forward` has run. MuJoCo: mj_Euler."""
    return _integrator.euler(m, d)


def implicit(m: Model, d: State) -> State:
    """Implicit / implicitfast integration after `forward`. MuJoCo: mj_implicit."""
    return _integrator.implicit(m, d)


def rungekutta4(m: Model, d: State) -> State:
    """RK4 integration after `forward`. MuJoCo: mj_RungeKutta(m, d, 4)."""
    return _integrator.rungekutta4(m, d)
