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


def test_spatial_products_match_mujoco():
    # the helpers build their results with math.stack_last (one select over the last axis
    # in place of a minor-axis concatenate); XLA may contract a product and a sum into one
    # fused multiply-add, so the last bit may differ from MuJoCo's build (which has none)
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 300, 6))
    qa, qb = rng.normal(size=(2, 300, 4))
    f = jax.jit(lambda a, b, qa, qb: (jm.cross_motion(a, b), jm.cross_force(a, b),
                                      jm.quat_mul(qa, qb)))
    cm, cf, qm = (np.asarray(x) for x in f(a, b, qa, qb))
    # mju_crossMotion / mju_crossForce (not in the Python bindings) in numpy
    w, v, fw, fv = a[:, :3], a[:, 3:], b[:, :3], b[:, 3:]
    tol = dict(rtol=0, atol=4e-15)
    np.testing.assert_allclose(cm, np.concatenate(
        [np.cross(w, fw), np.cross(w, fv) + np.cross(v, fw)], -1), **tol)
    np.testing.assert_allclose(cf, np.concatenate(
        [np.cross(w, fw) + np.cross(v, fv), np.cross(w, fv)], -1), **tol)
    qn = qa / np.linalg.norm(qa, axis=-1, keepdims=True)
    rv = np.asarray(jax.jit(jm.rot_vec_quat)(a[:, :3], qn))
    for k in range(len(a)):
        ref = np.zeros(4)
        mujoco.mju_mulQuat(ref, qa[k], qb[k])
        np.testing.assert_allclose(qm[k], ref, **tol)
        ref3 = np.zeros(3)
        mujoco.mju_rotVecQuat(ref3, a[k, :3], qn[k])
        np.testing.assert_allclose(rv[k], ref3, **tol)


def test_stack_last_is_stack_with_its_gradient():
    rng = np.random.default_rng(3)
    parts = [jnp.asarray(x) for x in rng.normal(size=(4, 7, 5))] + [jnp.asarray(2.0)]
    got = jax.jit(jm.stack_last)(parts)
    want = jnp.stack([jnp.broadcast_to(p, (7, 5)) for p in parts], axis=-1)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    w = jnp.asarray(rng.normal(size=(7, 5, 5)))
    g = jax.grad(lambda ps: jnp.sum(w * jm.stack_last(ps)))(parts)
    for k in range(4):
        np.testing.assert_array_equal(np.asarray(g[k]), np.asarray(w[..., k]))
    np.testing.assert_allclose(float(g[4]), float(jnp.sum(w[..., 4])), rtol=1e-12)


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
