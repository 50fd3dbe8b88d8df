"""passive (mj_passive) and actuation (mj_fwdActuation) compared with MuJoCo C.

MuJoCo runs mj_forward at random states (qpos from mj_integratePos, random qvel, ctrl and
act). Most tests give our `com_vel`, `tendon_actuator_velocity`, `passive` and `actuation`
MuJoCo's position-stage results (frames, cdof, ten_J, actuator_moment, ...), so they test
these stages alone and compile quickly; `test_full_chain` runs our position stages too.
Every force the stages fill is compared. Plus: disable flags and actuator groups, bad
controls, float32, gradients at zero velocity, jit with the model as an argument,
unsupported actuator types raising.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from mjadapter import model_from_mujoco, state_from_mujoco  # noqa: E402

from jaxsim import actuation, passive, smooth  # noqa: E402

jax.config.update("jax_enable_x64", True)

_HERE = os.path.dirname(__file__)
_SITE = os.path.dirname(mujoco.__file__)
_GYM = os.path.join(os.path.dirname(_SITE), "gymnasium", "envs", "mujoco", "assets")
_MJX = os.path.join(_SITE, "mjx", "test_data")
_CORPUS = os.path.join(_HERE, "..", "..", "shared", "corpus", "mujoco", "engine", "testdata")
FEATURES = os.path.join(_HERE, "passive_actuation_features.xml")

MODELS = [
    FEATURES,  # every joint type with polynomial springs/dampers, fluid, gravcomp, actuators
    os.path.join(_GYM, "humanoid.xml"),
    os.path.join(_GYM, "swimmer.xml"),  # inertia-box fluid model
    os.path.join(_HERE, "..", "models", "arm_tendon.xml"),  # muscle
    os.path.join(_CORPUS, "derivative", "tumbling_thin_object_ellipsoid.xml"),  # thin geoms
    os.path.join(_CORPUS, "actuation", "refsite.xml"),  # gravcomp through actuators
    os.path.join(_CORPUS, "actuation", "tendon_force_clamp.xml"),
]
# Each model costs a compilation; JAXSIM_TEST_ALL=1 adds models whose features the ones
# above already cover.
if os.environ.get("JAXSIM_TEST_ALL"):
    MODELS += [os.path.join(_GYM, f + ".xml") for f in ("ant", "hopper", "reacher")]
    MODELS += [os.path.join(_MJX, "actuator", f) for f in ("general_dyntype.xml", "arm21.xml",
                                                          "tendon_force_clamp.xml")]
    MODELS += [os.path.join(_CORPUS, "actuation", f) for f in (
        "actearly.xml", "activation.xml", "actuator_group_disable.xml", "damper.xml",
        "dampratio.xml", "joint_force_clamp.xml", "refsite_free.xml", "sites.xml",
        "tendon_dampratio.xml")]
    MODELS += [os.path.join(_CORPUS, f) for f in (
        "passive/poly_stiffness.xml", "tendon_springlength.xml", "catenary.xml",
        "derivative/tumbling_thin_object.xml", "derivative/damped_actuators.xml",
        "solver/model.xml")]
MODELS = [p for p in MODELS if os.path.exists(p)]

FIELDS = ("qfrc_spring", "qfrc_damper", "qfrc_gravcomp", "qfrc_fluid", "qfrc_passive",
          "actuator_force", "qfrc_actuator", "act_dot", "ten_velocity", "actuator_velocity")
TOL = 1e-9


def _ids(p):
    return os.path.basename(p)


def _velocity_stages(m, d):
    d = smooth.com_vel(m, d)
    d = passive.tendon_actuator_velocity(m, d)
    d = passive.passive(m, d)
    return actuation.actuation(m, d)


def _all_stages(m, d):
    d = smooth.kinematics(m, d)
    d = smooth.com_pos(m, d)
    d = smooth.tendon(m, d)
    d = smooth.transmission(m, d)
    return _velocity_stages(m, d)


_run = jax.jit(_velocity_stages)
_run_all = jax.jit(_all_stages)


def _dense(mm, rownnz, rowadr, colind, values, nrow):
    out = np.zeros((nrow, mm.nv))
    for i in range(nrow):
        for k in range(rownnz[i]):
            out[i, colind[rowadr[i] + k]] = values[rowadr[i] + k]
    return out


_POSITION_FIELDS = ("xpos", "xquat", "xmat", "xipos", "ximat", "xanchor", "xaxis", "geom_xpos",
                    "geom_xmat", "site_xpos", "site_xmat", "subtree_com", "cdof", "cinert",
                    "ten_length", "actuator_length")


def _state(m, mm, md, act_dot):
    """Our State with the inputs of md and, after mj_forward, its position-stage results."""
    dt = m.body_pos.dtype
    d = state_from_mujoco(m, md).replace(act_dot=jnp.asarray(act_dot, dt))
    fields = {f: jnp.asarray(getattr(md, f), dt).reshape(getattr(d, f).shape)
              for f in _POSITION_FIELDS}
    if mm.ntendon:
        fields["ten_J"] = jnp.asarray(_dense(mm, mm.ten_J_rownnz, mm.ten_J_rowadr,
                                             mm.ten_J_colind, md.ten_J, mm.ntendon), dt)
    if mm.nu:
        fields["actuator_moment"] = jnp.asarray(_dense(mm, md.moment_rownnz, md.moment_rowadr,
                                                       md.moment_colind, md.actuator_moment,
                                                       mm.nu), dt)
    return d.replace(**fields)


def _random_data(mm, seed, ctrl_scale=1.5):
    md = mujoco.MjData(mm)
    rng = np.random.default_rng(seed)
    mujoco.mj_integratePos(mm, md.qpos, 0.5 * rng.standard_normal(mm.nv), 1.0)
    md.qvel[:] = rng.standard_normal(mm.nv)
    span = np.where(mm.actuator_ctrllimited, np.abs(mm.actuator_ctrlrange).max(-1), 1.0)
    md.ctrl[:] = rng.uniform(-ctrl_scale, ctrl_scale, mm.nu) * span
    md.act[:] = rng.uniform(-0.2, 1.2, mm.na)
    md.act_dot[:] = 0.25  # what MuJoCo leaves in place when actuation is disabled
    return md


def _compare(mm, m, md, fields=FIELDS, full=False):
    act_dot = md.act_dot.copy()
    if full:
        d = _run_all(m, state_from_mujoco(m, md).replace(act_dot=jnp.asarray(act_dot)))
        mujoco.mj_forward(mm, md)
    else:
        mujoco.mj_forward(mm, md)
        d = _run(m, _state(m, mm, md, act_dot))
    errs = {}
    for f in fields:
        a = np.asarray(getattr(d, f), np.float64)
        b = np.asarray(getattr(md, f), np.float64).reshape(a.shape)
        if a.size:
            errs[f] = float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))
    return errs


def _assert_small(errs, tol=TOL):
    bad = {f: e for f, e in errs.items() if not e <= tol}
    assert not bad, f"relative errors above {tol:g}: {bad}"


def test_full_chain():
    """Our own kinematics, com_pos, tendon and transmission feeding passive and actuation."""
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    m = model_from_mujoco(mm)
    for seed in range(2):
        _assert_small(_compare(mm, m, _random_data(mm, seed), full=True))


@pytest.mark.parametrize("path", MODELS, ids=_ids)
def test_matches_mujoco(path):
    mm = mujoco.MjModel.from_xml_path(path)
    m = model_from_mujoco(mm)
    for seed in range(3):
        _assert_small(_compare(mm, m, _random_data(mm, seed, ctrl_scale=1.5 + 6 * (seed == 2))))


_D = mujoco.mjtDisableBit
# every flag appears at least once; each variant is one compilation
VARIANTS = {
    "spring+clampctrl": (_D.mjDSBL_SPRING | _D.mjDSBL_CLAMPCTRL, 0),
    "damper+gravity+group2": (_D.mjDSBL_DAMPER | _D.mjDSBL_GRAVITY, 1 << 2),
    "spring+damper+actuation": (_D.mjDSBL_SPRING | _D.mjDSBL_DAMPER | _D.mjDSBL_ACTUATION, 0),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_disable_flags(variant):
    flags, groups = VARIANTS[variant]
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    mm.opt.disableflags = flags
    mm.opt.disableactuator = groups
    m = model_from_mujoco(mm)
    for seed in (5, 6):
        _assert_small(_compare(mm, m, _random_data(mm, seed, ctrl_scale=4.0)))


def test_bad_ctrl_zeroes_all_controls():
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    m = model_from_mujoco(mm)
    md = _random_data(mm, 7)
    md.ctrl[2] = np.nan
    _assert_small(_compare(mm, m, md))


def test_rotational_setpoint_wraps():
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    m = model_from_mujoco(mm)
    md = _random_data(mm, 1)
    md.ctrl[mm.actuator("ballservo").id] = 9.0
    md.ctrl[mm.actuator("siteservo").id] = -8.0
    _assert_small(_compare(mm, m, md))


def test_float32():
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    m = model_from_mujoco(mm, dtype=jnp.float32)
    md = _random_data(mm, 3)
    errs = _compare(mm, m, md, fields=("qfrc_passive", "qfrc_actuator", "act_dot"))
    _assert_small(errs, 1e-5)
    mujoco.mj_forward(mm, md)
    d = _run(m, _state(m, mm, md, md.act_dot))
    assert d.qfrc_passive.dtype == jnp.float32 and d.qfrc_actuator.dtype == jnp.float32


def test_grad_at_zero_velocity_is_finite():
    """Gradient wrt qvel at qvel = 0 (no wind: zero fluid velocity, |v| and sqrt at 0)."""
    # the features model has both fluid models, ball/free springs, muscles, dampingpoly
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    mm.opt.wind[:] = 0
    m = model_from_mujoco(mm)
    md = mujoco.MjData(mm)
    mujoco.mj_forward(mm, md)
    d0 = _state(m, mm, md, md.act_dot)

    def total(qvel):
        d = _velocity_stages(m, d0.replace(qvel=qvel))
        return jnp.sum(d.qfrc_passive) + jnp.sum(d.qfrc_actuator) + jnp.sum(d.act_dot)

    g = jax.jit(jax.grad(total))(jnp.zeros(mm.nv))
    assert np.all(np.isfinite(g)) and np.any(g != 0)


def test_jit_model_argument_compiles_once():
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    m = model_from_mujoco(mm)
    md = _random_data(mm, 0)
    mujoco.mj_forward(mm, md)
    d = _state(m, mm, md, md.act_dot)
    a = _run(m, d)
    size = _run._cache_size()
    m2 = m.replace(dof_damping=2 * m.dof_damping, actuator_gainprm=3 * m.actuator_gainprm,
                   opt=m.opt.replace(density=m.opt.density * 3))
    b = _run(m2, d)
    assert _run._cache_size() == size
    assert not np.allclose(a.qfrc_passive, b.qfrc_passive)
    assert not np.allclose(a.actuator_force, b.actuator_force)


def test_fluid_follows_the_density_and_viscosity_values():
    """A model closed over by the traced function with zero density and viscosity has no
    fluid stage (MuJoCo's early return); the same model given other values, closed over
    (concrete) or as a vmapped argument, gets MuJoCo's fluid forces for them."""
    mm = mujoco.MjModel.from_xml_path(FEATURES)
    mm.opt.density, mm.opt.viscosity = 0.0, 0.0
    m = model_from_mujoco(mm)
    md = _random_data(mm, 1)
    mujoco.mj_forward(mm, md)
    d = _state(m, mm, md, md.act_dot)
    zero = jax.jit(lambda d_: _velocity_stages(m, d_))(d)
    np.testing.assert_array_equal(zero.qfrc_fluid, md.qfrc_fluid)
    vals = [(1.3, 0.0), (0.0, 0.02), (1.3, 0.02)]
    mm.opt.density, mm.opt.viscosity = vals[0]
    m1 = m.replace(opt=m.opt.replace(density=jnp.asarray(vals[0][0]),
                                     viscosity=jnp.asarray(vals[0][1])))
    batch = jax.tree.map(lambda *x: jnp.stack(x), *[
        m.replace(opt=m.opt.replace(density=jnp.asarray(r), viscosity=jnp.asarray(v)))
        for r, v in vals])
    outs = [jax.jit(lambda d_: _velocity_stages(m1, d_))(d),
            *[jax.tree.map(lambda x, i=i: x[i], jax.vmap(_run, in_axes=(0, None))(batch, d))
              for i in range(len(vals))]]
    for out, (rho, mu) in zip(outs, vals[:1] + vals, strict=True):
        mm.opt.density, mm.opt.viscosity = rho, mu
        mujoco.mj_forward(mm, md)
        assert np.abs(md.qfrc_fluid).max() > 1e-3
        np.testing.assert_allclose(out.qfrc_fluid, md.qfrc_fluid, rtol=1e-9, atol=1e-12)


def test_unsupported_actuator_raises():
    mm = mujoco.MjModel.from_xml_string("""
    <mujoco><worldbody><body><joint name="j" type="slide"/><geom size=".1"/></body></worldbody>
    <actuator><general name="u2" joint="j" dyntype="user" actdim="2"/></actuator></mujoco>""")
    m = model_from_mujoco(mm)
    d = state_from_mujoco(m, mujoco.MjData(mm))
    with pytest.raises(NotImplementedError, match="'u2'.*user dynamics with 2"):
        jax.eval_shape(actuation.actuation, m, d)
