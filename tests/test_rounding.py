"""Rounding that decides MuJoCo's discrete choices, checked bit for bit against MuJoCo.

Where MuJoCo picks one of several nearly equal candidates (the quadrilateral kept from a
clipped face, say), the last bit of its arithmetic decides, so jaxsim rounds those
computations as MuJoCo 4.0's build does (float64).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_with_default_xla

import jaxsim
from jaxsim import math as jm

mujoco = pytest.importorskip("mujoco")


@pytest.fixture(scope="module", autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def test_no_fma_rounds_the_product():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 2000))
    got = np.asarray(jax.jit(lambda a, b, c: jm.no_fma(a * b) + c)(a, b, c))
    np.testing.assert_array_equal(got, a * b + c)  # numpy rounds the product first
    # gradients pass through, NaN stays NaN
    g = jax.grad(lambda a: jnp.sum(jm.no_fma(a * b)))(jnp.asarray(a))
    np.testing.assert_array_equal(np.asarray(g), b)
    assert np.isnan(float(jm.no_fma(jnp.asarray(np.nan))))


def test_quat_to_mat_matches_mujoco_bitwise():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(500, 4))
    for k in range(len(q)):
        mujoco.mju_normalize4(q[k])
    ours = np.asarray(jax.jit(jm.quat_to_mat)(jnp.asarray(q))).reshape(-1, 9)
    ref = np.zeros_like(ours)
    for k in range(len(q)):
        mujoco.mju_quat2Mat(ref[k], q[k])
    np.testing.assert_array_equal(ours, ref)


# two overlapping sphere meshes (perf/spheremesh.xml's builtin sphere) whose clipped face
# has a duplicated vertex: the two quadrilaterals that keep it twice have the same area but
# for rounding, and MuJoCo's order of the contacts follows the one its arithmetic prefers
_SPHERES = """
<mujoco>
  <option><flag multiccd="enable"/></option>
  <asset><mesh name="sphere" builtin="sphere" params="3" scale=".08 .08 .08"/></asset>
  <worldbody>
    <body><freejoint/><geom type="mesh" mesh="sphere" condim="1"/></body>
    <body><freejoint/><geom type="mesh" mesh="sphere" condim="1"/></body>
  </worldbody>
</mujoco>
"""
_POSES = [
    ([0.22659675292298842, -0.23970934667109656, 0.202030157455469, 0.9317868613019396,
      0.0823477189223091, 0.10244891787650598, 0.3383730449065134],
     [0.31283626635293155, -0.15158877789290562, 0.21100876926068335, 0.9328324836686954,
      0.14903721042593915, 0.18881602860302152, 0.268253564120834]),
    ([0.14297538109392716, 0.06946328927308745, 0.4030155197823877, 0.9514036595271199,
      0.14459405716243154, 0.11102433548051067, 0.24818789697086877],
     [0.14152259733909978, 0.03584229071622115, 0.30533437557067344, 0.9667964570523476,
      0.16068372200625058, 0.16152061054990163, 0.11574301050531366]),
]


def _check_ties() -> None:
    m = mujoco.MjModel.from_xml_string(_SPHERES)
    model = jaxsim.load_string(_SPHERES, dtype=jnp.float64)
    fwd = jax.jit(jaxsim.forward)
    for pose in _POSES:
        d = mujoco.MjData(m)
        d.qpos[:] = np.concatenate(pose)
        mujoco.mj_forward(m, d)
        out = fwd(model, jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos)))
        act = np.asarray(out.contact.active).astype(bool)
        assert d.ncon == 4 and act.sum() == 4
        # a duplicated point among the four, at the same place in both lists
        np.testing.assert_allclose(np.asarray(out.contact.dist)[act], d.contact.dist, rtol=0,
                                   atol=1e-12)
        np.testing.assert_allclose(np.asarray(out.contact.pos)[act], d.contact.pos, rtol=0,
                                   atol=1e-12)


def test_mesh_face_quadrilateral_ties_in_mujoco_order():
    """With XLA's default CPU settings (see conftest.run_with_default_xla)."""
    run_with_default_xla(__file__, "_check_ties")
