"""Flex elasticity (<elasticity young=...>): the compiled stretch metrics and bending
matrices against MuJoCo's mjModel, and the passive forces (spring and damper apart), the
acceleration, one step and inverse dynamics against mj_forward / mj_step / mj_inverse."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim import MJCFError

# three flexes, no contacts between them: a pinned cloth (stretch and bending, damped), a
# closed shell (bending over a curved reference) and a block of tetrahedra inside a
# floating body, pinned to it at one vertex (whose forces go through its point Jacobian)
XML = """
<mujoco>
  <option gravity="0 0 -9.81" solver="{solver}" integrator="{integrator}"{flags}/>
  <worldbody>
    <geom type="plane" size="2 2 .1" contype="0" conaffinity="0"/>
    <flexcomp name="cloth" type="grid" dim="2" count="4 3 1" spacing=".1 .12 .1"
              pos="0 0 1" radius=".005" mass=".3">
      <contact contype="0" conaffinity="0"/>
      <edge damping=".01"/>
      <elasticity young="3e4" poisson=".3" thickness="1e-2" elastic2d="both" damping=".01"/>
      <pin id="0 3"/>
    </flexcomp>
    <flexcomp name="shell" type="ellipsoid" dim="2" count="4 3 4" spacing=".1 .13 .09"
              pos="1 0 1" radius=".005" mass=".2">
      <contact contype="0" conaffinity="0"/>
      <elasticity young="2e4" poisson=".25" thickness="1e-2" elastic2d="bend" damping=".02"/>
    </flexcomp>
    <body name="carrier" pos="0 1 1">
      <freejoint/>
      <geom type="box" size=".05 .05 .05" contype="0" conaffinity="0"/>
      <flexcomp name="block" type="grid" dim="3" count="2 2 3" spacing=".07 .08 .07"
                pos=".1 0 0" radius=".005" mass=".4">
        <contact contype="0" conaffinity="0"/>
        <elasticity young="5e4" poisson=".3" damping=".002"/>
        <pin id="0"/>
      </flexcomp>
    </body>
  </worldbody>
</mujoco>
"""


def _xml(flags="", solver="Newton", integrator="Euler"):
    return XML.format(flags=flags, solver=solver, integrator=integrator)


def test_elasticity_constants_match_mujoco():
    xml = _xml()
    ref = mujoco.MjModel.from_xml_string(xml)
    m = jaxsim.load_string(xml, dtype=np.float64)
    assert list(ref.flex_dim) == [2, 2, 3]
    np.testing.assert_array_equal(np.asarray(m.flex_edgeflap), ref.flex_edgeflap.reshape(-1, 2))
    np.testing.assert_allclose(np.asarray(m.flex_damping), ref.flex_damping, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(m.flexedge_invweight0), ref.flexedge_invweight0,
                               rtol=1e-10)
    for f in range(ref.nflex):
        ne = 3 if ref.flex_dim[f] == 2 else 6
        n, adr = int(ref.flex_elemnum[f]), int(ref.flex_elemadr[f])
        np.testing.assert_array_equal(
            np.asarray(m.flex_elemedge)[adr:adr + n, :ne].reshape(-1),
            ref.flex_elemedge[ref.flex_elemedgeadr[f]:][:n * ne])
        # MuJoCo 4.0 keeps 21 entries per triangle and 24 per tetrahedron (three unused)
        stride = 21 if ref.flex_dim[f] == 2 else 24
        k = ref.flex_stiffness[ref.flex_stiffnessadr[f]:][:n * stride].reshape(n, stride)
        assert np.all(k[:, 21:] == 0)
        np.testing.assert_allclose(np.asarray(m.flex_stiffness)[adr:adr + n], k[:, :21],
                                   rtol=1e-12, atol=1e-12 * np.abs(k).max(), err_msg=f"{f}")
        e, ea = int(ref.flex_edgenum[f]), int(ref.flex_edgeadr[f])
        ours = np.asarray(m.flex_bending)[ea:ea + e]
        if ref.flex_bendingadr[f] < 0:
            assert np.all(ours == 0)
            continue
        b = ref.flex_bending[ref.flex_bendingadr[f]:][:e * 17].reshape(e, 17)
        np.testing.assert_allclose(ours, b, rtol=1e-12, atol=1e-12 * np.abs(b).max(),
                                   err_msg=f"{f}")
    # what the test is about: stretch on the cloth (not the shell), a curved reference
    assert np.abs(np.asarray(m.flex_stiffness)).max() > 0
    assert np.abs(ref.flex_bending.reshape(-1, 17)[:, 16]).max() > 1


def _states(ref, n, seed):
    rng = np.random.default_rng(seed)
    d = mujoco.MjData(ref)
    for _ in range(n):
        mujoco.mj_resetData(ref, d)
        d.qpos[:] = ref.qpos0 + rng.normal(size=ref.nq) * 0.01
        d.qvel[:] = rng.normal(size=ref.nv) * 0.3
        mujoco.mj_forward(ref, d)
        yield d


@pytest.mark.parametrize("flags", ["", '><flag spring="disable"/></option><option',
                                   '><flag damper="disable"/></option><option'],
                         ids=["all", "no-spring", "no-damper"])
def test_elasticity_forces_match_mujoco(flags):
    xml = _xml(flags)
    ref = mujoco.MjModel.from_xml_string(xml)
    m = jaxsim.load_string(xml, dtype=np.float64)
    fwd = jax.jit(jaxsim.forward)
    state = jaxsim.make_state(m)
    for d in _states(ref, 3, 5):
        out = fwd(m, state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel)))
        for f in ("qfrc_spring", "qfrc_damper", "qfrc_passive", "qacc"):
            ours, theirs = np.asarray(getattr(out, f)), getattr(d, f)
            np.testing.assert_allclose(ours, theirs, rtol=1e-9,
                                       atol=1e-9 * (1 + np.abs(theirs).max()), err_msg=f)
    # the forces tested are there
    if not flags:
        assert np.abs(d.qfrc_spring).max() > 1 and np.abs(d.qfrc_damper).max() > 1e-2


def test_elasticity_step_and_inverse_match_mujoco():
    xml = _xml()
    ref = mujoco.MjModel.from_xml_string(xml)
    m = jaxsim.load_string(xml, dtype=np.float64)
    step, inv = jax.jit(jaxsim.step), jax.jit(jaxsim.inverse)
    fwd = jax.jit(jaxsim.forward)
    state = jaxsim.make_state(m)
    for d in _states(ref, 2, 9):
        st = state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel))
        ds = mujoco.MjData(ref)
        mujoco.mj_copyData(ds, ref, d)
        mujoco.mj_step(ref, ds)
        np.testing.assert_allclose(np.asarray(step(m, st).qvel), ds.qvel, rtol=1e-8,
                                   atol=1e-8 * (1 + np.abs(ds.qvel).max()))
        di = mujoco.MjData(ref)
        mujoco.mj_copyData(di, ref, d)
        mujoco.mj_inverse(ref, di)
        io = inv(m, fwd(m, st).replace(qacc=np.array(d.qacc)))
        np.testing.assert_allclose(np.asarray(io.qfrc_inverse), di.qfrc_inverse,
                                   atol=1e-8 * (1 + np.abs(di.qfrc_inverse).max()))


def test_elasticity_gradients_are_finite_and_match_differences():
    """System identification: d qacc / d (stiffness scale, damping) by reverse mode against
    central differences."""
    xml = _xml()
    ref = mujoco.MjModel.from_xml_string(xml)
    m = jaxsim.load_string(xml, dtype=np.float64)
    d = next(_states(ref, 1, 2))
    st = jaxsim.make_state(m).replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel))
    w = jnp.asarray(np.random.default_rng(0).normal(size=m.nv))

    def loss(p):
        mm = m.replace(flex_stiffness=m.flex_stiffness * p[0], flex_bending=m.flex_bending * p[1],
                       flex_damping=m.flex_damping * p[2])
        return jnp.dot(w, jaxsim.forward(mm, st).qacc)

    p0 = jnp.ones(3)
    g = np.asarray(jax.jit(jax.grad(loss))(p0))
    f = jax.jit(loss)
    h = 1e-6
    fd = [(f(p0.at[i].add(h)) - f(p0.at[i].add(-h))) / (2 * h) for i in range(3)]
    assert np.all(np.isfinite(g)) and np.all(np.abs(g) > 0)
    np.testing.assert_allclose(g, np.asarray(fd), rtol=1e-5)


@pytest.mark.parametrize("elas,what", [
    ('young="1e4" elastic2d="bend"', "2d elasticity requires positive thickness"),
    ('young="1e4" thickness=".01" elastic2d="bend" poisson=".5"', "Poisson ratio"),
    ('young="1e4" poisson="-.1"', "Poisson ratio"),
    ('young="1e4" thickness=".01" elastic2d="both" dim3', "2d elasticity requires 2d flex"),
])
def test_elasticity_errors_name_the_element(elas, what):
    dim, count = ("3", "2 2 2") if "dim3" in elas else ("2", "3 3 1")
    xml = (f'<mujoco><worldbody><flexcomp name="F" type="grid" dim="{dim}" count="{count}" '
           f'spacing=".1 .1 .1"><elasticity {elas.replace(" dim3", "")}/></flexcomp>'
           '</worldbody></mujoco>')
    with pytest.raises(MJCFError, match=rf"(?s)<elasticity>.*{what}"):
        jaxsim.load_string(xml)
    with pytest.raises(ValueError):  # MuJoCo refuses it too
        mujoco.MjModel.from_xml_string(xml)


def test_elasticity_with_cg_and_an_implicit_integrator_is_refused():
    """MuJoCo folds flex stiffness into its CG solve under an implicit integrator (a
    different model of the step); jaxsim refuses it, naming the flex, instead of
    simulating something else."""
    m = jaxsim.load_string(_xml(solver="CG", integrator="implicitfast"))
    with pytest.raises(MJCFError, match=r"<flex 'cloth'>.*CG solver and an implicit"):
        jax.eval_shape(jaxsim.forward, m, jaxsim.make_state(m))
