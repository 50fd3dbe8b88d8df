"""Gradients through rollouts: reverse mode through `step` and the constraint solver.

The solver's derivatives come from the implicit function theorem at its answer (see
jaxsim/solver.py), not from unrolling its iterations, so what is checked here is that the
whole pipeline (collision, constraint rows, solver, integrator) differentiates correctly
over many steps:

- a box sliding on a plane, 50 steps, Newton with 20 iterations, float64: d(final x) /
  d(initial velocity) and d(final x) / d(sliding friction) agree with central differences
  within 1%, for the pyramidal and the elliptic cone;
- jax.grad through a 200-step rollout of gymnasium's ant is finite and not all zero
  (JAXSIM_TEST_ALL=1: the compilation takes minutes).

A note on the box. A box kicked to slide on a plane does not slide in persistent contact
in MuJoCo (nor here, identically): the soft contact turns part of the friction impulse
into a normal one, and the box hops, so its contacts come and go over the rollout. The
final position is then piecewise smooth in the parameters, with kinks where a contact
appears or disappears one step earlier or later. Central differences are meaningful only
if no such event moves between the perturbed rollouts, which the test checks (the
per-step contact and constraint-state pattern must be identical in all of them) before
comparing.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import gym_assets

import jaxsim

ALL = os.environ.get("JAXSIM_TEST_ALL") == "1"

BOX = """
<mujoco>
  <option timestep="0.005" solver="Newton" iterations="20" tolerance="1e-12" cone="{cone}"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" friction="0.1 0.005 0.0001"/>
    <body name="box" pos="0 0 0.1">
      <freejoint/>
      <geom name="box" type="box" size=".1 .1 .1" mass="1" condim="3"
            friction="{mu} 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>
"""

NSTEP = 50
MU = 0.3  # box sliding friction (the floor's is lower: the contact takes the larger)
V0 = 1.5  # initial x velocity (m/s): still sliding after NSTEP steps
REL = 1e-5  # central-difference step, relative


@pytest.fixture(scope="module", autouse=True)
def _x64():
    jax.config.update("jax_enable_x64", True)


def _box_model(cone):
    m = jaxsim.load_string(BOX.format(cone=cone, mu=MU), dtype=jnp.float64)
    assert m.opt.solver == jaxsim.Solver.NEWTON and m.opt.iterations == 20
    assert float(m.geom_friction[0, 0]) < MU  # the box's friction is the contact's
    return m


def _box_rollout(m, qpos, qvel, warm, v0, mu):
    """NSTEP steps from (qpos, qvel with qvel[0] = v0), box friction mu.

    Returns (final state, per-step trace). The state is made inside, from the same model,
    so that its constraint-row layout matches the model's (traced or not).
    """
    m = m.replace(geom_friction=m.geom_friction.at[1, 0].set(mu))
    d = jaxsim.make_state(m).replace(qpos=qpos, qvel=qvel.at[0].set(v0), qacc_warmstart=warm)

    def body(d, _):
        d = jaxsim.step(m, d)
        return d, (d.contact.active, d.efc_state, d.solver_niter)

    return jax.lax.scan(body, d, None, length=NSTEP)


@pytest.mark.parametrize("cone", [
    "pyramidal",
    pytest.param("elliptic", marks=pytest.mark.skipif(
        not ALL, reason="set JAXSIM_TEST_ALL=1 (another ~40 s of compilation)")),
])
def test_box_sliding_grad_matches_central_differences(cone):
    m = _box_model(cone)

    @jax.jit
    def run(qpos, qvel, warm, v0, mu):
        d, trace = _box_rollout(m, qpos, qvel, warm, v0, mu)
        return d.qpos[0], d.qvel[0], d.qpos, d.qvel, d.qacc_warmstart, trace

    # settle the box at rest on the plane (2 * NSTEP steps), then kick it along x
    d = jaxsim.make_state(m)
    qpos, qvel, warm = d.qpos, d.qvel, d.qacc_warmstart
    for _ in range(2):
        *_, qpos, qvel, warm, _ = run(qpos, qvel, warm, 0.0, MU)
    assert float(jnp.max(jnp.abs(qvel))) < 1e-6
    assert abs(float(qpos[2]) - 0.1) < 1e-3

    @jax.jit
    def final_x(v0, mu):
        return _box_rollout(m, qpos, qvel, warm, v0, mu)[0].qpos[0]

    g_v0, g_mu = jax.grad(final_x, argnums=(0, 1))(V0, MU)
    g_v0, g_mu = float(g_v0), float(g_mu)

    hv, hm = REL * V0, REL * MU
    pts = [(V0, MU), (V0 + hv, MU), (V0 - hv, MU), (V0, MU + hm), (V0, MU - hm)]
    outs = [run(qpos, qvel, warm, v, u) for v, u in pts]
    x = [float(o[0]) for o in outs]
    vx = [float(o[1]) for o in outs]
    niter = np.asarray(outs[0][5][2])
    # the box moved, is still sliding forward, and the solver did work
    assert x[0] > 0.1 and min(vx) > 0.1, (x[0], vx)
    assert niter.max() > 0
    # no contact event or constraint state moves between the perturbed rollouts
    for o in outs[1:]:
        for a, b in zip(outs[0][5][:2], o[5][:2], strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ncontact_steps = int(np.sum(np.any(np.asarray(outs[0][5][0]), axis=1)))
    assert ncontact_steps >= 5, ncontact_steps  # the friction acted over several steps

    fd_v0 = (x[1] - x[2]) / (2 * hv)
    fd_mu = (x[3] - x[4]) / (2 * hm)
    print(f"{cone}: dx/dv0 grad {g_v0:.10g} fd {fd_v0:.10g}; "
          f"dx/dmu grad {g_mu:.10g} fd {fd_mu:.10g}; final vx {vx[0]:.4f}; "
          f"steps in contact {ncontact_steps}/{NSTEP}; max solver iterations {niter.max()}")
    # meaningful: faster start goes further, more friction less far
    assert g_v0 > 0 and g_mu < 0
    assert abs(g_v0 - fd_v0) <= 0.01 * abs(fd_v0), (g_v0, fd_v0)
    assert abs(g_mu - fd_mu) <= 0.01 * abs(fd_mu), (g_mu, fd_mu)


# --------------------------------------------------------------------------------- ant

ANT_STEPS = 200


@pytest.mark.skipif(not ALL, reason="set JAXSIM_TEST_ALL=1 (compiles for 2-4 minutes)")
@pytest.mark.timeout(1200)
def test_ant_rollout_grad_is_finite():
    pytest.importorskip("gymnasium")
    assets = gym_assets()
    if assets is None or not (assets / "ant.xml").exists():
        pytest.skip("gymnasium's MuJoCo assets are not installed")
    m = jaxsim.load(str(assets / "ant.xml"), dtype=jnp.float64)
    rng = np.random.default_rng(0)
    ctrl = jnp.asarray(0.3 * rng.uniform(-1, 1, (ANT_STEPS, m.nu)))
    qvel0 = jnp.asarray(0.1 * rng.standard_normal(m.nv))

    def loss(ctrl, qvel0, body_mass):
        mm = m.replace(body_mass=body_mass)
        d = jaxsim.make_state(mm).replace(qvel=qvel0)

        def body(d, u):
            d = jaxsim.step(mm, d.replace(ctrl=u))
            return d, (d.contact.active, d.efc_state, d.solver_niter)

        d, trace = jax.lax.scan(body, d, ctrl)
        return d.qpos[0] + jnp.sum(d.qvel**2), trace

    vg = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
    (val, trace), grads = vg(ctrl, qvel0, m.body_mass)
    active, _, niter = (np.asarray(t) for t in trace)
    assert np.isfinite(float(val))
    # the ant touched the floor and the solver ran: the gradient went through contacts
    assert active.any(axis=1).sum() > ANT_STEPS // 4, active.any(axis=1).sum()
    assert niter.max() > 0
    for name, g in zip(("ctrl", "qvel0", "body_mass"), grads, strict=True):
        g = np.asarray(g)
        assert np.all(np.isfinite(g)), name
        assert np.any(g != 0), name
    # the ctrl of the last step still moves the final velocities
    assert np.any(np.asarray(grads[0])[-1] != 0)

    # The gradient is the derivative of the rollout, not just finite: along a random
    # direction it matches central differences with a step small enough that no contact
    # event or constraint state changes between the two perturbed rollouts.
    f = jax.jit(loss)
    for arg, g in ((0, grads[0]), (1, grads[1])):
        x0 = (ctrl, qvel0)[arg]
        u = jnp.asarray(rng.standard_normal(x0.shape))
        ad = float(jnp.sum(g * u))
        for h in (1e-6, 1e-7, 1e-8):
            args_p = [ctrl, qvel0, m.body_mass]
            args_m = list(args_p)
            args_p[arg], args_m[arg] = x0 + h * u, x0 - h * u
            (lp, tp), (lm, tm) = f(*args_p), f(*args_m)
            same = all(np.array_equal(a, b) for a, b in zip(tp[:2], tm[:2], strict=True))
            if same:
                break
        assert same, "no step size kept the contact events fixed"
        fd = float(lp - lm) / (2 * h)
        print(f"ant d loss / d {('ctrl', 'qvel0')[arg]} along a random direction: "
              f"grad {ad:.10g} fd {fd:.10g} (h {h:g})")
        assert abs(ad - fd) <= 0.01 * abs(fd), (ad, fd, h)


ARM = """
<mujoco>
  <worldbody>
    <body name="base" pos="0 0 1">
      <freejoint/>
      <geom type="box" size=".1 .2 .05" mass="2"/>
      <body name="link" pos=".1 0 0">
        <joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" mass=".5"/>
        <body name="tip" pos=".3 0 0">
          <joint type="ball"/>
          <geom type="sphere" size=".04" pos=".05 .02 0" mass=".2"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_applied_wrench_grad_is_the_com_jacobian():
    """d qfrc / d xfrc_applied is MuJoCo's Jacobian of each body's com (mj_jacBodyCom),
    transposed, with no wrench applied (where the accumulation is skipped) and with one,
    in forward and reverse mode."""
    import mujoco

    from jaxsim.forward import fwd_position, xfrc_accumulate

    mj = mujoco.MjModel.from_xml_string(ARM)
    md = mujoco.MjData(mj)
    rng = np.random.default_rng(1)
    md.qpos[:] = np.concatenate([[0.1, -0.2, 1.0], np.array([1, .2, -.1, .3]) / 1.0677,
                                 [0.4], np.array([.9, .1, .3, -.2]) / 0.9747])
    mujoco.mj_normalizeQuat(mj, md.qpos)
    mujoco.mj_forward(mj, md)
    ref = np.zeros((mj.nbody, 6, mj.nv))
    for b in range(1, mj.nbody):
        jacp, jacr = np.zeros((3, mj.nv)), np.zeros((3, mj.nv))
        mujoco.mj_jacBodyCom(mj, md, jacp, jacr, b)
        ref[b] = np.concatenate([jacp, jacr])
    model = jaxsim.load_string(ARM, dtype=jnp.float64)
    d = fwd_position(model, jaxsim.make_state(model).replace(qpos=jnp.asarray(md.qpos)))

    def qfrc(x):
        return xfrc_accumulate(model, d.replace(xfrc_applied=x))

    want = np.transpose(ref, (2, 0, 1))  # (nv, nbody, 6)
    for x in (np.zeros((mj.nbody, 6)), rng.normal(size=(mj.nbody, 6))):
        for jac in (jax.jacfwd, jax.jacrev):
            got = jax.jit(jac(qfrc))(jnp.asarray(x))
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
