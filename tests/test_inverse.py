"""Inverse dynamics (jaxsim.inverse) against MuJoCo's mj_inverse.

As the referee: forward at a state, then the inverse at that state with MuJoCo's qacc;
qfrc_inverse must match. One model without constraints, and one with contacts, limits and
an equality under both friction cones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim

_INV = jax.jit(jaxsim.inverse)

_SMOOTH = '''
<mujoco>
  <option gravity="0.2 0 -9.81"/>
  <worldbody>
    <body pos="0 0 1">
      <joint name="h1" axis="0 1 0" damping="0.3" stiffness="2"/>
      <geom type="capsule" size=".05 .2" pos="0 0 -.2"/>
      <body pos="0 0 -.4">
        <joint name="s1" type="slide" axis="1 0 0"/>
        <joint type="ball"/>
        <geom type="box" size=".05 .06 .07"/>
      </body>
    </body>
    <body pos="1 0 1"><freejoint/><geom type="ellipsoid" size=".1 .2 .3"/></body>
  </worldbody>
  <tendon><fixed stiffness="1"><joint joint="h1" coef="1"/><joint joint="s1" coef="2"/></fixed></tendon>
  <actuator><motor joint="h1"/><velocity joint="s1" kv="2"/></actuator>
  <sensor><accelerometer site="acc"/></sensor>
</mujoco>'''.replace('<geom type="box"', '<site name="acc" pos=".1 0 0"/><geom type="box"')

_CONTACT = '''
<mujoco>
  <option cone="{cone}" impratio="{impratio}"/>
  <worldbody>
    <geom type="plane" size="3 3 .1" friction="0.8 0.02 0.001"/>
    <body pos="0 0 0.095">
      <freejoint/>
      <geom type="box" size=".1 .1 .1" condim="{condim}"/>
      <body pos="0 0 .2">
        <joint name="hinge" axis="1 0 0" range="-0.3 0.3" frictionloss="0.05"/>
        <geom type="capsule" size=".03 .1" pos="0 0 .1"/>
      </body>
    </body>
    <body pos=".3 0 0.055">
      <freejoint/>
      <geom type="sphere" size=".06" condim="{condim}"/>
    </body>
  </worldbody>
</mujoco>'''

MODELS = {"smooth": _SMOOTH}
for _cone, _dim, _imp in (("pyramidal", 3, 1), ("elliptic", 4, 2), ("elliptic", 6, 1)):
    MODELS[f"contact_{_cone}_{_dim}"] = _CONTACT.format(cone=_cone, condim=_dim, impratio=_imp)


def _state(model, d):
    st = jaxsim.make_state(model)
    return st.replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel),
                      ctrl=jnp.asarray(d.ctrl), qfrc_applied=jnp.asarray(d.qfrc_applied),
                      xfrc_applied=jnp.asarray(d.xfrc_applied), qacc=jnp.asarray(d.qacc),
                      time=jnp.asarray(d.time))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inverse_matches_mujoco(name):
    xml = MODELS[name]
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    rng = np.random.default_rng(1)
    for i in range(3):
        d = mujoco.MjData(m)
        mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv) * 0.02, 1)
        d.qvel[:] = rng.normal(size=m.nv) * 0.3
        d.ctrl[:] = rng.normal(size=m.nu)
        for _ in range(10 * i):  # settle into contact
            mujoco.mj_step(m, d)
        d.qfrc_applied[:] = rng.normal(size=m.nv)
        mujoco.mj_forward(m, d)
        d.qacc[:] += rng.normal(size=m.nv) * 0.5  # any acceleration, not only the forward one
        mujoco.mj_inverse(m, d)
        out = _INV(model, _state(model, d))
        ref = d.qfrc_inverse
        err = np.max(np.abs(np.asarray(out.qfrc_inverse) - ref)) / (1 + np.max(np.abs(ref)))
        assert err < 1e-8, (i, np.asarray(out.qfrc_inverse), ref)
        if m.nsensordata:
            np.testing.assert_allclose(out.sensordata, d.sensordata, atol=1e-8, rtol=1e-8)
    if name.startswith("contact"):
        assert d.nefc > 0, "no constraint rows: the test is vacuous"


_FWDINV = """<mujoco><option><flag fwdinv="enable"/></option><worldbody>
  <geom type="plane" size="2 2 .1"/>
  <body pos="0 0 .09"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
  <body pos="1 0 1"><joint name="h" axis="0 1 0" range="-.1 .1"/>
    <geom type="capsule" fromto="0 0 0 .3 0 0" size=".05"/></body>
  </worldbody><actuator><motor joint="h"/></actuator></mujoco>"""


def test_fwdinv_flag_fills_solver_fwdinv():
    """With <flag fwdinv>, step compares forward and inverse dynamics (mj_compareFwdInv):
    both differences are at the solver's tolerance, as in MuJoCo; without it they stay 0."""
    m = mujoco.MjModel.from_xml_string(_FWDINV)
    d = mujoco.MjData(m)
    model = jaxsim.load_string(_FWDINV, dtype=jnp.float64)
    step = jax.jit(jaxsim.step)
    s = jaxsim.make_state(model)
    for _ in range(5):
        d.ctrl[0] = 0.5
        s = s.replace(ctrl=jnp.asarray(d.ctrl))
        mujoco.mj_step(m, d)
        s = step(model, s)
        ours = np.asarray(s.solver_fwdinv)
        assert np.all(np.isfinite(ours))
        np.testing.assert_allclose(ours, d.solver_fwdinv, atol=1e-5)
        np.testing.assert_allclose(np.asarray(s.qpos), d.qpos, atol=1e-9)
    off = model.replace(opt=model.opt.replace(enableflags=0))
    assert np.all(np.asarray(step(off, jaxsim.make_state(off)).solver_fwdinv) == 0)


_DISCRETE = _SMOOTH.replace('<option gravity="0.2 0 -9.81"/>', '''<option gravity="0.2 0 -9.81"
  integrator="{integrator}" density="1.2" viscosity="0.01"><flag invdiscrete="enable"/>
  </option>''')


@pytest.mark.parametrize("integrator", ["Euler", "implicit", "implicitfast"])
def test_invdiscrete_matches_mujoco(integrator):
    """With <flag invdiscrete>, qacc is the integrator's discrete-time acceleration: the
    inverse of one step's (qvel' - qvel) / h gives back the applied forces, and
    qfrc_inverse equals mj_inverse's for any qacc (damping, fluid forces and a free body
    make the integrator's matrix differ from M)."""
    xml = _DISCRETE.format(integrator=integrator)
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    rng = np.random.default_rng(3)
    d = mujoco.MjData(m)
    d.qvel[:] = rng.normal(size=m.nv)
    d.ctrl[:] = rng.normal(size=m.nu)
    d.qfrc_applied[:] = rng.normal(size=m.nv)
    mujoco.mj_forward(m, d)
    d2 = mujoco.MjData(m)
    mujoco.mj_copyData(d2, m, d)
    mujoco.mj_step(m, d2)
    d.qacc[:] = (d2.qvel - d.qvel) / m.opt.timestep
    for k in range(2):
        if k:
            d.qacc[:] += rng.normal(size=m.nv)
        qacc = d.qacc.copy()
        mujoco.mj_inverse(m, d)
        out = _INV(model, _state(model, d))
        np.testing.assert_allclose(np.asarray(out.qfrc_inverse), d.qfrc_inverse, atol=1e-9,
                                   rtol=1e-9)
        np.testing.assert_array_equal(np.asarray(out.qacc), qacc)  # restored
        np.testing.assert_allclose(np.asarray(out.sensordata), d.sensordata, atol=1e-8)
        if not k:  # the discrete-time inverse recovers the forces that made the step
            want = d.qfrc_applied + d.qfrc_actuator
            np.testing.assert_allclose(np.asarray(out.qfrc_inverse), want, atol=1e-8)


def test_invdiscrete_rejects_rk4():
    xml = _DISCRETE.format(integrator="RK4")
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    with pytest.raises(ValueError, match="RK4"):
        jaxsim.inverse(model, jaxsim.make_state(model))
