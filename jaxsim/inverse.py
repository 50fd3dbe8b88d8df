"""Inverse dynamics: the forces that produce a given acceleration. MuJoCo: engine_inverse.c.

qfrc_inverse = M qacc + qfrc_bias - qfrc_passive - qfrc_constraint, where the constraint
forces come from the inverse constraint problem: with jar = J qacc - aref, each row's force
is the minimiser of the same convex cost the forward solver uses, which has the closed form
of mj_constraintUpdate (f = -D jar on quadratic rows, the friction-loss bounds, zero on
satisfied rows, the elliptic-cone zones): no iterations. With the invdiscrete flag qacc
is read as the integrator's discrete-time acceleration (mj_discreteAcc).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxsim import constraint as _constraint
from jaxsim import solver as _solver
from jaxsim.forward import acc_sensors, pos_vel_stages
from jaxsim.integrator import check_discrete, discrete_acc
from jaxsim.types import Cone, EnableBit, Model, Stage, State


def inv_constraint(m: Model, d: State) -> State:
    """Constraint forces of the acceleration d.qacc. MuJoCo: mj_invConstraint.

    Builds the constraint rows at the current position and velocity and sets efc_force,
    efc_state, efc_active and qfrc_constraint = J' efc_force.
    """
    efc = _constraint.make_constraint(m, d)
    nefc = efc.J.shape[0]
    dt = d.qacc.dtype
    if nefc == 0 or m.nv == 0:
        return d.replace(qfrc_constraint=jnp.zeros_like(d.qacc), efc_force=jnp.zeros(nefc, dt))
    con = d.contact.replace(efc_address=jnp.where(
        efc.contact_dim > 0, jnp.asarray(efc.contact_adr, jnp.int32), -1))
    if int(efc.contact_nrow) == 0 or efc.contact_adr.shape[0] == 0:
        # no contact rows: one empty block keeps the solver's block arrays non-empty
        efc = efc.replace(contact_adr=np.zeros(1, np.int32), contact_nrow=1, contact_rows=None,
                          contact_dim=jnp.zeros(1, jnp.int32), contact_mu=jnp.zeros(1, dt),
                          contact_friction=jnp.zeros((1, 5), dt))
    has_cone = m.opt.cone == Cone.ELLIPTIC and int(efc.contact_nrow) > 1
    p = _solver._problem(m, d, efc, has_cone)
    up = _solver._update(p, p.J @ d.qacc - p.aref, has_cone)
    return d.replace(qfrc_constraint=p.J.T @ up.force, efc_force=up.force,
                     efc_state=up.state.astype(jnp.int32), efc_active=efc.active, contact=con)


def inverse_skip(m: Model, d: State, skipstage: int = Stage.NONE,
                 skipsensor: bool = False) -> State:
    """Inverse dynamics, reusing the stages up to `skipstage`. MuJoCo: mj_inverseSkip.

    skipstage (static): Stage.NONE recomputes everything from qpos, qvel; Stage.POS reuses
    the position stage in `d`, Stage.VEL also the velocity stage. Sensors of the three
    stages are computed unless `skipsensor`.
    """
    discrete = bool(m.opt.enableflags & EnableBit.INVDISCRETE)
    if discrete:
        check_discrete(m)  # before any work
    d = pos_vel_stages(m, d, skipstage, skipsensor)
    if discrete:  # the discrete-time qacc of the integrator, as a continuous-time one
        qacc_in = d.qacc
        d = d.replace(qacc=discrete_acc(m, d))
    d = inv_constraint(m, d)
    if not skipsensor:
        d = acc_sensors(m, d)
    # qfrc_bias (RNE without acceleration plus the tendon-armature bias) is fwd_velocity's
    ma = d.qM @ d.qacc if m.nv else d.qacc
    qfrc = d.qfrc_bias + ma - d.qfrc_passive - d.qfrc_constraint
    d = d.replace(qfrc_inverse=qfrc)
    return d.replace(qacc=qacc_in) if discrete else d


def inverse(m: Model, d: State) -> State:
    """Inverse dynamics: qfrc_inverse from qpos, qvel and qacc. MuJoCo: mj_inverse."""
    return inverse_skip(m, d, Stage.NONE)


__all__ = ["inv_constraint", "inverse", "inverse_skip"]
