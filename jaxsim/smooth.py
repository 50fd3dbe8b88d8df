"""Smooth dynamics, position and velocity stages: kinematics, com-based quantities,
tendons, transmissions, the joint-space inertia and its factorisation.

Every stage is a pure `stage(m, d) -> d`. Static structure (joint types, parent ids, tendon
paths, transmission types) is read with numpy at trace time and turned into index arrays,
so each stage is a fixed sequence of vectorised operations: one per tree depth level for
the recursions, one per object kind elsewhere.

Differences from MuJoCo that are below rounding level, made for differentiability:
- quaternions are always divided by their norm (MuJoCo skips it within 1e-15 of 1);
- where `*_sameframe` says a geom, site or inertial frame coincides with its body's
  frame, the values are MuJoCo's copies but the derivatives those of the full transform,
  so gradients reach `geom_pos`, `body_ipos`, ... even where they are zero;
- `crb` computes every diagonal entry from the composite inertia (MuJoCo copies `dof_M0`
  for "simple" dofs; the values agree while `dof_M0` is up to date).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from jaxsim import math, scan
from jaxsim.collision.common import contact_bodies
from jaxsim.hostnp import jax, jnp  # numpy inside hostnp.host_backend(), see there
from jaxsim.massmatrix import factor_m, half_solve_m, solve_m  # noqa: F401 (the stage's API)
from jaxsim.types import CamLight, JointType, Model, State, TrnType, WrapType

# ---------------------------------------------------------------------------- helpers


def _dtype(m: Model):
    return m.body_pos.dtype


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def jac(m: Model, d: State, point: jax.Array, body: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Translational and rotational Jacobians of global points on bodies (mj_jac).

    Args:
      point: (k, 3) global points; body: (k,) static body ids.

    Returns:
      (jacp, jacr), each (k, 3, nv).
    """
    body = _np(body)
    mask = scan.body_dof_mask(m.body_parentid, m.dof_bodyid)[body].astype(_dtype(m))
    offset = point - d.subtree_com[_np(m.body_rootid)[body]]
    rot, lin = d.cdof[:, :3], d.cdof[:, 3:]
    jacp = jnp.cross(rot[None, :, :], offset[:, None, :]) + lin[None]
    jacp = jnp.swapaxes(jacp, 1, 2) * mask[:, None, :]
    jacr = jnp.swapaxes(jnp.broadcast_to(rot, (len(body),) + rot.shape), 1, 2) * mask[:, None, :]
    return jacp, jacr


# mjtSameFrame
_SF_BODY, _SF_INERTIA, _SF_BODYROT, _SF_INERTIAROT = 1, 2, 3, 4


def _local_to_global(d: State, body: np.ndarray, pos: jax.Array, quat: jax.Array,
                     sameframe=None):
    """Global frame of objects given in their body's frame (mj_local2Global).

    Where the compiler found the object's frame to coincide (within 1e-6) with its body's
    frame or inertial frame (`sameframe`), MuJoCo copies that frame's position and/or
    orientation; the values here are those copies, to the bit. The derivatives stay
    those of the full transform: the copied parts are written as the body frame composed
    with the local offset minus itself (`x - stop_gradient(x)`, zero in value), so
    gradients still reach `geom_pos`, `body_iquat`, ...
    """
    body = _np(body)
    R = d.xmat[body]
    sf = np.zeros(len(body), np.int64) if sameframe is None else np.asarray(sameframe, np.int64)
    if not sf.any():
        xpos = d.xpos[body] + math.mv(R, pos)
        return xpos, math.quat_to_mat(math.quat_mul(d.xquat[body], quat))
    sg = jax.lax.stop_gradient
    inertia_pos = jnp.asarray(sf == _SF_INERTIA)[:, None]
    copy_pos = np.isin(sf, (_SF_BODY, _SF_INERTIA))
    local = jnp.where(jnp.asarray(copy_pos)[:, None], pos - sg(pos), pos)
    xpos = jnp.where(inertia_pos, d.xipos[body], d.xpos[body]) + math.mv(R, local)
    full = math.quat_to_mat(math.quat_mul(d.xquat[body], quat))
    # copied orientations: body (or inertial) frame times R(identity + q - q), exactly it
    ident = jnp.zeros_like(quat).at[:, 0].set(1.0)
    base = jnp.where(jnp.asarray(np.isin(sf, (_SF_INERTIA, _SF_INERTIAROT)))[:, None, None],
                     d.ximat[body], R)
    copied = math.mm(base, math.quat_to_mat(ident + (quat - sg(quat))))
    xmat = jnp.where(jnp.asarray(sf != 0)[:, None, None], copied, full)
    return xpos, xmat


# ------------------------------------------------------------------------- kinematics


def kinematics(m: Model, d: State) -> State:
    """Global frames of bodies, joints, geoms, sites and cameras. MuJoCo: mj_kinematics.

    Each body's transform relative to its parent (body offset, or mocap pose, followed by
    its joints) depends on qpos only, so it is computed for all bodies at once; the
    parent-to-child composition then runs once per depth level. Cameras get their
    fixed-mode frame here; `camlight` applies the tracking modes.
    """
    dt = _dtype(m)
    nbody, njnt = m.nbody, m.njnt
    jnt_type = _np(m.jnt_type)
    qadr = _np(m.jnt_qposadr)
    qpos = d.qpos

    # per-joint transform in the frame accumulated before the joint
    jpos = jnp.zeros((njnt, 3), dt)
    jquat = jnp.zeros((njnt, 4), dt).at[:, 0].set(1.0)
    for t in (JointType.HINGE, JointType.SLIDE, JointType.BALL, JointType.FREE):
        ids = np.nonzero(jnt_type == t)[0]
        if not len(ids):
            continue
        a = qadr[ids]
        if t == JointType.HINGE:
            q = math.axis_angle_to_quat(m.jnt_axis[ids], qpos[a] - m.qpos0[a])
            p = m.jnt_pos[ids] - math.rot_vec_quat(m.jnt_pos[ids], q)
        elif t == JointType.SLIDE:
            q = jquat[ids]
            p = m.jnt_axis[ids] * (qpos[a] - m.qpos0[a])[:, None]
        elif t == JointType.BALL:
            q = math.normalize_quat(qpos[a[:, None] + np.arange(4)])
            p = m.jnt_pos[ids] - math.rot_vec_quat(m.jnt_pos[ids], q)
        else:
            p = qpos[a[:, None] + np.arange(3)]
            q = math.normalize_quat(qpos[a[:, None] + np.arange(3, 7)])
        jpos = jpos.at[ids].set(p)
        jquat = jquat.at[ids].set(q)

    # body transform relative to its parent: offset (or mocap pose), then its joints
    jntnum = _np(m.body_jntnum)
    jntadr = _np(m.body_jntadr)
    is_free = np.zeros(nbody, bool)
    has_jnt = jntnum > 0
    is_free[has_jnt] = jnt_type[jntadr[has_jnt]] == JointType.FREE
    lpos = m.body_pos
    lquat = m.body_quat
    mocapid = _np(m.body_mocapid)
    mb = np.nonzero(mocapid >= 0)[0]
    if len(mb):
        lpos = lpos.at[mb].set(d.mocap_pos[mocapid[mb]])
        lquat = lquat.at[mb].set(math.normalize_quat(d.mocap_quat[mocapid[mb]]))
    fb = np.nonzero(is_free)[0]
    if len(fb):
        # a free joint sets the global pose directly; body_pos/quat do not apply
        lpos = lpos.at[fb].set(0.0)
        lquat = lquat.at[fb].set(jnp.array([1.0, 0, 0, 0], dt))
    prepos = jnp.zeros((njnt, 3), dt)
    prequat = jnp.zeros((njnt, 4), dt).at[:, 0].set(1.0)
    for k in range(int(jntnum.max(initial=0))):
        b = np.nonzero(jntnum > k)[0]
        j = jntadr[b] + k
        prepos = prepos.at[j].set(lpos[b])
        prequat = prequat.at[j].set(lquat[b])
        lpos = lpos.at[b].add(math.rot_vec_quat(jpos[j], lquat[b]))
        lquat = lquat.at[b].set(math.quat_mul(lquat[b], jquat[j]))

    free_f = jnp.asarray(is_free)

    def level(parent, ids):
        ppos, pquat, pmat = parent
        free = free_f[ids][:, None]
        ppos = jnp.where(free, 0.0, ppos)
        pquat = jnp.where(free, jnp.array([1.0, 0, 0, 0], dt), pquat)
        pmat = jnp.where(free[:, :, None], jnp.eye(3, dtype=dt), pmat)
        xpos = ppos + jnp.einsum("kij,kj->ki", pmat, lpos[ids])
        xquat = math.normalize_quat(math.quat_mul(pquat, lquat[ids]))
        return xpos, xquat, math.quat_to_mat(xquat)

    init = (
        jnp.zeros((nbody, 3), dt),
        jnp.zeros((nbody, 4), dt).at[:, 0].set(1.0),
        jnp.broadcast_to(jnp.eye(3, dtype=dt), (nbody, 3, 3)),
    )
    xpos, xquat, xmat = scan.body_forward(m.body_parentid, level, init)

    # joint anchors and axes from the frame each joint acts in
    xanchor = jnp.zeros((njnt, 3), dt)
    xaxis = jnp.zeros((njnt, 3), dt)
    if njnt:
        jb = _np(m.jnt_bodyid)
        pb = _np(m.body_parentid)[jb]
        free_j = jnp.asarray(is_free[jb])[:, None]
        gpos = xpos[pb] + jnp.einsum("kij,kj->ki", xmat[pb], prepos)
        gmat = math.quat_to_mat(math.quat_mul(xquat[pb], prequat))
        xaxis = jnp.einsum("kij,kj->ki", gmat, m.jnt_axis)
        xanchor = gpos + jnp.einsum("kij,kj->ki", gmat, m.jnt_pos)
        xaxis = jnp.where(free_j, m.jnt_axis, xaxis)
        xanchor = jnp.where(free_j, xpos[jb], xanchor)

    d = d.replace(xpos=xpos, xquat=xquat, xmat=xmat, xanchor=xanchor, xaxis=xaxis)

    bodies = np.arange(nbody)
    xipos, ximat = _local_to_global(d, bodies, m.body_ipos, m.body_iquat, m.body_sameframe)
    # the world's inertial frame is the identity regardless of body 0's fields
    xipos = xipos.at[0].set(0.0)
    ximat = ximat.at[0].set(jnp.eye(3, dtype=dt))
    d = d.replace(xipos=xipos, ximat=ximat)
    if m.ngeom:
        gx, gm = _local_to_global(d, m.geom_bodyid, m.geom_pos, m.geom_quat, m.geom_sameframe)
        d = d.replace(geom_xpos=gx, geom_xmat=gm)
    if m.nsite:
        sx, sm = _local_to_global(d, m.site_bodyid, m.site_pos, m.site_quat, m.site_sameframe)
        d = d.replace(site_xpos=sx, site_xmat=sm)
    if m.ncam:
        cx, cm = _local_to_global(d, m.cam_bodyid, m.cam_pos, m.cam_quat)
        d = d.replace(cam_xpos=cx, cam_xmat=cm)
    return d


def com_pos(m: Model, d: State) -> State:
    """Subtree centres of mass, com-based inertias and motion dofs. MuJoCo: mj_comPos."""
    dt = _dtype(m)
    moment = scan.subtree_sum(m.body_parentid, m.body_mass[:, None] * d.xipos)
    mass = m.body_subtreemass[:, None]
    light = mass < math.MINVAL
    subtree_com = jnp.where(light, d.xipos, moment / jnp.where(light, 1.0, mass))

    rootid = _np(m.body_rootid)
    offset = d.xipos - subtree_com[rootid]
    cinert = math.inert_com(m.body_inertia, d.ximat, offset, m.body_mass)
    cinert = cinert.at[0].set(0.0)

    cdof = jnp.zeros((m.nv, 6), dt)
    jnt_type = _np(m.jnt_type)
    jb = _np(m.jnt_bodyid)
    dofadr = _np(m.jnt_dofadr)
    if m.njnt:
        off = subtree_com[rootid[jb]] - d.xanchor
        for t in (JointType.HINGE, JointType.SLIDE, JointType.BALL, JointType.FREE):
            ids = np.nonzero(jnt_type == t)[0]
            if not len(ids):
                continue
            da = dofadr[ids]
            if t == JointType.HINGE:
                ax = d.xaxis[ids]
                cdof = cdof.at[da].set(_motion_axis(ax, off[ids]))
            elif t == JointType.SLIDE:
                cdof = cdof.at[da].set(jnp.concatenate([jnp.zeros_like(d.xaxis[ids]), d.xaxis[ids]], -1))
            else:
                rot0 = 3 if t == JointType.FREE else 0
                if t == JointType.FREE:
                    lin = jnp.concatenate([jnp.zeros((3, 3), dt), jnp.eye(3, dtype=dt)], -1)
                    for k in range(3):
                        cdof = cdof.at[da + k].set(jnp.broadcast_to(lin[k], (len(ids), 6)))
                for k in range(3):
                    # rotation about the k-th axis of the child frame
                    ax = d.xmat[jb[ids], :, k]
                    cdof = cdof.at[da + rot0 + k].set(_motion_axis(ax, off[ids]))
    return d.replace(subtree_com=subtree_com, cinert=cinert, cdof=cdof)


def _motion_axis(ax: jax.Array, off: jax.Array) -> jax.Array:
    """The 6D motion [ax, ax x off] of a rotation about axis ax at offset off."""
    a, o = tuple(jnp.moveaxis(ax, -1, 0)), tuple(jnp.moveaxis(off, -1, 0))
    return math.stack_last([*a, *math.cross3(a, o)])


def camlight(m: Model, d: State) -> State:
    """Camera tracking modes applied to the fixed-mode frames from `kinematics`.

    MuJoCo: mj_camlight (cameras only: State has no light_xpos / light_xdir yet).
    """
    if not m.ncam:
        return d
    dt = _dtype(m)
    mode = _np(m.cam_mode)
    body = _np(m.cam_bodyid)
    target = _np(m.cam_targetbodyid)
    cam_xpos, cam_xmat = d.cam_xpos, d.cam_xmat
    for md in (CamLight.TRACK, CamLight.TRACKCOM):
        ids = np.nonzero(mode == md)[0]
        if len(ids):
            ref = d.xpos if md == CamLight.TRACK else d.subtree_com
            off = m.cam_pos0 if md == CamLight.TRACK else m.cam_poscom0
            cam_xmat = cam_xmat.at[ids].set(m.cam_mat0[ids].reshape(-1, 3, 3))
            cam_xpos = cam_xpos.at[ids].set(ref[body[ids]] + off[ids])
    for md in (CamLight.TARGETBODY, CamLight.TARGETBODYCOM):
        ids = np.nonzero((mode == md) & (target >= 0))[0]
        if len(ids):
            ref = d.xpos if md == CamLight.TARGETBODY else d.subtree_com
            z = math.normalize(cam_xpos[ids] - ref[target[ids]])
            up = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0], dt), z.shape)
            x = math.normalize(jnp.cross(up, z))
            y = math.normalize(jnp.cross(z, x))
            cam_xmat = cam_xmat.at[ids].set(jnp.stack([x, y, z], axis=-1))
    return d.replace(cam_xpos=cam_xpos, cam_xmat=cam_xmat)


# ---------------------------------------------------------------------------- tendons


class _TendonPlan(NamedTuple):
    fix_ten: np.ndarray  # fixed-tendon terms: tendon id, joint id, wrap id (coefficient)
    fix_jnt: np.ndarray
    fix_wrap: np.ndarray
    st_ten: np.ndarray  # straight segments: tendon, sites, divisor wrap id (-1: none)
    st_s0: np.ndarray
    st_s1: np.ndarray
    st_div: np.ndarray
    wr_ten: np.ndarray  # wrapped segments: tendon, sites, geom, geom wrap id, divisor
    wr_s0: np.ndarray
    wr_s1: np.ndarray
    wr_geom: np.ndarray
    wr_wrap: np.ndarray
    wr_div: np.ndarray
    wr_sphere: np.ndarray
    cand_ten: np.ndarray  # path points in order: tendon, kind, reference, wrap_obj
    cand_kind: np.ndarray  # 0 pulley, 1 site, 2 first tangent, 3 second tangent
    cand_ref: np.ndarray  # site id or wrapped-segment index
    cand_obj: np.ndarray


_plans: dict = {}


def _tendon_plan(m: Model) -> _TendonPlan:
    key = m._static_key
    if key in _plans:
        return _plans[key]
    wt, wo = _np(m.wrap_type), _np(m.wrap_objid)
    fix, st, wr, cand = [], [], [], []
    for i in range(m.ntendon):
        adr, num = int(m.tendon_adr[i]), int(m.tendon_num[i])
        if num and wt[adr] == WrapType.JOINT:
            fix += [(i, wo[adr + j], adr + j) for j in range(num)]
            continue
        div, j = -1, 0
        while j < num - 1:
            t0, t1 = wt[adr + j], wt[adr + j + 1]
            if t0 == WrapType.PULLEY or t1 == WrapType.PULLEY:
                if t0 == WrapType.PULLEY:
                    div = adr + j
                    cand.append((i, 0, 0, -2))
                j += 1
                continue
            id0 = wo[adr + j]
            cand.append((i, 1, id0, -1))
            if t1 in (WrapType.SPHERE, WrapType.CYLINDER):
                g = wo[adr + j + 1]
                wr.append((i, id0, wo[adr + j + 2], g, adr + j + 1, div, t1 == WrapType.SPHERE))
                cand += [(i, 2, len(wr) - 1, g), (i, 3, len(wr) - 1, g)]
                j += 2
            else:
                st.append((i, id0, wo[adr + j + 1], div))
                j += 1
            if j == num - 1 or wt[adr + j + 1] == WrapType.PULLEY:
                cand.append((i, 1, wo[adr + j], -1))

    def cols(rows, n):
        a = np.asarray(rows, dtype=np.int64).reshape(-1, n)
        return [a[:, k] for k in range(n)]

    plan = _TendonPlan(
        *cols(fix, 3), *cols(st, 4), *cols([r[:6] for r in wr], 6),
        np.asarray([r[6] for r in wr], dtype=bool), *cols(cand, 4),
    )
    _plans[key] = plan
    return plan


def _segment_jac(m, d, p0, b0, p1, b1):
    """Rows dif' * (J(b1, p1) - J(b0, p0)) of straight pieces; zero within one body."""
    dif = math.normalize(p1 - p0)
    j0, _ = jac(m, d, p0, b0)
    j1, _ = jac(m, d, p1, b1)
    rows = jnp.einsum("ki,kiv->kv", dif, j1 - j0)
    return rows * jnp.asarray(b0 != b1, rows.dtype)[:, None]


def wrap_divisor(m: Model, idx: np.ndarray) -> jax.Array:
    """Pulley divisor of path pieces (wrap index of their pulley, -1 for none: 1)."""
    return jnp.where(jnp.asarray(idx >= 0), m.wrap_prm[np.maximum(idx, 0)], 1.0)


def wrap_tangents(m: Model, d: State, p: _TendonPlan):
    """(arc length, or -1 where the piece does not wrap; tangent points (k, 6)) of the
    wrapped pieces of the tendon plan (mju_wrap around spheres and cylinders)."""
    x0, x1 = d.site_xpos[p.wr_s0], d.site_xpos[p.wr_s1]
    g = p.wr_geom
    side_id = jnp.round(m.wrap_prm[p.wr_wrap]).astype(jnp.int32)
    side = d.site_xpos[jnp.clip(side_id, 0, max(m.nsite - 1, 0))] if m.nsite else x0
    return math.wrap(x0, x1, d.geom_xpos[g], d.geom_xmat[g], m.geom_size[g, 0],
                     jnp.asarray(p.wr_sphere), side, side_id >= 0)


def tendon(m: Model, d: State) -> State:
    """Tendon lengths, dense Jacobians and wrap paths. MuJoCo: mj_tendon.

    Fixed tendons, spatial tendons through sites, sphere/cylinder wrapping with optional
    side sites (mju_wrap semantics, including its no-wrap cases) and pulleys. wrap_xpos /
    wrap_obj / ten_wrapadr / ten_wrapnum follow MuJoCo's compacted layout; slots past the
    last path point are zero.
    """
    if not m.ntendon:
        return d
    dt = _dtype(m)
    p = _tendon_plan(m)
    length = jnp.zeros(m.ntendon, dt)
    J = jnp.zeros((m.ntendon, m.nv), dt)

    if len(p.fix_ten):
        coef = m.wrap_prm[p.fix_wrap]
        length = length.at[p.fix_ten].add(coef * d.qpos[_np(m.jnt_qposadr)[p.fix_jnt]])
        J = J.at[p.fix_ten, _np(m.jnt_dofadr)[p.fix_jnt]].add(coef)

    def divisor(idx):
        return wrap_divisor(m, idx)

    site_body = _np(m.site_bodyid)
    if len(p.st_ten):
        x0, x1 = d.site_xpos[p.st_s0], d.site_xpos[p.st_s1]
        div = divisor(p.st_div)
        length = length.at[p.st_ten].add(math.norm(x1 - x0) / div)
        rows = _segment_jac(m, d, x0, site_body[p.st_s0], x1, site_body[p.st_s1])
        J = J.at[p.st_ten].add(rows / div[:, None])

    tangent = jnp.zeros((0, 6), dt)
    wrapped = jnp.zeros((0,), bool)
    if len(p.wr_ten):
        x0, x1 = d.site_xpos[p.wr_s0], d.site_xpos[p.wr_s1]
        g = p.wr_geom
        wlen, tangent = wrap_tangents(m, d, p)
        wrapped = wlen >= 0
        t0, t1 = tangent[:, :3], tangent[:, 3:]
        div = divisor(p.wr_div)
        b0, b1, bg = site_body[p.wr_s0], site_body[p.wr_s1], _np(m.geom_bodyid)[g]
        direct = math.norm(x1 - x0)
        around = math.norm(t0 - x0) + wlen + math.norm(x1 - t1)
        length = length.at[p.wr_ten].add(jnp.where(wrapped, around, direct) / div)
        rows_direct = _segment_jac(m, d, x0, b0, x1, b1)
        rows_around = _segment_jac(m, d, x0, b0, t0, bg) + _segment_jac(m, d, t1, bg, x1, b1)
        rows = jnp.where(wrapped[:, None], rows_around, rows_direct)
        J = J.at[p.wr_ten].add(rows / div[:, None])

    # path points: static candidates, tangent points valid only where the segment wraps
    ncand = len(p.cand_ten)
    if ncand:
        kind, ref = p.cand_kind, p.cand_ref
        pos = jnp.zeros((ncand, 3), dt)
        s = np.nonzero(kind == 1)[0]
        pos = pos.at[s].set(d.site_xpos[ref[s]])
        valid = jnp.ones(ncand, bool)
        for k, sl in ((2, slice(0, 3)), (3, slice(3, 6))):
            c = np.nonzero(kind == k)[0]
            if len(c):
                pos = pos.at[c].set(tangent[ref[c], sl])
                valid = valid.at[c].set(wrapped[ref[c]])
        slot = jnp.cumsum(valid) - 1
        nslot = 2 * m.nwrap
        slot = jnp.where(valid, slot, nslot)
        wrap_xpos = jnp.zeros((nslot, 3), dt).at[slot].set(pos, mode="drop")
        wrap_obj = jnp.zeros(nslot, jnp.int32).at[slot].set(
            jnp.asarray(p.cand_obj, jnp.int32), mode="drop"
        )
        wrapnum = jnp.zeros(m.ntendon, jnp.int32).at[p.cand_ten].add(valid.astype(jnp.int32))
    else:
        wrap_xpos = jnp.zeros((2 * m.nwrap, 3), dt)
        wrap_obj = jnp.zeros(2 * m.nwrap, jnp.int32)
        wrapnum = jnp.zeros(m.ntendon, jnp.int32)
    wrapadr = jnp.cumsum(wrapnum) - wrapnum

    return d.replace(
        ten_length=length, ten_J=J, wrap_xpos=wrap_xpos, wrap_obj=wrap_obj,
        ten_wrapnum=wrapnum, ten_wrapadr=wrapadr,
    )


# ----------------------------------------------------------------------- transmission


def _common_chain(m: Model, b0: int, b1: int) -> np.ndarray:
    """Dofs on the chain above the deepest dof shared by two bodies (bool (nv,))."""
    weld = _np(m.body_weldid)
    dofadr, dofnum, dpar = _np(m.body_dofadr), _np(m.body_dofnum), _np(m.dof_parentid)
    d0 = dofadr[weld[b0]] + dofnum[weld[b0]] - 1
    d1 = dofadr[weld[b1]] + dofnum[weld[b1]] - 1
    out = np.zeros(m.nv, bool)
    if d0 < 0 or d1 < 0 or dofnum[weld[b0]] == 0 or dofnum[weld[b1]] == 0:
        return out
    while d0 != d1 and d0 >= 0 and d1 >= 0:
        if d0 < d1:
            d1 = dpar[d1]
        else:
            d0 = dpar[d0]
    if d0 == d1 and d0 >= 0:
        while d0 >= 0:
            out[d0] = True
            d0 = dpar[d0]
    return out


def transmission(m: Model, d: State) -> State:
    """Actuator lengths and dense moment arms. MuJoCo: mj_transmission.

    Joint, jointinparent, tendon, site (with and without refsite) and slider-crank.
    Body transmissions (adhesion) have length 0 and minus the average contact-normal
    Jacobian of the body's contacts as moment (the contacts must be in `d`).
    SO3 transmissions (a ball joint, or a site with a reference site) fill three rows: the
    rotation as a rotation vector, and the rotational Jacobian in the child (site) frame.
    Each actuator writes the rows from its actuator_outadr; gear is read from that row.
    """
    nv = m.nv
    dt = _dtype(m)
    if not m.nactuator:
        return d
    length = jnp.zeros(m.nout, dt)
    moment = jnp.zeros((m.nout, nv), dt)
    trntype = _np(m.actuator_trntype)
    trnid = _np(m.actuator_trnid)
    orow = _np(m.actuator_outadr)
    gear = m.actuator_gear[orow]  # the first output row's gear, per actuator
    jtype, qadr, dofadr = _np(m.jnt_type), _np(m.jnt_qposadr), _np(m.jnt_dofadr)
    site_body = _np(m.site_bodyid)

    # joint transmissions
    isjnt = (trntype == TrnType.JOINT) | (trntype == TrnType.JOINTINPARENT)
    inparent = trntype == TrnType.JOINTINPARENT
    jid = np.where(isjnt, trnid[:, 0], 0)
    scalar = np.nonzero(isjnt & np.isin(jtype[jid], (JointType.HINGE, JointType.SLIDE)))[0]
    if len(scalar):
        j = jid[scalar]
        length = length.at[orow[scalar]].set(d.qpos[qadr[j]] * gear[scalar, 0])
        moment = moment.at[orow[scalar], dofadr[j]].set(gear[scalar, 0])
    ball = np.nonzero(isjnt & (jtype[jid] == JointType.BALL))[0]
    if len(ball):
        j = jid[ball]
        quat = math.normalize_quat(d.qpos[qadr[j][:, None] + np.arange(4)])
        axis = math.quat_to_vel(quat)
        gax = jnp.where(
            jnp.asarray(inparent[ball])[:, None],
            math.rot_vec_quat(gear[ball, :3], math.quat_neg(quat)), gear[ball, :3],
        )
        length = length.at[orow[ball]].set(jnp.sum(axis * gax, -1))
        moment = moment.at[orow[ball][:, None], dofadr[j][:, None] + np.arange(3)].set(gax)
    free = np.nonzero(isjnt & (jtype[jid] == JointType.FREE))[0]
    if len(free):
        j = jid[free]
        quat = math.normalize_quat(d.qpos[qadr[j][:, None] + np.arange(3, 7)])
        gax = jnp.where(
            jnp.asarray(inparent[free])[:, None],
            math.rot_vec_quat(gear[free, 3:6], math.quat_neg(quat)), gear[free, 3:6],
        )
        val = jnp.concatenate([gear[free, :3], gax], -1)
        moment = moment.at[orow[free][:, None], dofadr[j][:, None] + np.arange(6)].set(val)

    # tendon transmissions
    ten = np.nonzero(trntype == TrnType.TENDON)[0]
    if len(ten):
        t = trnid[ten, 0]
        length = length.at[orow[ten]].set(d.ten_length[t] * gear[ten, 0])
        moment = moment.at[orow[ten]].set(d.ten_J[t] * gear[ten, 0][:, None])

    # slider-crank
    sc = np.nonzero(trntype == TrnType.SLIDERCRANK)[0]
    if len(sc):
        sid, slid = trnid[sc, 0], trnid[sc, 1]
        rod = m.actuator_cranklength[sc]
        axis = d.site_xmat[slid, :, 2]
        vec = d.site_xpos[sid] - d.site_xpos[slid]
        av = jnp.sum(vec * axis, -1)
        det = av * av + rod * rod - jnp.sum(vec * vec, -1)
        ok = det > 0
        sdet = math.safe_sqrt(det)
        inv = 1.0 / jnp.where(ok, sdet, 1.0)
        ln = jnp.where(ok, av - sdet, av)
        dldv = jnp.where(
            ok[:, None], axis * (1 - av * inv)[:, None] + vec * inv[:, None], axis
        )
        dlda = jnp.where(ok[:, None], vec * (1 - av * inv)[:, None], vec)
        jacS, jacR = jac(m, d, d.site_xpos[slid], site_body[slid])
        jacP, _ = jac(m, d, d.site_xpos[sid], site_body[sid])
        jacA = jnp.cross(jnp.swapaxes(jacR, 1, 2), axis[:, None, :])  # (k, nv, 3)
        row = jnp.einsum("ki,kvi->kv", dlda, jacA) + jnp.einsum("ki,kiv->kv", dldv, jacP - jacS)
        length = length.at[orow[sc]].set(ln * gear[sc, 0])
        moment = moment.at[orow[sc]].set(row * gear[sc, 0][:, None])

    # site transmissions
    site = np.nonzero(trntype == TrnType.SITE)[0]
    if len(site):
        sid, ref = trnid[site, 0], trnid[site, 1]
        jp, jr = jac(m, d, d.site_xpos[sid], site_body[sid])
        noref = np.nonzero(ref < 0)[0]
        if len(noref):
            a, s = site[noref], sid[noref]
            wt = jnp.einsum("kij,kj->ki", d.site_xmat[s], gear[a, :3])
            wr = jnp.einsum("kij,kj->ki", d.site_xmat[s], gear[a, 3:6])
            row = jnp.einsum("ki,kiv->kv", wt, jp[noref]) + jnp.einsum("ki,kiv->kv", wr, jr[noref])
            moment = moment.at[orow[a]].set(row)
        withref = np.nonzero(ref >= 0)[0]
        if len(withref):
            a, s, r = site[withref], sid[withref], ref[withref]
            keep = np.stack([~_common_chain(m, site_body[x], site_body[y]) for x, y in zip(s, r, strict=True)])
            keep = jnp.asarray(keep, dt)[:, None, :]
            jpr, jrr = jac(m, d, d.site_xpos[r], site_body[r])
            rmat = d.site_xmat[r]
            vec = jnp.einsum("kji,kj->ki", rmat, d.site_xpos[s] - d.site_xpos[r])
            ln = jnp.sum(vec * gear[a, :3], -1)
            wt = jnp.einsum("kij,kj->ki", rmat, gear[a, :3])
            row = jnp.einsum("ki,kiv->kv", wt, (jp[withref] - jpr) * keep)
            quat = math.quat_mul(d.xquat[site_body[s]], m.site_quat[s])
            rquat = math.quat_mul(d.xquat[site_body[r]], m.site_quat[r])
            rvec = math.sub_quat(quat, rquat)
            ln = ln + jnp.sum(rvec * gear[a, 3:6], -1)
            wr = jnp.einsum("kij,kj->ki", rmat, gear[a, 3:6])
            row = row + jnp.einsum("ki,kiv->kv", wr, (jr[withref] - jrr) * keep)
            length = length.at[orow[a]].set(ln)
            moment = moment.at[orow[a]].set(row)

    # SO3: three rows per actuator
    so3 = np.nonzero(trntype == TrnType.SO3)[0]
    ballj = so3[trnid[so3, 1] < 0]
    if len(ballj):
        j = trnid[ballj, 0]
        rows = orow[ballj][:, None] + np.arange(3)
        quat = math.normalize_quat(d.qpos[qadr[j][:, None] + np.arange(4)])
        length = length.at[rows].set(math.quat_to_vel(quat))
        moment = moment.at[rows, dofadr[j][:, None] + np.arange(3)].set(1.0)
    sites = so3[trnid[so3, 1] >= 0]
    if len(sites):
        s, r = trnid[sites, 0], trnid[sites, 1]
        rows = orow[sites][:, None] + np.arange(3)
        quat = math.quat_mul(d.xquat[site_body[s]], m.site_quat[s])
        rquat = math.quat_mul(d.xquat[site_body[r]], m.site_quat[r])
        keep = np.stack([~_common_chain(m, site_body[x], site_body[y])
                         for x, y in zip(s, r, strict=True)])
        _, jrs = jac(m, d, d.site_xpos[s], site_body[s])
        _, jrr = jac(m, d, d.site_xpos[r], site_body[r])
        jrel = (jrs - jrr) * jnp.asarray(keep, dt)[:, None, :]
        length = length.at[rows].set(math.sub_quat(quat, rquat))
        # row k: the site's k-th axis projected on the relative rotational Jacobian
        moment = moment.at[rows].set(jnp.einsum("kij,kiv->kjv", d.site_xmat[s], jrel))

    # body transmissions (adhesion): minus the average normal Jacobian of the body's contacts
    body_act = np.nonzero(trntype == TrnType.BODY)[0]
    if len(body_act) and d.contact.dist.shape[0]:
        moment = moment.at[orow[body_act]].set(_body_moment(m, d, trnid[body_act, 0]))

    return d.replace(actuator_length=length, actuator_moment=moment)


def _body_moment(m: Model, d: State, bodies: np.ndarray) -> jax.Array:
    """Moments (k, nv) of body transmissions: minus the mean, over the geom-geom contacts of
    each body (active or in the margin's gap; flex contacts do not count), of the
    contact-normal Jacobian of body 2 relative to body 1 at the contact point (for a
    pyramidal cone, the mean of the pyramid's edge rows is that normal row too). MuJoCo:
    mj_transmission, mjTRN_BODY."""
    c = d.contact
    b1, b2 = contact_bodies(m, c).T
    mask = jnp.asarray(scan.body_dof_mask(m.body_parentid, m.dof_bodyid), _dtype(m))
    root = jnp.asarray(_np(m.body_rootid))
    rot, lin = d.cdof[:, :3], d.cdof[:, 3:]
    u = c.frame[:, 0]

    def side(b):  # u . (velocity of the contact point on body b), per dof
        off = c.pos - d.subtree_com[root[b]]
        return mask[b] * (jnp.cross(off, u) @ rot.T + u @ lin.T)

    rows = side(b2) - side(b1)  # (ncon, nv)
    bid = jnp.asarray(bodies)[:, None]
    # contacts with a flex side do not count (MuJoCo skips them)
    geoms = (c.geom[:, 0] >= 0) & (c.geom[:, 1] >= 0)
    rel = (c.active & geoms)[None] & ((b1[None] == bid) | (b2[None] == bid))  # (k, ncon)
    count = jnp.sum(rel, axis=1)
    total = jnp.asarray(rel, rows.dtype) @ rows
    return -total / jnp.maximum(count, 1)[:, None].astype(rows.dtype)


# ---------------------------------------------------------------------------- inertia


def _actuator_armature(m: Model, trn_types: tuple, n: int) -> jax.Array:
    """Armature inherited from actuators by joints or tendons (mj_actuatorArmature)."""
    dt = _dtype(m)
    out = jnp.zeros(n, dt)
    if not m.nactuator or not n:
        return out
    sel = np.nonzero(np.isin(_np(m.actuator_trntype), trn_types))[0]
    if not len(sel):
        return out
    arm = m.actuator_armature[sel] * m.actuator_gear[_np(m.actuator_outadr)[sel], 0] ** 2
    return out.at[_np(m.actuator_trnid)[sel, 0]].add(arm)


def dof_armature(m: Model) -> jax.Array:
    """dof_armature plus what joint actuators add (armature * gear^2)."""
    jnt = _actuator_armature(m, (TrnType.JOINT, TrnType.JOINTINPARENT), m.njnt)
    if not m.nv:
        return m.dof_armature
    return m.dof_armature + jnt[_np(m.dof_jntid)]


def tendon_armature(m: Model) -> jax.Array:
    """tendon_armature plus what tendon actuators add (armature * gear^2)."""
    return m.tendon_armature + _actuator_armature(m, (TrnType.TENDON,), m.ntendon)


def crb(m: Model, d: State) -> State:
    """Composite rigid-body inertias and the joint-space inertia qM. MuJoCo: mj_crb.

    qM is dense (nv, nv) and symmetric; entries outside MuJoCo's tree sparsity (dofs on
    different branches) are zero. Includes dof and joint-actuator armature.
    """
    crb_ = scan.subtree_sum(m.body_parentid, d.cinert, into_world=False)
    if not m.nv:
        return d.replace(crb=crb_, qM=jnp.zeros((0, 0), _dtype(m)))
    buf = math.mul_inert_vec(crb_[_np(m.dof_bodyid)], d.cdof)
    anc = scan.dof_ancestors(m.dof_parentid)
    # [i, j] = cdof_j . (crb_i cdof_i) where j is i or an ancestor of i, its mirror image
    # above the diagonal; both triangles as products of their own (a transpose of the
    # lower one made XLA evaluate each entry twice, in every fusion that reads qM)
    low = math.mm(buf, d.cdof.T)
    up = math.mm(d.cdof, buf.T)
    qM = jnp.where(anc, low, jnp.where(anc.T, up, 0.0)) + jnp.diag(dof_armature(m))
    return d.replace(crb=crb_, qM=qM)


def tendon_armature_m(m: Model, d: State) -> State:
    """Adds armature * J' J of each tendon to qM. MuJoCo: mj_tendonArmature.

    As in MuJoCo, only entries inside the tree sparsity of M receive the contribution.
    """
    if not m.ntendon or not m.nv:
        return d
    arm = tendon_armature(m)
    add = jnp.einsum("t,ti,tj->ij", arm, d.ten_J, d.ten_J)
    anc = scan.dof_ancestors(m.dof_parentid)
    pattern = jnp.asarray(anc | anc.T)
    return d.replace(qM=d.qM + jnp.where(pattern, add, 0.0))


def make_m(m: Model, d: State) -> State:
    """Joint-space inertia with all armature terms. MuJoCo: mj_makeM."""
    return tendon_armature_m(m, crb(m, d))


# --------------------------------------------------------------------------- velocity


@functools.lru_cache(maxsize=256)
def _prior_dofs(dof_bodyid: tuple, dof_jntid: tuple, jnt_type: tuple, jnt_dofadr: tuple):
    """[v, w]: dof w of the same body acts before v's joint group (for cdof_dot)."""
    nv = len(dof_bodyid)
    prior = np.zeros((nv, nv), bool)
    zero = np.zeros(nv, bool)
    for v in range(nv):
        j = dof_jntid[v]
        start = jnt_dofadr[j]
        if jnt_type[j] == JointType.FREE:
            if v - start < 3:
                zero[v] = True
            start += 3
        elif jnt_type[j] == JointType.HINGE or jnt_type[j] == JointType.SLIDE:
            start = v
        for w in range(nv):
            prior[v, w] = dof_bodyid[w] == dof_bodyid[v] and w < start
    return prior, zero


def com_vel(m: Model, d: State) -> State:
    """Com-based body velocities and dof-axis derivatives. MuJoCo: mj_comVel."""
    dt = _dtype(m)
    if not m.nv:
        return d.replace(cvel=jnp.zeros((m.nbody, 6), dt))
    contrib = d.cdof * d.qvel[:, None]
    mask = jnp.asarray(scan.body_dof_mask(m.body_parentid, m.dof_bodyid), dt)
    cvel = mask @ contrib
    prior, zero = _prior_dofs(
        tuple(_np(m.dof_bodyid).tolist()), tuple(_np(m.dof_jntid).tolist()),
        tuple(_np(m.jnt_type).tolist()), tuple(_np(m.jnt_dofadr).tolist()),
    )
    parent = _np(m.body_parentid)[_np(m.dof_bodyid)]
    pre = cvel[parent] + jnp.asarray(prior, dt) @ contrib
    cdof_dot = math.cross_motion(pre, d.cdof)
    cdof_dot = jnp.where(jnp.asarray(zero)[:, None], 0.0, cdof_dot)
    return d.replace(cvel=cvel, cdof_dot=cdof_dot)
