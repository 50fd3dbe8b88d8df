"""Sensors (jaxsim.sensor) against MuJoCo's mj_forward, one small model per group of types.

Each model is loaded by both, set to random states (positions, velocities, controls, applied
forces), and sensordata is compared sensor by sensor in float64.
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim.mjcf.sections_sensor import UncomputedSensorWarning

TOL = 1e-8
_FWD = jax.jit(jaxsim.forward)

_BODIES = '''
  <worldbody>
    <geom name="floor" type="plane" size="3 3 .1"/>
    <site name="wsite" pos="0.3 0.2 0.1" quat="0.9 0.1 0.3 0.2"/>
    <camera name="wcam" pos="1 1 1" xyaxes="1 0 0 0 1 1" resolution="320 240"/>
    <camera name="pix" pos="0 -2 1" xyaxes="1 0 0 0 .4 1" resolution="640 480"
            sensorsize=".01 .008" focal=".012 .011"/>
    <body name="b1" pos="0 0 1.2" quat="0.9 0.2 0.1 0.3">
      <joint name="h1" type="hinge" axis="0 1 1" range="-0.4 0.5" stiffness="2" damping="0.1"/>
      <geom name="g1" type="capsule" size=".05 .2" pos=".1 0 0" euler="10 20 30"/>
      <site name="s1" pos=".1 .1 -.1" euler="30 0 45" type="box" size=".1 .2 .3"/>
      <camera name="c1" pos="0 .2 0" euler="0 40 10"/>
      <body name="b2" pos=".3 0 -.2">
        <joint name="s2" type="slide" axis="1 0 .3" range="-0.2 0.3" margin="0.05"/>
        <joint name="h2" type="hinge" axis="1 0 0" stiffness="1" springref="0.3"/>
        <inertial pos=".02 .03 .01" quat="0.8 0.3 0.1 0.5" mass="0.7" diaginertia=".01 .02 .03"/>
        <geom name="g2" type="box" size=".05 .06 .07"/>
        <site name="s2" pos="0 .05 .1" euler="10 70 3"/>
        <body name="b3" pos="0 .2 0">
          <joint name="ball" type="ball" range="0 0.6"/>
          <geom name="g3" type="sphere" size=".05" pos=".05 0 0"/>
          <site name="s3" pos=".05 0 .02"/>
        </body>
      </body>
    </body>
    <body name="free" pos="0.5 -0.5 1">
      <freejoint name="fj"/>
      <geom name="gf" type="ellipsoid" size=".1 .05 .08"/>
      <site name="sf" pos=".02 .01 0" euler="5 6 7"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="ten" limited="true" range="-0.3 0.2" stiffness="3" springlength="-0.1 0.1">
      <joint joint="h1" coef="1"/><joint joint="s2" coef="-0.5"/>
    </fixed>
    {spatial}
  </tendon>
  <actuator>
    <motor name="m1" joint="h1" gear="2"/>
    <position name="p2" joint="s2" kp="10"/>
    <motor name="mt" tendon="ten"/>
    <motor name="mt2" tendon="ten" gear="0.5"/>
    <velocity name="vb" joint="h2" kv="3"/>
  </actuator>
'''


_SPATIAL = ('<spatial name="spt" limited="true" range="0.1 0.45" margin="0.02">'
            '<site site="wsite"/><site site="s2"/></spatial>')
_BODIES = _BODIES.replace("{spatial}", _SPATIAL)


def _xml(sensors: str, option: str = '<flag contact="disable"/>') -> str:
    return (f'<mujoco><option gravity="0.3 -0.2 -9.81" magnetic="0.1 -0.4 0.3">{option}'
            f'</option>{_BODIES}<sensor>{sensors}</sensor></mujoco>')


MODELS = {
    "joints_tendons_limits": _xml('''
      <jointpos joint="h1"/><jointpos joint="s2" cutoff="0.05"/><jointvel joint="h2"/>
      <jointvel joint="s2"/><tendonpos tendon="ten"/><tendonpos tendon="spt"/>
      <tendonvel tendon="spt"/><actuatorpos actuator="m1"/><actuatorpos actuator="mt"/>
      <actuatorvel actuator="p2"/><actuatorfrc actuator="p2" cutoff="0.3"/>
      <actuatorfrc actuator="vb"/><jointactuatorfrc joint="h1"/><jointactuatorfrc joint="h2"/>
      <tendonactuatorfrc tendon="ten"/><tendonactuatorfrc tendon="spt"/>
      <ballquat joint="ball"/><ballangvel joint="ball"/><clock/>
      <e_potential/><e_kinetic/>
      <jointlimitpos joint="h1"/><jointlimitpos joint="s2"/><jointlimitpos joint="ball"/>
      <jointlimitvel joint="h1"/><jointlimitvel joint="s2"/><jointlimitvel joint="ball"/>
      <jointlimitfrc joint="h1"/><jointlimitfrc joint="s2"/><jointlimitfrc joint="ball"/>
      <tendonlimitpos tendon="ten"/><tendonlimitpos tendon="spt"/>
      <tendonlimitvel tendon="ten"/><tendonlimitvel tendon="spt"/>
      <tendonlimitfrc tendon="ten"/><tendonlimitfrc tendon="spt" cutoff="0.5"/>'''),
    "frames": _xml('''
      <framepos objtype="site" objname="s1"/><framepos objtype="body" objname="b2"/>
      <framepos objtype="xbody" objname="b2" reftype="site" refname="s3"/>
      <framepos objtype="geom" objname="g1" reftype="camera" refname="c1"/>
      <framepos objtype="camera" objname="wcam" reftype="body" refname="b3"/>
      <framequat objtype="site" objname="s2"/><framequat objtype="body" objname="b2"/>
      <framequat objtype="geom" objname="g1" reftype="xbody" refname="free"/>
      <framequat objtype="camera" objname="c1" reftype="geom" refname="g3"/>
      <framequat objtype="xbody" objname="b3" reftype="body" refname="b2"/>
      <framexaxis objtype="site" objname="s3"/><frameyaxis objtype="body" objname="b3" reftype="site" refname="s1"/>
      <framezaxis objtype="geom" objname="gf" reftype="xbody" refname="b1"/>
      <framezaxis objtype="site" objname="wsite"/>
      <subtreecom body="b2"/><subtreecom body="world"/><magnetometer site="s2"/>
      <magnetometer site="wsite"/>
      <camprojection site="s3" camera="wcam"/><camprojection site="sf" camera="pix"/>
      <velocimeter site="s2"/><velocimeter site="wsite"/><gyro site="s3"/><gyro site="sf"/>
      <framelinvel objtype="site" objname="s3"/><framelinvel objtype="body" objname="b2" reftype="site" refname="sf"/>
      <framelinvel objtype="geom" objname="g1" reftype="xbody" refname="b3"/>
      <framelinvel objtype="site" objname="wsite" reftype="body" refname="b2"/>
      <frameangvel objtype="xbody" objname="b3"/><frameangvel objtype="camera" objname="c1" reftype="geom" refname="gf"/>
      <subtreelinvel body="b1"/><subtreelinvel body="world"/><subtreelinvel body="free"/>
      <subtreeangmom body="b1"/><subtreeangmom body="b2"/><subtreeangmom body="world"/>
      <accelerometer site="s2"/><accelerometer site="sf"/><accelerometer site="wsite"/>
      <framelinacc objtype="body" objname="b3"/><framelinacc objtype="site" objname="wsite"/>
      <frameangacc objtype="geom" objname="g2"/><frameangacc objtype="camera" objname="c1"/>
      <force site="s2"/><force site="sf" cutoff="2"/><torque site="s3"/><torque site="s1"/>
      <distance geom1="g1" geom2="gf" cutoff="2"/><normal body1="b1" body2="free" cutoff="3"/>
      <fromto geom1="g2" geom2="g3" cutoff="1"/><fromto geom1="floor" geom2="g2" cutoff="5"/>
      <distance geom1="g2" geom2="gf" cutoff="0.5"/><fromto body1="free" body2="b1" cutoff="9"/>
      <distance body1="b2" body2="b3"/><normal geom1="gf" geom2="floor" cutoff="4"/>'''
      ).replace(_SPATIAL, ''),  # no spatial tendon: force / torque sensors reject them
}

# contact forces reach touch, force, torque and accelerometers through cfrc_ext
_CONTACT = '''
<mujoco>
  <option cone="{cone}" gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 .1"/>
    <body name="box" pos="0 0 0.09">
      <freejoint/>
      <geom name="gb" type="box" size=".1 .1 .1" condim="{condim}"/>
      <site name="zone" type="box" size=".12 .12 .05" pos="0 0 -.08"/>
      <site name="zs" type="sphere" size=".3"/>
      <site name="top" type="cylinder" size=".05 .02" pos="0 0 .1"/>
      <body name="arm" pos="0 0 .2">
        <joint name="hinge" axis="1 0 0" range="-0.3 0.3"/>
        <geom type="capsule" size=".03 .1" pos="0 0 .1"/>
        <site name="armsite" pos="0 0 .05" type="capsule" size=".05 .1"/>
      </body>
    </body>
    <body name="ball" pos=".3 0 0.05">
      <freejoint/>
      <geom name="gs" type="sphere" size=".06" condim="{condim}"/>
      <site name="ballzone" type="ellipsoid" size=".07 .08 .09"/>
    </body>
  </worldbody>
  <equality><connect body1="arm" body2="ball" anchor="0 0 .2" solref="0.05 1"/></equality>
  <sensor>
    <touch site="zone"/><touch site="zs" cutoff="5"/><touch site="top"/><touch site="ballzone"/>
    <touch site="armsite"/>
    <force site="armsite"/><torque site="armsite"/><force site="zone"/><torque site="zone"/>
    <accelerometer site="zone"/><framelinacc objtype="body" objname="ball"/>
    <jointlimitfrc joint="hinge"/>
    <insidesite site="zs" objtype="body" objname="arm"/>
    <insidesite site="ballzone" objtype="geom" objname="gs"/>
    <insidesite site="zone" objtype="xbody" objname="box"/>
    <insidesite site="armsite" objtype="site" objname="top"/>
    <insidesite site="top" objtype="body" objname="ball"/>
    <insidesite site="zs" objtype="body" objname="ball"/>
    <contact num="3" data="found force torque dist pos normal tangent"/>
    <contact body1="box" num="2" data="found force normal"/>
    <contact subtree1="box" geom2="floor" num="2" data="force torque pos"/>
    <contact body2="ball" num="2" data="found force tangent" reduce="maxforce"/>
    <contact geom1="floor" num="4" data="dist pos" reduce="mindist"/>
    <contact site="zs" data="found dist normal"/>
    <contact site="ballzone" geom2="floor" data="found force"/>
    <contact geom1="gs" body2="world" data="found normal"/>
    <contact body1="ball" subtree2="world" data="found force torque dist pos normal tangent"
             reduce="netforce"/>
    <contact body1="box" data="found force torque pos" reduce="netforce" num="2"/>
  </sensor>
</mujoco>'''
for _cone, _dim in (("pyramidal", 3), ("elliptic", 4), ("pyramidal", 1)):
    MODELS[f"contact_{_cone}_{_dim}"] = _CONTACT.format(cone=_cone, condim=_dim)
# each model is a compilation of forward; the default run covers each group once
# spatial tendons pull on the bodies of their path points (cfrc_ext, MuJoCo 4.0): sites,
# sphere and cylinder wrapping (side site), a pulley; spring, damper, actuator, friction
# loss, limit and a tendon equality all act through the tendon force
MODELS["spatial_tendon_forces"] = """
<mujoco>
  <worldbody>
    <site name="w0" pos="0 0 1.2"/>
    <body name="a" pos="0.2 0 1">
      <joint name="ab" type="ball"/>
      <geom size=".05"/>
      <site name="sa" pos="0.1 0.05 0"/>
      <site name="sideA" pos="0.25 0.2 0"/>
      <body name="b" pos="0.3 0 0">
        <joint name="bh" type="hinge" axis="0 1 0" range="-1 1"/>
        <geom name="wrapS" type="sphere" size=".04"/>
        <site name="sb" pos="0.15 0 0.03"/>
        <site name="fb" pos="0 0 0"/>
        <body name="c" pos="0.3 0 0">
          <joint name="cs" type="slide" axis="1 0 0" range="-.1 .1"/>
          <geom name="wrapC" type="cylinder" size=".03 .05" euler="90 0 0"/>
          <site name="sc" pos="0.12 0 -0.02"/>
          <site name="fc" pos="0 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="t1" stiffness="30" springlength="0.2" damping="0.5" frictionloss="0.3"
             range="0.3 0.62">
      <site site="w0"/><site site="sa"/><geom geom="wrapS" sidesite="sideA"/><site site="sb"/>
      <pulley divisor="2"/>
      <site site="sb"/><geom geom="wrapC"/><site site="sc"/>
    </spatial>
    <spatial name="t2" stiffness="5"><site site="sa"/><site site="sc"/></spatial>
  </tendon>
  <equality><tendon tendon1="t2" tendon2="t1" polycoef="0 0.5 0.2 0 0"/></equality>
  <actuator><motor tendon="t1" gear="3"/></actuator>
  <sensor>
    <force site="fb"/><torque site="fb"/><force site="fc"/><torque site="fc"/>
    <force site="sa"/><torque site="sa"/>
  </sensor>
</mujoco>"""
FULL = {"contact_pyramidal_1"}


def _random_states(m: mujoco.MjModel, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        d = mujoco.MjData(m)
        mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv) * (0.05 if i == 0 else 0.4), 1)
        d.qvel[:] = rng.normal(size=m.nv) * 0.7
        d.ctrl[:] = rng.normal(size=m.nu)
        d.qfrc_applied[:] = rng.normal(size=m.nv) * 0.1
        d.xfrc_applied[1:] = rng.normal(size=(m.nbody - 1, 6)) * 0.2
        d.time = rng.uniform(0, 3)
        if i == n - 1:  # let contacts and limits settle in
            for _ in range(30):
                mujoco.mj_step(m, d)
        yield d


def _state(model, d):
    st = jaxsim.make_state(model)
    return st.replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel),
                      ctrl=jnp.asarray(d.ctrl), act=jnp.asarray(d.act),
                      qfrc_applied=jnp.asarray(d.qfrc_applied),
                      xfrc_applied=jnp.asarray(d.xfrc_applied),
                      qacc_warmstart=jnp.asarray(d.qacc_warmstart),
                      time=jnp.asarray(d.time))


def _sensor_errors(m, ours, ref) -> list[str]:
    bad = []
    for i in range(m.nsensor):
        a, n = m.sensor_adr[i], m.sensor_dim[i]
        x, y = np.asarray(ours[a:a + n]), ref[a:a + n]
        e = np.max(np.abs(x - y)) / (1 + np.max(np.abs(y)))
        if not e <= TOL:
            typ = mujoco.mjtSensor(m.sensor_type[i]).name
            bad.append(f"sensor {i} {typ}: ours {x} ref {y}")
    return bad


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sensordata_matches_mujoco(name):
    if name in FULL and not os.environ.get("JAXSIM_TEST_ALL"):
        pytest.skip("set JAXSIM_TEST_ALL=1 (another compilation)")
    xml = MODELS[name]
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    bad = []
    nonzero = np.zeros(m.nsensordata, bool)
    for d in _random_states(m, 3):
        mujoco.mj_forward(m, d)
        out = _FWD(model, _state(model, d))
        bad += _sensor_errors(m, out.sensordata, d.sensordata)
        nonzero |= d.sensordata != 0
    assert not bad, "\n".join(bad)
    if name.startswith("contact"):
        assert nonzero[0], "the touch sensor saw no contact: the test is vacuous"
        inside = [i for i in range(m.nsensor)
                  if m.sensor_type[i] == mujoco.mjtSensor.mjSENS_INSIDESITE]
        # some sites hold their object, some do not (over the states)
        assert nonzero[m.sensor_adr[inside]].any() and not nonzero[m.sensor_adr[inside]].all()
        contact = [i for i in range(m.nsensor)
                   if m.sensor_type[i] == mujoco.mjtSensor.mjSENS_CONTACT]
        assert nonzero[m.sensor_adr[contact]].all(), "a contact sensor found nothing"


_UNCOMPUTED = ['<user dim="2"/>', '<user dim="1" needstage="vel"/>']
_SMALL = '''<mujoco><option>{option}</option><worldbody><geom name="w" size=".1"/>
  <camera name="c" pos="0 0 2" resolution="10 10"/>
  <body name="b" pos="0 0 1"><joint name="h" axis="0 1 0"/><geom name="g" size=".1" pos=".2 0 0"/>
  <site name="s" pos=".1 0 0"/></body></worldbody>
  <sensor><jointpos joint="h"/>{sensors}<framepos objtype="site" objname="s"/></sensor></mujoco>'''


def test_uncomputed_sensors_warn_and_read_nan():
    """Sensors jaxsim does not compute yet load with a warning naming each one, and read
    NaN; the other sensors of the model are still computed."""
    xml = _SMALL.format(option="", sensors="".join(_UNCOMPUTED))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = jaxsim.load_string(xml, dtype=jnp.float64)
    msgs = [str(w.message) for w in caught if issubclass(w.category, UncomputedSensorWarning)]
    assert len(msgs) == len(_UNCOMPUTED), msgs
    assert all("<string>:" in msg for msg in msgs), msgs  # the line of the element
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qpos[:] = 0.3
    mujoco.mj_forward(m, d)
    out = _FWD(model, _state(model, d))
    data = np.asarray(out.sensordata)
    for i in range(m.nsensor):
        a, n = m.sensor_adr[i], m.sensor_dim[i]
        if i in (0, m.nsensor - 1):  # jointpos, framepos
            np.testing.assert_allclose(data[a:a + n], d.sensordata[a:a + n], atol=1e-12)
        else:
            assert np.all(np.isnan(data[a:a + n])), (i, data[a:a + n])


def test_disabled_sensors_leave_sensordata():
    xml = _SMALL.format(option='<flag sensor="disable"/>', sensors="")
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    out = _FWD(model, jaxsim.make_state(model))
    assert np.all(np.asarray(out.sensordata) == 0)
