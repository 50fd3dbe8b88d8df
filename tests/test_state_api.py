"""State utilities (jaxsim.util) against MuJoCo's C functions.

mj_stateSize / mj_getState / mj_setState, mj_resetData(Keyframe), the Jacobians (mj_jac,
mj_jacBody, mj_jacBodyCom, mj_jacSubtreeCom, mj_jacGeom, mj_jacSite, mj_jacPointAxis,
mj_jacDot), mj_integratePos / mj_differentiatePos, mj_objectVelocity /
mj_objectAcceleration, mj_contactForce and mjd_transitionFD, each on a small model loaded in
both simulators at the same random state.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim import ObjType, StateBit

pytestmark = pytest.mark.timeout(300)

_XML = """
<mujoco>
  <size nuserdata="3"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="mocap" mocap="true" pos="0 0 2" quat="0.9 0.1 0.2 0.3">
      <geom type="sphere" size=".05"/>
    </body>
    <body name="arm" pos="0 0 1">
      <joint name="h1" axis="0 1 0" damping="0.2"/>
      <geom type="capsule" size=".05 .2" pos="0 0 -.2"/>
      <body pos="0 0 -.4" euler="10 20 30">
        <joint name="s1" type="slide" axis="1 0 0"/>
        <joint name="b1" type="ball"/>
        <geom type="box" size=".05 .06 .07" pos=".02 0 0"/>
        <site name="tip" pos=".1 .02 -.05" euler="5 0 40"/>
        <camera name="cam" pos="0 .1 0" euler="0 30 0"/>
        <body name="welded" pos=".1 0 -.1"><geom type="sphere" size=".03" pos=".01 0 0"/></body>
      </body>
    </body>
    <body name="free" pos="1 0 1">
      <freejoint/>
      <geom type="ellipsoid" size=".1 .2 .3"/>
      <body pos="0 .2 0">
        <joint name="h2" axis="1 0 0"/>
        <geom type="capsule" size=".03 .1" pos="0 0 .1"/>
        <site name="s2" pos="0 0 .2"/>
      </body>
    </body>
  </worldbody>
  <equality>
    <weld body1="mocap" body2="free" active="false"/>
    <joint joint1="h1" joint2="h2"/>
  </equality>
  <actuator>
    <motor joint="h1"/>
    <general joint="s1" dyntype="filter" dynprm="0.1" gainprm="10" biastype="affine"
             biasprm="0 -10 0"/>
    <general joint="h2" dyntype="integrator" gainprm="1"/>
  </actuator>
  <sensor><jointpos joint="h1"/><jointpos joint="s1" nsample="3"/></sensor>
  <keyframe><key time="0.5" ctrl="0.1 0.2 0.3" act="0.4 0.5"/></keyframe>
</mujoco>"""

_FORWARD = jax.jit(jaxsim.forward)


@functools.cache
def _models():
    return mujoco.MjModel.from_xml_string(_XML), jaxsim.load_string(_XML, dtype=jnp.float64)


def _random_data(m, seed):
    rng = np.random.default_rng(seed)
    d = mujoco.MjData(m)
    mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv), 1.0)
    d.time = rng.uniform()
    d.qvel[:] = rng.normal(size=m.nv)
    d.act[:] = rng.normal(size=m.na)
    d.qacc_warmstart[:] = rng.normal(size=m.nv)
    d.ctrl[:] = rng.normal(size=m.nu)
    d.qfrc_applied[:] = rng.normal(size=m.nv)
    d.xfrc_applied[1:] = rng.normal(size=(m.nbody - 1, 6))
    d.eq_active[:] = rng.integers(0, 2, size=m.neq)
    d.mocap_pos[:] = rng.normal(size=(m.nmocap, 3))
    q = rng.normal(size=(m.nmocap, 4))
    d.mocap_quat[:] = q / np.linalg.norm(q, axis=1, keepdims=True)
    d.userdata[:] = rng.normal(size=m.nuserdata)
    d.history[2 + 3:] = rng.normal(size=3)  # the sensor's samples (times, cursor kept)
    return d


_FIELDS = ("time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl", "qfrc_applied",
           "xfrc_applied", "mocap_pos", "mocap_quat", "userdata", "history")


def _our_state(model, d):
    st = jaxsim.make_state(model)
    upd = {f: jnp.asarray(getattr(d, f), jnp.float64) for f in _FIELDS}
    return st.replace(eq_active=jnp.asarray(d.eq_active, jnp.float64), **upd)


_SPECS = [b for b in StateBit if b.value & (b.value - 1) == 0] + [
    StateBit.PHYSICS, StateBit.FULLPHYSICS, StateBit.USER, StateBit.INTEGRATION,
    StateBit.QPOS | StateBit.EQ_ACTIVE | StateBit.MOCAP_QUAT]


def test_state_bits_match_mujoco():
    assert int(StateBit.INTEGRATION) == int(mujoco.mjtState.mjSTATE_INTEGRATION)
    for name in ("PHYSICS", "FULLPHYSICS", "USER", "INTEGRATION", "HISTORY", "PLASTIC"):
        assert int(StateBit[name]) == int(getattr(mujoco.mjtState, "mjSTATE_" + name))


def test_get_set_state_and_size():
    m, model = _models()
    assert m.nmocap and m.neq and m.na == 2 and m.nuserdata == 3 and m.nhistory == 8
    d = _random_data(m, 0)
    st = _our_state(model, d)
    fresh = jaxsim.reset(model)
    for spec in _SPECS:
        size = jaxsim.state_size(model, spec)
        assert size == mujoco.mj_stateSize(m, spec), spec
        ref = np.zeros(size)
        mujoco.mj_getState(m, d, ref, spec)
        ours = np.asarray(jaxsim.get_state(model, st, spec))
        np.testing.assert_array_equal(ours, ref, err_msg=str(spec))
        # set_state on a fresh state, then read back: same vector
        back = jaxsim.set_state(model, fresh, jnp.asarray(ref), spec)
        np.testing.assert_array_equal(np.asarray(jaxsim.get_state(model, back, spec)), ref)
        # MuJoCo's mj_setState of our vector gives MuJoCo's data the same components
        d2 = mujoco.MjData(m)
        mujoco.mj_setState(m, d2, ours, spec)
        ref2 = np.zeros(size)
        mujoco.mj_getState(m, d2, ref2, spec)
        np.testing.assert_array_equal(ref2, ref)
    # the full round trip restores every field
    full = jaxsim.get_state(model, st, StateBit.INTEGRATION)
    back = jaxsim.set_state(model, fresh, full, StateBit.INTEGRATION)
    for f in _FIELDS + ("eq_active",):
        np.testing.assert_array_equal(np.asarray(getattr(back, f)), np.asarray(getattr(st, f)))
    # eq_active: any non-zero value is active, as MuJoCo's boolean conversion
    d3 = mujoco.MjData(m)
    vals = np.array([0.3, 0.0])
    mujoco.mj_setState(m, d3, vals, StateBit.EQ_ACTIVE)
    ours = jaxsim.set_state(model, fresh, jnp.asarray(vals), StateBit.EQ_ACTIVE)
    np.testing.assert_array_equal(np.asarray(ours.eq_active), d3.eq_active.astype(float))
    # jit: the spec is static
    got = jax.jit(jaxsim.get_state, static_argnums=2)(model, st, int(StateBit.PHYSICS))
    assert got.shape == (mujoco.mj_stateSize(m, StateBit.PHYSICS),)
    with pytest.raises(ValueError):
        jaxsim.state_size(model, 1 << 15)


def test_reset_matches_mujoco():
    m, model = _models()
    d = mujoco.MjData(m)
    for key in (None, 0):
        if key is None:
            mujoco.mj_resetData(m, d)
        else:
            mujoco.mj_resetDataKeyframe(m, d, key)
        ours = jaxsim.reset(model, key)
        for f in _FIELDS + ("eq_active",):
            np.testing.assert_allclose(np.asarray(getattr(ours, f)), getattr(d, f), atol=1e-7,
                                       err_msg=f"{key} {f}")


def test_jacobians_match_mujoco():
    m, model = _models()
    errs = {}
    for seed in range(2):
        d = _random_data(m, seed)
        mujoco.mj_forward(m, d)
        st = _FORWARD(model, _our_state(model, d))
        rng = np.random.default_rng(seed + 10)

        def check(name, ours, ref):
            err = float(np.max(np.abs(np.asarray(ours) - ref), initial=0.0))
            errs[name] = max(errs.get(name, 0.0), err)
            assert err < 1e-9, (name, np.asarray(ours), ref)

        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        for b in range(m.nbody):
            point = rng.normal(size=3)
            mujoco.mj_jac(m, d, jp, jr, point, b)
            ours = jaxsim.jac(model, st, point, b)
            check("jac", ours[0], jp)
            check("jac", ours[1], jr)
            mujoco.mj_jacBody(m, d, jp, jr, b)
            ours = jaxsim.jac_body(model, st, b)
            check("jac_body", np.concatenate(ours), np.concatenate([jp, jr]))
            mujoco.mj_jacBodyCom(m, d, jp, jr, b)
            ours = jaxsim.jac_body_com(model, st, b)
            check("jac_body_com", np.concatenate(ours), np.concatenate([jp, jr]))
            mujoco.mj_jacSubtreeCom(m, d, jp, b)
            if m.body_subtreemass[b] > 0:
                check("jac_subtree_com", jaxsim.jac_subtree_com(model, st, b), jp)
            axis = rng.normal(size=3)
            ja = np.zeros((3, m.nv))
            mujoco.mj_jacPointAxis(m, d, jp, ja, point, axis, b)
            ours = jaxsim.jac_point_axis(model, st, point, axis, b)
            check("jac_point_axis", np.concatenate(ours), np.concatenate([jp, ja]))
            mujoco.mj_jacDot(m, d, jp, jr, point, b)
            ours = jaxsim.jac_dot(model, st, point, b)
            check("jac_dot", np.concatenate(ours), np.concatenate([jp, jr]))
        for g in range(m.ngeom):
            mujoco.mj_jacGeom(m, d, jp, jr, g)
            check("jac_geom", np.concatenate(jaxsim.jac_geom(model, st, g)),
                  np.concatenate([jp, jr]))
        for s in range(m.nsite):
            mujoco.mj_jacSite(m, d, jp, jr, s)
            check("jac_site", np.concatenate(jaxsim.jac_site(model, st, s)),
                  np.concatenate([jp, jr]))
    print("max abs errors", errs)


def test_object_velocity_acceleration_match_mujoco():
    m, model = _models()
    d = _random_data(m, 3)
    mujoco.mj_forward(m, d)
    mujoco.mj_rnePostConstraint(m, d)
    st = _FORWARD(model, _our_state(model, d))
    objs = ([(ObjType.BODY, b) for b in range(m.nbody)] + [(ObjType.XBODY, b) for b in range(m.nbody)]
            + [(ObjType.GEOM, g) for g in range(m.ngeom)] + [(ObjType.SITE, s) for s in range(m.nsite)]
            + [(ObjType.CAMERA, 0)])
    ref = np.zeros(6)
    err_v = err_a = 0.0
    for t, i in objs:
        for local in (False, True):
            mujoco.mj_objectVelocity(m, d, int(t), i, ref, int(local))
            ours = np.asarray(jaxsim.object_velocity(model, st, t, i, local))
            err_v = max(err_v, np.max(np.abs(ours - ref)))
            np.testing.assert_allclose(ours, ref, atol=1e-9, err_msg=f"vel {t} {i} {local}")
            mujoco.mj_objectAcceleration(m, d, int(t), i, ref, int(local))
            ours = np.asarray(jaxsim.object_acceleration(model, st, t, i, local))
            err_a = max(err_a, np.max(np.abs(ours - ref)) / (1 + np.max(np.abs(ref))))
            np.testing.assert_allclose(ours, ref, atol=1e-7 * (1 + np.max(np.abs(ref))),
                                       err_msg=f"acc {t} {i} {local}")
    print("max errors: velocity", err_v, "acceleration (relative)", err_a)


def test_integrate_differentiate_pos():
    m, model = _models()
    rng = np.random.default_rng(5)
    d = _random_data(m, 5)
    q1 = d.qpos.copy()
    v = rng.normal(size=m.nv)
    dt = 0.3
    q2 = q1.copy()
    mujoco.mj_integratePos(m, q2, v, dt)
    integ = jax.jit(lambda q, x: jaxsim.integrate_pos(model, q, x, dt))
    diff = jax.jit(lambda a, b: jaxsim.differentiate_pos(model, a, b, dt))
    ours = np.asarray(integ(jnp.asarray(q1), jnp.asarray(v)))
    np.testing.assert_allclose(ours, q2, atol=1e-12)
    vel = np.zeros(m.nv)
    mujoco.mj_differentiatePos(m, vel, dt, q1, q2)
    ours = np.asarray(diff(jnp.asarray(q1), jnp.asarray(q2)))
    np.testing.assert_allclose(ours, vel, atol=1e-10)
    np.testing.assert_allclose(ours, v, atol=1e-10)
    # gradients at zero velocity and identical quaternions: finite and exact
    q = jnp.asarray(q1)
    zero = jnp.zeros(m.nv)
    grads = jax.jit(lambda q, x: (
        jax.grad(lambda y: jnp.sum(jnp.sin(integ(q, y))))(x),
        jax.grad(lambda y: jnp.sum(diff(q, y)))(q),
        jax.grad(lambda y: jnp.sum(diff(y, q)))(q),
        jax.jacfwd(lambda y: diff(q, integ(q, y)))(x),
        jax.jacrev(lambda y: diff(q, integ(q, y)))(x)))(q, zero)
    for g in grads:
        assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_allclose(np.asarray(grads[3]), np.eye(m.nv), atol=1e-12)
    np.testing.assert_allclose(np.asarray(grads[4]), np.eye(m.nv), atol=1e-12)


_CONTACT = """
<mujoco>
  <option cone="{cone}" tolerance="1e-12"/>
  <worldbody>
    <geom type="plane" size="3 3 .1" friction="0.8 0.02 0.001" condim="1"/>
    <body pos="0 0 0.098" euler="0 0 20">
      <freejoint/><geom type="box" size=".1 .1 .1" condim="3"/>
    </body>
    <body pos=".5 0 0.058"><freejoint/><geom type="sphere" size=".06" condim="1"/></body>
    <body pos="1 0 0.058"><freejoint/><geom type="sphere" size=".06" condim="4"/></body>
    <body pos="1.5 0 0.058"><freejoint/><geom type="sphere" size=".06" condim="6"/></body>
  </worldbody>
</mujoco>"""


@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_contact_force_matches_mujoco(cone):
    """Condims 1, 3, 4 and 6 in one model. First MuJoCo's own efc_force copied into our
    rows (the decoding alone: exact), then our solver's forces (both solvers run to a
    tight tolerance: at the default 1e-8 MuJoCo stops one iteration earlier on the
    elliptic condim-6 contact, 1e-4 relative away). Elliptic box contacts still differ by
    ~3e-7 relative (solver-level, not the decoding)."""
    tol = 1e-12 if cone == "pyramidal" else 1e-6
    xml = _CONTACT.format(cone=cone)
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    d = mujoco.MjData(m)
    d.qvel[:] = np.random.default_rng(2).normal(size=m.nv) * 0.3
    mujoco.mj_forward(m, d)
    assert d.ncon == 7 and sorted(set(d.contact.dim)) == [1, 3, 4, 6]
    st = jax.jit(jaxsim.forward)(model, _our_state(model, d))
    slots = np.nonzero(np.asarray(st.contact.active))[0]
    assert len(slots) == d.ncon
    force = jax.jit(jaxsim.contact_force)
    pyramidal = cone == "pyramidal"
    efc = np.zeros(st.efc_force.shape)
    pairs = []
    for i in range(d.ncon):
        c = d.contact[i]
        match = [k for k in slots if tuple(np.asarray(st.contact.geom[k])) == tuple(c.geom)
                 and np.linalg.norm(np.asarray(st.contact.pos[k]) - c.pos) < 1e-8]
        assert len(match) == 1, (i, c.geom, c.pos)
        k = match[0]
        assert int(st.contact.dim[k]) == c.dim
        nrow = (2 * (c.dim - 1) if c.dim > 1 else 1) if pyramidal else c.dim
        adr = int(st.contact.efc_address[k])
        efc[adr:adr + nrow] = d.efc_force[c.efc_address:c.efc_address + nrow]
        pairs.append((i, k))
    copied = st.replace(efc_force=jnp.asarray(efc))
    ref = np.zeros(6)
    worst_copy = worst = 0.0
    for i, k in pairs:
        mujoco.mj_contactForce(m, d, i, ref)
        scale = np.max(np.abs(ref))
        assert scale > 0
        if d.contact[i].dim > 1:
            assert np.any(ref[1:d.contact[i].dim] != 0)
        ours = np.asarray(force(model, copied, k))
        worst_copy = max(worst_copy, np.max(np.abs(ours - ref)) / scale)
        np.testing.assert_allclose(ours, ref, atol=1e-12 * scale, err_msg=f"decode {i}")
        ours = np.asarray(force(model, st, k))
        worst = max(worst, np.max(np.abs(ours - ref)) / scale)
        np.testing.assert_allclose(ours, ref, atol=tol * scale, err_msg=f"solve {i}")
    inactive = np.nonzero(~np.asarray(st.contact.active))[0]
    if len(inactive):
        assert np.all(np.asarray(force(model, st, inactive[0])) == 0)
    print(cone, "max relative error: decoding", worst_copy, "end to end", worst)


_PENDULUM = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body pos="0 0 1">
      <joint name="h" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.4" size=".04"/>
      <body pos="0 0 -.4">
        <joint name="b" type="ball" damping="0.05"/>
        <geom type="box" size=".05 .08 .1" pos=".05 0 -.1"/>
        <site name="tip" pos=".05 0 -.2"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <general name="a0" joint="h" dyntype="filter" dynprm="0.05" gainprm="2"/>
    <motor joint="b" gear="0 1 0 0 0 0"/>
  </actuator>
  <sensor>
    <jointpos joint="h"/>
    <jointvel joint="h"/>
    <framepos objtype="site" objname="tip"/>
    <actuatorfrc actuator="a0"/>
  </sensor>
</mujoco>"""


def test_transition_jacobians_match_mjd_transitionFD():
    m = mujoco.MjModel.from_xml_string(_PENDULUM)
    model = jaxsim.load_string(_PENDULUM, dtype=jnp.float64)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(7)
    mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv), 1.0)
    d.qvel[:] = rng.normal(size=m.nv)
    d.act[:] = rng.normal(size=m.na)
    d.ctrl[:] = rng.normal(size=m.nu)
    nx = 2 * m.nv + m.na
    a, b = np.zeros((nx, nx)), np.zeros((nx, m.nu))
    c, dd = np.zeros((m.nsensordata, nx)), np.zeros((m.nsensordata, m.nu))
    mujoco.mjd_transitionFD(m, d, 1e-6, 1, a, b, c, dd)
    st = jaxsim.make_state(model).replace(
        qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel), act=jnp.asarray(d.act),
        ctrl=jnp.asarray(d.ctrl))
    ours = jax.jit(jaxsim.transition_jacobians)(model, st)
    for name, x, ref in zip("ABCD", ours, (a, b, c, dd), strict=True):
        x = np.asarray(x)
        assert x.shape == ref.shape, name
        err = np.max(np.abs(x - ref)) / (1 + np.max(np.abs(ref)))
        print(name, "max relative error", err)
        assert err < 1e-5, (name, x, ref)


def test_step_rejects_a_state_of_another_layout():
    """A state made before a disable flag removed the constraint rows does not line up with
    the model's states: step (its reset) names the field and the remedy instead of failing inside."""
    _, model = _models()
    state = jaxsim.make_state(model)
    assert state.efc_force.shape[0] > 0
    off = model.replace(opt=model.opt.replace(
        disableflags=model.opt.disableflags | jaxsim.DisableBit.CONSTRAINT))
    with pytest.raises(ValueError, match=r"state\.efc_\w+ has shape .*make_state"):
        jaxsim.step(off, state)
    jaxsim.step(off, jaxsim.make_state(off))  # its own state steps
