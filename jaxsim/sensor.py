"""Sensors by stage: sensor_pos, sensor_vel, sensor_acc. MuJoCo: engine_sensor.c.

Sensors of one type are computed together: the grouping (type -> sensor ids, object ids,
reference frames) is static, read from the model on the host, so each stage traces one
gather per sensor type present, never one computation per sensor. The results are
scattered into `sensordata` at `sensor_adr`, then `sensor_cutoff` clamps them as
MuJoCo's apply_cutoff does (both sides for real data, the upper side for positive data).

Contact sensors and the geom distance sensors live in sensor_contact.py, rangefinders in
raycast.py, tactile sensors in sensor_contact.py. Sensors with a history buffer (delays,
sampling intervals) read it through jaxsim.history. User and plugin sensors read NaN,
in the stage MuJoCo computes them; `load` warns about each (UncomputedSensorWarning,
sections_sensor.py) and `unsupported` lists them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import history, math, scan
from jaxsim.collision.common import contact_bodies
from jaxsim.sensor_contact import contact_sensors, distance_sensor, inside, tactile
from jaxsim.types import (
    DataType,
    DisableBit,
    GeomType,
    JointType,
    Model,
    ObjType,
    SensorType,
    Stage,
    State,
    TrnType,
)

S = SensorType
MINVAL = 1e-15  # mjMINVAL

POS_TYPES = frozenset({
    S.MAGNETOMETER, S.JOINTPOS, S.TENDONPOS, S.ACTUATORPOS, S.BALLQUAT, S.JOINTLIMITPOS,
    S.TENDONLIMITPOS, S.FRAMEPOS, S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS, S.FRAMEQUAT,
    S.SUBTREECOM, S.E_POTENTIAL, S.E_KINETIC, S.CLOCK, S.INSIDESITE, S.CAMPROJECTION,
    S.GEOMDIST, S.GEOMNORMAL, S.GEOMFROMTO, S.RANGEFINDER})
VEL_TYPES = frozenset({
    S.VELOCIMETER, S.GYRO, S.JOINTVEL, S.TENDONVEL, S.ACTUATORVEL, S.BALLANGVEL,
    S.JOINTLIMITVEL, S.TENDONLIMITVEL, S.FRAMELINVEL, S.FRAMEANGVEL, S.SUBTREELINVEL,
    S.SUBTREEANGMOM, S.TACTILE})
ACC_TYPES = frozenset({
    S.TOUCH, S.ACCELEROMETER, S.FORCE, S.TORQUE, S.ACTUATORFRC, S.JOINTACTFRC,
    S.TENDONACTFRC, S.JOINTLIMITFRC, S.TENDONLIMITFRC, S.FRAMELINACC, S.FRAMEANGACC})
# computed in the stage `sensor_needstage` names (position, or acceleration with forces)
ANY_STAGE_TYPES = frozenset({S.CONTACT})
# types whose sensors differ in size: computed one sensor at a time
PER_SENSOR_TYPES = frozenset({S.CONTACT, S.RANGEFINDER, S.TACTILE})
SUPPORTED = POS_TYPES | VEL_TYPES | ACC_TYPES | ANY_STAGE_TYPES
# acceleration-stage types that read cacc / cfrc_int (MuJoCo calls mj_rnePostConstraint)
RNE_POST_TYPES = frozenset({S.ACCELEROMETER, S.FORCE, S.TORQUE, S.FRAMELINACC, S.FRAMEANGACC})


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def unsupported(m: Model) -> list[tuple[int, str]]:
    """(sensor id, reason) of every sensor jaxsim cannot compute."""
    out = []
    for i, t in enumerate(_np(m.sensor_type)):
        if t not in SUPPORTED:
            name = S(t).name.lower() if t in S._value2member_map_ else str(t)
            out.append((i, f"{name} sensors are not supported by jaxsim"))
    return out


def _groups(m: Model, types: frozenset) -> list[tuple[int, np.ndarray]]:
    """(type, sensor ids) of the sensors whose type is in `types`, in order of appearance;
    actuator sensors also by dimension (one value per actuator output)."""
    st = _np(m.sensor_type)
    key = np.where(np.isin(st, (S.ACTUATORPOS, S.ACTUATORVEL, S.ACTUATORFRC)),
                   _np(m.sensor_dim), 0)
    present = [tk for tk in dict.fromkeys(zip(st.tolist(), key.tolist(), strict=True))
               if tk[0] in types]
    return [(t, np.nonzero((st == t) & (key == k))[0]) for t, k in present]


# ------------------------------------------------------------------------------ frames


def _body_of(m: Model, objtype: np.ndarray, objid: np.ndarray) -> np.ndarray:
    """Body each spatial object is attached to (static)."""
    out = np.zeros(len(objid), np.int64)
    for t, table in ((ObjType.BODY, None), (ObjType.XBODY, None), (ObjType.GEOM, m.geom_bodyid),
                     (ObjType.SITE, m.site_bodyid), (ObjType.CAMERA, m.cam_bodyid)):
        sel = objtype == t
        if sel.any():
            out[sel] = objid[sel] if table is None else _np(table)[objid[sel]]
    return out


def _select(objtype: np.ndarray, objid: np.ndarray, tables: dict):
    """Rows of per-objtype tables, one gather per objtype present, merged by static masks."""
    out = None
    for t in dict.fromkeys(objtype.tolist()):
        sel = objtype == t
        rows = tables[t][np.where(sel, objid, 0)]
        if out is None:
            out = rows
        else:
            mask = sel.reshape((-1,) + (1,) * (rows.ndim - 1))
            out = jnp.where(mask, rows, out)
    return out


def _xpos_xmat(d: State, objtype: np.ndarray, objid: np.ndarray):
    """Global position and orientation of (x)bodies, geoms, sites, cameras (get_xpos_xmat)."""
    pos = {ObjType.XBODY: d.xpos, ObjType.BODY: d.xipos, ObjType.GEOM: d.geom_xpos,
           ObjType.SITE: d.site_xpos, ObjType.CAMERA: d.cam_xpos}
    mat = {ObjType.XBODY: d.xmat, ObjType.BODY: d.ximat, ObjType.GEOM: d.geom_xmat,
           ObjType.SITE: d.site_xmat, ObjType.CAMERA: d.cam_xmat}
    return _select(objtype, objid, pos), _select(objtype, objid, mat)


def _xquat(m: Model, d: State, objtype: np.ndarray, objid: np.ndarray) -> jax.Array:
    """Global quaternion of spatial objects (get_xquat): body quaternion times local one."""
    body = _body_of(m, objtype, objid)
    one = jnp.asarray([[1.0, 0.0, 0.0, 0.0]], d.xquat.dtype)
    local = {ObjType.XBODY: one, ObjType.BODY: m.body_iquat, ObjType.GEOM: m.geom_quat,
             ObjType.SITE: m.site_quat, ObjType.CAMERA: m.cam_quat}
    ids = np.where(objtype == ObjType.XBODY, 0, objid)
    q = math.quat_mul(d.xquat[body], _select(objtype, ids, local))
    return jnp.where(jnp.asarray(objtype == ObjType.XBODY)[:, None], d.xquat[body], q)


def _transform_motion(vec: jax.Array, newpos, oldpos, rot=None) -> jax.Array:
    """Motion vector (rot:lin) moved from oldpos to newpos, optionally rotated into a frame
    whose axes are the columns of `rot` (mju_transformSpatial with flg_force=0)."""
    ang, lin = vec[..., :3], vec[..., 3:]
    lin = lin - jnp.cross(newpos - oldpos, ang)
    if rot is not None:
        ang = jnp.einsum("kji,kj->ki", rot, ang)
        lin = jnp.einsum("kji,kj->ki", rot, lin)
    return jnp.concatenate([ang, lin], -1)


def _transform_force(vec: jax.Array, newpos, oldpos, rot=None) -> jax.Array:
    """Force vector (torque:force) moved from oldpos to newpos (flg_force=1)."""
    tor, frc = vec[..., :3], vec[..., 3:]
    tor = tor - jnp.cross(newpos - oldpos, frc)
    if rot is not None:
        tor = jnp.einsum("kji,kj->ki", rot, tor)
        frc = jnp.einsum("kji,kj->ki", rot, frc)
    return jnp.concatenate([tor, frc], -1)


def object_velocity(m: Model, d: State, objtype: np.ndarray, objid: np.ndarray,
                    local: bool) -> jax.Array:
    """6D velocity (rot:lin) at objects' frames, global or local axes (mj_objectVelocity)."""
    body = _body_of(m, objtype, objid)
    pos, mat = _xpos_xmat(d, objtype, objid)
    com = d.subtree_com[_np(m.body_rootid)[body]]
    return _transform_motion(d.cvel[body], pos, com, mat if local else None)


def object_acceleration(m: Model, d: State, objtype: np.ndarray, objid: np.ndarray,
                        local: bool) -> jax.Array:
    """6D acceleration at objects' frames with the Coriolis term (mj_objectAcceleration).

    As MuJoCo 4.0, objects on the world or static bodies report the world's acceleration
    (-gravity), not zero.
    """
    body = _body_of(m, objtype, objid)
    pos, mat = _xpos_xmat(d, objtype, objid)
    com = d.subtree_com[_np(m.body_rootid)[body]]
    rot = mat if local else None
    acc = _transform_motion(d.cacc[body], pos, com, rot)
    vel = _transform_motion(d.cvel[body], pos, com, rot)
    return acc.at[:, 3:].add(jnp.cross(vel[:, :3], vel[:, 3:]))


# --------------------------------------------------------------------- limit rows


def _limit_rows(m: Model, d: State, tendon: bool, ids: np.ndarray):
    """For limited joints / tendons: (pos - margin, vel, active) of their limit rows.

    Slide and hinge joints and tendons have a lower and an upper row (k, 2), ball joints
    one (the second column inactive). Rows follow constraint.py's definitions.
    """
    dt = d.qpos.dtype
    side = jnp.asarray([-1.0, 1.0], dt)
    if tendon:
        rng, margin = m.tendon_range[ids], m.tendon_margin[ids]
        dist = side * (rng - d.ten_length[ids][:, None])
        vel = -side * d.ten_velocity[ids][:, None] if d.ten_velocity.shape[0] else 0 * dist
        nonempty = jnp.any(d.ten_J[ids] != 0, axis=-1)[:, None] if m.nv else False
        active = (dist < margin[:, None]) & nonempty
        return dist - margin[:, None], vel, active
    jt = _np(m.jnt_type)[ids]
    qadr, dadr = _np(m.jnt_qposadr)[ids], _np(m.jnt_dofadr)[ids]
    rng, margin = m.jnt_range[ids], m.jnt_margin[ids]
    dist = side * (rng - d.qpos[qadr][:, None])
    vel = -side * d.qvel[dadr][:, None]
    ball = jt == JointType.BALL
    if ball.any():
        qa = np.where(ball, qadr, 0)[:, None] + np.arange(4)
        rv = math.quat_to_vel(math.normalize_quat(d.qpos[qa]))
        axis, angle = math.normalize_with_norm(rv)
        bdist = jnp.max(rng, axis=-1) - angle
        bvel = -jnp.sum(axis * d.qvel[np.where(ball, dadr, 0)[:, None] + np.arange(3)], -1)
        bsel = jnp.asarray(ball)[:, None]
        dist = jnp.where(bsel, jnp.stack([bdist, bdist], -1), dist)
        vel = jnp.where(bsel, jnp.stack([bvel, bvel], -1), vel)
    active = dist < margin[:, None]
    active = active & jnp.asarray(np.stack([np.ones_like(ball), ~ball], -1))
    return dist - margin[:, None], vel, active


def _limit_plan(m: Model, d: State, tendon: bool, ids: np.ndarray):
    """Static rows of the limit constraints of `ids` in the efc arrays: (k, 2) row index
    (clipped) and whether the object has rows at all."""
    from jaxsim import constraint

    p = constraint.plan(m, d.contact.dist.shape[0])
    neq = (3 * len(p.eq_connect) + 6 * len(p.eq_weld) + len(p.eq_joint) + len(p.eq_tendon)
           + len(p.eq_flex))
    start = neq + len(p.fri_dof) + len(p.fri_ten)
    if tendon:
        start += 2 * len(p.lim_jnt) + len(p.lim_ball)
        objs, nrows = p.lim_ten, np.full(len(p.lim_ten), 2)
    else:
        objs = np.concatenate([p.lim_jnt, p.lim_ball])
        nrows = np.concatenate([np.full(len(p.lim_jnt), 2), np.ones(len(p.lim_ball), np.int64)])
        order = np.argsort(objs, kind="stable")
        objs, nrows = objs[order], nrows[order]
    adr = start + np.concatenate([[0], np.cumsum(nrows)[:-1]]).astype(np.int64)
    lookup = dict(zip(objs.tolist(), adr.tolist(), strict=True))
    has = np.asarray([i in lookup for i in ids.tolist()], bool)
    first = np.asarray([lookup.get(i, 0) for i in ids.tolist()], np.int64)
    rows = first[:, None] + np.arange(2)
    return np.clip(rows, 0, max(p.nefc - 1, 0)), has


def _first_active(values: jax.Array, active: jax.Array) -> jax.Array:
    """Value of the first active row of each object (lower before upper), else 0."""
    return jnp.where(active[:, 0], values[:, 0], jnp.where(active[:, 1], values[:, 1], 0.0))


def _limit_sensor(m: Model, d: State, typ: int, ids: np.ndarray) -> jax.Array:
    tendon = typ in (S.TENDONLIMITPOS, S.TENDONLIMITVEL, S.TENDONLIMITFRC)
    rows, has = _limit_plan(m, d, tendon, ids)
    has = jnp.asarray(has)
    if typ in (S.JOINTLIMITFRC, S.TENDONLIMITFRC):
        if d.efc_force.shape[0] == 0:
            return jnp.zeros(len(ids), d.qpos.dtype)
        val = _first_active(d.efc_force[rows], d.efc_active[rows])
    else:
        pos, vel, active = _limit_rows(m, d, tendon, ids)
        val = _first_active(pos if typ in (S.JOINTLIMITPOS, S.TENDONLIMITPOS) else vel, active)
    return jnp.where(has, val, 0.0)


# ----------------------------------------------------------------------------- energy


def energy_pos(m: Model, d: State) -> jax.Array:
    """Potential energy: gravity and joint / tendon springs. MuJoCo: mj_energyPos."""
    dt = d.qpos.dtype
    e = jnp.zeros((), dt)
    flags = m.opt.disableflags
    if not flags & DisableBit.GRAVITY and m.nbody > 1:
        e = e - jnp.sum(m.body_mass[1:] * (d.xipos[1:] @ m.opt.gravity))
    if flags & DisableBit.SPRING:
        return e

    def potential(k, poly, x):
        # 0.5 k x^2 + poly0 x^3 / 3 + poly1 x^4 / 4 (mju_polyPotential)
        return 0.5 * k * x * x + poly[..., 0] / 3 * x ** 3 + poly[..., 1] / 4 * x ** 4

    from jaxsim.passive import spring_refs

    qpos_spring, lengthspring = spring_refs(m, d)
    jt, qadr = _np(m.jnt_type), _np(m.jnt_qposadr)
    k, poly = m.jnt_stiffness, m.jnt_stiffnesspoly
    for t in (JointType.SLIDE, JointType.HINGE):
        ids = np.nonzero(jt == t)[0]
        if len(ids):
            x = d.qpos[qadr[ids]] - qpos_spring[qadr[ids]]
            e = e + jnp.sum(potential(k[ids], poly[ids], x))
    ids = np.nonzero(jt == JointType.FREE)[0]
    if len(ids):
        a = qadr[ids][:, None] + np.arange(3)
        x = math.norm(d.qpos[a] - qpos_spring[a])
        e = e + jnp.sum(potential(k[ids], poly[ids], x))
    ids = np.nonzero((jt == JointType.FREE) | (jt == JointType.BALL))[0]
    if len(ids):
        a = (qadr[ids] + np.where(jt[ids] == JointType.FREE, 3, 0))[:, None] + np.arange(4)
        x = math.norm(math.sub_quat(d.qpos[a], qpos_spring[a]))
        e = e + jnp.sum(potential(k[ids], poly[ids], x))
    if m.ntendon:
        length = d.ten_length
        lo, hi = lengthspring[:, 0], lengthspring[:, 1]
        x = jnp.where(length > hi, length - hi, jnp.where(length < lo, length - lo, 0.0))
        e = e + jnp.sum(potential(m.tendon_stiffness, m.tendon_stiffnesspoly, x))
    return e


def energy_vel(m: Model, d: State) -> jax.Array:
    """Kinetic energy 0.5 qvel' M qvel. MuJoCo: mj_energyVel."""
    if not m.nv:
        return jnp.zeros((), d.qpos.dtype)
    return 0.5 * d.qvel @ (d.qM @ d.qvel)


# -------------------------------------------------------------------- subtree velocity


def subtree_vel(m: Model, d: State) -> tuple[jax.Array, jax.Array]:
    """Subtree linear velocity and angular momentum (nbody, 3) each. MuJoCo: mj_subtreeVel."""
    body = np.arange(m.nbody)
    vel = object_velocity(m, d, np.full(m.nbody, ObjType.BODY), body, local=False)
    w, v = vel[:, :3], vel[:, 3:]
    mass, smass = m.body_mass, m.body_subtreemass
    parent = _np(m.body_parentid)
    linvel = scan.subtree_sum(parent, mass[:, None] * v)
    linvel = linvel / jnp.maximum(MINVAL, smass)[:, None]
    # own angular momentum about the body com, then about the subtree com
    wl = jnp.einsum("kji,kj->ki", d.ximat, w) * m.body_inertia
    own = jnp.einsum("kij,kj->ki", d.ximat, wl)
    own = own + jnp.cross(d.xipos - d.subtree_com, mass[:, None] * (v - linvel))
    # momentum of each child subtree's com motion about its parent's subtree com
    rel = jnp.cross(d.subtree_com - d.subtree_com[parent],
                    smass[:, None] * (linvel - linvel[parent]))
    rel = rel.at[0].set(0.0)
    angmom = scan.subtree_sum(parent, own + rel) - rel
    return linvel, angmom


# -------------------------------------------------------------------------- touch


def _ray_quad(a, b, c):
    """Roots x0 <= x1 of a x^2 + 2 b x + c = 0 and whether they are real (ray_quad)."""
    det = b * b - a * c
    ok = (det >= 0) & (a >= MINVAL)
    s = jnp.sqrt(jnp.where(ok, det, 0.0))
    a_ = jnp.where(ok, a, 1.0)
    x0, x1 = (-b - s) / a_, (-b + s) / a_
    return jnp.where(ok, x0, -1.0), jnp.where(ok, x1, -1.0), ok


def _smallest(x0, x1):
    """Smallest non-negative root, or -1."""
    return jnp.where(x0 >= 0, x0, jnp.where(x1 >= 0, x1, -1.0))


def _sphere_hit(dif, vec, r2):
    a = jnp.sum(vec * vec, -1)
    b = jnp.sum(vec * dif, -1)
    c = jnp.sum(dif * dif, -1) - r2
    x0, x1, _ = _ray_quad(a, b, c)
    return _smallest(x0, x1) >= 0


def ray_hits(gtype: int, pos, mat, size, pnt, vec) -> jax.Array:
    """Whether rays (pnt, vec) hit primitive shapes (mju_rayGeom(...) >= 0), broadcasting."""
    dif = pnt - pos
    lp = jnp.einsum("...ji,...j->...i", mat, dif)
    lv = jnp.einsum("...ji,...j->...i", mat, vec)
    if gtype == GeomType.SPHERE:
        return _sphere_hit(dif, vec, size[..., 0] ** 2)
    if gtype == GeomType.ELLIPSOID:
        s = 1 / (size * size)
        a = jnp.sum(s * lv * lv, -1)
        b = jnp.sum(s * lv * lp, -1)
        c = jnp.sum(s * lp * lp, -1) - 1
        x0, x1, _ = _ray_quad(a, b, c)
        return _smallest(x0, x1) >= 0
    r, h = size[..., 0], size[..., 1]
    if gtype == GeomType.CAPSULE:
        bound = _sphere_hit(dif, vec, (r + h) ** 2)
        a = lv[..., 0] ** 2 + lv[..., 1] ** 2
        b = lv[..., 0] * lp[..., 0] + lv[..., 1] * lp[..., 1]
        c = lp[..., 0] ** 2 + lp[..., 1] ** 2 - r * r
        sol = _smallest(*_ray_quad(a, b, c)[:2])
        hit = (sol >= 0) & (jnp.abs(lp[..., 2] + sol * lv[..., 2]) <= h)
        a3 = jnp.sum(lv * lv, -1)
        for sgn in (1.0, -1.0):
            ld = lp.at[..., 2].add(-sgn * h)
            b3 = jnp.sum(lv * ld, -1)
            c3 = jnp.sum(ld * ld, -1) - r * r
            x0, x1, _ = _ray_quad(a3, b3, c3)
            for x in (x0, x1):
                z = lp[..., 2] + x * lv[..., 2]
                hit = hit | ((x >= 0) & (sgn * z >= h))
        return bound & hit
    if gtype == GeomType.CYLINDER:
        bound = _sphere_hit(dif, vec, r * r + h * h)
        hit = jnp.zeros(bound.shape, bool)
        lz = lv[..., 2]
        okz = jnp.abs(lz) > MINVAL
        for sgn in (-1.0, 1.0):
            sol = (sgn * h - lp[..., 2]) / jnp.where(okz, lz, 1.0)
            p0 = lp[..., 0] + sol * lv[..., 0]
            p1 = lp[..., 1] + sol * lv[..., 1]
            hit = hit | (okz & (sol >= 0) & (p0 * p0 + p1 * p1 <= r * r))
        a = lv[..., 0] ** 2 + lv[..., 1] ** 2
        b = lv[..., 0] * lp[..., 0] + lv[..., 1] * lp[..., 1]
        c = lp[..., 0] ** 2 + lp[..., 1] ** 2 - r * r
        sol = _smallest(*_ray_quad(a, b, c)[:2])
        hit = hit | ((sol >= 0) & (jnp.abs(lp[..., 2] + sol * lv[..., 2]) <= h))
        return bound & hit
    if gtype == GeomType.BOX:
        bound = _sphere_hit(dif, vec, jnp.sum(size * size, -1))
        hit = jnp.zeros(bound.shape, bool)
        for i, (j, k) in enumerate(((1, 2), (0, 2), (0, 1))):
            li = lv[..., i]
            ok = jnp.abs(li) > MINVAL
            for sgn in (-1.0, 1.0):
                sol = (sgn * size[..., i] - lp[..., i]) / jnp.where(ok, li, 1.0)
                p0 = lp[..., j] + sol * lv[..., j]
                p1 = lp[..., k] + sol * lv[..., k]
                hit = hit | (ok & (sol >= 0) & (jnp.abs(p0) <= size[..., j])
                             & (jnp.abs(p1) <= size[..., k]))
        return bound & hit
    raise NotImplementedError(f"ray intersection with {GeomType(gtype).name.lower()}")


def _touch(m: Model, d: State, ids: np.ndarray) -> jax.Array:
    """Normal force of the contacts whose force ray enters the site's zone (mjSENS_TOUCH)."""
    from jaxsim.rne import contact_force

    c = d.contact
    dt = d.qpos.dtype
    n = c.dist.shape[0]
    if n == 0 or d.efc_force.shape[0] == 0:
        return jnp.zeros(len(ids), dt)
    site = _np(m.sensor_objid)[ids]
    body = _np(m.site_bodyid)[site]
    b1, b2 = contact_bodies(m, c).T
    fn = contact_force(m, d)[:, 0]  # (ncon,)
    on1 = b1[None] == jnp.asarray(body)[:, None]  # (k, ncon)
    on2 = b2[None] == jnp.asarray(body)[:, None]
    use = (c.efc_address >= 0)[None] & (on1 | on2) & (fn > 0)[None]
    ray = math.normalize(c.frame[:, 0] * fn[:, None])  # (ncon, 3)
    ray = jnp.where(on2[..., None], -ray[None], ray[None])  # (k, ncon, 3)
    out = jnp.zeros(len(ids), dt)
    st = _np(m.site_type)[site]
    for t in dict.fromkeys(st.tolist()):
        sel = np.nonzero(st == t)[0]
        s = site[sel]
        hit = ray_hits(t, d.site_xpos[s][:, None], d.site_xmat[s][:, None],
                       m.site_size[s][:, None], c.pos[None], ray[sel])
        val = jnp.sum(jnp.where(use[sel] & hit, fn[None], 0.0), -1)
        out = out.at[sel].set(val)
    return out


# --------------------------------------------------------------------- computation


def _frame_ref(m: Model, d: State, ids: np.ndarray):
    """Reference frames of frame sensors: (has_ref mask (static), pos, mat)."""
    rt, rid = _np(m.sensor_reftype)[ids], _np(m.sensor_refid)[ids]
    has = rid >= 0
    if not has.any():
        return has, None, None, rt, rid
    rt_ = np.where(has, rt, ObjType.XBODY)
    rid_ = np.where(has, rid, 0)
    pos, mat = _xpos_xmat(d, rt_, rid_)
    return has, pos, mat, rt_, rid_


def _inside_site(m: Model, d: State, objtype: np.ndarray, objid: np.ndarray,
                 site: np.ndarray) -> jax.Array:
    """1 where the object's position lies inside the site's volume (mju_insideGeom)."""
    xpos, _ = _xpos_xmat(d, objtype, objid)
    body = (objtype == ObjType.BODY) & (objid > 0)
    if body.any():  # a massless body with mass below it: its subtree's com (as MuJoCo)
        use = (jnp.asarray(body) & (m.body_mass[objid] < MINVAL)
               & (m.body_subtreemass[objid] >= MINVAL))
        xpos = jnp.where(use[:, None], d.subtree_com[objid], xpos)
    return inside(m, d, site, xpos).astype(d.qpos.dtype)


def _cam_project(m: Model, d: State, site: np.ndarray, cam: np.ndarray) -> jax.Array:
    """Pixel coordinates (k, 2) of sites seen by cameras (engine_sensor.c: cam_project)."""
    res = jnp.asarray(np.asarray(m.cam_resolution).reshape(-1, 2)[cam], d.qpos.dtype)
    ss = m.cam_sensorsize[cam]
    has_sensor = (ss[:, 0] != 0) & (ss[:, 1] != 0)
    safe_ss = jnp.where(ss == 0, 1.0, ss)
    # MuJoCo stores intrinsic and sensorsize as float and divides them in float
    f32 = jnp.float32
    f_sensor = ((m.cam_intrinsic[cam][:, :2].astype(f32) / safe_ss.astype(f32))
                * res.astype(f32)).astype(d.qpos.dtype)
    f_fovy = (0.5 / jnp.tan(m.cam_fovy[cam] * np.pi / 360.0) * res[:, 1])[:, None]
    f = jnp.where(has_sensor[:, None], f_sensor, jnp.broadcast_to(f_fovy, f_sensor.shape))
    rel = d.site_xpos[site] - d.cam_xpos[cam]
    p = jnp.einsum("kji,kj->ki", d.cam_xmat[cam], rel)
    z = p[:, 2]
    den = jnp.where(jnp.abs(z) < MINVAL, jnp.where(z < 0, -MINVAL, MINVAL), z)
    return jnp.stack([-f[:, 0] * (p[:, 0] / den) + 0.5 * res[:, 0],
                      f[:, 1] * (p[:, 1] / den) + 0.5 * res[:, 1]], axis=1)


def _actuator_rows(m: Model, x: jax.Array, objid: np.ndarray) -> jax.Array:
    """(k, outnum) output rows of the actuators `objid` (all with the same outnum)."""
    n = int(_np(m.actuator_outnum)[objid[0]])
    return x[_np(m.actuator_outadr)[objid][:, None] + np.arange(n)]


def _compute(m: Model, d: State, typ: int, ids: np.ndarray) -> jax.Array:
    """Values (k, dim) of the sensors `ids`, all of type `typ`."""
    dt = d.qpos.dtype
    objid = _np(m.sensor_objid)[ids]
    objtype = _np(m.sensor_objtype)[ids]
    k = len(ids)
    col = lambda x: jnp.asarray(x, dt).reshape(k, -1)  # noqa: E731

    # ---- position
    if typ == S.MAGNETOMETER:
        return jnp.einsum("kji,j->ki", d.site_xmat[objid], m.opt.magnetic)
    if typ == S.JOINTPOS:
        return col(d.qpos[_np(m.jnt_qposadr)[objid]])
    if typ == S.TENDONPOS:
        return col(d.ten_length[objid])
    if typ == S.ACTUATORPOS:
        return _actuator_rows(m, d.actuator_length, objid)
    if typ == S.BALLQUAT:
        return math.normalize_quat(d.qpos[_np(m.jnt_qposadr)[objid][:, None] + np.arange(4)])
    if typ in (S.JOINTLIMITPOS, S.TENDONLIMITPOS, S.JOINTLIMITVEL, S.TENDONLIMITVEL,
               S.JOINTLIMITFRC, S.TENDONLIMITFRC):
        return col(_limit_sensor(m, d, typ, objid))
    if typ in (S.FRAMEPOS, S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS):
        pos, mat = _xpos_xmat(d, objtype, objid)
        val = pos if typ == S.FRAMEPOS else mat[:, :, typ - S.FRAMEXAXIS]
        has, rpos, rmat, *_ = _frame_ref(m, d, ids)
        if rpos is None:
            return val
        rel = val - rpos if typ == S.FRAMEPOS else val
        return jnp.where(jnp.asarray(has)[:, None], jnp.einsum("kji,kj->ki", rmat, rel), val)
    if typ == S.FRAMEQUAT:
        q = _xquat(m, d, objtype, objid)
        has, _, _, rt, rid = _frame_ref(m, d, ids)
        if not has.any():
            return q
        rq = _xquat(m, d, rt, rid)
        return jnp.where(jnp.asarray(has)[:, None], math.quat_mul(math.quat_neg(rq), q), q)
    if typ == S.SUBTREECOM:
        return d.subtree_com[objid]
    if typ == S.E_POTENTIAL:
        return jnp.broadcast_to(energy_pos(m, d), (k, 1))
    if typ == S.E_KINETIC:
        return jnp.broadcast_to(energy_vel(m, d), (k, 1))
    if typ == S.CLOCK:
        return jnp.broadcast_to(d.time.astype(dt), (k, 1))
    if typ == S.INSIDESITE:
        return col(_inside_site(m, d, objtype, objid, _np(m.sensor_refid)[ids]))
    if typ == S.CAMPROJECTION:
        return _cam_project(m, d, objid, _np(m.sensor_refid)[ids])
    if typ in (S.GEOMDIST, S.GEOMNORMAL, S.GEOMFROMTO):
        return jnp.stack([distance_sensor(m, d, int(i)) for i in ids])

    # ---- velocity
    if typ in (S.VELOCIMETER, S.GYRO):
        vel = object_velocity(m, d, np.full(k, ObjType.SITE), objid, local=True)
        return vel[:, 3:] if typ == S.VELOCIMETER else vel[:, :3]
    if typ == S.JOINTVEL:
        return col(d.qvel[_np(m.jnt_dofadr)[objid]])
    if typ == S.TENDONVEL:
        return col(d.ten_velocity[objid])
    if typ == S.ACTUATORVEL:
        return _actuator_rows(m, d.actuator_velocity, objid)
    if typ == S.BALLANGVEL:
        return d.qvel[_np(m.jnt_dofadr)[objid][:, None] + np.arange(3)]
    if typ in (S.FRAMELINVEL, S.FRAMEANGVEL):
        vel = object_velocity(m, d, objtype, objid, local=False)
        has, rpos, rmat, rt, rid = _frame_ref(m, d, ids)
        if rpos is not None:
            pos, _ = _xpos_xmat(d, objtype, objid)
            vref = object_velocity(m, d, rt, rid, local=False)
            rel = vel - vref
            rel = rel.at[:, 3:].add(jnp.cross(pos - rpos, vref[:, :3]))
            rel = jnp.concatenate([jnp.einsum("kji,kj->ki", rmat, rel[:, :3]),
                                   jnp.einsum("kji,kj->ki", rmat, rel[:, 3:])], -1)
            vel = jnp.where(jnp.asarray(has)[:, None], rel, vel)
        return vel[:, 3:] if typ == S.FRAMELINVEL else vel[:, :3]
    if typ in (S.SUBTREELINVEL, S.SUBTREEANGMOM):
        linvel, angmom = subtree_vel(m, d)
        return (linvel if typ == S.SUBTREELINVEL else angmom)[objid]

    # ---- acceleration
    if typ == S.TOUCH:
        return col(_touch(m, d, ids))
    if typ == S.ACCELEROMETER:
        return object_acceleration(m, d, np.full(k, ObjType.SITE), objid, local=True)[:, 3:]
    if typ in (S.FORCE, S.TORQUE):
        body = _np(m.site_bodyid)[objid]
        com = d.subtree_com[_np(m.body_rootid)[body]]
        f = _transform_force(d.cfrc_int[body], d.site_xpos[objid], com, d.site_xmat[objid])
        return f[:, 3:] if typ == S.FORCE else f[:, :3]
    if typ == S.ACTUATORFRC:
        return _actuator_rows(m, d.actuator_force, objid)
    if typ == S.JOINTACTFRC:
        return col(d.qfrc_actuator[_np(m.jnt_dofadr)[objid]])
    if typ == S.TENDONACTFRC:
        trn = _np(m.actuator_trntype)
        tid = (_np(m.actuator_trnid).reshape(-1, 2)[:, 0] if m.nactuator
               else np.zeros(0, np.int64))
        sel = (trn[None] == TrnType.TENDON) & (tid[None] == objid[:, None])  # (k, nactuator)
        if not m.nactuator:
            return col(jnp.zeros(k, dt))
        return col(jnp.asarray(sel, dt) @ d.actuator_force[_np(m.actuator_outadr)])
    if typ in (S.FRAMELINACC, S.FRAMEANGACC):
        acc = object_acceleration(m, d, objtype, objid, local=False)
        return acc[:, 3:] if typ == S.FRAMELINACC else acc[:, :3]
    raise NotImplementedError(f"{S(typ).name.lower()} sensors are not supported by jaxsim")


def _per_sensor(m: Model, d: State, typ: int, i: int) -> jax.Array:
    """Values (dim,) of one sensor of a type whose sensors differ in size."""
    if typ == S.RANGEFINDER:
        from jaxsim.raycast import rangefinder

        return rangefinder(m, d, i)
    if typ == S.TACTILE:
        return tactile(m, d, i)
    raise NotImplementedError(f"{S(typ).name.lower()} sensors are not supported by jaxsim")


def _cutoff(m: Model, ids: np.ndarray, val: jax.Array) -> jax.Array:
    """MuJoCo's apply_cutoff: clamp real data to [-cutoff, cutoff], positive data above."""
    dtype = _np(m.sensor_datatype)[ids]
    # the cutoff of a fromto sensor bounds its search, not its values
    real = (dtype == DataType.REAL) & (_np(m.sensor_type)[ids] != S.GEOMFROMTO)
    pos = dtype == DataType.POSITIVE
    if not (real.any() or pos.any()):
        return val
    c = m.sensor_cutoff[ids][:, None]
    on = c > 0
    clipped = jnp.where(jnp.asarray(real)[:, None], jnp.clip(val, -c, c),
                        jnp.where(jnp.asarray(pos)[:, None], jnp.minimum(c, val), val))
    return jnp.where(on, clipped, val)


def _write(m: Model, d: State, data: jax.Array, ids: np.ndarray) -> jax.Array:
    """`data` (sensordata) with the sensors `ids` (supported types) freshly computed."""
    adr, dim = _np(m.sensor_adr), _np(m.sensor_dim)
    groups = [(t, g[np.isin(g, ids)]) for t, g in _groups(m, SUPPORTED)]
    for typ, g in groups:
        if not len(g):
            continue
        if typ == S.CONTACT:  # one array per sensor (their sizes differ); no cutoff
            for i, val in zip(g, contact_sensors(m, d, g), strict=True):
                data = data.at[adr[i] + np.arange(dim[i])].set(val.astype(data.dtype))
            continue
        if typ in PER_SENSOR_TYPES:
            for i in g:
                val = _per_sensor(m, d, typ, int(i)).astype(data.dtype)
                val = _cutoff(m, np.array([i]), val[None])[0]
                data = data.at[adr[i] + np.arange(dim[i])].set(val)
            continue
        val = _cutoff(m, g, _compute(m, d, typ, g).astype(data.dtype))
        n = int(dim[g[0]])
        data = data.at[adr[g][:, None] + np.arange(n)].set(val.reshape(len(g), n))
    return data


def compute(m: Model, d: State, ids: np.ndarray) -> jax.Array:
    """(len(ids), dim) fresh values of sensors of one dimension (mj_computeSensor), from
    the fields of `d` (history buffers are not read); unsupported sensors give NaN."""
    ids = np.asarray(ids)
    adr, dim = _np(m.sensor_adr), _np(m.sensor_dim)
    data = _write(m, d, jnp.full(m.nsensordata, jnp.nan, d.sensordata.dtype), ids)
    return data[adr[ids][:, None] + np.arange(int(dim[ids[0]]))]


def _stage(m: Model, d: State, stage: int) -> State:
    """Computes the sensors whose `sensor_needstage` is `stage`; sensors with a history
    buffer then read it as MuJoCo does (delays, sampling intervals)."""
    if not m.nsensor or m.opt.disableflags & DisableBit.SENSOR:
        return d
    bad = [i for i, _ in unsupported(m)]
    here = np.nonzero(_np(m.sensor_needstage) == stage)[0]
    if not len(here):
        return d
    nan_ids = [i for i in bad if i in here]
    data = d.sensordata
    adr, dim = _np(m.sensor_adr), _np(m.sensor_dim)
    if nan_ids:
        slots = np.concatenate([adr[i] + np.arange(dim[i]) for i in nan_ids])
        data = data.at[slots].set(jnp.nan)
    data = _write(m, d, data, here[~np.isin(here, bad)])
    buffered = _np(m.sensor_history).reshape(-1, 2)[here, 0] > 0
    if buffered.any():
        data = history.sensor_values(m, d, data, here[buffered])
    return d.replace(sensordata=data)


def sensor_pos(m: Model, d: State) -> State:
    """Position-dependent sensors. MuJoCo: mj_sensorPos."""
    return _stage(m, d, Stage.POS)


def sensor_vel(m: Model, d: State) -> State:
    """Velocity-dependent sensors. MuJoCo: mj_sensorVel."""
    return _stage(m, d, Stage.VEL)


def sensor_acc(m: Model, d: State) -> State:
    """Acceleration- and force-dependent sensors. MuJoCo: mj_sensorAcc.

    Needs cacc / cfrc_int (rne_post_constraint) when an accelerometer, force, torque or
    frame acceleration sensor is present; see `needs_rne_post`.
    """
    return _stage(m, d, Stage.ACC)


def needs_rne_post(m: Model) -> bool:
    """Whether the acceleration-stage sensors read cacc / cfrc_int (static)."""
    if not m.nsensor or m.opt.disableflags & DisableBit.SENSOR:
        return False
    return bool(set(_np(m.sensor_type).tolist()) & RNE_POST_TYPES)


__all__ = ["compute", "energy_pos", "energy_vel", "needs_rne_post", "object_acceleration",
           "object_velocity", "ray_hits", "sensor_acc", "sensor_pos", "sensor_vel",
           "subtree_vel", "unsupported"]
