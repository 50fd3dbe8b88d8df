"""Value checks in `step` (MuJoCo: mj_checkPos, mj_checkVel, mj_checkAcc): a world whose
state blows up is reset and counts a warning, and in a vmapped batch the other worlds are
untouched."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim.types import Warning

XML = """<mujoco><worldbody><geom type="plane" size="2 2 .1"/>
  <body pos="0 0 .5"><freejoint/><geom size=".1"/></body>
  <body pos="1 0 1"><joint name="h" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 .3 0 0" size=".05"/></body>
  </worldbody><actuator><motor joint="h"/></actuator></mujoco>"""

_STEP = jax.jit(jaxsim.step)


@pytest.fixture(scope="module")
def models():
    return mujoco.MjModel.from_xml_string(XML), jaxsim.load_string(XML, dtype=jnp.float64)


def _pair(m, model):
    """A MuJoCo state one step into a motion, and the same state for jaxsim."""
    d = mujoco.MjData(m)
    d.qvel[:] = 0.3
    mujoco.mj_step(m, d)
    s = jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel),
                                         time=jnp.asarray(d.time))
    return d, s


def _warnings(d) -> np.ndarray:
    return np.array([d.warning[i].number for i in range(7)])


@pytest.mark.parametrize("field,index,value,warning", [
    ("qpos", 2, np.nan, Warning.BADQPOS), ("qpos", 0, 2e10, Warning.BADQPOS),
    ("qvel", 6, 1e11, Warning.BADQVEL), ("qvel", 1, -np.inf, Warning.BADQVEL)])
def test_bad_position_or_velocity_resets_as_mujoco(models, field, index, value, warning):
    m, model = models
    d, s = _pair(m, model)
    getattr(d, field)[index] = value
    s = s.replace(**{field: getattr(s, field).at[index].set(value)})
    mujoco.mj_step(m, d)
    out = _STEP(model, s)
    assert _warnings(d)[warning] == 1
    np.testing.assert_array_equal(np.asarray(out.warning)[:7], _warnings(d))
    assert float(out.time) == d.time
    np.testing.assert_allclose(np.asarray(out.qpos), d.qpos, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out.qvel), d.qvel, atol=1e-12)


def test_bad_acceleration_resets_one_step_behind_mujoco(models):
    m, model = models
    d, s = _pair(m, model)
    d.qfrc_applied[6] = 1e30
    s = s.replace(qfrc_applied=s.qfrc_applied.at[6].set(1e30))
    mujoco.mj_step(m, d)  # resets, then integrates the reset state
    out = _STEP(model, s)  # resets only
    assert _warnings(d)[Warning.BADQACC] == 1
    np.testing.assert_array_equal(np.asarray(out.warning)[:7], _warnings(d))
    fresh = jaxsim.make_state(model)
    assert float(out.time) == 0.0
    np.testing.assert_array_equal(np.asarray(out.qpos), np.asarray(fresh.qpos))
    out = _STEP(model, out)
    assert float(out.time) == d.time
    np.testing.assert_allclose(np.asarray(out.qpos), d.qpos, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out.qvel), d.qvel, atol=1e-12)


def test_blow_up_in_one_world_leaves_the_others_bit_identical(models):
    del models
    # the ball starts on the floor (the solver iterates from the first step), and more
    # worlds than jaxsim.loops runs as one batch: the others' iterations are regrouped
    # when one world blows up
    model = jaxsim.load_string(XML.replace('pos="0 0 .5"', 'pos="0 0 .099"'),
                               dtype=jnp.float64)
    n, steps = 40, 15
    base = jaxsim.make_state(model)
    key = jax.random.PRNGKey(0)
    qvel = 0.5 * jax.random.normal(key, (n, base.qvel.shape[0]), dtype=base.qvel.dtype)
    batch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), base)
    batch = batch.replace(qvel=qvel)

    @jax.jit
    def run(b):
        step = jax.vmap(jaxsim.step, in_axes=(None, 0))
        return jax.lax.fori_loop(0, steps, lambda i, x: step(model, x), b)

    clean = run(batch)
    bad = run(batch.replace(qvel=batch.qvel.at[1, 6].set(jnp.nan)))
    for name in ("qpos", "qvel", "qacc", "time", "warning", "act"):
        a, b = np.asarray(getattr(clean, name)), np.asarray(getattr(bad, name))
        keep = np.arange(n) != 1
        np.testing.assert_array_equal(a[keep], b[keep], err_msg=name)
    assert np.all(np.isfinite(np.asarray(bad.qpos)))
    assert int(np.asarray(bad.warning)[1, Warning.BADQVEL]) == 1
    assert np.asarray(clean.warning).sum() == 0
    niter = np.asarray(clean.solver_niter)
    assert niter.min() != niter.max()  # the worlds' solver loops stop at different trips
