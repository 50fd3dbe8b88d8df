"""MuJoCo's state and kinematics utilities as pure JAX functions.

MuJoCo counterparts (engine_support.c, engine_core_util.c, engine_derivative_fd.c):
- state vectors: mj_stateSize, mj_getState, mj_setState (`StateBit` is mjtState);
- reset: mj_resetData / mj_resetDataKeyframe;
- Jacobians: mj_jac, mj_jacBody, mj_jacBodyCom, mj_jacSubtreeCom, mj_jacGeom, mj_jacSite,
  mj_jacPointAxis, mj_jacDot;
- positions: mj_integratePos, mj_differentiatePos;
- object motion: mj_objectVelocity, mj_objectAcceleration;
- contacts: mj_contactForce;
- linearisation: mjd_transitionFD (here by forward-mode autodiff, not finite differences).

Functions that read derived quantities (Jacobians, object motion, contact forces) need a
state on which `jaxsim.forward` has run (for the Jacobians `smooth.kinematics` followed by
`smooth.com_pos` is enough; `jac_dot` and the object motions also need `smooth.com_vel`).
Object ids (body, geom, site, ...) are static Python ints, as they select structure.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import math, scan, smooth
from jaxsim.integrator import integrate_pos as _integrate_pos
from jaxsim.types import JointType, Model, ObjType, State, StateBit

__all__ = [
    "StateBit", "contact_force", "differentiate_pos", "get_state", "integrate_pos", "jac",
    "jac_body", "jac_body_com", "jac_dot", "jac_geom", "jac_point_axis", "jac_site",
    "jac_subtree_com", "object_acceleration", "object_velocity", "reset", "set_state",
    "state_size", "transition_jacobians",
]

_NSTATE = 15  # mjNSTATE: number of elementary bits in StateBit

# elementary components in MuJoCo's order: (bit, State field or None, size function)
_ELEMENTS = (
    (StateBit.TIME, "time", lambda m: 1),
    (StateBit.QPOS, "qpos", lambda m: m.nq),
    (StateBit.QVEL, "qvel", lambda m: m.nv),
    (StateBit.ACT, "act", lambda m: m.na),
    (StateBit.HISTORY, "history", lambda m: getattr(m, "nhistory", 0)),
    (StateBit.WARMSTART, "qacc_warmstart", lambda m: m.nv),
    (StateBit.CTRL, "ctrl", lambda m: m.nu),
    (StateBit.QFRC_APPLIED, "qfrc_applied", lambda m: m.nv),
    (StateBit.XFRC_APPLIED, "xfrc_applied", lambda m: 6 * m.nbody),
    (StateBit.EQ_ACTIVE, "eq_active", lambda m: m.neq),
    (StateBit.MOCAP_POS, "mocap_pos", lambda m: 3 * m.nmocap),
    (StateBit.MOCAP_QUAT, "mocap_quat", lambda m: 4 * m.nmocap),
    (StateBit.USERDATA, "userdata", lambda m: getattr(m, "nuserdata", 0)),
    (StateBit.PLUGIN, "plugin_state", lambda m: getattr(m, "npluginstate", 0)),
    (StateBit.PLASTIC, "plastic", lambda m: getattr(m, "nplastic", 0)),
)


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _dtype(m: Model):
    return m.body_pos.dtype


# ---------------------------------------------------------------------------- state


def _elements(m: Model, spec: int):
    """(bit, field, size) of the components `spec` selects, in MuJoCo's order."""
    spec = int(spec)
    if not 0 <= spec < (1 << _NSTATE):
        raise ValueError(f"invalid state signature {spec}: must be in [0, 2^{_NSTATE})")
    out = []
    for bit, field, size in _ELEMENTS:
        if spec & bit:
            n = int(size(m))
            if n and field not in State.field_info():
                raise NotImplementedError(
                    f"state component {bit.name} ({field}, size {n}) is not supported by jaxsim")
            out.append((bit, field, n))
    return out


def state_size(model: Model, spec: int) -> int:
    """Length of the state vector for the components in `spec` (mj_stateSize)."""
    return sum(n for _, _, n in _elements(model, spec))


def get_state(model: Model, state: State, spec: int) -> jax.Array:
    """The components of `spec` concatenated into one vector, as mj_getState.

    eq_active is returned as 0/1 (MuJoCo stores it as a boolean and copies it to doubles).
    """
    dt = _dtype(model)
    parts = [jnp.zeros((0,), dt)]
    for bit, field, n in _elements(model, spec):
        if not n:
            continue
        x = jnp.reshape(getattr(state, field), (-1,)).astype(dt)
        if bit == StateBit.EQ_ACTIVE:
            x = (x != 0).astype(dt)
        parts.append(x)
    return jnp.concatenate(parts)


def set_state(model: Model, state: State, values: jax.Array, spec: int) -> State:
    """A state whose `spec` components are read from `values`, as mj_setState.

    eq_active entries are converted as MuJoCo 4.0 converts a double to its boolean
    (non-zero: active) and stored as 0/1.
    """
    elems = _elements(model, spec)
    total = sum(n for _, _, n in elems)
    values = jnp.asarray(values)
    if values.shape != (total,):
        raise ValueError(f"state vector has shape {values.shape}, spec {int(spec)} needs ({total},)")
    upd, adr = {}, 0
    for bit, field, n in elems:
        if not n:
            continue
        old = getattr(state, field)
        x = values[adr:adr + n]
        adr += n
        if bit == StateBit.EQ_ACTIVE:
            x = x != 0
        upd[field] = jnp.reshape(x, old.shape).astype(old.dtype)
    return state.replace(**upd)


def reset(model: Model, keyframe: int | None = None) -> State:
    """A fresh state (mj_resetData), or the state of keyframe `keyframe`
    (mj_resetDataKeyframe). Same as `jaxsim.make_state`."""
    from jaxsim.state import make_state

    return make_state(model, keyframe)


# ------------------------------------------------------------------------ Jacobians


def jac(model: Model, state: State, point: jax.Array, body: int) -> tuple[jax.Array, jax.Array]:
    """(jacp, jacr), each (3, nv): translational Jacobian of the global `point` moving
    with `body` and rotational Jacobian of `body` (mj_jac)."""
    point = jnp.asarray(point, _dtype(model))
    jp, jr = smooth.jac(model, state, point[None], np.asarray([int(body)]))
    return jp[0], jr[0]


def jac_body(model: Model, state: State, body: int) -> tuple[jax.Array, jax.Array]:
    """Jacobians of the body frame origin, xpos (mj_jacBody)."""
    return jac(model, state, state.xpos[int(body)], body)


def jac_body_com(model: Model, state: State, body: int) -> tuple[jax.Array, jax.Array]:
    """Jacobians of the body's centre of mass, xipos (mj_jacBodyCom)."""
    return jac(model, state, state.xipos[int(body)], body)


def jac_geom(model: Model, state: State, geom: int) -> tuple[jax.Array, jax.Array]:
    """Jacobians of the geom's centre, geom_xpos (mj_jacGeom)."""
    return jac(model, state, state.geom_xpos[int(geom)], int(_np(model.geom_bodyid)[geom]))


def jac_site(model: Model, state: State, site: int) -> tuple[jax.Array, jax.Array]:
    """Jacobians of the site, site_xpos (mj_jacSite)."""
    return jac(model, state, state.site_xpos[int(site)], int(_np(model.site_bodyid)[site]))


def jac_subtree_com(model: Model, state: State, body: int) -> jax.Array:
    """(3, nv) translational Jacobian of the centre of mass of the subtree rooted at `body`
    (mj_jacSubtreeCom): body-com Jacobians weighted by mass over body_subtreemass."""
    body = int(body)
    anc = scan.body_ancestors(model.body_parentid)
    sub = np.nonzero(anc[:, body])[0]
    jp, _ = smooth.jac(model, state, state.xipos[sub], sub)
    w = jnp.asarray(model.body_mass)[sub]
    return jnp.einsum("k,kij->ij", w, jp) / model.body_subtreemass[body]


def jac_point_axis(model: Model, state: State, point: jax.Array, axis: jax.Array,
                   body: int) -> tuple[jax.Array, jax.Array]:
    """(jac_point, jac_axis), each (3, nv): translational Jacobian of `point` and Jacobian
    of the global `axis` rotating with `body`, columns jacr_i x axis (mj_jacPointAxis)."""
    jp, jr = jac(model, state, point, body)
    axis = jnp.asarray(axis, jp.dtype)
    return jp, jnp.cross(jr.T, axis).T


def jac_dot(model: Model, state: State, point: jax.Array, body: int) -> tuple[jax.Array, jax.Array]:
    """(jacp_dot, jacr_dot), each (3, nv): time derivatives of `jac` (mj_jacDot).

    Needs cvel and cdof_dot (`forward`, or com_vel after the position stage). As MuJoCo,
    the quaternion dofs (ball joints, rotations of free joints) use cvel x cdof of their
    own body in place of cdof_dot.
    """
    body = int(body)
    d = state
    point = jnp.asarray(point, _dtype(model))
    com = d.subtree_com[int(_np(model.body_rootid)[body])]
    offset = point - com
    vel = d.cvel[body]
    pvel = vel[3:] - jnp.cross(offset, vel[:3])  # linear velocity of the point
    mask = scan.body_dof_mask(model.body_parentid, model.dof_bodyid)[body].astype(d.cdof.dtype)
    jnt = _np(model.dof_jntid)
    typ = _np(model.jnt_type)[jnt]
    first = _np(model.jnt_dofadr)[jnt]
    is_quat = (typ == JointType.BALL) | ((typ == JointType.FREE) & (np.arange(model.nv) >= first + 3))
    cdd = d.cdof_dot
    if is_quat.any():
        alt = math.cross_motion(d.cvel[_np(model.dof_bodyid)], d.cdof)
        cdd = jnp.where(jnp.asarray(is_quat)[:, None], alt, cdd)
    jr = cdd[:, :3]
    jp = cdd[:, 3:] + jnp.cross(jr, offset) + jnp.cross(d.cdof[:, :3], pvel)
    return (jp * mask[:, None]).T, (jr * mask[:, None]).T


# ------------------------------------------------------------------------- positions


def integrate_pos(model: Model, qpos: jax.Array, qvel: jax.Array, dt) -> jax.Array:
    """qpos moved by qvel over dt; quaternions rotated in their local frame
    (mj_integratePos). Finite value and gradient at zero velocity."""
    return _integrate_pos(model, qpos, qvel, dt)


def differentiate_pos(model: Model, qpos1: jax.Array, qpos2: jax.Array, dt) -> jax.Array:
    """(nv,) velocity taking qpos1 to qpos2 in time dt (mj_differentiatePos): differences for
    hinge, slide and free positions, qpos1 * quat(qvel dt) = qpos2 for quaternions.

    Finite value and gradient when the two quaternions are equal (the small-angle limit of
    math.sub_quat), where the gradient is the exact linearisation.
    """
    qpos1, qpos2 = jnp.asarray(qpos1), jnp.asarray(qpos2)
    jtype, qadr, dadr = _np(model.jnt_type), _np(model.jnt_qposadr), _np(model.jnt_dofadr)
    out = jnp.zeros((model.nv,), jnp.result_type(qpos1, qpos2))
    lin_q, lin_v, rot_q, rot_v = [], [], [], []
    for j, t in enumerate(jtype):
        if t in (JointType.HINGE, JointType.SLIDE):
            lin_q.append([qadr[j]])
            lin_v.append([dadr[j]])
        elif t == JointType.FREE:
            lin_q.append(qadr[j] + np.arange(3))
            lin_v.append(dadr[j] + np.arange(3))
            rot_q.append(qadr[j] + 3)
            rot_v.append(dadr[j] + 3)
        elif t == JointType.BALL:
            rot_q.append(qadr[j])
            rot_v.append(dadr[j])
    if lin_q:
        lq, lv = np.concatenate(lin_q), np.concatenate(lin_v)
        out = out.at[lv].set((qpos2[lq] - qpos1[lq]) / dt)
    if rot_q:
        qa = np.asarray(rot_q)[:, None] + np.arange(4)
        va = np.asarray(rot_v)[:, None] + np.arange(3)
        out = out.at[va].set(math.sub_quat(qpos2[qa], qpos1[qa]) / dt)
    return out


# --------------------------------------------------------------------- object motion


def object_velocity(model: Model, state: State, objtype: int, objid: int,
                    local: bool = False) -> jax.Array:
    """(6,) velocity (rot:lin) of an object's frame, in global axes or, with `local`, in the
    object's axes (mj_objectVelocity). objtype: ObjType BODY (inertial frame), XBODY,
    GEOM, SITE or CAMERA. Needs cvel (`forward`)."""
    from jaxsim import sensor

    t, i = _obj(objtype, objid)
    return sensor.object_velocity(model, state, t, i, bool(local))[0]


def object_acceleration(model: Model, state: State, objtype: int, objid: int,
                        local: bool = False) -> jax.Array:
    """(6,) acceleration (rot:lin) of an object's frame with the Coriolis term, as
    mj_objectAcceleration.

    MuJoCo reads cacc, which mj_forward fills only for models with acceleration sensors;
    here cacc is always recomputed from qacc (mj_rnePostConstraint), so any state after
    `forward` works.
    """
    from jaxsim import rne, sensor

    t, i = _obj(objtype, objid)
    state = rne.rne_post_constraint(model, state)
    return sensor.object_acceleration(model, state, t, i, bool(local))[0]


def _obj(objtype: int, objid: int) -> tuple[np.ndarray, np.ndarray]:
    t = int(objtype)
    if t not in (ObjType.BODY, ObjType.XBODY, ObjType.GEOM, ObjType.SITE, ObjType.CAMERA):
        raise ValueError(f"object type {t} must be BODY, XBODY, GEOM, SITE or CAMERA")
    return np.asarray([t]), np.asarray([int(objid)])


# -------------------------------------------------------------------------- contacts


def contact_force(model: Model, state: State, i) -> jax.Array:
    """(6,) force:torque of contact slot `i` in its contact frame (mj_contactForce), from
    efc_force: pyramidal rows decoded, elliptic rows copied, adhesion subtracted from the
    normal force. Slots that are inactive or have no constraint rows give zeros. `i` may be
    traced; slots are the buffer's, not MuJoCo's contact order."""
    from jaxsim import rne

    f = rne.contact_force(model, state)
    if not f.shape[0]:
        return jnp.zeros((6,), _dtype(model))
    c = state.contact
    return jnp.where(c.active[i] & (c.efc_address[i] >= 0), f[i], 0.0)


# --------------------------------------------------------------------- linearisation


def transition_jacobians(model: Model, state: State, eps: float = 1e-6,
                         centered: bool = False):
    """(A, B, C, D): derivatives of one `jaxsim.step`, as mjd_transitionFD but exact
    (forward-mode autodiff; `eps` and `centered` are accepted for MuJoCo's signature and
    not used).

    With x = [dq, qvel, act] (2 nv + na; dq the position in tangent space: qpos =
    integrate_pos(qpos, dq, 1), and the next one differentiate_pos(next qpos, ., 1)) and
    u = ctrl:  A = dx'/dx (2nv+na, 2nv+na), B = dx'/du (2nv+na, nu),
    C = d sensordata/dx (nsensordata, 2nv+na), D = d sensordata/du (nsensordata, nu).
    sensordata is the one `step` computes (its forward pass at the input state).
    """
    del eps, centered
    from jaxsim.forward import step

    nv = model.nv
    dt = _dtype(model)
    nominal = step(model, state)

    def f(x, u):
        dq, v, a = x[:nv], x[nv:2 * nv], x[2 * nv:]
        s = state.replace(qpos=integrate_pos(model, state.qpos, dq, 1.0), qvel=v, act=a,
                          ctrl=u)
        n = step(model, s)
        dq_next = differentiate_pos(model, nominal.qpos, n.qpos, 1.0)
        return jnp.concatenate([dq_next, n.qvel, n.act]), n.sensordata

    x0 = jnp.concatenate([jnp.zeros((nv,), dt), state.qvel.astype(dt), state.act.astype(dt)])
    (a_mat, b_mat), (c_mat, d_mat) = jax.jacfwd(f, argnums=(0, 1))(x0, state.ctrl.astype(dt))
    return a_mat, b_mat, c_mat, d_mat
