"""History buffers: delayed controls and sensors, sampling intervals, against MuJoCo C.

One small model has every buffer mode: actuators delayed with zero-order hold, linear and
cubic reads and one with a buffer but no delay; sensors delayed (scalar and 3-vector),
sampled at an interval (with and without a phase, with and without a delay) and a plain
recorded sensor. Rollouts with random controls are compared with mj_step field by field,
the history itself included; a vmapped batch whose worlds have different delays checks
that delays and intervals may be traced model parameters.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim

XML = """
<mujoco>
  <option timestep="0.01" integrator="{integrator}"/>
  <worldbody>
    <body pos="0 0 1">
      <joint name="j" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
      <site name="s" pos="0.3 0 0"/>
      <body pos="0.3 0 0">
        <joint name="j2" type="slide" axis="1 0 0"/>
        <geom type="sphere" size="0.05"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m0" joint="j" nsample="5" delay="0.02"/>
    <motor name="m1" joint="j2" nsample="4" delay="0.015" interp="linear"/>
    <position name="m2" joint="j" kp="3" nsample="6" delay="0.025" interp="cubic"/>
    <motor name="m3" joint="j2" nsample="3"/>
  </actuator>
  <sensor>
    <jointpos joint="j" nsample="4" delay="0.02"/>
    <framepos objtype="site" objname="s" nsample="5" delay="0.013" interp="linear"/>
    <jointvel joint="j2" nsample="3" interval="0.03"/>
    <accelerometer site="s" nsample="4" interval="0.02 -0.005" delay="0.01" interp="cubic"/>
    <jointpos joint="j2" nsample="2"/>
    <actuatorfrc actuator="m0"/>
  </sensor>
</mujoco>
"""

FIELDS = ("qpos", "qvel", "act", "ctrl", "actuator_force", "sensordata", "history")


def _models(integrator):
    xml = XML.format(integrator=integrator)
    return jaxsim.load_string(xml, dtype=jnp.float64), mujoco.MjModel.from_xml_string(xml)


def test_reset_history_as_mujoco():
    m, mm = _models("Euler")
    md = mujoco.MjData(mm)
    np.testing.assert_array_equal(np.asarray(jaxsim.make_state(m).history), md.history)
    assert m.nhistory == mm.nhistory
    np.testing.assert_array_equal(np.asarray(m.sensor_historyadr), mm.sensor_historyadr)
    np.testing.assert_array_equal(np.asarray(m.actuator_historyadr), mm.actuator_historyadr)


@pytest.mark.parametrize("integrator", ["Euler", "RK4"])
def test_delayed_rollout_matches_mujoco(integrator):
    """Two worlds with different delays and sampling periods in one vmapped rollout."""
    m, mm = _models(integrator)
    scale = np.array([1.0, 0.6])
    models, datas = [], []
    for s in scale:
        mk = mujoco.MjModel.from_xml_string(XML.format(integrator=integrator))
        mk.actuator_delay[:] = mm.actuator_delay * s
        mk.sensor_delay[:] = mm.sensor_delay * s
        mk.sensor_interval[:, 0] = mm.sensor_interval[:, 0] * (2 - s)
        models.append(mk)
        datas.append(mujoco.MjData(mk))
    worlds = [m.replace(actuator_delay=jnp.asarray(mk.actuator_delay),
                        sensor_delay=jnp.asarray(mk.sensor_delay),
                        sensor_interval=jnp.asarray(mk.sensor_interval)) for mk in models]
    batch = jax.tree.map(lambda *x: jnp.stack(x), *worlds)
    states = jax.tree.map(lambda *x: jnp.stack(x), *[jaxsim.make_state(w) for w in worlds])

    @jax.jit
    def run(batch, states, ctrls):
        def body(d, u):
            d = jax.vmap(lambda mm_, dd, uu: jaxsim.step(mm_, dd.replace(ctrl=uu)))(
                batch, d, u)
            return d, {f: getattr(d, f) for f in FIELDS}

        return jax.lax.scan(body, states, ctrls)[1]

    rng = np.random.default_rng(1)
    ctrls = rng.uniform(-1, 1, (30, len(models), mm.nu))
    traj = run(batch, states, jnp.asarray(ctrls))
    for w, (mk, md) in enumerate(zip(models, datas, strict=True)):
        for t in range(ctrls.shape[0]):
            md.ctrl[:] = ctrls[t, w]
            mujoco.mj_step(mk, md)
            for f in FIELDS:
                np.testing.assert_allclose(np.asarray(traj[f][t, w]), getattr(md, f),
                                           rtol=1e-11, atol=1e-12, err_msg=f"{f} step {t}")
        spec = mujoco.mjtState.mjSTATE_HISTORY
        hist = np.empty(mujoco.mj_stateSize(mk, spec))
        mujoco.mj_getState(mk, md, hist, spec)
        np.testing.assert_allclose(np.asarray(traj["history"][-1, w]), hist, atol=1e-12)


def test_reads_and_out_of_order_inserts_match_mujoco():
    """Buffers set by the user with irregular times, read at arbitrary times with every
    interpolation, then a step taken at times that insert in the middle of the buffer, at
    an existing sample time and before the oldest sample."""
    m, mm = _models("Euler")
    md = mujoco.MjData(mm)
    rng = np.random.default_rng(2)
    n0 = mm.actuator_history[2, 0]  # cubic actuator, 6 samples
    times = np.sort(rng.uniform(-0.2, 0.2, n0))
    values = rng.normal(size=n0)
    mujoco.mj_initCtrlHistory(mm, md, 2, times, values)
    d = jaxsim.init_ctrl_history(m, jaxsim.make_state(m), 2, times, values)
    s = 1  # framepos sensor, 5 samples of 3
    n1 = mm.sensor_history[s, 0]
    stimes = np.sort(rng.uniform(-0.2, 0.2, n1))
    svalues = rng.normal(size=(n1, 3))
    mujoco.mj_initSensorHistory(mm, md, s, stimes, svalues, 0.07)
    d = jaxsim.init_sensor_history(m, d, s, stimes, svalues, 0.07)
    np.testing.assert_array_equal(np.asarray(d.history), md.history)

    read_c = jax.jit(lambda d, t, k: jnp.stack([jaxsim.read_ctrl(m, d, 2, t, k)]),
                     static_argnums=2)
    read_s = jax.jit(lambda d, t, k: jaxsim.read_sensor(m, d, s, t, k), static_argnums=2)
    queries = np.concatenate([rng.uniform(-0.3, 0.3, 12), times + mm.actuator_delay[2],
                              stimes[:2] + mm.sensor_delay[s]])
    for interp in (0, 1, 2):
        for t in queries:
            res = np.zeros(1)
            ptr = mujoco.mj_readCtrl(mm, md, 2, t, res, interp)
            want = res if ptr is None else ptr
            np.testing.assert_allclose(np.asarray(read_c(d, t, interp)), want, atol=1e-13)
            res3 = np.zeros(3)
            ptr = mujoco.mj_readSensor(mm, md, s, t, res3, interp)
            want = res3 if ptr is None else ptr
            np.testing.assert_allclose(np.asarray(read_s(d, t, interp)), want, atol=1e-13,
                                       err_msg=f"sensor interp {interp} t {t}")

    step = jax.jit(jaxsim.step)
    for t in (times[2] - 1e-3, times[3], times[0] - 0.05, 0.5):
        md.time = t
        d = d.replace(time=jnp.asarray(t))
        mujoco.mj_step(mm, md)
        d = step(m, d)
        np.testing.assert_allclose(np.asarray(d.history), md.history, atol=1e-12,
                                   err_msg=f"insert at {t}")


def test_float32_zero_order_hold_picks_the_delayed_sample():
    """In single precision the accumulated time drifts by ulps; a delay of whole steps must
    still apply the control of exactly that many steps before (not the one before it)."""
    xml = """<mujoco><option timestep="0.002"/><worldbody><body><joint name="j"/>
      <geom size=".1"/></body></worldbody>
      <actuator><motor joint="j" nsample="4" delay="0.006"/></actuator></mujoco>"""
    m = jaxsim.load_string(xml, dtype=jnp.float32)
    ctrls = jnp.asarray(np.random.default_rng(4).uniform(-1, 1, 1500), jnp.float32)

    @jax.jit
    def run(d, u):
        def body(d, c):
            d = jaxsim.step(m, d.replace(ctrl=c[None]))
            return d, d.actuator_force[0]
        return jax.lax.scan(body, d, u)[1]

    force = np.asarray(run(jaxsim.make_state(m), ctrls))
    # step k applies the control given at step k - 3 (zeros before the first)
    want = np.concatenate([np.zeros(3, np.float32), np.asarray(ctrls)[:-3]])
    np.testing.assert_array_equal(force, want)
