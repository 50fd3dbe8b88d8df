"""Sleeping islands against MuJoCo C: compiled sleep policies, the sleep state of every
tree at every step of a rollout (falling asleep, islands, waking by contact, equality,
tendon and user perturbation, trees initialised asleep), held sensor values, the initial
state, vmapped batches and gradients."""

import glob
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import CORPUS

import jaxsim
from jaxsim import MJCFError

SLEEP = CORPUS / "engine" / "testdata" / "sleep"
# the default run keeps one model per waking mechanism; JAXSIM_TEST_ALL=1 runs the rest
ALL = os.environ.get("JAXSIM_TEST_ALL") == "1"
_slow = pytest.mark.skipif(not ALL, reason="set JAXSIM_TEST_ALL=1 (another compilation)")


def _pair(name):
    path = str(SLEEP / name)
    return mujoco.MjModel.from_xml_path(path), jaxsim.load(path, dtype=jnp.float64)


@pytest.fixture(scope="module")
def step():
    return jax.jit(jaxsim.step)


def test_policy_matches_mujoco():
    paths = sorted(glob.glob(str(SLEEP / "**" / "*.xml"), recursive=True))
    paths += sorted(glob.glob(str(CORPUS / "engine" / "testdata" / "island" / "*.xml")))
    checked = 0
    for p in paths:
        if "perf" in p:
            continue
        try:
            ref = mujoco.MjModel.from_xml_path(p)
        except Exception:  # noqa: BLE001 -- fragments and models MuJoCo rejects
            continue
        try:
            m = jaxsim.load(p, dtype=jnp.float64)
        except MJCFError as e:
            assert "flex" in str(e), (p, e)  # flex models are rejected as a whole
            continue
        np.testing.assert_array_equal(np.asarray(m.tree_sleep_policy), ref.tree_sleep_policy,
                                      err_msg=p)
        np.testing.assert_allclose(np.asarray(m.dof_length), ref.dof_length, rtol=1e-12,
                                   err_msg=p)
        checked += 1
    assert checked >= 12


def test_policy_errors():
    xml = """<mujoco><worldbody><body><freejoint/><geom size=".1"/>
      <body sleep="never"><joint/><geom size=".1"/></body></body></worldbody></mujoco>"""
    with pytest.raises(MJCFError) as e:
        jaxsim.load_string(xml)
    assert e.value.line == 2 and "sleep" in str(e.value)
    xml = """<mujoco><option><flag sleep="enable"/></option><worldbody>
      <body><joint name="a"/><geom size=".1"/></body>
      <body pos="1 0 0"><joint name="b"/><geom size=".1"/></body></worldbody>
      <tendon><fixed name="t1"><joint joint="a" coef="1"/></fixed>
              <fixed name="t2"><joint joint="b" coef="1"/></fixed></tendon>
      <equality><tendon tendon1="t1" tendon2="t2"/></equality></mujoco>"""
    with pytest.raises(MJCFError) as e:
        jaxsim.load_string(xml)
    assert "tendon equality" in str(e.value) and e.value.line == 1


def test_init_island_that_cannot_sleep_warns_and_stays_awake():
    """MuJoCo 4.0 warns (its documentation still speaks of an error) and starts the trees
    that could not sleep awake; the other trees keep their sleep countdown."""
    model = jaxsim.load(str(SLEEP / "init_island_fail.xml"), dtype=jnp.float64)
    with pytest.warns(UserWarning, match="asleep_init0"):
        st = jaxsim.make_state(model)
    ref = mujoco.MjModel.from_xml_path(str(SLEEP / "init_island_fail.xml"))
    np.testing.assert_array_equal(np.asarray(st.tree_asleep), mujoco.MjData(ref).tree_asleep)


@pytest.mark.parametrize("name,nstep,tol", [
    ("init_island.xml", 400, 1e-9),  # islands initialised asleep, woken by a falling box
    ("equality.xml", 600, 1e-6),  # connect and weld islands, woken through equalities
    pytest.param("tendon2.xml", 400, 1e-9, marks=_slow),  # limited tendon between trees
    ("sensor.xml", 300, 1e-6),  # sensors of sleeping bodies keep their values
    # a flex asleep on a mocap sphere: no flex pair without a dynamically awake side
    ("flex_mocap.xml", 200, 1e-9),
    # a ball wakes a sleeping flex, whose floor contacts return in the same step
    ("flex_contact.xml", 200, 1e-9),
])
def test_rollout_matches_mujoco(step, name, nstep, tol):
    ref, model = _pair(name)
    d = mujoco.MjData(ref)
    st = jaxsim.make_state(model)
    np.testing.assert_array_equal(np.asarray(st.tree_asleep), d.tree_asleep)
    # sensors that do not split a contact force among the contact points of a box-box
    # contact (MuJoCo's box-box points differ from ours, the totals do not)
    split = [int(mujoco.mjtSensor.mjSENS_CONTACT), int(mujoco.mjtSensor.mjSENS_TOUCH),
             int(mujoco.mjtSensor.mjSENS_FORCE)]
    keep = np.concatenate([np.full(ref.sensor_dim[i], int(ref.sensor_type[i]) not in split)
                           for i in range(ref.nsensor)]) if ref.nsensor else np.zeros(0, bool)
    changes = 0
    for t in range(nstep):
        before = d.tree_asleep.copy()
        mujoco.mj_step(ref, d)
        st = step(model, st)
        changes += int(not np.array_equal(before, d.tree_asleep))
        np.testing.assert_array_equal(np.asarray(st.tree_asleep), d.tree_asleep,
                                      err_msg=f"step {t}")
        np.testing.assert_allclose(np.asarray(st.qpos), d.qpos, atol=tol, err_msg=f"step {t}")
        np.testing.assert_allclose(np.asarray(st.qvel), d.qvel, atol=100 * tol,
                                   err_msg=f"step {t}")
        if keep.any():
            np.testing.assert_allclose(np.asarray(st.sensordata)[keep], d.sensordata[keep],
                                       atol=100 * tol, err_msg=f"step {t}")
    assert changes >= 2  # something fell asleep and something woke


@pytest.mark.parametrize("flag", ["mjDSBL_LIMIT", pytest.param("mjDSBL_CONSTRAINT", marks=_slow)])
def test_tendon_without_limit_rows_does_not_wake(step, flag):
    """With limits (or all constraints) disabled MuJoCo 4.0 does not wake a sleeping tree
    through a limited tendon at its limit: there is no limit row to join the trees."""
    ref, model = _pair("tendon.xml")
    bit = int(getattr(mujoco.mjtDisableBit, flag))
    ref.opt.disableflags |= bit
    model = model.replace(opt=model.opt.replace(disableflags=model.opt.disableflags | bit))
    d = mujoco.MjData(ref)
    st = jaxsim.make_state(model)
    for t in range(300):  # the falling box reaches the tendon's limit after ~180 steps
        mujoco.mj_step(ref, d)
        st = step(model, st)
        np.testing.assert_array_equal(np.asarray(st.tree_asleep), d.tree_asleep,
                                      err_msg=f"step {t}")
    assert (d.tree_asleep >= 0).any()  # still asleep
    np.testing.assert_allclose(np.asarray(st.qpos), d.qpos, atol=1e-9)


def test_initial_state_matches_mujoco():
    """Trees initialised asleep: mj_forward keeps their accelerations at zero and builds
    no contacts within their islands."""
    ref, model = _pair("init_island.xml")
    d = mujoco.MjData(ref)
    mujoco.mj_forward(ref, d)
    out = jax.jit(jaxsim.forward)(model, jaxsim.make_state(model))
    for f in ("xpos", "xquat", "cvel", "qfrc_bias", "qacc_smooth", "qacc", "qfrc_constraint"):
        np.testing.assert_allclose(np.asarray(getattr(out, f)), getattr(d, f), atol=1e-10,
                                   err_msg=f)
    assert int(out.ncon) == d.ncon
    np.testing.assert_array_equal(np.asarray(out.tree_asleep), d.tree_asleep)


def test_user_perturbation_wakes_only_its_world(step):
    """In a vmapped batch, a velocity given to a sleeping tree wakes its island in that
    world only; the other world stays bit-identical to stepping it alone."""
    ref, model = _pair("init_island.xml")
    st = jaxsim.make_state(model)
    kick = st.replace(qvel=st.qvel.at[0].set(0.3))
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), st, kick)
    vstep = jax.jit(jax.vmap(jaxsim.step, in_axes=(None, 0)))
    d = mujoco.MjData(ref)
    d.qvel[0] = 0.3
    alone = st
    for _ in range(5):
        batch = vstep(model, batch)
        alone = step(model, alone)
        mujoco.mj_step(ref, d)
    for a, b in zip(jax.tree_util.tree_leaves(alone),
                    jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda x: x[0], batch)),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(batch.tree_asleep[1]), d.tree_asleep)
    assert np.all(np.asarray(batch.tree_asleep[0])[:3] >= 0)  # untouched world sleeps on
    np.testing.assert_allclose(np.asarray(batch.qpos[1]), d.qpos, atol=1e-9)


@pytest.mark.skipif(not ALL, reason="set JAXSIM_TEST_ALL=1 (a fresh process compiling "
                    "a reverse-mode rollout, ~100 s)")
def test_gradient_through_sleeping_rollout_is_finite():
    # compiled in a fresh process: XLA's CPU compiler has crashed (segfault) compiling this
    # reverse-mode rollout in the CI's long-lived test workers, not when compiled alone
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          timeout=540, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "gradient ok" in proc.stdout


def _check_gradient_through_sleeping_rollout():
    _, model = _pair("init_island.xml")
    st = jaxsim.make_state(model)

    def final(v):
        s = st.replace(qvel=st.qvel.at[-6:].set(v))
        s, _ = jax.lax.scan(lambda c, _: (jaxsim.step(model, c), None), s, None, length=10)
        return jnp.sum(s.qpos)

    g = jax.jit(jax.grad(final))(jnp.zeros(6, jnp.float64).at[2].set(-0.1))
    assert np.all(np.isfinite(np.asarray(g))) and np.any(np.asarray(g) != 0)


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    _check_gradient_through_sleeping_rollout()
    print("gradient ok")
