"""Creating states: `make_state` (mj_makeData + mj_resetData / mj_resetDataKeyframe)."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np

from jaxsim.struct import shape_of
from jaxsim.types import Contact, CtrlChart, GainType, Model, SleepPolicy, State

_INT_FIELDS = ("ten_wrapadr", "ten_wrapnum", "wrap_obj", "ncon", "maxuse_con", "warning",
               "efc_state", "solver_niter", "tree_asleep", "tree_island")


def make_state(model: Model, keyframe: int | None = None, ncon: int | None = None) -> State:
    """A fresh state: qpos0 (or the keyframe), zero velocity, mocap bodies at their poses.

    Args:
      model: the compiled model.
      keyframe: index of a <keyframe> key to start from (MuJoCo: mj_resetDataKeyframe).
      ncon: size of the contact buffer; by default the size the collision pass fills.
    """
    dt = model.body_pos.dtype
    if ncon is None:
        from jaxsim.collision.driver import buffer_size

        ncon = buffer_size(model)
    from jaxsim.constraint import plan as _efc_plan

    sizes = dict(model.sizes(), ncon=ncon, nefc=_efc_plan(model, ncon).nefc)
    fields = {}
    for name, info in State.field_info().items():
        if name == "contact":
            fields[name] = Contact.zeros(ncon, dt)
            continue
        kind = jnp.int32 if name in _INT_FIELDS else dt
        if name in ("overflow", "efc_active"):
            kind = bool
        fields[name] = jnp.zeros(shape_of(info["shape"], sizes), kind)
    fields["qpos"] = jnp.asarray(model.qpos0, dt)
    if model.nmocap:
        mocap = np.asarray(model.body_mocapid)
        bodies = np.array([int(np.nonzero(mocap == k)[0][0]) for k in range(model.nmocap)])
        fields["mocap_pos"] = jnp.asarray(model.body_pos, dt)[bodies]
        fields["mocap_quat"] = jnp.asarray(model.body_quat, dt)[bodies]
    quat = ((np.asarray(model.actuator_gaintype) == GainType.SO3)
            & (np.asarray(model.actuator_ctrlspec) == CtrlChart.QUAT))
    if quat.any():  # a quaternion set-point resets to the identity (mj_resetCtrl)
        fields["ctrl"] = fields["ctrl"].at[np.asarray(model.actuator_ctrladr)[quat]].set(1.0)
    if model.nplastic:
        from jaxsim.passive import plastic_reset

        fields["plastic"] = plastic_reset(model)
    from jaxsim.history import init as _init_history

    fields["history"] = _init_history(model)
    fields["eq_active"] = jnp.asarray(np.asarray(model.eq_active0), dt)
    from jaxsim import sleep

    fields["tree_asleep"] = jnp.full(model.ntree, sleep.AWAKE, jnp.int32)
    fields["tree_island"] = jnp.full(model.ntree, -1, jnp.int32)
    state = State(**fields)
    if sleep.enabled(model) and np.any(np.asarray(model.tree_sleep_policy) == SleepPolicy.INIT):
        state = _init_asleep(model, state)
        fields = {k: getattr(state, k) for k in State.field_info()}
    if keyframe is not None:
        if not 0 <= keyframe < model.nkey:
            raise IndexError(f"keyframe {keyframe} out of range (model has {model.nkey})")
        k = keyframe
        fields.update(time=model.key_time[k], qpos=model.key_qpos[k], qvel=model.key_qvel[k],
                      act=model.key_act[k], ctrl=model.key_ctrl[k], plastic=model.key_plastic[k])
        if model.nmocap:
            fields.update(mocap_pos=model.key_mpos[k], mocap_quat=model.key_mquat[k])
    return State(**fields)


def _init_asleep(model: Model, state: State) -> State:
    """Puts the trees with sleep policy "init" to sleep, as mj_resetData: forward at the
    initial state, then the sleep step with those trees ready; every one must fall asleep
    (with the islands they form); when some cannot, MuJoCo 4.0 warns and leaves
    them awake, and so does this. Inside a trace (an autoreset in `step`)
    the model's values are unknown, and the trees start awake instead."""
    import jax

    from jaxsim import sleep
    from jaxsim.forward import forward

    staged = isinstance(jnp.zeros((), jnp.int32) + 0, jax.core.Tracer)  # inside jit / vmap / grad
    if staged or any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(model)):
        return state
    d = jax.jit(forward)(model, state)
    init = np.asarray(model.tree_sleep_policy) == SleepPolicy.INIT
    d = d.replace(tree_asleep=jnp.where(jnp.asarray(init), -1, sleep.AWAKE).astype(jnp.int32))
    ta, went = sleep.fall_asleep(model, d)
    went = np.asarray(went)
    if np.any(init & ~went):
        t = int(np.nonzero(init & ~went)[0][0])
        root = int(model.tree_bodyadr[t])
        name = model.id2name(1, root)
        warnings.warn(
            f"{int(init.sum())} trees were marked as sleep='init' but only "
            f"{int((init & went).sum())} could be slept; body '{name}' (id={root}) is the root "
            "of the first tree that could not (its island holds a tree that may not sleep "
            "initially); those trees start awake, as MuJoCo 4.0 does", stacklevel=3)
        ta = jnp.where(jnp.asarray(init & ~went), sleep.AWAKE, ta).astype(ta.dtype)
    ds = sleep.dof_asleep(model, ta)
    zero = jnp.zeros_like(d.qvel)
    # mj_resetData clears the smooth accelerations and the constraint arena afterwards
    return d.replace(tree_asleep=ta, qvel=jnp.where(ds, zero, d.qvel),
                     qacc=jnp.where(ds, zero, d.qacc), qacc_smooth=zero, qfrc_smooth=zero,
                     efc_force=jnp.zeros_like(d.efc_force),
                     efc_active=jnp.zeros_like(d.efc_active))
