"""Tactile sensors against MuJoCo: penetration depth at each taxel (mesh vertex) into the
primitives touching the sensor's body; mesh colliders are skipped as MuJoCo skips meshes
without an SDF octree; per-vertex normal frames (slip channels) are rejected by load."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim.mjcf.errors import MJCFError

XML = """<mujoco>
  <option timestep="0.005"/>
  <asset>
    <mesh name="pad" vertex="-.03 -.03 0  .03 -.03 0  -.03 .03 0  .03 .03 0  0 0 0  .015 -.015 0  -.015 .02 0  0 .03 -.002"/>
    <mesh name="tet" vertex="0 0 0  .1 0 0  0 .1 0  0 0 .1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 .1"/>
    <geom type="sphere" size=".05" pos=".3 0 .04"/>
    <geom type="capsule" size=".03 .1" pos="-.3 0 .02" euler="0 90 20"/>
    <geom type="box" size=".05 .06 .04" pos="0 .3 .03" euler="0 0 30"/>
    <geom type="ellipsoid" size=".05 .08 .04" pos="0 -.3 .03"/>
    <geom type="cylinder" size=".05 .03" pos=".3 .3 .02"/>
    <geom type="mesh" mesh="tet" pos="-.3 -.3 0"/>
    <body name="finger" pos="0 0 .1">
      <freejoint/>
      <geom name="tip" type="box" size=".035 .035 .01"/>
      <geom type="sphere" size=".01" pos="0 0 .03"/>
      <body pos="0 0 .05"><geom type="capsule" size=".01 .02"/></body>
    </body>
  </worldbody>
  <sensor>
    <tactile geom="tip" mesh="pad"/>
    <tactile geom="tip" mesh="tet"/>
  </sensor>
</mujoco>
"""


def test_tactile_matches_mujoco():
    # compiled in a fresh process: in the CI's long-lived test workers (after ~400 other
    # compilations) XLA's CPU compiler has crashed (abort / segfault) compiling this
    # forward; the same compile succeeds in a new process
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tactile ok" in proc.stdout


def _check_tactile_matches_mujoco():
    mm = mujoco.MjModel.from_xml_string(XML)
    m = jaxsim.load_string(XML, dtype=jnp.float64)
    fwd = jax.jit(jaxsim.forward)
    rng = np.random.default_rng(0)
    pressed = 0
    for _ in range(40):
        md = mujoco.MjData(mm)
        md.qpos[:3] = [rng.uniform(-.35, .35), rng.uniform(-.35, .35), rng.uniform(0, .08)]
        q = rng.normal(size=4) * [1, .2, .2, .2] + [3, 0, 0, 0]
        md.qpos[3:] = q / np.linalg.norm(q)
        md.qvel[:] = rng.normal(size=6)
        mujoco.mj_forward(mm, md)
        st = jaxsim.make_state(m).replace(qpos=jnp.asarray(md.qpos), qvel=jnp.asarray(md.qvel))
        out = np.asarray(fwd(m, st).sensordata)
        np.testing.assert_allclose(out, md.sensordata, atol=1e-12)
        pressed += bool(md.sensordata.any())
    assert pressed >= 5, "the taxels touched almost nothing: the test is vacuous"


def test_tactile_normal_frames_rejected():
    frames = " ".join(["0 0 1 1 0 0 0 1 0"] * 8)
    xml = XML.replace('<mesh name="pad"', f'<mesh name="pad" normal="{frames}"')
    mujoco.MjModel.from_xml_string(xml)  # MuJoCo computes slip channels from the frames
    with pytest.raises(MJCFError, match="normal frame"):
        jaxsim.load_string(xml, dtype=jnp.float64)


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    _check_tactile_matches_mujoco()
    print("tactile ok")
