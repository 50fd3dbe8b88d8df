"""Numpy re-implementation of MuJoCo 4.0 PID and DCMOTOR actuation (act_dot, actuator_force,
qfrc_actuator, next activation), checked against the installed mujoco on pid_dc.xml and
the corpus dcmotor.xml. Transmission (length/velocity/moment) is taken from MuJoCo.

Usage: /work/venv/bin/python docs/design/mimo/pid_dc_check.py
"""
import os
import sys

import mujoco as mj
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from so3_check import dense_moment  # noqa: E402

MINVAL = 1e-15
POS, VEL, FF, VOLT, NONE = 1, 2, 4, 8, 16
G_PID, G_DC = int(mj.mjtGain.mjGAIN_PID), int(mj.mjtGain.mjGAIN_DCMOTOR)
D_PID, D_DC = int(mj.mjtDyn.mjDYN_PID), int(mj.mjtDyn.mjDYN_DCMOTOR)
HERE = os.path.dirname(os.path.abspath(__file__))


def cround(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def wrap_period(m, i):
    """2*pi*|gear| for servo/PID on ball joint or rotational site+refsite, else 0."""
    gt, bt, dt = m.actuator_gaintype[i], m.actuator_biastype[i], m.actuator_dyntype[i]
    servo = (gt == 0 and bt == 1 and m.actuator_gainprm[i, 0] == -m.actuator_biasprm[i, 1]
             and dt in (0, 1))
    if not servo and gt != G_PID:
        return 0.0
    gear = m.actuator_gear[m.actuator_outadr[i]]
    trn = m.actuator_trntype[i]
    if trn == 4 and m.actuator_trnid[i, 1] >= 0 and not gear[:3].any():
        return 2 * np.pi * np.linalg.norm(gear[3:])
    if trn in (0, 1) and m.jnt_type[m.actuator_trnid[i, 0]] == mj.mjtJoint.mjJNT_BALL:
        return 2 * np.pi * np.linalg.norm(gear[:3])
    return 0.0


def wrap_sp(u, length, period):
    return u - period * cround((u - length) / period) if period > 0 else u


def unpack(u, spec):
    out, k = np.zeros(4), 0
    for j, bit in enumerate((POS, VEL, FF)):
        if spec & bit:
            out[j] = u[k]
            k += 1
    if spec & VOLT:
        out[3] = u[k]
    return out


def dc_voltage(u, spec, length, vel, xI, gp):
    u4 = unpack(u, spec)
    V = 0.0
    if spec & (POS | VEL | FF) and spec != NONE:
        tau = gp[4] * (u4[0] - length) + gp[6] * (u4[1] - vel) + gp[5] * xI + u4[2]
        R, K = gp[0], gp[1]
        V = R / K * tau + K * vel
        if gp[7] > 0:
            V = np.clip(V, -gp[7], gp[7])
    return V + u4[3]


def dc_slots(dp, gp):
    s, n = {}, 0
    for name, cond in (("slew", dp[7] > 0), ("integral", gp[5] > 0), ("temperature", dp[2] > 0),
                       ("bristle", dp[5] > 0), ("current", dp[0] > 0)):
        s[name] = n if cond else -1
        n += cond
    s["num"] = n
    return s


def stribeck(v, fc, fs, vs):
    r = v / max(MINVAL, vs)
    return fc + (fs - fc) * np.exp(-r * r)


def next_act(m, d, i, j, adot):
    """mj_nextActivation for act index j of actuator i."""
    a, h = d.act[j], m.opt.timestep
    dt = m.actuator_dyntype[i]
    if dt == D_DC:
        dp, gp, bp = m.actuator_dynprm[i], m.actuator_gainprm[i], m.actuator_biasprm[i]
        s = dc_slots(dp, gp)
        off = j - m.actuator_actadr[i]
        if off == s["current"]:
            te = max(MINVAL, dp[0])
            return a + adot * te * (1 - np.exp(-h / te))
        if off == s["bristle"]:
            v = m_vel(m, d, i)
            g = stribeck(v, bp[3], bp[4], bp[5])
            al = -dp[5] * abs(v) / max(MINVAL, g)
            e = np.exp(al * h)
            integ = (e - 1) / al if abs(al) > MINVAL else h
            return e * a + integ * v
        if off == s["integral"]:
            a = a + adot * h
            return np.clip(a, -dp[8], dp[8]) if dp[8] > 0 else a
        return a + adot * h
    a = a + adot * h
    if m.actuator_actlimited[i]:
        a = np.clip(a, *m.actuator_actrange[i])
    return a


def m_vel(m, d, i):
    return d.actuator_velocity[m.actuator_outadr[i]]


def reimplement(m, d):
    h = m.opt.timestep
    ctrl = d.ctrl.copy()
    lim = m.actuator_ctrllimited.astype(bool)
    ctrl[lim] = np.clip(ctrl[lim], m.actuator_ctrlrange[lim, 0], m.actuator_ctrlrange[lim, 1])
    act_dot = np.zeros(m.na)
    L, V = d.actuator_length, d.actuator_velocity
    # ---- act_dot (this loop also rewrites the slew-limited first input in ctrl)
    for i in range(m.nactuator):
        a0 = m.actuator_actadr[i]
        if a0 < 0:
            continue
        u, o = m.actuator_ctrladr[i], m.actuator_outadr[i]
        dp, gp, bp = m.actuator_dynprm[i], m.actuator_gainprm[i], m.actuator_biasprm[i]
        last = a0 + m.actuator_actnum[i] - 1
        if m.actuator_dyntype[i] == D_PID:
            adr, per = a0, wrap_period(m, i)
            if dp[1] > 0:
                uu = wrap_sp(ctrl[u], d.act[adr], per)
                sl = dp[1] * h
                ue = np.clip(uu, d.act[adr] - sl, d.act[adr] + sl)
                act_dot[adr] = (ue - d.act[adr]) / h
                ctrl[u] = ue
                adr += 1
            if gp[0] > 0:
                err = ctrl[u] - L[o]
                if per > 0:
                    err -= per * cround(err / per)
                if dp[0] > 0:
                    z = d.act[adr]
                    if z >= dp[0]:
                        err = min(err, 0)
                    elif z <= -dp[0]:
                        err = max(err, 0)
                act_dot[adr] = err
        elif m.actuator_dyntype[i] == D_DC:
            adr, v = a0, V[o]
            R, K, te = gp[0], gp[1], dp[0]
            if dp[7] > 0:
                sl = dp[7] * h
                ue = np.clip(ctrl[u], d.act[adr] - sl, d.act[adr] + sl)
                act_dot[adr] = (ue - d.act[adr]) / h
                ctrl[u] = ue
                adr += 1
            xI = 0.0
            if gp[5] > 0:
                xI = d.act[adr]
                e = ctrl[u] - L[o]
                if dp[8] > 0:
                    if xI >= dp[8]:
                        e = min(e, 0)
                    elif xI <= -dp[8]:
                        e = max(e, 0)
                act_dot[adr] = e
                adr += 1
            Vt = dc_voltage(ctrl[u:], m.actuator_ctrlspec[i], L[o], v, xI, gp)
            if dp[2] > 0:
                T = d.act[adr]
                R = R * (1 + gp[2] * (T + dp[4] - gp[3]))
                cur = d.act[last] if te > 0 else (Vt - K * v) / R
                act_dot[adr] = (R * cur * cur - T / dp[2]) / dp[3]
                adr += 1
            if dp[5] > 0:
                g = stribeck(v, bp[3], bp[4], bp[5])
                act_dot[adr] = -dp[5] * abs(v) / max(MINVAL, g) * d.act[adr] + v
                adr += 1
            if te > 0:
                idot = (Vt / R - K / R * v - d.act[last]) / te
                if dp[1] > 0:
                    idot = np.clip(idot, -dp[1], dp[1])
                act_dot[last] = idot
        else:
            raise NotImplementedError
    # ---- forces
    force = np.zeros(m.nout)
    for i in range(m.nactuator):
        u, o = m.actuator_ctrladr[i], m.actuator_outadr[i]
        dp, gp, bp = m.actuator_dynprm[i], m.actuator_gainprm[i], m.actuator_biasprm[i]
        a0, an = m.actuator_actadr[i], m.actuator_actnum[i]
        gt = m.actuator_gaintype[i]
        if gt == G_PID:
            u4 = unpack(ctrl[u:], m.actuator_ctrlspec[i])
            qref = wrap_sp(u4[0], L[o], wrap_period(m, i))
            f = -bp[1] * qref - bp[2] * u4[1] + u4[2]
            if an and gp[0] > 0:
                j = a0 + an - 1
                z = next_act(m, d, i, j, act_dot[j]) if m.actuator_actearly[i] else d.act[j]
                f += gp[0] * z
            f += bp[0] + bp[1] * L[o] + bp[2] * V[o]  # affine bias
        elif gt == G_DC:
            R, K = gp[0], gp[1]
            s = dc_slots(dp, gp)
            if s["temperature"] >= 0:
                T = d.act[a0 + s["temperature"]]
                R = R * (1 + gp[2] * (T + dp[4] - gp[3]))
            gain = K if dp[0] > 0 else K / max(MINVAL, R)
            spec, cn = m.actuator_ctrlspec[i], m.actuator_ctrlnum[i]
            if spec != VOLT and cn > 0:
                xI = d.act[a0 + s["integral"]] if s["integral"] >= 0 else 0.0
                ctrl[u] = dc_voltage(ctrl[u:], spec, L[o], V[o], xI, gp)
            if dp[0] <= 0:
                f = gain * (ctrl[u] if cn else 0.0)
                f -= gain * K * V[o]  # back-EMF
            else:
                j = a0 + an - 1
                f = gain * next_act(m, d, i, j, act_dot[j])  # actearly always on
        else:
            raise NotImplementedError
        if m.actuator_forcelimited[i]:
            f = np.clip(f, *m.actuator_forcerange[i])
        force[o] = f
    for i in range(m.nactuator):  # DC mechanical terms after the clamp
        if m.actuator_biastype[i] != int(mj.mjtBias.mjBIAS_DCMOTOR):
            continue
        o, dp, bp = m.actuator_outadr[i], m.actuator_dynprm[i], m.actuator_biasprm[i]
        if bp[0] != 0:
            force[o] += bp[0] * np.sin(bp[1] * L[o] + bp[2])
        if dp[5] > 0:
            j = m.actuator_actadr[i] + dc_slots(dp, m.actuator_gainprm[i])["bristle"]
            force[o] -= dp[5] * d.act[j] + dp[6] * act_dot[j]
    return force, act_dot


def main():
    rng = np.random.default_rng(7)
    ok = True
    for path in (os.path.join(HERE, "pid_dc.xml"),
                 "/work/shared/corpus/mujoco/engine/testdata/derivative/dcmotor.xml"):
        m = mj.MjModel.from_xml_path(path)
        d = mj.MjData(m)
        worst = dict(force=0.0, act_dot=0.0, qfrc=0.0, act_next=0.0)
        nstep = 0
        for t in range(60):
            mj.mj_resetData(m, d)
            for j in range(m.njnt):
                a = m.jnt_qposadr[j]
                if m.jnt_type[j] == mj.mjtJoint.mjJNT_BALL:
                    q = rng.normal(size=4)
                    d.qpos[a:a + 4] = q / np.linalg.norm(q)
                else:
                    d.qpos[a] = rng.normal() * 3
            d.qvel[:] = rng.normal(size=m.nv) * 3
            d.ctrl[:] = rng.normal(size=m.nu) * (10 if t % 2 else 1)
            d.act[:] = rng.normal(size=m.na) * (3 if t % 3 else 0.2)
            if "derivative" in path:  # stiff LuGre (sigma0=1e4): keep the step stable
                d.act[:] *= 1e-5
                d.qvel[:] *= 1e-2
            for i in range(m.nactuator):  # temperatures: keep R positive
                if m.actuator_dyntype[i] == D_DC:
                    s = dc_slots(m.actuator_dynprm[i], m.actuator_gainprm[i])
                    if s["temperature"] >= 0:
                        d.act[m.actuator_actadr[i] + s["temperature"]] = abs(rng.normal()) * 30
            mj.mj_forward(m, d)
            f, adot = reimplement(m, d)
            worst["force"] = max(worst["force"], np.abs(f - d.actuator_force).max())
            worst["act_dot"] = max(worst["act_dot"], np.abs(adot - d.act_dot).max())
            qf = dense_moment(m, d).T @ f
            worst["qfrc"] = max(worst["qfrc"], np.abs(qf - d.qfrc_actuator).max())
            nxt = np.array([next_act(m, d, i, j, d.act_dot[j]) for i in range(m.nactuator)
                            for j in range(m.actuator_actadr[i],
                                           m.actuator_actadr[i] + m.actuator_actnum[i])])
            nbad = d.warning[mj.mjtWarning.mjWARN_BADQACC].number
            mj.mj_step(m, d)
            if d.warning[mj.mjtWarning.mjWARN_BADQACC].number == nbad:  # no reset happened
                worst["act_next"] = max(worst["act_next"], np.abs(nxt - d.act).max())
                nstep += 1
        print(f"  {os.path.basename(path)}: 60 states, act_next compared on {nstep} "
              "(others diverged and were reset by mj_step)")
        for k, e in worst.items():
            rel_ok = e < 1e-10
            ok &= rel_ok
            print(f"{'OK ' if rel_ok else 'BAD'} {os.path.basename(path):12s} {k:9s} {e:.3e}")
    print("ALL MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
