"""forward / step / rne_post_constraint against MuJoCo C, with constraints disabled.

Every model is loaded twice (jaxsim and MuJoCo) from a copy with
`<option><flag constraint="disable"/></option>` injected. At random states (random
velocity integrated into qpos, random qvel, ctrl, act, qfrc_applied, xfrc_applied) the
smooth forces, accelerations, body accelerations/forces and one step must agree to 1e-8
(max |ours - ref| / (1 + max |ref|), as the referee). The default run covers a few
models; JAXSIM_TEST_ALL=1 sweeps the gymnasium, MJX and corpus models and models/.
"""

import importlib
import os
import pathlib
import uuid

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from lxml import etree

import jaxsim
from jaxsim import rne
from jaxsim.forward import integrate
from jaxsim.types import Integrator, Warning
from tests.conftest import CORPUS, MODELS, gym_assets, mjx_test_data, visible_xml

TOL = 1e-8
ALL = os.environ.get("JAXSIM_TEST_ALL") == "1"
GYM = gym_assets()
MJX = mjx_test_data()
TESTDATA = CORPUS / "engine" / "testdata"


# ------------------------------------------------------------------------------ helpers


def load_unconstrained(path, integrator=None):
    """(MjModel, jaxsim Model) of `path` with constraints disabled (and the integrator set)."""
    path = pathlib.Path(path)
    tree = etree.parse(str(path))
    root = tree.getroot()
    opt = root.find("option")
    if opt is None:
        opt = etree.Element("option")
        root.insert(0, opt)
    flag = opt.find("flag")
    if flag is None:
        flag = etree.SubElement(opt, "flag")
    flag.set("constraint", "disable")
    if integrator is not None:
        opt.set("integrator", integrator)
    # beside the original, so that includes and assets resolve the same way
    tmp = path.parent / f".jaxsim-test-{uuid.uuid4().hex}-{path.name}"
    try:
        tree.write(str(tmp))
        m = mujoco.MjModel.from_xml_path(str(tmp))
        model = jaxsim.load(str(tmp), dtype=jnp.float64)
    finally:
        tmp.unlink(missing_ok=True)
    return m, model


def random_data(m, rng, scale=1.0):
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv) * 0.3, 1.0)
    d.qvel[:] = rng.normal(size=m.nv) * scale
    d.ctrl[:] = rng.uniform(-1.0, 1.0, size=m.nu)
    d.act[:] = rng.uniform(0.0, 1.0, size=m.na)
    d.qfrc_applied[:] = rng.normal(size=m.nv) * 0.1
    d.xfrc_applied[1:] = rng.normal(size=(m.nbody - 1, 6)) * 0.1
    return d


def to_state(model, d):
    return jaxsim.make_state(model).replace(
        time=jnp.asarray(d.time), qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel),
        act=jnp.asarray(d.act), ctrl=jnp.asarray(d.ctrl),
        qfrc_applied=jnp.asarray(d.qfrc_applied), xfrc_applied=jnp.asarray(d.xfrc_applied),
        mocap_pos=jnp.asarray(d.mocap_pos), mocap_quat=jnp.asarray(d.mocap_quat),
    )


def err(ours, ref):
    a = np.asarray(ours, np.float64)
    b = np.asarray(ref, np.float64).reshape(a.shape)
    if not b.size:
        return 0.0
    return float(np.max(np.abs(a - b)) / (1.0 + np.max(np.abs(b))))


def has_spatial_tendon(m):
    return any(m.tendon_num[i] and m.wrap_type[m.tendon_adr[i]] != mujoco.mjtWrap.mjWRAP_JOINT
               for i in range(m.ntendon))


@jax.jit
def _forward_post_step(model, state):
    """forward, rne_post_constraint and step in one compiled function (compile time)."""
    out = jaxsim.forward(model, state)
    return out, rne.rne_post_constraint(model, out), integrate(model, out)


_step = jax.jit(jaxsim.step)


def check_model(m, model, nstates=2, seed=0, scale=1.0):
    """Compares forward, rne_post_constraint and one step at random states."""
    rng = np.random.default_rng(seed)
    bad = []
    for k in range(nstates):
        d = random_data(m, rng, scale)
        st = to_state(model, d)
        mujoco.mj_forward(m, d)
        out, post, so = _forward_post_step(model, st)
        for f in ("qfrc_bias", "qfrc_passive", "qfrc_actuator", "qacc_smooth", "qacc", "act_dot"):
            e = err(getattr(out, f), getattr(d, f))
            if e > TOL:
                bad.append(f"{f}@{k}: {e:.1e}")
        # MuJoCo 4.0 also adds spatial-tendon forces to cfrc_ext (not implemented yet)
        if not has_spatial_tendon(m):
            mujoco.mj_rnePostConstraint(m, d)
            for f in ("cacc", "cfrc_int", "cfrc_ext"):
                e = err(getattr(post, f), getattr(d, f))
                if e > TOL:
                    bad.append(f"{f}@{k}: {e:.1e}")
        if not np.all(np.abs(d.qacc) <= 1e10):
            continue  # MuJoCo's step resets this state (mj_checkAcc): see test_divergence
        mujoco.mj_step(m, d)
        for f in ("qpos", "qvel", "act", "time"):
            e = err(getattr(so, f), getattr(d, f))
            if e > TOL:
                bad.append(f"step.{f}@{k}: {e:.1e}")
    return bad


# ------------------------------------------------------------------------------- models


def _gym(name):
    return pytest.param(GYM / name if GYM else None, id=f"gym-{name}",
                        marks=pytest.mark.skipif(GYM is None, reason="gymnasium not installed"))


def _corpus(rel):
    p = TESTDATA / rel
    return pytest.param(p, id=rel, marks=pytest.mark.skipif(not p.exists(), reason="no corpus"))


DEFAULT = [
    _gym("hopper.xml"),  # Euler with damping
    _corpus("derivative/damped_pendulum.xml"),  # Euler; hinge, slide, ball, springs
    _corpus("derivative/tumbling_thin_object_ellipsoid.xml"),  # implicit, fluid, free body
]


def _sweep():
    paths = []
    if GYM:
        paths += [GYM / n for n in ("ant.xml", "half_cheetah.xml", "swimmer.xml", "walker2d.xml",
                                    "inverted_pendulum.xml", "reacher.xml")]
    if MJX and (MJX / "humanoid" / "humanoid.xml").exists():
        paths.append(MJX / "humanoid" / "humanoid.xml")
    if TESTDATA.exists():
        paths += sorted((TESTDATA / "derivative").glob("*.xml"))
        for p in visible_xml(TESTDATA):
            try:
                text = p.read_text()
            except UnicodeDecodeError:
                continue
            if "integrator=" in text and "<mujoco" in text and p not in paths:
                paths.append(p)
    paths += sorted(MODELS.glob("*.xml"))
    return [pytest.param(p, id=str(p.name)) for p in paths]


@pytest.mark.parametrize("path", DEFAULT)
def test_forward_step(path):
    m, model = load_unconstrained(path)
    bad = check_model(m, model)
    assert not bad, bad


FORCED = [
    pytest.param(p.values[0], it, id=f"{p.id}-{it}", marks=p.marks)
    for p, its in ((_corpus("derivative/damped_pendulum.xml"), ("implicit",)),
                   (pytest.param(MODELS / "pendulum.xml", id="pendulum"), ("RK4", "implicitfast")),
                   (_gym("ant.xml"), ("implicitfast", "RK4")))
    for it in its
]


@pytest.mark.parametrize(("path", "integrator"), FORCED)
def test_integrators(path, integrator):
    """Integrators forced on a damped chain with a ball joint and on free-floating models
    (Euler and implicit also run on their own models in test_forward_step)."""
    m, model = load_unconstrained(path, integrator)
    assert model.opt.integrator == Integrator[integrator.upper()]
    bad = check_model(m, model, nstates=1)
    assert not bad, bad


@pytest.mark.skipif(not ALL, reason="set JAXSIM_TEST_ALL=1 for the full sweep")
@pytest.mark.parametrize("path", _sweep())
def test_sweep(path):
    try:
        m, model = load_unconstrained(path)
    except Exception as e:  # noqa: BLE001 -- a model either side cannot load is not ours here
        pytest.skip(f"load: {type(e).__name__}: {str(e)[:120]}")
    try:
        bad = check_model(m, model, nstates=2, scale=0.3)
    except NotImplementedError as e:
        pytest.skip(str(e)[:160])
    assert not bad, bad


# ---------------------------------------------------------------------------- transforms


def test_vmap_step_equals_loop():
    m, model = load_unconstrained(MODELS / "pendulum.xml")
    rng = np.random.default_rng(1)
    states = [to_state(model, random_data(m, rng)) for _ in range(3)]
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states)
    out = jax.jit(jax.vmap(jaxsim.step, in_axes=(None, 0)))(model, batch)
    for i, st in enumerate(states):
        one = _step(model, st)
        np.testing.assert_allclose(out.qpos[i], one.qpos, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out.qvel[i], one.qvel, rtol=1e-12, atol=1e-12)


def test_jit_does_not_retrace_on_values():
    m, model = load_unconstrained(MODELS / "cartpole.xml")
    traces = []

    @jax.jit
    def f(model, state):
        traces.append(1)
        return jaxsim.step(model, state)

    st = jaxsim.make_state(model)
    f(model, st)
    heavier = model.replace(body_mass=model.body_mass * 1.5,
                            dof_damping=model.dof_damping + 0.1,
                            opt=model.opt.replace(timestep=model.opt.timestep * 0.5))
    f(heavier, st.replace(qvel=st.qvel + 1.0))
    assert len(traces) == 1


# ----------------------------------------------------------------------------- gradients


def test_gradients_match_finite_differences():
    """jacfwd and jacrev of forward(...).qacc wrt qpos, qvel, ctrl, body_mass vs central FD."""
    _, model = load_unconstrained(MODELS / "cartpole.xml")
    rng = np.random.default_rng(2)
    st = jaxsim.make_state(model).replace(
        qpos=jnp.asarray(rng.normal(size=model.nq) * 0.3),
        qvel=jnp.asarray(rng.normal(size=model.nv)),
        ctrl=jnp.asarray(rng.uniform(-0.5, 0.5, size=model.nu)),
    )

    def qacc(qpos, qvel, ctrl, mass):
        s = st.replace(qpos=qpos, qvel=qvel, ctrl=ctrl)
        return jaxsim.forward(model.replace(body_mass=mass), s).qacc

    args = (st.qpos, st.qvel, st.ctrl, model.body_mass)
    f = jax.jit(qacc)
    argn = (0, 1, 2, 3)
    jf, jr = jax.jit(lambda *a: (jax.jacfwd(qacc, argn)(*a), jax.jacrev(qacc, argn)(*a)))(*args)
    eps = 1e-6
    for k in range(4):
        x = np.asarray(args[k])
        fd = np.zeros((model.nv, x.size))
        for i in range(x.size):
            dx = np.zeros_like(x)
            dx[i] = eps
            plus = list(args)
            minus = list(args)
            plus[k] = jnp.asarray(x + dx)
            minus[k] = jnp.asarray(x - dx)
            fd[:, i] = (np.asarray(f(*plus)) - np.asarray(f(*minus))) / (2 * eps)
        scale = 1.0 + np.max(np.abs(fd))
        np.testing.assert_allclose(jf[k], jr[k], rtol=1e-10, atol=1e-10 * scale)
        np.testing.assert_allclose(jf[k], fd, rtol=1e-5, atol=1e-6 * scale)
        if k < 3:  # body 0 (world) has no effect; the others must
            assert np.any(np.abs(np.asarray(jf[k])) > 0)


def test_step1_step2_equal_step():
    m, model = load_unconstrained(MODELS / "pendulum.xml")
    st = to_state(model, random_data(m, np.random.default_rng(3)))
    two = jax.jit(lambda mm, s: jaxsim.step2(mm, jaxsim.step1(mm, s)))(model, st)
    one = _step(model, st)
    np.testing.assert_allclose(two.qpos, one.qpos, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(two.qvel, one.qvel, rtol=1e-14, atol=1e-14)


_RK4_CONTACT = """<mujoco><option integrator="RK4" timestep="0.005"/><worldbody>
  <geom type="plane" size="2 2 .1"/>
  <body pos="0 0 .12"><freejoint/><geom type="box" size=".1 .08 .06"/>
    <body pos=".1 0 0"><joint axis="0 1 0" damping=".1"/><geom type="capsule" size=".03 .1"
      fromto="0 0 0 .2 0 0"/></body></body></worldbody>
  <actuator><motor joint="0" gear="1"/></actuator></mujoco>"""


def test_rk4_in_one_scanned_pass_equals_forward_then_stages():
    """Sensor-less RK4 models step with the forward pass as the first of four scanned
    stages (one compiled forward): the result of forward then the three stages up to
    rounding (two programs, fused differently), contacts and a bad-qacc reset included."""
    fwd = importlib.import_module("jaxsim.forward")
    model = jaxsim.load_string(_RK4_CONTACT.replace('joint="0"', 'joint="j"').replace(
        '<joint axis', '<joint name="j" axis'), dtype=jnp.float64)
    assert fwd._rk4_in_one_pass(model)
    st = jaxsim.make_state(model)
    st = st.replace(qvel=st.qvel.at[:].set(jnp.linspace(-0.5, 0.5, model.nv)),
                    ctrl=jnp.full_like(st.ctrl, 0.4))
    bad = st.replace(qfrc_applied=st.qfrc_applied.at[0].set(jnp.nan))

    def two_passes(m, d):
        d = fwd.forward(m, fwd.check_pos_vel(m, d))
        return fwd._integrate_unless_reset(m, d, lambda dd: fwd.integrate(m, dd))

    for s in (st, bad):
        one = _step(model, s)
        ref = jax.jit(two_passes)(model, s)
        for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(ref),
                        strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-15)
    assert int(_step(model, bad).warning[Warning.BADQACC]) == 1
