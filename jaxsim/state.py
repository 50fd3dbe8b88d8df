"""Creating states: `make_state` (mj_makeData + mj_resetData / mj_resetDataKeyframe)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxsim.struct import shape_of
from jaxsim.types import Contact, Model, State

_INT_FIELDS = ("ten_wrapadr", "ten_wrapnum", "wrap_obj", "ncon", "maxuse_con", "warning",
               "efc_state", "solver_niter")


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
    from jaxsim.history import init as _init_history

    fields["history"] = _init_history(model)
    fields["eq_active"] = jnp.asarray(np.asarray(model.eq_active0), dt)
    if keyframe is not None:
        if not 0 <= keyframe < model.nkey:
            raise IndexError(f"keyframe {keyframe} out of range (model has {model.nkey})")
        k = keyframe
        fields.update(time=model.key_time[k], qpos=model.key_qpos[k], qvel=model.key_qvel[k],
                      act=model.key_act[k], ctrl=model.key_ctrl[k])
        if model.nmocap:
            fields.update(mocap_pos=model.key_mpos[k], mocap_quat=model.key_mquat[k])
    return State(**fields)
