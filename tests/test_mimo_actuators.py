"""MuJoCo 4.0's multi-input multi-output actuators against MuJoCo C: SO(3) orientation servos,
PID servos and DC motors.

Models: the corpus orientation.xml (three outputs per actuator: ball joints, expmap and
quaternion set-points) and dcmotor.xml (thermal, LuGre and current states), and two models
of docs/design/mimo: so3_site.xml (site/refsite transmissions, integrator set-points with
actearly, actrange and the re-anchoring of mj_advance, the force-norm limit) and pid_dc.xml
(every PID input subset, slew and integral states with anti-windup, ball-joint wrapping;
DC motors with every state, voltage limits and a passive one). At random states: the
transmission (length, moment, velocity), act_dot, actuator_force, qfrc_actuator and qacc of
mj_forward; act, qvel and qpos after mj_step (Euler and implicitfast); the actuators' share
of qDeriv (mjd_actuator_vel). Plus: the controls mj_resetData gives, delayed multi-input
controls read from the history buffer, actuator sensors with three values, gradients at
the zero rotation.
"""

import functools
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import CORPUS

import jaxsim
from jaxsim import integrator
from jaxsim.state import make_state

jax.config.update("jax_enable_x64", True)

_DOCS = os.path.join(os.path.dirname(__file__), "..", "docs", "design", "mimo")
MODELS = {
    "orientation": CORPUS / "engine" / "testdata" / "actuation" / "orientation.xml",
    "dcmotor": CORPUS / "engine" / "testdata" / "derivative" / "dcmotor.xml",
    "so3_site": os.path.join(_DOCS, "so3_site.xml"),
    "pid_dc": os.path.join(_DOCS, "pid_dc.xml"),
}
FORWARD = ("actuator_length", "actuator_velocity", "actuator_force", "qfrc_actuator",
           "act_dot", "qacc")


def _dense_moment(mm, md):
    out = np.zeros((mm.nout, mm.nv))
    for r in range(mm.nout):
        adr, nnz = md.moment_rowadr[r], md.moment_rownnz[r]
        out[r, md.moment_colind[adr:adr + nnz]] = md.actuator_moment[adr:adr + nnz]
    return out


def _random_state(mm, md, rng, t, small=False):
    """A random state; small: small velocities and activations (the stiff dcmotor.xml,
    LuGre sigma0 = 1e4)."""
    mujoco.mj_resetData(mm, md)
    for j in range(mm.njnt):
        a = mm.jnt_qposadr[j]
        if mm.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
            q = rng.normal(size=4)
            md.qpos[a:a + 4] = q / np.linalg.norm(q)
        elif mm.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE:
            md.qpos[a] = rng.normal()
    md.qvel[:] = rng.normal(size=mm.nv) * (0.1 if small else 1.0)
    md.ctrl[:] = rng.normal(size=mm.nu) * (3.0 if t % 2 else 0.3)
    if mm.na:
        md.act[:] = rng.normal(size=mm.na) * (2.0 if t % 3 else 0.1) * (1e-5 if small else 1)


@functools.cache
def _compiled():
    def deriv(m, d):  # implicitfast's qDeriv: damping and actuators
        d = jaxsim.forward(m, d)
        return integrator.actuator_vel_deriv(m, d) + integrator.damping_vel_deriv(m, d)

    return jax.jit(jaxsim.forward), jax.jit(jaxsim.step), jax.jit(deriv)


def _pair(name, integ="mjINT_EULER"):
    mm = mujoco.MjModel.from_xml_path(str(MODELS[name]))
    mm.opt.integrator = getattr(mujoco.mjtIntegrator, integ)
    m = jaxsim.load(MODELS[name], dtype=jnp.float64)
    return m.replace(opt=m.opt.replace(integrator=int(mm.opt.integrator))), mm


def _state(m, md):
    return make_state(m).replace(qpos=jnp.asarray(md.qpos), qvel=jnp.asarray(md.qvel),
                                 ctrl=jnp.asarray(md.ctrl), act=jnp.asarray(md.act))


def _close(ours, ref, what, rtol=1e-9, atol=1e-9):
    ours, ref = np.asarray(ours), np.asarray(ref)
    scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
    err = float(np.max(np.abs(ours - ref), initial=0.0))
    assert err <= atol + rtol * scale, f"{what}: max error {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("integ", ["mjINT_EULER", "mjINT_IMPLICITFAST"])
def test_forward_and_step_match_mujoco(name, integ):
    m, mm = _pair(name, integ)
    md = mujoco.MjData(mm)
    fwd, stp, _ = _compiled()
    rng = np.random.default_rng(11)
    assert (m.nu, m.nactuator, m.nout, m.na) == (mm.nu, mm.nactuator, mm.nout, mm.na)
    for t in range(6):
        _random_state(mm, md, rng, t, name == "dcmotor")
        d = _state(m, md)
        mujoco.mj_forward(mm, md)
        ours = fwd(m, d)
        for f in FORWARD:
            _close(getattr(ours, f), getattr(md, f), f"{name} t={t} {f}")
        _close(ours.actuator_moment, _dense_moment(mm, md), f"{name} t={t} moment")
        if integ == "mjINT_IMPLICITFAST" and name == "so3_site":
            continue  # its force-norm limits sit at the bound: see test_vel_deriv
        mujoco.mj_step(mm, md)
        ours = stp(m, d)
        for f in ("act", "qvel", "qpos"):
            _close(getattr(ours, f), getattr(md, f), f"{name} t={t} step {f}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vel_deriv_matches_mujoco(name):
    """The actuators' part of qDeriv (implicitfast: passive damping plus actuators).

    MuJoCo drops an SO3 actuator whose force norm is at its bound, judged on the rounded
    norm of the clamped force, which one ulp decides either way; jaxsim drops every
    clamped one. States with a clamped SO3 force are therefore skipped, and so3_site.xml
    runs without its force limits (its random states nearly all reach them).
    """
    m, mm = _pair(name, "mjINT_IMPLICITFAST")
    if name == "so3_site":
        mm.actuator_forcelimited[:] = 0
        m = m.replace(actuator_forcelimited=np.zeros(m.nactuator, np.int64))
    md = mujoco.MjData(mm)
    _, _, deriv = _compiled()
    rng = np.random.default_rng(5)
    compared = 0
    for t in range(8):
        _random_state(mm, md, rng, t, name == "dcmotor")
        d = _state(m, md)
        mujoco.mj_forward(mm, md)
        clamped = False
        for i in range(mm.nactuator):
            o = mm.actuator_outadr[i]
            if mm.actuator_outnum[i] == 3 and mm.actuator_forcelimited[i]:
                n = np.linalg.norm(md.actuator_force[o:o + 3])
                clamped |= abs(n - mm.actuator_forcerange[i, 1]) < 1e-9
        if clamped:
            continue
        ours = np.asarray(deriv(m, d))
        mujoco.mj_step(mm, md)
        ref = np.zeros((mm.nv, mm.nv))
        for r in range(mm.nv):
            a, z = mm.D_rowadr[r], mm.D_rownnz[r]
            ref[r, mm.D_colind[a:a + z]] = md.qDeriv[a:a + z]
        _close(ours, ref, f"{name} t={t} qDeriv")
        compared += 1
    assert compared >= 4


SMALL = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <body name="b" pos="0 0 1">
      <joint name="ball" type="ball" damping=".1"/>
      <geom type="box" size=".1 .2 .3" mass="1"/>
      <site name="s" pos=".1 0 0" euler="5 0 15"/>
      <body pos="0 0 -.4">
        <joint name="h" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".04"/>
      </body>
    </body>
    <site name="ref" pos="0 0 .5" euler="10 20 30"/>
  </worldbody>
  <actuator>
    <orientation name="o1" joint="ball" kp="4" kv=".5" nsample="3" delay="0.004"/>
    <orientation name="o2" site="s" refsite="ref" kp="2" dampratio="1" input="quat"/>
    <pid name="p" joint="h" kp="5" kv=".3" ki="2" input="pos vel ff" nsample="4"
         delay="0.006" interp="linear"/>
  </actuator>
  <sensor>
    <actuatorpos actuator="o1"/><actuatorvel actuator="o2"/><actuatorfrc actuator="o1"/>
    <actuatorfrc actuator="p"/><actuatorpos actuator="p"/>
  </sensor>
</mujoco>
"""


def test_reset_delays_and_sensors_match_mujoco():
    m = jaxsim.load_string(SMALL, dtype=jnp.float64)
    mm = mujoco.MjModel.from_xml_string(SMALL)
    md = mujoco.MjData(mm)
    d = make_state(m)
    # a quaternion set-point resets to the identity, the others to zero
    np.testing.assert_array_equal(np.asarray(d.ctrl), md.ctrl)
    assert md.ctrl[3] == 1.0
    np.testing.assert_array_equal(np.asarray(m.sensor_dim), mm.sensor_dim)
    assert m.nhistory == mm.nhistory
    _, stp, _ = _compiled()
    rng = np.random.default_rng(2)
    for k in range(12):
        ctrl = rng.normal(size=mm.nu)
        md.ctrl[:] = ctrl
        d = d.replace(ctrl=jnp.asarray(ctrl))
        mujoco.mj_step(mm, md)
        d = stp(m, d)
        for f in ("qpos", "qvel", "act", "actuator_force", "sensordata", "history"):
            _close(getattr(d, f), getattr(md, f), f"step {k} {f}", rtol=1e-8, atol=1e-8)
    # the delayed controls of an actuator with three inputs, read back as MuJoCo reads them
    for i in range(mm.nactuator):
        n = mm.actuator_ctrlnum[i]
        ref = np.zeros((n, 1))
        got = mujoco.mj_readCtrl(mm, md, i, md.time - 0.003, ref, -1)
        # an exact time match returns a view of MuJoCo's buffer: copy it at once
        ref = np.array(got if got is not None else ref, copy=True).ravel()[:n]
        ours = np.atleast_1d(np.asarray(jaxsim.read_ctrl(m, d, i, d.time - 0.003)))
        _close(ours, ref, f"read_ctrl {i}")


def test_gradient_finite_at_zero_rotation():
    """exp/log of the set-point and the joint rotation are smooth through zero."""
    m = jaxsim.load_string(SMALL, dtype=jnp.float64)
    d0 = make_state(m)

    def final(ctrl):
        d = d0.replace(ctrl=ctrl)
        for _ in range(3):
            d = jaxsim.step(m, d)
        return jnp.sum(d.qpos[:4] * jnp.arange(1.0, 5.0)) + jnp.sum(d.qvel)

    g = jax.grad(final)(d0.ctrl)
    assert np.all(np.isfinite(np.asarray(g)))
    assert np.any(np.asarray(g)[:3] != 0)  # the expmap set-point moves the ball


ADHESION = """
<mujoco>
  <option cone="{cone}"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="box" pos="0 0 .1">
      <freejoint/>
      <geom type="box" size=".1 .1 .1" margin=".02" gap=".01"/>
      <body name="paddle" pos=".12 0 .2">
        <joint name="j" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 .15 0 0" size=".03" condim="4"/>
      </body>
    </body>
    <body name="ball" pos=".3 0 .35">
      <freejoint/>
      <geom size=".06" margin=".01"/>
    </body>
  </worldbody>
  <actuator>
    <adhesion body="box" ctrlrange="0 1" gain="30"/>
    <adhesion body="paddle" ctrlrange="0 1" gain="5"/>
    <motor joint="j"/>
  </actuator>
</mujoco>
"""


@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_adhesion_matches_mujoco(cone):
    """Body transmissions: minus the mean contact-normal Jacobian of the body's contacts
    (active ones and those in the margin's gap), along a rollout that makes and breaks
    contacts."""
    xml = ADHESION.format(cone=cone)
    m = jaxsim.load_string(xml, dtype=jnp.float64)
    mm = mujoco.MjModel.from_xml_string(xml)
    md = mujoco.MjData(mm)
    fwd, _, _ = _compiled()
    rng = np.random.default_rng(4)
    seen = set()
    for k in range(150):
        md.ctrl[:] = [rng.uniform(0, 1), rng.uniform(0, 1), rng.normal()]
        mujoco.mj_step(mm, md)
        if k % 15:
            continue
        mujoco.mj_forward(mm, md)
        ours = fwd(m, _state(m, md).replace(qacc_warmstart=jnp.asarray(md.qacc_warmstart)))
        _close(ours.actuator_moment, _dense_moment(mm, md), f"step {k} moment", atol=1e-8)
        for f in ("qfrc_actuator", "qacc"):
            _close(getattr(ours, f), getattr(md, f), f"step {k} {f}", rtol=1e-6, atol=1e-6)
        seen.add(tuple(int(x) for x in (np.abs(_dense_moment(mm, md)[:2]).sum(1) > 0)))
    assert (1, 1) in seen  # both adhesion actuators had contacts at some point


ADHESION_ON_CLOTH = """
<mujoco>
  <worldbody>
    <flexcomp name="cloth" type="grid" count="4 4 1" spacing=".1 .1 .1" dim="2" radius=".01"
              mass=".1">
      <pin id="0 3 12 15"/>
      <contact selfcollide="none"/>
    </flexcomp>
    <geom type="sphere" size=".05" pos=".13 0 .1"/>
    <body name="box" pos="0 0 .105">
      <freejoint/>
      <geom type="box" size=".08 .08 .08" margin=".02"/>
    </body>
  </worldbody>
  <actuator><adhesion body="box" ctrlrange="0 1" gain="3"/></actuator>
</mujoco>
"""


def test_adhesion_ignores_flex_contacts():
    """A body transmission averages over the body's geom-geom contacts only: the box lying
    on a cloth (flex contacts) and touching a sphere gets the sphere contact's normal."""
    m = jaxsim.load_string(ADHESION_ON_CLOTH, dtype=jnp.float64)
    mm = mujoco.MjModel.from_xml_string(ADHESION_ON_CLOTH)
    md = mujoco.MjData(mm)
    md.ctrl[:] = 0.5
    mujoco.mj_forward(mm, md)
    flex = sum(int(c.geom[1] < 0 or c.geom[0] < 0) for c in md.contact[:md.ncon])
    assert flex > 0 and md.ncon > flex  # both kinds present
    ours = _compiled()[0](m, _state(m, md))
    assert int(ours.contact.active.sum()) == md.ncon
    ref = _dense_moment(mm, md)
    assert np.abs(ref).sum() > 0
    _close(ours.actuator_moment, ref, "moment", atol=1e-12)


SATURATED = """
<mujoco><option integrator="implicitfast" gravity="0 0 0"/>
  <worldbody>
    <body><joint name="a" type="slide" axis="1 0 0"/><geom size=".1" mass="1"/>
      <body pos="0 0 .3"><joint name="c" axis="0 1 0" actuatorfrcrange="-.5 .5"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".05" mass="1"/></body></body>
    <body pos="0 1 0"><joint name="b" type="slide" axis="1 0 0"/><geom size=".1" mass="1"/></body>
  </worldbody>
  <tendon><fixed name="t" actuatorfrcrange="-1 1"><joint joint="a" coef="1"/>
    <joint joint="b" coef="-0.5"/></fixed></tendon>
  <actuator><velocity tendon="t" kv="3"/><motor tendon="t"/><velocity joint="a" kv="2"/>
    <velocity joint="c" kv="4"/><motor joint="c"/></actuator>
</mujoco>
"""


def test_vel_deriv_drops_actuators_saturated_by_joint_and_tendon_limits():
    """MuJoCo 4.0: actuators whose joint or tendon total is at its actuatorfrcrange add no
    velocity derivative (compared on MuJoCo's qDeriv pattern)."""
    m = jaxsim.load_string(SATURATED, dtype=jnp.float64)
    mm = mujoco.MjModel.from_xml_string(SATURATED)
    md = mujoco.MjData(mm)
    _, _, deriv = _compiled()
    for ctrl in ([0.1, 0.2, 0.0, 0.0, 0.1], [5, 3, 1, 0, 2], [-5, -3, 1, 0, -2]):
        mujoco.mj_resetData(mm, md)
        md.ctrl[:] = ctrl
        md.qvel[:] = [0.3, -0.2, 0.1]
        d = _state(m, md)
        ours = np.asarray(deriv(m, d))
        mujoco.mj_step(mm, md)
        for r in range(mm.nv):
            a, z = mm.D_rowadr[r], mm.D_rownnz[r]
            cols = mm.D_colind[a:a + z]
            np.testing.assert_allclose(ours[r, cols], md.qDeriv[a:a + z], atol=1e-12,
                                       err_msg=f"ctrl {ctrl} row {r}")
