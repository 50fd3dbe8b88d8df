import os
import sys

import mujoco as mj
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import so3_check as S  # noqa: E402

m = mj.MjModel.from_xml_path(__file__.rsplit('/', 1)[0] + '/so3_site.xml'); d = mj.MjData(m)
print('reset ctrl', d.ctrl)
mj.mj_resetData(m, d); print('after resetData', d.ctrl)
print('jnt_actuatorid', m.jnt_actuatorid)
# dampratio check for 'site_quat' (actuator 1), dampratio=1, kp=2
mj.mj_resetData(m, d); mj.mj_forward(m, d)
o = m.actuator_outadr[1]
M = np.zeros((m.nv, m.nv)); mj.mj_fullM(m, d, M)
Minv = np.linalg.inv(M)
J = S.dense_moment(m, d)[o:o+3]
tmt = np.einsum('kv,vw,kw->k', J, Minv, J)
for name, mass in [('outnum/sum(JMJ)', 3/tmt.sum()), ('mean(1/JMJ)', np.mean(1/tmt)), ('first row', 1/tmt[0])]:
    print(name, -2*np.sqrt(2*mass))
print('MuJoCo biasprm[2]', m.actuator_biasprm[1,2])
print('acc0 rows', m.actuator_acc0[o:o+3], 'norm(Minv J^T)', np.linalg.norm(J@Minv, axis=1))
print('length0', m.actuator_length0[o:o+3], 'vs length at qpos0', d.actuator_length[o:o+3])
