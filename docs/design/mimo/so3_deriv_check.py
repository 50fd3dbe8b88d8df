"""Check MuJoCo 4.0 SO3 contribution to qDeriv (implicitfast): sum over output rows of
biasprm[2] * J_k^T J_k, skipped when |force| >= forcerange[1] (forcelimited)."""
import os
import sys

import mujoco as mj
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import so3_check as S

for path in S.MODELS:
    m = mj.MjModel.from_xml_path(path); d = mj.MjData(m)
    rng = np.random.default_rng(3); worst = 0; nsat = 0
    for t in range(30):
        S.random_state(m, d, rng, big=t % 2 == 1)
        mj.mj_forward(m, d)
        mom = S.dense_moment(m, d)
        force = d.actuator_force.copy()
        K = np.zeros((m.nv, m.nv))
        for i in range(m.nactuator):
            o, n = m.actuator_outadr[i], m.actuator_outnum[i]
            b = m.actuator_biasprm[i, 2] if m.actuator_biastype[i] in (1, 4) else 0.0
            if m.actuator_forcelimited[i] and m.actuator_gaintype[i] == S.GAIN_SO3:
                if np.linalg.norm(force[o:o+3]) >= m.actuator_forcerange[i, 1]:
                    nsat += 1; continue
            for k in range(n):
                K += b * np.outer(mom[o+k], mom[o+k])
        mj.mj_step(m, d)
        Q = np.zeros((m.nv, m.nv))
        for r in range(m.nv):
            a, z = m.D_rowadr[r], m.D_rownnz[r]
            Q[r, m.D_colind[a:a+z]] = d.qDeriv[a:a+z]
        worst = max(worst, np.abs(Q - K).max())
    print(path.split('/')[-1], 'max|qDeriv - model| =', worst, 'saturated skips', nsat)
