"""qDeriv (implicitfast) contribution of PID / DCMOTOR actuators vs the per-actuator scalar b:
qDeriv = sum_i b_i * J_i^T J_i (mjd_actuator_vel), MuJoCo 4.0.
Usage: python pid_dc_deriv_check.py THERMAL CLIP SIGMA_SURVIVES   (4.0 rules: 1 1 0)
  THERMAL: use the temperature-adjusted R; CLIP: drop dVdw when the Vmax clamp is active."""
import os
import sys

import mujoco as mj
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pid_dc_check as P

THERMAL = int(sys.argv[1]); CLIP = int(sys.argv[2]); SIGMA_SURVIVES = int(sys.argv[3]); nsat=[0]; DBG=0
MINVAL = 1e-15
for path in (__file__.rsplit('/', 1)[0] + '/pid_dc.xml', '/work/shared/corpus/mujoco/engine/testdata/derivative/dcmotor.xml'):
    m = mj.MjModel.from_xml_path(path); m.opt.integrator = mj.mjtIntegrator.mjINT_IMPLICITFAST
    d = mj.MjData(m); rng = np.random.default_rng(5); worst = 0
    for t in range(200):
        mj.mj_resetData(m, d)
        d.qvel[:] = rng.normal(size=m.nv) * 0.1; d.ctrl[:] = rng.normal(size=m.nu) * (0.1 if t % 2 else 0.002)
        if m.na: d.act[:] = np.abs(rng.normal(size=m.na)) * 0.01 * (t % 3)
        mj.mj_forward(m, d)
        J = P.dense_moment(m, d); K = np.zeros((m.nv, m.nv))
        for i in range(m.nactuator):
            o = m.actuator_outadr[i]; gp, dp, bp = m.actuator_gainprm[i], m.actuator_dynprm[i], m.actuator_biasprm[i]
            fe = d.actuator_force[o]
            if m.actuator_biastype[i] == 3:  # strip DC mechanical terms (added after the clamp)
                fe -= bp[0]*np.sin(bp[1]*d.actuator_length[o] + bp[2])
                if dp[5] > 0:
                    jb = m.actuator_actadr[i] + P.dc_slots(dp, gp)['bristle']
                    fe += dp[5]*d.act[jb] + dp[6]*d.act_dot[jb]
            sat = m.actuator_forcelimited[i] and not (m.actuator_forcerange[i,0] < fe < m.actuator_forcerange[i,1])
            if sat:
                if SIGMA_SURVIVES and m.actuator_gaintype[i] == P.G_DC and dp[6] > 0:
                    K += -dp[6] * np.outer(J[o], J[o])
                nsat[0] += 1
                continue
            b = 0.0
            if m.actuator_biastype[i] == 1: b = bp[2]
            elif m.actuator_biastype[i] == 3 and dp[0] <= 0: b -= gp[1]**2 / max(MINVAL, gp[0])
            if m.actuator_gaintype[i] == P.G_DC:
                R, Kc, te = max(MINVAL, gp[0]), gp[1], dp[0]
                s_ = P.dc_slots(dp, gp)
                if THERMAL and s_['temperature'] >= 0:
                    T = d.act[m.actuator_actadr[i] + s_['temperature']]
                    R = R * (1 + gp[2]*(T + dp[4] - gp[3]))
                    if m.actuator_biastype[i] == 3 and dp[0] <= 0:  # redo back-EMF with R_T
                        b += gp[1]**2 / max(MINVAL, gp[0]) - Kc**2 / R
                spec = m.actuator_ctrlspec[i]
                ctl = bool(spec & 7) and spec != 16
                dVdw = (-gp[6]*gp[0]/Kc + Kc) if ctl else 0.0
                if CLIP and ctl and gp[7] > 0:
                    u = m.actuator_ctrladr[i]
                    c = d.ctrl[u:].copy()
                    if s_['slew'] >= 0:
                        a_ = d.act[m.actuator_actadr[i]]; sl = dp[7]*m.opt.timestep
                        c[0] = np.clip(c[0], a_ - sl, a_ + sl)
                    xI = d.act[m.actuator_actadr[i] + s_['integral']] if s_['integral'] >= 0 else 0.0
                    u4 = P.unpack(c, spec)
                    tau = gp[4]*(u4[0]-d.actuator_length[o]) + gp[6]*(u4[1]-d.actuator_velocity[o]) + gp[5]*xI + u4[2]
                    Vu = gp[0]/Kc*tau + Kc*d.actuator_velocity[o]
                    if abs(Vu) >= gp[7]: dVdw = 0.0
                didt_clip = False
                if te > 0 and dp[1] > 0:  # current-rate limit active -> no current-path term
                    _, adot_c = P.reimplement(m, d)
                    save = m.actuator_dynprm[i, 1]; m.actuator_dynprm[i, 1] = 0
                    _, adot_u = P.reimplement(m, d); m.actuator_dynprm[i, 1] = save
                    last = m.actuator_actadr[i] + m.actuator_actnum[i] - 1
                    didt_clip = abs(adot_u[last]) >= dp[1]
                if te > 0:
                    if not didt_clip: b += Kc*(dVdw - Kc)*(1 - np.exp(-m.opt.timestep/te))/R
                elif dVdw != 0: b += Kc*dVdw/R
                if dp[6] > 0: b -= dp[6]
            K += b * np.outer(J[o], J[o])
        mj.mj_step(m, d)
        Q = np.zeros((m.nv, m.nv))
        for r in range(m.nv):
            a, z = m.D_rowadr[r], m.D_rownnz[r]; Q[r, m.D_colind[a:a+z]] = d.qDeriv[a:a+z]
        Q -= -np.diag(m.dof_damping)  # remove passive dof damping (linear) part
        for i in range(m.nactuator):  # actuator damping attribute is passive (jnt_actuatorid)
            if m.actuator_damping[i] and m.actuator_trntype[i] == 0:
                dof = m.jnt_dofadr[m.actuator_trnid[i, 0]]
                Q[dof, dof] += m.actuator_damping[i] * m.actuator_gear[m.actuator_outadr[i], 0]**2

        if np.abs(Q-K).max() > 1e-9 and DBG: print(t, np.round(np.diag(Q-K),5), np.round(d.ctrl,3))
        worst = max(worst, np.abs(Q - K).max())
    print(os.path.basename(path), 'max|qDeriv - sum b J^T J| =', worst, 'saturated cases', nsat[0]); nsat[0]=0
