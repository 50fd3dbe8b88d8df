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

from jaxsim import math, scan
from jaxsim.types import DisableBit, Model, State, WrapType


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
    if not len(sel) or not m.nv:
        return jnp.zeros(m.nv, dt)
    arm = smooth.tendon_armature(m)[sel]
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


def rne_post_constraint(m: Model, d: State) -> State:
    """Body accelerations and forces: cacc, cfrc_int, cfrc_ext. MuJoCo: mj_rnePostConstraint.

    cfrc_ext holds xfrc_applied moved to the com of each body's tree. Contact and
    equality-constraint forces are not added yet (constraints are not implemented; with
    constraints disabled the result is exact).
    """
    dt = _dtype(m)
    nbody = m.nbody
    xfrc = d.xfrc_applied
    force, torque = xfrc[:, :3], xfrc[:, 3:]
    # torque about the tree's com: torque + (xipos - com) x force
    ref = d.subtree_com[_np(m.body_rootid)]
    cfrc_ext = jnp.concatenate([torque + jnp.cross(d.xipos - ref, force), force], axis=-1)
    cfrc_ext = cfrc_ext.at[0].set(0.0)

    cacc = body_acc(m, d, d.qacc if m.nv else None)
    if not m.nv:
        cacc = jnp.broadcast_to(_world_acc(m), (nbody, 6)).astype(dt)
    cfrc_int = body_force(d, cacc) - cfrc_ext
    cfrc_int = cfrc_int.at[0].set(0.0)
    cfrc_int = scan.subtree_sum(m.body_parentid, cfrc_int, into_world=True)
    return d.replace(cacc=cacc, cfrc_int=cfrc_int, cfrc_ext=cfrc_ext)


__all__ = ["body_acc", "rne", "rne_acc", "rne_bias", "rne_post_constraint", "tendon_bias"]
