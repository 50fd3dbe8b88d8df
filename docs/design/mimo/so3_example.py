import mujoco as mj
import numpy as np

np.set_printoptions(precision=12, suppress=False, linewidth=140)
m = mj.MjModel.from_xml_path('/work/shared/corpus/mujoco/engine/testdata/actuation/orientation.xml')
d = mj.MjData(m)
rng = np.random.default_rng(42)
for j in range(m.njnt):
    a = m.jnt_qposadr[j]; q = rng.normal(size=4); d.qpos[a:a+4] = q / np.linalg.norm(q)
d.qvel[:] = rng.normal(size=m.nv)
d.ctrl[:] = rng.uniform(-2, 2, size=m.nu)
mj.mj_forward(m, d)
print('qpos', d.qpos); print('qvel', d.qvel); print('ctrl', d.ctrl)
print('actuator_length  ', d.actuator_length)
print('actuator_velocity', d.actuator_velocity)
print('actuator_force   ', d.actuator_force)
print('qfrc_actuator    ', d.qfrc_actuator)
print('moment_rownnz', d.moment_rownnz, 'rowadr', d.moment_rowadr, 'colind', d.moment_colind, 'moment', d.actuator_moment)
