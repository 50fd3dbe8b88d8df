"""Model constants derived from masses, inertias and geometry at qpos0. MuJoCo: mj_setConst.

`set_const(m) -> m` is traceable (jit, vmap, grad pass through it), so randomising or
differentiating a mass or a length can refresh the derived quantities that the dynamics
read (`dof_invweight0` scales constraint regularisation, `actuator_acc0` and `dof_M0`
enter the compiler's defaults, ...). The MJCF compiler runs the same code once per model in
float64 on numpy (`jaxsim.hostnp.host_backend`), which avoids compiling each JAX primitive.

Not recomputed here: flex quantities, sleep policies, sameframe flags, tree ids and the
other integer structure (static, the compiler's job), and actuator_lengthrange (mj_setLengthRange).
"""

from __future__ import annotations

import numpy as np

from jaxsim import math, smooth
from jaxsim.hostnp import jax, jnp  # numpy inside hostnp.host_backend(), see there
from jaxsim.struct import shape_of
from jaxsim.types import (
    Contact,
    EqType,
    GainType,
    GeomType,
    JointType,
    Model,
    ObjType,
    State,
)


def blank_state(m: Model, qpos: jax.Array | None = None) -> State:
    """A State of zeros with the model's shapes at qpos0 (or `qpos`), mocap at body poses."""
    dt = m.body_pos.dtype
    sizes = dict(m.sizes(), ncon=0, nefc=0)
    fields = {}
    for name, info in State.field_info().items():
        if name == "contact":
            fields[name] = Contact.zeros(0, dt)
            continue
        shp = shape_of(info["shape"], sizes)
        kind = jnp.int32 if name in ("ten_wrapadr", "ten_wrapnum", "wrap_obj", "ncon") else dt
        if name == "overflow":
            kind = bool
        fields[name] = jnp.zeros(shp, kind)
    fields["qpos"] = m.qpos0 if qpos is None else qpos
    mocap = np.asarray(m.body_mocapid)
    if m.nmocap:
        bodies = np.nonzero(mocap >= 0)[0]
        bodies = bodies[np.argsort(mocap[bodies])]
        fields["mocap_pos"] = m.body_pos[bodies]
        fields["mocap_quat"] = m.body_quat[bodies]
    fields["eq_active"] = jnp.asarray(m.eq_active0, dt)
    return State(**fields)


def _position(m: Model, d: State) -> State:
    d = smooth.kinematics(m, d)
    d = smooth.com_pos(m, d)
    return d


def set_const(m: Model) -> Model:
    """Recomputes the derived constants of `m` (mj_setConst, without lengthrange).

    Fills body_subtreemass, dof_M0, body_invweight0, dof_invweight0, tendon_length0,
    tendon_invweight0, actuator_length0, actuator_acc0, eq_data of connect/weld constraints,
    cam/light pos0/poscom0/mat0/dir0, dampratio-based actuator damping (biasprm[2] > 0 on a
    position-like actuator), stat_* (center, extent, meansize, meanmass, meaninertia),
    dof_length, and tendon_lengthspring where it is (-1, -1).

    The compiler must apply user `<statistic>` overrides after this call, as MuJoCo does.
    """
    dt = m.body_pos.dtype
    nv, nbody = m.nv, m.nbody
    parent = np.asarray(m.body_parentid)
    from jaxsim import scan

    # ----- fixed quantities
    subtreemass = scan.subtree_sum(parent, m.body_mass)
    m = m.replace(body_subtreemass=subtreemass)

    # ----- at qpos0
    d = _position(m, blank_state(m))
    d = smooth.tendon(m, d)
    d = smooth.crb(m, d)
    dof_M0 = jnp.diagonal(d.qM) if nv else jnp.zeros(0, dt)
    d = smooth.tendon_armature_m(m, d)
    d = smooth.factor_m(m, d)
    d = smooth.transmission(m, d)

    if nv:
        minv = smooth.solve_m(m, d, jnp.eye(nv, dtype=dt))
    else:
        minv = jnp.zeros((0, 0), dt)

    # body_invweight0: mean diagonal of J M^-1 J' for the body com, per translation/rotation
    weld = np.asarray(m.body_weldid)
    dofnum = np.asarray(m.body_dofnum)
    simple = np.asarray(m.body_simple)
    bodies = np.arange(nbody)
    invw = jnp.zeros((nbody, 2), dt)
    if nv:
        jp, jr = smooth.jac(m, d, d.xipos, bodies)
        A_t = jnp.einsum("biv,vw,biw->b", jp, minv, jp) / 3
        A_r = jnp.einsum("biv,vw,biw->b", jr, minv, jr) / 3
        invw = jnp.stack([A_t, A_r], -1)
    inv_mass = 1.0 / jnp.maximum(math.MINVAL, m.body_mass)
    invw = jnp.where(jnp.asarray(simple == 2)[:, None], jnp.stack([inv_mass, 0 * inv_mass], -1), invw)
    invw = jnp.where(jnp.asarray(dofnum[weld] == 0)[:, None], 0.0, invw)
    invw = invw.at[0].set(0.0)

    # dof_invweight0: per joint, mean diagonal of M^-1 over its translations / rotations
    dof_invw = jnp.zeros(nv, dt)
    if nv:
        dg = jnp.diagonal(minv)
        jtype = np.asarray(m.jnt_type)
        dofadr = np.asarray(m.jnt_dofadr)
        jb = np.asarray(m.jnt_bodyid)
        for t, groups in (
            (JointType.FREE, ((0, 3), (3, 6))),
            (JointType.BALL, ((0, 3),)),
            (JointType.HINGE, ((0, 1),)),
            (JointType.SLIDE, ((0, 1),)),
        ):
            ids = np.nonzero(jtype == t)[0]
            if not len(ids):
                continue
            for lo, hi in groups:
                cols = dofadr[ids][:, None] + np.arange(lo, hi)
                val = jnp.mean(dg[cols], axis=1, keepdims=True)
                val = jnp.broadcast_to(val, cols.shape)
                dof_invw = dof_invw.at[cols].set(val)
        s2 = np.nonzero(simple[jb] == 2)[0]
        if len(s2):
            # MuJoCo sets only the first dof of such joints (all are slides on axes)
            dof_invw = dof_invw.at[dofadr[s2]].set(inv_mass[jb[s2]])

    # tendons and actuators
    ten_invw = jnp.zeros(m.ntendon, dt)
    acc0 = jnp.zeros(m.nout, dt)
    if nv and m.ntendon:
        ten_invw = jnp.einsum("tv,vw,tw->t", d.ten_J, minv, d.ten_J)
    if nv and m.nout:
        acc0 = math.norm(d.actuator_moment @ minv)

    # flex edges: rest lengths; inverse weights (simple point masses: MuJoCo's shortcut)
    fl_len0, fl_invw = m.flexedge_length0, m.flexedge_invweight0
    if m.nflexedge:
        from jaxsim import flex

        fl_len0, fl_J = flex.edges(m, d)
        fid = np.repeat(np.arange(m.nflex), np.asarray(m.flex_edgenum))
        b1, b2 = np.asarray(m.flex_vertbodyid)[flex.edge_vertices(m)].T
        general = jnp.einsum("ev,vw,ew->e", fl_J, minv, fl_J) if nv else jnp.zeros_like(fl_len0)
        # MuJoCo computes edge Jacobians only for flexes with an edge equality, stiffness
        # or damping, or elasticity damping; the others keep a zero Jacobian (and so a zero inverse weight)
        needj = ((np.asarray(m.flex_edgeequality) == 1)
                 | (np.asarray(m.flex_edgestiffness) != 0)
                 | (np.asarray(m.flex_damping) != 0)
                 | (np.asarray(m.flex_edgedamping) != 0))[fid]
        general = jnp.where(jnp.asarray(needj), general, 0.0)
        quick = (inv_mass[b1] + inv_mass[b2]) / 2
        fl_invw = jnp.where(jnp.asarray((simple[b1] == 2) & (simple[b2] == 2)), quick, general)
        fl_invw = jnp.where(jnp.asarray(np.asarray(m.flexedge_rigid, bool)), 0.0, fl_invw)

    m = m.replace(
        flexedge_length0=fl_len0,
        flexedge_invweight0=fl_invw,
        dof_M0=dof_M0,
        body_invweight0=invw,
        dof_invweight0=dof_invw,
        tendon_length0=d.ten_length if m.ntendon else m.tendon_length0,
        tendon_invweight0=ten_invw,
        actuator_length0=d.actuator_length if m.nout else m.actuator_length0,
        actuator_acc0=acc0,
    )
    m = _eq_data(m, d)
    m = _camlight0(m, d)
    m = _dampratio(m, d, minv)
    m = _stat(m, d)
    m = _spring(m)
    return m


def _eq_data(m: Model, d: State) -> Model:
    """Fills the body-frame anchors of connect and weld constraints at qpos0."""
    if not m.neq:
        return m
    eq_type = np.asarray(m.eq_type)
    objtype = np.asarray(m.eq_objtype)
    id1, id2 = np.asarray(m.eq_obj1id), np.asarray(m.eq_obj2id)
    data = m.eq_data
    c = np.nonzero((eq_type == EqType.CONNECT) & (objtype == ObjType.BODY))[0]
    if len(c):
        a, b = id1[c], id2[c]
        pos = d.xpos[a] + jnp.einsum("kij,kj->ki", d.xmat[a], data[c, 0:3])
        loc = jnp.einsum("kji,kj->ki", d.xmat[b], pos - d.xpos[b])
        data = data.at[c, 3:6].set(loc)
    c = np.nonzero((eq_type == EqType.CONNECT) & (objtype == ObjType.SITE))[0]
    if len(c):
        data = data.at[c].set(0.0)
    w = np.nonzero((eq_type == EqType.WELD) & (objtype == ObjType.BODY))[0]
    if len(w):
        a, b = id1[w], id2[w]
        q = data[w, 6:10]
        user = jnp.any(q != 0, axis=-1, keepdims=True)
        pos = d.xpos[b] + jnp.einsum("kij,kj->ki", d.xmat[b], data[w, 0:3])
        loc = jnp.einsum("kji,kj->ki", d.xmat[a], pos - d.xpos[a])
        rel = math.quat_mul(math.quat_neg(d.xquat[a]), d.xquat[b])
        new = jnp.concatenate([data[w, 0:3], loc, rel], -1)
        old = jnp.concatenate([data[w, 0:6], math.normalize_quat(q)], -1)
        data = data.at[w, 0:10].set(jnp.where(user, old, new))
        # MuJoCo 4.0 flags welds whose relative pose it computed at qpos0
        data = data.at[w, 11].set(jnp.where(user[:, 0], data[w, 11], 1.0))
    return m.replace(eq_data=data)


def _camlight0(m: Model, d: State) -> Model:
    """Camera and light offsets at qpos0 used by the tracking modes."""
    if m.ncam:
        body = np.asarray(m.cam_bodyid)
        tgt = np.asarray(m.cam_targetbodyid)
        ref = np.where(tgt >= 0, tgt, body)
        m = m.replace(
            cam_pos0=d.cam_xpos - d.xpos[body],
            cam_poscom0=d.cam_xpos - d.subtree_com[ref],
            cam_mat0=d.cam_xmat.reshape(-1, 9),
        )
    if m.nlight:
        body = np.asarray(m.light_bodyid)
        tgt = np.asarray(m.light_targetbodyid)
        ref = np.where(tgt >= 0, tgt, body)
        xpos = d.xpos[body] + jnp.einsum("kij,kj->ki", d.xmat[body], m.light_pos)
        xdir = math.normalize(math.rot_vec_quat(m.light_dir, d.xquat[body]))
        m = m.replace(
            light_pos0=xpos - d.xpos[body],
            light_poscom0=xpos - d.subtree_com[ref],
            light_dir0=xdir,
        )
    return m


def _dampratio(m: Model, d: State, minv: jax.Array) -> Model:
    """Turns biasprm[2] > 0 of position-like actuators (a dampratio) into -damping.

    The mass is the inertia reflected through the transmission, 1 / (t M^-1 t'), as MuJoCo
    4.0 computes it (older releases summed dof_M0 / t^2 instead); for an actuator with
    several outputs (SO3), the harmonic mean over its output rows.
    """
    if not m.nactuator or not m.nv:
        return m
    gain, bias = m.actuator_gainprm, m.actuator_biasprm
    is_pid = jnp.asarray(np.asarray(m.actuator_gaintype) == GainType.PID)
    poslike = is_pid | (gain[:, 0] == -bias[:, 1])
    apply = poslike & (bias[:, 2] > 0)
    t = d.actuator_moment
    tmt = jnp.einsum("uv,vw,uw->u", t, minv, t)
    tmt = jnp.zeros(m.nactuator, tmt.dtype).at[m.out2act()].add(tmt)
    outnum = jnp.asarray(np.asarray(m.actuator_outnum, np.float64), tmt.dtype)
    mass = outnum / jnp.maximum(tmt, math.MINVAL)
    kp = jnp.where(is_pid, -bias[:, 1], gain[:, 0])
    damping = bias[:, 2] * 2 * math.safe_sqrt(kp * mass)
    return m.replace(actuator_biasprm=bias.at[:, 2].set(jnp.where(apply, -damping, bias[:, 2])))


def _stat(m: Model, d: State) -> Model:
    """Model statistics and dof_length (setStat)."""
    dt = m.body_pos.dtype
    pts = [d.xpos[1:], d.xipos[1:], d.xanchor, d.site_xpos]
    rad = [jnp.zeros(len(p), dt) for p in pts]
    if m.ngeom:
        gtype = np.asarray(m.geom_type)
        size = m.geom_size
        plane = jnp.where(
            (size[:, 0] != 0) | (size[:, 1] != 0),
            jnp.maximum(size[:, 0], size[:, 1]) * 0.1, 0.01,
        )
        rb = jnp.where(jnp.asarray(gtype == GeomType.PLANE), plane, 0.0)
        if m.nhfield:
            # dataid of non-hfield geoms (meshes, -1) is discarded below; keep it in range
            hid = np.clip(np.asarray(m.geom_dataid), 0, m.nhfield - 1)
            hmax = jnp.max(m.hfield_size, axis=1)[hid] * 0.1
            rb = jnp.where(jnp.asarray(gtype == GeomType.HFIELD), hmax, rb)
        rb = jnp.where(m.geom_rbound > 0, m.geom_rbound, rb)
        pts.append(d.geom_xpos)
        rad.append(rb)
    pts = jnp.concatenate(pts, 0)
    rad = jnp.concatenate(rad, 0)
    big = jnp.asarray(1e10, dt)
    xmin = jnp.minimum(jnp.min(pts - rad[:, None], axis=0, initial=big), big)
    xmax = jnp.maximum(jnp.max(pts + rad[:, None], axis=0, initial=-big), -big)
    center = 0.5 * (xmin + xmax)
    extent = jnp.where(
        xmax[0] > xmin[0], jnp.maximum(1e-5, jnp.max(xmax - xmin)), m.stat_extent
    )

    # body size: largest com-joint distance (own and child joints), then geom extents
    body = jnp.zeros(m.nbody, dt)
    if m.njnt:
        jb = np.asarray(m.jnt_bodyid)
        pb = np.asarray(m.body_parentid)[jb]
        body = body.at[jb].max(math.norm(d.xipos[jb] - d.xanchor))
        body = body.at[pb].max(math.norm(d.xipos[pb] - d.xanchor))
    body = body.at[0].set(0.0)
    if m.ngeom:
        gb = np.asarray(m.geom_bodyid)
        val = m.geom_rbound + math.norm(d.xipos[gb] - d.geom_xpos)
        val = jnp.where((m.geom_rbound > 0) & jnp.asarray(gb > 0), val, 0.0)
        body = body.at[gb].max(val)
    meansize, meanmass = m.stat_meansize, m.stat_meanmass
    if m.nbody > 1:
        body = body.at[1:].set(jnp.maximum(body[1:], 1e-5))
        meansize = jnp.sum(body[1:] / (m.nbody - 1))
        meanmass = jnp.sum(m.body_mass[1:]) / (m.nbody - 1)
    extent = jnp.maximum(extent, 2 * meansize)

    dof_length = jnp.ones(m.nv, dt)
    if m.nv:
        jid = np.asarray(m.dof_jntid)
        jtype = np.asarray(m.jnt_type)[jid]
        off = np.arange(m.nv) - np.asarray(m.jnt_dofadr)[jid]
        rot = (jtype == JointType.BALL) | (jtype == JointType.HINGE)
        rot |= (jtype == JointType.FREE) & (off >= 3)
        dof_length = jnp.where(jnp.asarray(rot), body[np.asarray(m.dof_bodyid)], 1.0)
    meaninertia = jnp.mean(jnp.diagonal(d.qM)) if m.nv else m.stat_meaninertia

    return m.replace(
        stat_center=center, stat_extent=extent, stat_meansize=meansize,
        stat_meanmass=meanmass, stat_meaninertia=meaninertia, dof_length=dof_length,
    )


def _spring(m: Model) -> Model:
    """Tendon spring lengths marked (-1, -1) become the length at qpos_spring (setSpring)."""
    if not m.ntendon:
        return m
    d = _position(m, blank_state(m, m.qpos_spring))
    d = smooth.tendon(m, d)
    unset = jnp.all(m.tendon_lengthspring == -1, axis=-1, keepdims=True)
    ls = jnp.where(unset, d.ten_length[:, None], m.tendon_lengthspring)
    return m.replace(tendon_lengthspring=ls)
