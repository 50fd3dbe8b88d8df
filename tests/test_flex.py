"""Flexes: <flexcomp> expansion and <flex> compilation against MuJoCo's compiler; edge
spring-dampers and edge equality rows against mj_forward; clear errors for the flex physics
jaxsim lacks."""

from __future__ import annotations

import pathlib

import jax
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim import MJCFError

CORPUS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "corpus" / "mujoco"
MODELS = [
    "engine/testdata/sleep/flex_nocnstr.xml", "engine/testdata/sleep/flex_static.xml",
    "engine/testdata/ray/flex.xml", "user/testdata/flex_line_obj.xml",
    "user/testdata/rigid_flex.xml", "xml/testdata/many_dependencies.xml",
    "user/testdata/cube_22_ascii_vol_gmshApp.xml", "user/testdata/cube_41_binary_surf_gmshApp.xml",
]

# every generator, dof kind and pin form, written for this test
GENERATED = {
    "grid1": '<flexcomp name="F" type="grid" dim="1" count="4 1 1" spacing=".1 .1 .1" '
             'pos=".1 .2 .3" euler="0 0 30"><pin id="0"/></flexcomp>',
    "grid2": '<flexcomp name="F" type="grid" dim="2" count="3 4 1" spacing=".1 .1 .1" '
             'mass="2"><pin gridrange="0 0 0 3"/></flexcomp>',
    "grid3": '<flexcomp name="F" type="grid" dim="3" count="2 3 2" spacing=".1 .1 .1" '
             'inertiabox=".01"><edge equality="true" solref=".01 1"/></flexcomp>',
    "box3": '<flexcomp name="F" type="box" dim="3" count="3 3 4" spacing=".1 .1 .1" '
            'dof="radial"/>',
    "box2": '<flexcomp name="F" type="box" dim="2" count="3 4 3" spacing=".1 .1 .1"/>',
    "cylinder": '<flexcomp name="F" type="cylinder" dim="2" count="4 4 3" spacing=".1 .1 .1"/>',
    "ellipsoid": '<flexcomp name="F" type="ellipsoid" dim="3" count="3 3 3" '
                 'spacing=".1 .1 .1"/>',
    "square": '<flexcomp name="F" type="square" count="3 3 1" spacing=".1 .1 .1" '
              'dof="2d"/>',
    "disc": '<flexcomp name="F" type="disc" count="5 5 1" spacing=".1 .1 .1"/>',
    "circle": '<flexcomp name="F" type="circle" dim="1" count="6 1 1" spacing=".1 .1 .1"/>',
    "direct": '<flexcomp name="F" type="direct" dim="2" point="0 0 0  1 0 0  0 1 0  5 5 5" '
              'element="0 1 2" scale="2 1 1"/>',
    "rigid": '<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".1 .1 .1" '
             'rigid="true"/>',
}


def _pair(xml: str):
    return mujoco.MjModel.from_xml_string(xml), jaxsim.load_string(xml, dtype=np.float64)


def _compare(ref, m, where):
    assert (m.nbody, m.njnt, m.nv, m.nflex, m.nflexvert, m.nflexedge, m.neq) == (
        ref.nbody, ref.njnt, ref.nv, ref.nflex, ref.nflexvert, ref.nflexedge, ref.neq), where
    for f in ("body_parentid", "body_pos", "body_quat", "body_mass", "body_inertia",
              "body_invweight0", "jnt_type", "jnt_axis", "dof_invweight0", "flex_dim",
              "flex_vertadr", "flex_vertnum", "flex_edgeadr", "flex_edgenum", "flex_vertbodyid",
              "flex_edge", "flexedge_rigid", "flex_vert", "flex_rigid", "flex_centered",
              "flexedge_length0", "flexedge_invweight0", "flex_edgestiffness",
              "flex_edgedamping", "flex_radius", "flex_contype", "flex_conaffinity",
              "eq_type", "eq_obj1id", "eq_obj2id", "eq_solref", "eq_solimp", "eq_data"):
        np.testing.assert_allclose(np.asarray(getattr(m, f), float).reshape(-1),
                                   np.asarray(getattr(ref, f), float).reshape(-1),
                                   rtol=1e-10, atol=1e-12, err_msg=f"{where}: {f}")


@pytest.mark.parametrize("rel", MODELS)
def test_corpus_flex_compiles_like_mujoco(rel):
    path = CORPUS / rel
    ref = mujoco.MjModel.from_xml_path(str(path))
    _compare(ref, jaxsim.load(path, dtype=np.float64), rel)


@pytest.mark.parametrize("kind", sorted(GENERATED))
def test_flexcomp_generators_like_mujoco(kind):
    xml = (f'<mujoco><worldbody><body name="b" pos="0 0 1">{GENERATED[kind]}</body>'
           '<body name="after"><geom size=".1"/></body></worldbody></mujoco>')
    ref, m = _pair(xml)
    _compare(ref, m, kind)


SPRING_XML = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <worldbody>
    <body name="holder" pos="0 0 1">
      <joint type="hinge" axis="0 1 0" damping=".1"/>
      <geom size=".05" mass=".2"/>
      <flexcomp name="rope" type="grid" dim="1" count="5 1 1" spacing=".1 .1 .1" mass=".5">
        <pin id="0"/>
        <edge stiffness="80" damping="3"/>
        <contact contype="0" conaffinity="0"/>
      </flexcomp>
    </body>
  </worldbody>
</mujoco>
"""


def test_edge_spring_damper_forces_match_mujoco():
    ref, m = _pair(SPRING_XML)
    d = mujoco.MjData(ref)
    rng = np.random.default_rng(3)
    state = jaxsim.make_state(m)
    fwd = jax.jit(jaxsim.forward)
    for _ in range(3):
        d.qpos[:] = rng.normal(size=ref.nq) * 0.05
        d.qvel[:] = rng.normal(size=ref.nv)
        mujoco.mj_forward(ref, d)
        out = fwd(m, state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel)))
        for f in ("qfrc_spring", "qfrc_damper", "qfrc_passive", "qacc"):
            np.testing.assert_allclose(np.asarray(getattr(out, f)), getattr(d, f), rtol=1e-9,
                                       atol=1e-10, err_msg=f)
    assert np.abs(d.qfrc_spring).max() > 1e-3 and np.abs(d.qfrc_damper).max() > 1e-3


def test_flex_physics_jaxsim_lacks_raises_naming_the_flexcomp():
    colliding = SPRING_XML.replace('<contact contype="0" conaffinity="0"/>', "")
    m = jaxsim.load_string(colliding)
    # raised while tracing (eval_shape compiles nothing)
    with pytest.raises(MJCFError, match=r"line \d+|<flex 'rope'>.*collisions"):
        jax.eval_shape(jaxsim.forward, m, jaxsim.make_state(m))
    # without contacts the same model simulates
    off = colliding.replace('<option gravity="0 0 -9.81"/>',
                            '<option><flag contact="disable"/></option>')
    m = jaxsim.load_string(off)
    assert np.isfinite(np.asarray(jax.jit(jaxsim.step)(m, jaxsim.make_state(m)).qpos)).all()


CLOTH_XML = """
<mujoco>
  <option gravity="0 0 -9.81"{flags}/>
  <worldbody>
    <body name="post" pos="0 0 .5"><freejoint/><geom type="box" size=".02 .02 .02"/></body>
    <flexcomp name="cloth" type="grid" count="4 3 1" spacing=".1 .1 .1" pos="0 0 1" dim="2"
              radius=".01" mass="0.3">
      <edge equality="true" solref=".01 1" damping="0.01"/>
      <contact contype="0" conaffinity="0"/>
      <pin id="0 3"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("flags", ["", '><flag sleep="enable"/></option><option'],
                         ids=["islands", "sleep"])
def test_flex_edge_equality_rows_match_mujoco(flags):
    """mjEQ_FLEX: one equality row per non-rigid edge (length - rest length along the edge
    Jacobian, diagonal from flexedge_invweight0), against mj_forward (rows, forces,
    accelerations), mj_step and mj_inverse, islands and the sleep-enabled row filter
    included."""
    xml = CLOTH_XML.replace("{flags}", flags)
    ref, m = _pair(xml)
    assert ref.neq == 1 and ref.eq_type[0] == mujoco.mjtEq.mjEQ_FLEX
    d = mujoco.MjData(ref)
    rng = np.random.default_rng(5)
    fwd, stp, inv = jax.jit(jaxsim.forward), jax.jit(jaxsim.step), jax.jit(jaxsim.inverse)
    state = jaxsim.make_state(m)
    for _ in range(2):
        mujoco.mj_resetData(ref, d)
        d.qpos[:] = ref.qpos0 + rng.normal(size=ref.nq) * 0.02
        d.qvel[:] = rng.normal(size=ref.nv) * 0.3
        mujoco.mj_forward(ref, d)
        st = state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel))
        out = fwd(m, st)
        n = d.nefc
        assert n == ref.nflexedge - int(ref.flexedge_rigid.sum()) > 0
        assert np.all(d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY)
        assert np.asarray(out.efc_active)[:n].all()
        np.testing.assert_array_equal(np.asarray(out.efc_state)[:n], d.efc_state)
        np.testing.assert_allclose(np.asarray(out.efc_force)[:n], d.efc_force, rtol=1e-8,
                                   atol=1e-9)
        for f in ("qfrc_constraint", "qacc"):
            np.testing.assert_allclose(np.asarray(getattr(out, f)), getattr(d, f), rtol=1e-8,
                                       atol=1e-8, err_msg=f)
        assert np.abs(d.qfrc_constraint).max() > 1e-2
        ds = mujoco.MjData(ref)
        mujoco.mj_copyData(ds, ref, d)
        mujoco.mj_step(ref, ds)
        so = stp(m, st)
        np.testing.assert_allclose(np.asarray(so.qvel), ds.qvel, rtol=1e-8, atol=1e-9)
        di = mujoco.MjData(ref)
        mujoco.mj_copyData(di, ref, d)
        mujoco.mj_inverse(ref, di)
        io = inv(m, out.replace(qacc=np.array(d.qacc)))
        np.testing.assert_allclose(np.asarray(io.qfrc_inverse), di.qfrc_inverse, atol=1e-8)


@pytest.mark.parametrize("bad,what", [
    ('<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".1 .1 .1" '
     'dof="trilinear"/>', "trilinear"),
    ('<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".1 .1 .1">'
     '<elasticity young="1e4"/></flexcomp>', "elasticity"),
    ('<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".001 .1 .1"/>', "Spacing"),
    ('<frame pos="1 0 0"><flexcomp name="F" type="grid" dim="1" count="3 1 1" '
     'spacing=".1 .1 .1"/></frame>', "frame"),
])
def test_flexcomp_errors_name_the_element(bad, what):
    xml = f'<mujoco><worldbody><body name="b">{bad}</body></worldbody></mujoco>'
    with pytest.raises(MJCFError) as info:
        jaxsim.load_string(xml)
    assert what in str(info.value) and info.value.line is not None
