"""Plastic springs (MuJoCo 4.0's springyield) and the energy flag, against MuJoCo C.

A chain with slide, hinge and ball joints, a spatial and a fixed tendon, each spring with a
yield, driven by random motor torques: positions, velocities, the plastic state, the spring
forces and the energy after every step (Euler and implicitfast), keyframe plastic states,
the reset, the mjSTATE_PLASTIC bit, the compiler's checks; the energy of an RK4 step (that
of its last stage, as MuJoCo leaves it).
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from compare import model_errors

import jaxsim
from jaxsim import MJCFError

jax.config.update("jax_enable_x64", True)

XML = """
<mujoco>
  <option gravity="0 0 -1" timestep="0.01" integrator="{integrator}">
    <flag energy="enable"/>
  </option>
  <worldbody>
    <site name="a" pos="0 0.3 0"/>
    <body pos="1 0 0">
      <joint name="s" type="slide" axis="1 0 0" stiffness="3" springyield=".02" damping=".5"/>
      <geom size=".1" mass="1"/>
      <site name="b"/>
    </body>
    <body pos="0 0 1">
      <joint name="h" type="hinge" stiffness="2" springyield="3" springref="10" damping=".1"/>
      <geom type="capsule" fromto="0 0 0 1 0 0" size=".05" mass="1"/>
      <body pos="1 0 0">
        <joint name="b" type="ball" stiffness="1" springyield="8"/>
        <geom type="box" size=".3 .2 .1" mass="1" pos=".3 0 0"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="t" stiffness="2" springlength="1.04 1.05" springyield=".01">
      <site site="a"/><site site="b"/>
    </spatial>
    <fixed name="f" stiffness="1" springyield=".1">
      <joint joint="s" coef="1"/><joint joint="h" coef=".5"/>
    </fixed>
  </tendon>
  <actuator>
    <motor joint="s"/><motor joint="h"/><motor joint="b" gear="0 0 1"/>
    <motor joint="b" gear="1 0 0"/>
  </actuator>
  <keyframe><key qpos="0.1 0.2 1 0 0 0" plastic="0.05"/></keyframe>
  {sensor}
</mujoco>
"""

_step = jax.jit(jaxsim.step)


def _pair(integrator="Euler", sensor=""):
    xml = XML.format(integrator=integrator, sensor=sensor)
    return jaxsim.load_string(xml, dtype=jnp.float64), mujoco.MjModel.from_xml_string(xml)


@pytest.mark.parametrize(("integrator", "sensor"), [
    ("Euler", ""), ("implicitfast", ""), ("RK4", ""),
    ("RK4", "<sensor><tendonpos tendon='t'/></sensor>"),  # RK4 with a separate forward
])
def test_plastic_springs_match_mujoco(integrator, sensor):
    """RK4 (ball rotations with the exact dexp^-1 of MuJoCo 4.0) moves a plastic tendon by
    its length at the initial state, linearised."""
    m, mm = _pair(integrator, sensor)
    md = mujoco.MjData(mm)
    assert m.nplastic == mm.nplastic == 10
    assert model_errors(m, mm) == []  # yields in radians, addresses, keyframe plastic
    np.testing.assert_array_equal(m.jnt_plasticadr, mm.jnt_plasticadr)
    np.testing.assert_array_equal(m.tendon_plasticadr, mm.tendon_plasticadr)
    np.testing.assert_allclose(np.asarray(m.key_plastic), mm.key_plastic, atol=1e-15)
    d = jaxsim.make_state(m)
    np.testing.assert_allclose(np.asarray(d.plastic), md.plastic, atol=1e-15)
    p0 = md.plastic.copy()
    rng = np.random.default_rng(1)
    for k in range(60):
        ctrl = rng.normal(size=mm.nu) * 10
        md.ctrl[:] = ctrl
        mujoco.mj_step(mm, md)
        d = _step(m, d.replace(ctrl=jnp.asarray(ctrl)))
        for f in ("qpos", "qvel", "plastic", "qfrc_spring", "energy"):
            np.testing.assert_allclose(np.asarray(getattr(d, f)), getattr(md, f), atol=1e-9,
                                       err_msg=f"step {k} {f}")
    moved = np.abs(md.plastic - p0) > 1e-3
    # every kind of spring yielded: slide, hinge, ball, both tendons
    assert moved[[0, 1]].all() and moved[2:6].any() and moved[6:8].any() and moved[8:].any()
    # the keyframe and the state bits carry the plastic state
    mujoco.mj_resetDataKeyframe(mm, md, 0)
    dk = jaxsim.make_state(m, keyframe=0)
    np.testing.assert_allclose(np.asarray(dk.plastic), md.plastic, atol=1e-15)
    bits = int(jaxsim.StateBit.PLASTIC)
    vec = jaxsim.get_state(m, d, bits)
    assert vec.shape == (mm.nplastic,)
    np.testing.assert_array_equal(np.asarray(vec), np.asarray(d.plastic))
    back = jaxsim.set_state(m, dk, vec, bits)
    np.testing.assert_array_equal(np.asarray(back.plastic), np.asarray(d.plastic))


def test_energy_of_rk4_step_is_its_last_stage():
    xml = """<mujoco><option timestep="0.01" integrator="RK4"><flag energy="enable"/></option>
      <worldbody><body pos="0 0 1"><joint type="hinge" stiffness="2" springyield="20"/>
      <geom type="capsule" fromto="0 0 0 1 0 0" size=".05" mass="1"/></body></worldbody>
      </mujoco>"""
    m, mm = jaxsim.load_string(xml, dtype=jnp.float64), mujoco.MjModel.from_xml_string(xml)
    md = mujoco.MjData(mm)
    md.qvel[:] = 3.0
    d = jaxsim.make_state(m).replace(qvel=jnp.full(1, 3.0))
    for _ in range(20):
        mujoco.mj_step(mm, md)
        d = _step(m, d)
    np.testing.assert_allclose(np.asarray(d.energy), md.energy, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(d.plastic), md.plastic, rtol=1e-10)
    assert md.plastic[0] != 0  # the spring yielded


@pytest.mark.parametrize("bad", ['<joint type="hinge" springyield="-1"/>',
                                 '<joint type="free" springyield="1"/>'])
def test_springyield_checks(bad):
    xml = f"<mujoco><worldbody><body>{bad}<geom size='.1'/></body></worldbody></mujoco>"
    if "-1" in bad:
        with pytest.raises(ValueError):
            mujoco.MjModel.from_xml_string(xml)
    with pytest.raises(MJCFError, match="springyield"):
        jaxsim.load_string(xml)
