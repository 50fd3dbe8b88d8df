"""Numpy re-implementation of MuJoCo 4.0's SO(3) <orientation> actuator, checked against
the installed mujoco package.

Kinematic inputs (qpos, xquat, site_quat, site_xmat, site Jacobians, dof tree) are read
from MuJoCo; everything actuator-specific is recomputed here:
  actuator_length (3 per SO3 actuator), dense moment rows, actuator_velocity,
  actuator_force (incl. integrator/actearly, forcerange norm clamp), qfrc_actuator,
  act_dot, and the act re-anchoring done by mj_step.

Usage: /work/venv/bin/python docs/design/mimo/so3_check.py
"""
from __future__ import annotations

import os
import sys

import mujoco as mj
import numpy as np

MINVAL = 1e-15
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = [
    "/work/shared/corpus/mujoco/engine/testdata/actuation/orientation.xml",
    os.path.join(HERE, "so3_site.xml"),
]

TRN_SO3 = int(mj.mjtTrn.mjTRN_SO3)
GAIN_SO3 = int(mj.mjtGain.mjGAIN_SO3)
DYN_NONE = int(mj.mjtDyn.mjDYN_NONE)
DYN_INT = int(mj.mjtDyn.mjDYN_INTEGRATOR)
CHART_QUAT = int(mj.mjtCtrlChart.mjCHART_QUAT)


# ---------------------------------------------------------------- quaternion helpers
def qmul(a, b):
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1*w2 - x1*x2 - y1*y2 - z1*z2,
                     w1*x2 + x1*w2 + y1*z2 - z1*y2,
                     w1*y2 - x1*z2 + y1*w2 + z1*x2,
                     w1*z2 + x1*y2 - y1*x2 + z1*w2])


def qconj(q):
    return np.array([q[0], -q[1], -q[2], -q[3]])


def qnormalize(q):
    n = np.linalg.norm(q)
    if n < MINVAL:
        return np.array([1.0, 0, 0, 0])
    return q / n


def quat2vel(q):
    """log map: q -> axis*angle with angle in (-pi, pi] (mju_quat2Vel, dt=1)."""
    v = np.array(q[1:4], float)
    s = np.linalg.norm(v)
    axis = v / s if s >= MINVAL else np.array([1.0, 0, 0])
    ang = 2 * np.arctan2(s, q[0])
    if ang > np.pi:
        ang -= 2 * np.pi
    return axis * ang


def subquat(qa, qb):
    """log(qb^-1 qa) (mju_subQuat)."""
    return quat2vel(qmul(qconj(qb), qa))


def expmap2quat(v):
    ang = np.linalg.norm(v)
    if ang < MINVAL:
        return np.array([1.0, 0, 0, 0])
    ax = v / ang
    return np.concatenate([[np.cos(ang / 2)], ax * np.sin(ang / 2)])


# ---------------------------------------------------------------- transmission
def common_chain_cols(m, b_site, b_ref):
    """dofs of the common ancestral dof chain (cleared in site+refsite Jacobians)."""
    b0, b1 = m.body_weldid[b_site], m.body_weldid[b_ref]
    d0 = m.body_dofadr[b0] + m.body_dofnum[b0] - 1
    d1 = m.body_dofadr[b1] + m.body_dofnum[b1] - 1
    common = -1
    if d0 >= 0 and d1 >= 0:
        while d0 != d1:
            if d0 < d1:
                d1 = m.dof_parentid[d1]
            else:
                d0 = m.dof_parentid[d0]
            if d0 == -1 or d1 == -1:
                break
        if d0 == d1:
            common = d0
    cols = []
    while common >= 0:
        cols.append(common)
        common = m.dof_parentid[common]
    return cols


def site_world_quat(m, d, sid):
    # MuJoCo 4.0: the site's world quaternion = xquat(body) * site_quat (verified below;
    # the 3.12 snapshot multiplied in the opposite order)
    return qmul(d.xquat[m.site_bodyid[sid]], m.site_quat[sid])


def so3_transmission(m, d, i):
    """(length (3,), moment (3, nv)) of SO3 actuator i."""
    nv = m.nv
    jid, ref = m.actuator_trnid[i]
    if ref == -1:  # ball joint
        q = qnormalize(d.qpos[m.jnt_qposadr[jid]:m.jnt_qposadr[jid] + 4].copy())
        length = quat2vel(q)
        mom = np.zeros((3, nv))
        for k in range(3):
            mom[k, m.jnt_dofadr[jid] + k] = 1.0
        return length, mom
    sid = jid
    q = site_world_quat(m, d, sid)
    qr = site_world_quat(m, d, ref)
    length = subquat(q, qr)  # log(qr^-1 q): site orientation relative to refsite
    jr, jrr = np.zeros((3, nv)), np.zeros((3, nv))
    mj.mj_jacSite(m, d, None, jr, sid)
    mj.mj_jacSite(m, d, None, jrr, ref)
    jrel = jr - jrr
    cols = common_chain_cols(m, m.site_bodyid[sid], m.site_bodyid[ref])
    jrel[:, cols] = 0
    R = d.site_xmat[sid].reshape(3, 3)
    mom = R.T @ jrel  # row k = (site axis k in world) . relative angular Jacobian
    return length, mom


# ---------------------------------------------------------------- force
def so3_force(m, d, i, ctrl, act, act_dot, length, vel):
    uadr = m.actuator_ctrladr[i]
    if m.actuator_ctrlspec[i] == CHART_QUAT:
        q_tgt = qnormalize(ctrl[uadr:uadr + 4].copy())
    else:
        if m.actuator_dyntype[i] == DYN_NONE:
            u = ctrl[uadr:uadr + 3]
        else:
            a = m.actuator_actadr[i]
            u = act[a:a + 3].copy()
            if m.actuator_actearly[i]:
                u = u + act_dot[a:a + 3] * m.opt.timestep
                if m.actuator_actlimited[i]:
                    u = np.clip(u, *m.actuator_actrange[i])
        q_tgt = expmap2quat(u)
    q_cur = expmap2quat(length)
    e = subquat(q_tgt, q_cur)  # log(q_cur^-1 q_tgt)
    kp = m.actuator_gainprm[i, 0]
    b = m.actuator_biasprm[i]
    f = kp * e + b[0] + b[2] * vel
    if m.actuator_forcelimited[i]:
        n = np.linalg.norm(f)
        hi = m.actuator_forcerange[i, 1]
        if n > hi:
            f = f * (hi / n)
    return f


def reimplement(m, d):
    """Returns dict of recomputed quantities for every SO3 actuator (plus qfrc of all)."""
    ctrl = d.ctrl.copy()
    lim = m.actuator_ctrllimited.astype(bool)
    ctrl[lim] = np.clip(ctrl[lim], m.actuator_ctrlrange[lim, 0], m.actuator_ctrlrange[lim, 1])
    length = np.zeros(m.nout)
    mom = np.zeros((m.nout, m.nv))
    force = d.actuator_force.copy()  # non-SO3 outputs taken from MuJoCo
    act_dot = np.zeros(m.na)
    for i in range(m.nactuator):
        o = m.actuator_outadr[i]
        if m.actuator_trntype[i] == TRN_SO3:
            length[o:o + 3], mom[o:o + 3] = so3_transmission(m, d, i)
        else:
            length[o] = d.actuator_length[o]  # non-SO3 rows taken from MuJoCo
            mom[o] = dense_moment(m, d)[o]
        if m.actuator_dyntype[i] == DYN_INT and m.actuator_gaintype[i] == GAIN_SO3:
            a = m.actuator_actadr[i]
            act_dot[a:a + 3] = ctrl[m.actuator_ctrladr[i]:m.actuator_ctrladr[i] + 3]
    vel = mom @ d.qvel
    for i in range(m.nactuator):
        if m.actuator_gaintype[i] != GAIN_SO3:
            continue
        o = m.actuator_outadr[i]
        force[o:o + 3] = so3_force(m, d, i, ctrl, d.act, act_dot, length[o:o + 3], vel[o:o + 3])
    qfrc = mom.T @ force
    return dict(length=length, moment=mom, velocity=vel, force=force, qfrc=qfrc,
                act_dot=act_dot)


def dense_moment(m, d):
    out = np.zeros((m.nout, m.nv))
    for r in range(m.nout):
        adr, nnz = d.moment_rowadr[r], d.moment_rownnz[r]
        out[r, d.moment_colind[adr:adr + nnz]] = d.actuator_moment[adr:adr + nnz]
    return out


def reanchor(m, act):
    """mj_step's projection of SO3 integrator act onto norm <= pi."""
    act = act.copy()
    for i in range(m.nactuator):
        if m.actuator_dyntype[i] == DYN_INT and m.actuator_gaintype[i] == GAIN_SO3:
            a = m.actuator_actadr[i]
            v = act[a:a + 3]
            ang = np.linalg.norm(v)
            if ang > np.pi:
                # C round(): half away from zero
                r = np.sign(ang / (2*np.pi)) * np.floor(abs(ang / (2*np.pi)) + 0.5)
                act[a:a + 3] = v * ((ang - 2 * np.pi * r) / ang)
    return act


def random_state(m, d, rng, big=False):
    mj.mj_resetData(m, d)
    for j in range(m.njnt):
        a = m.jnt_qposadr[j]
        t = m.jnt_type[j]
        if t == mj.mjtJoint.mjJNT_FREE:
            d.qpos[a:a + 3] = rng.normal(size=3)
            d.qpos[a + 3:a + 7] = qnormalize(rng.normal(size=4))
        elif t == mj.mjtJoint.mjJNT_BALL:
            # unnormalised on purpose: the transmission normalises
            d.qpos[a:a + 4] = rng.normal(size=4) * rng.uniform(0.5, 2)
        else:
            d.qpos[a] = rng.normal() * 2
    d.qvel[:] = rng.normal(size=m.nv) * 2
    d.ctrl[:] = rng.normal(size=m.nu) * (4 if big else 1.5)
    if m.na:
        d.act[:] = rng.normal(size=m.na) * (5 if big else 1.5)


def main():
    rng = np.random.default_rng(0)
    worst = {}
    ok = True
    for path in MODELS:
        m = mj.MjModel.from_xml_path(path)
        d = mj.MjData(m)
        for trial in range(40):
            random_state(m, d, rng, big=trial % 2 == 1)
            mj.mj_forward(m, d)
            r = reimplement(m, d)
            ref = dict(length=d.actuator_length, moment=dense_moment(m, d),
                       velocity=d.actuator_velocity, force=d.actuator_force,
                       qfrc=d.qfrc_actuator)
            if m.na:
                ref["act_dot"] = d.act_dot
            for k, v in ref.items():
                err = float(np.max(np.abs(r[k] - v))) if v.size else 0.0
                key = (os.path.basename(path), k)
                worst[key] = max(worst.get(key, 0.0), err)
            # mj_step: act update + re-anchor (integrator, Euler on act)
            if m.na:
                act0, adot = d.act.copy(), d.act_dot.copy()
                mj.mj_step(m, d)
                expect = act0 + adot * m.opt.timestep
                lim = np.repeat(m.actuator_actlimited, m.actuator_actnum).astype(bool)
                if lim.any():
                    rng_ = np.repeat(m.actuator_actrange, m.actuator_actnum, axis=0)
                    expect[lim] = np.clip(expect[lim], rng_[lim, 0], rng_[lim, 1])
                expect = reanchor(m, expect)
                key = (os.path.basename(path), "act_after_step")
                worst[key] = max(worst.get(key, 0.0), float(np.max(np.abs(expect - d.act))))
    for (f, k), e in sorted(worst.items()):
        flag = "OK " if e < 1e-12 else "BAD"
        ok &= e < 1e-12
        print(f"{flag} {f:18s} {k:15s} max|diff| = {e:.3e}")
    print("ALL MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
