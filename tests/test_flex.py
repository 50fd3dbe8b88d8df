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
    "user/testdata/shark_22_ascii_vol_fTetWild.xml",
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
              "eq_type", "eq_obj1id", "eq_obj2id", "eq_solref", "eq_solimp", "eq_data",
              "flex_condim", "flex_priority", "flex_solmix", "flex_friction", "flex_solref",
              "flex_solimp", "flex_margin", "flex_gap", "flex_selfcollide",
              "flex_activelayers", "flex_elemlayer"):
        np.testing.assert_allclose(np.asarray(getattr(m, f), float).reshape(-1),
                                   np.asarray(getattr(ref, f), float).reshape(-1),
                                   rtol=1e-10, atol=1e-12, err_msg=f"{where}: {f}")
    # elements: MuJoCo packs dim + 1 ids per element, jaxsim pads rows of 4 with -1
    for f in range(ref.nflex):
        k, n = int(ref.flex_dim[f]) + 1, int(ref.flex_elemnum[f])
        adr = int(ref.flex_elemdataadr[f])
        rows = np.asarray(m.flex_elem)[int(ref.flex_elemadr[f]):][:n]
        np.testing.assert_array_equal(rows[:, :k].reshape(-1), ref.flex_elem[adr:adr + n * k])
        assert np.all(rows[:, k:] == -1), where


def _same_step_and_inverse(ref, d, m, st, out, stp, inv, rtol, atol, inv_atol):
    """One mj_step (qvel) and mj_inverse (qfrc_inverse) from MuJoCo's state d against
    jaxsim's step of st and inverse of its forward output `out` at MuJoCo's qacc."""
    ds = mujoco.MjData(ref)
    mujoco.mj_copyData(ds, ref, d)
    mujoco.mj_step(ref, ds)
    np.testing.assert_allclose(np.asarray(stp(m, st).qvel), ds.qvel, rtol=rtol, atol=atol)
    di = mujoco.MjData(ref)
    mujoco.mj_copyData(di, ref, d)
    mujoco.mj_inverse(ref, di)
    io = inv(m, out.replace(qacc=np.array(d.qacc)))
    np.testing.assert_allclose(np.asarray(io.qfrc_inverse), di.qfrc_inverse, atol=inv_atol)


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


def test_flexcomp_objects_follow_the_written_ones():
    """MuJoCo reads the body tree after every other section: a flexcomp's flex and edge
    equality come after the flexes and equalities the file writes, even below the
    worldbody (MuJoCo's model/flex/flag.xml)."""
    xml = """<mujoco><worldbody>
        <body name="b" pos="0 0 1"><geom size=".1"/>
          <flexcomp name="cloth" type="grid" dim="2" count="3 3 1" spacing=".1 .1 .1"
                    mass=".5"><edge equality="true"/></flexcomp></body>
        <body name="c" pos="1 0 1"><freejoint/><geom size=".1"/></body></worldbody>
      <equality><connect body1="c" anchor="0 0 0"/></equality>
      <deformable><flex name="own" dim="1" body="world world" vertex="0 0 0 1 0 0"
                                    element="0 1"/></deformable>
      </mujoco>"""
    ref, m = _pair(xml)
    assert list(ref.eq_type) == [0, 4]  # what the test is about
    _compare(ref, m, "written then generated")


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


LACKING_XML = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <worldbody>
    <body name="ball" pos="0 0 .8"><freejoint/><geom type="sphere" size=".05"/></body>
    <flexcomp name="sheet" type="grid" dim="3" count="3 3 3" spacing=".1 .1 .1" pos="0 0 1"
              mass=".5">
      <contact selfcollide="none"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""


def test_flex_physics_jaxsim_lacks_raises_naming_the_flexcomp():
    """Tetrahedra against a sphere (MuJoCo 4.0's analytic routine) are not implemented: the
    forward pass refuses the model, naming the flex and what it lacks."""
    m = jaxsim.load_string(LACKING_XML)
    # raised while tracing (eval_shape compiles nothing)
    with pytest.raises(MJCFError, match=r"<flex 'sheet'>.*collisions with geom 0 \(sphere\)"):
        jax.eval_shape(jaxsim.forward, m, jaxsim.make_state(m))
    # without contacts the same model simulates
    off = LACKING_XML.replace('<option gravity="0 0 -9.81"/>',
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
        _same_step_and_inverse(ref, d, m, st, out, stp, inv, 1e-8, 1e-9, 1e-8)


@pytest.mark.parametrize("bad,what", [
    ('<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".1 .1 .1" '
     'dof="trilinear"/>', "trilinear"),
    ('<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".1 .1 .1">'
     '<elasticity young="1e4" poisson=".6"/></flexcomp>', "Poisson"),
    ('<flexcomp name="F" type="grid" dim="2" count="3 3 1" spacing=".001 .1 .1"/>', "Spacing"),
    ('<frame pos="1 0 0"><flexcomp name="F" type="grid" dim="1" count="3 1 1" '
     'spacing=".1 .1 .1"/></frame>', "frame"),
])
def test_flexcomp_errors_name_the_element(bad, what):
    xml = f'<mujoco><worldbody><body name="b">{bad}</body></worldbody></mujoco>'
    with pytest.raises(MJCFError) as info:
        jaxsim.load_string(xml)
    assert what in str(info.value) and info.value.line is not None


PLANE_XML = """
<mujoco>
  <option gravity="0 0 -9.81" cone="{cone}"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 .1" priority="{gp}" solmix="2" margin=".002"
          friction=".7 .01 .002" solref=".03 1.2" condim="{gc}"/>
    <body name="tilted" euler="8 5 0" pos="0 0 -.01">
      <geom name="ramp" type="plane" size=".3 .3 .1" pos=".6 0 0" gap=".001"/>
    </body>
    <flexcomp name="block" type="grid" count="3 3 2" spacing=".05 .05 .05" pos="0 0 .03"
              dim="3" radius=".004" mass=".5">
      <edge equality="true" solref=".01 1"/>
      <contact selfcollide="none" priority="1" solmix=".5" margin=".003" gap=".001"
               friction=".9 .02 .001" solref=".02 .9" solimp=".8 .9 .002 .4 3" condim="{fc}"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("cone,gp,gc,fc", [("pyramidal", 0, 3, 1), ("elliptic", 1, 6, 4),
                                           ("pyramidal", 1, 4, 6)],
                         ids=["flex-priority", "mixed", "geom-priority"])
def test_plane_flex_vertex_contacts_match_mujoco(cone, gp, gc, fc):
    """mj_collidePlaneFlex: every flex vertex against the planes of dof-less bodies, with
    MuJoCo's contact parameters of a geom : flex pair (priority, solmix, margins, gaps),
    the ids (geom, flex, vert), and the forward pass, one step and inverse dynamics that
    follow from them."""
    xml = PLANE_XML.format(cone=cone, gp=gp, gc=gc, fc=fc)
    ref, m = _pair(xml)
    _compare(ref, m, "plane")
    d = mujoco.MjData(ref)
    rng = np.random.default_rng(11)
    fwd, stp, inv = jax.jit(jaxsim.forward), jax.jit(jaxsim.step), jax.jit(jaxsim.inverse)
    state = jaxsim.make_state(m)
    seen, gapped = set(), False
    for _ in range(3):
        mujoco.mj_resetData(ref, d)
        d.qpos[:] = ref.qpos0 + rng.normal(size=ref.nq) * 0.01 - 0.02 * (
            np.arange(ref.nq) % 3 == 2)
        d.qvel[:] = rng.normal(size=ref.nv) * 0.3
        mujoco.mj_forward(ref, d)
        st = state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel))
        out = fwd(m, st)
        c = out.contact
        act = np.asarray(c.active)
        assert act.sum() == d.ncon
        seen |= {int(r.geom[0]) for r in d.contact[:d.ncon]}
        gapped |= any(r.dist >= r.includemargin for r in d.contact[:d.ncon])
        for k, i in enumerate(np.nonzero(act)[0]):
            r = d.contact[k]
            np.testing.assert_array_equal(np.asarray(c.geom)[i], r.geom)
            np.testing.assert_array_equal(np.asarray(c.flex)[i], r.flex)
            np.testing.assert_array_equal(np.asarray(c.vert)[i], r.vert)
            for f in ("dist", "pos", "frame", "friction", "solref", "solimp",
                      "includemargin"):
                np.testing.assert_allclose(np.asarray(getattr(c, f))[i].reshape(-1),
                                           np.asarray(getattr(r, f)).reshape(-1)[
                                               :np.asarray(getattr(c, f))[i].size],
                                           rtol=1e-12, atol=1e-14, err_msg=f)
            assert int(np.asarray(c.dim)[i]) == r.dim
        for f in ("qfrc_constraint", "qacc"):
            np.testing.assert_allclose(np.asarray(getattr(out, f)), getattr(d, f), rtol=1e-7,
                                       atol=1e-7, err_msg=f)
        _same_step_and_inverse(ref, d, m, st, out, stp, inv, 1e-7, 1e-8, 1e-7)
    assert seen == {0, 1} and gapped  # both planes touched, some vertex in the gap


SELF_XML = """
<mujoco>
  <option gravity="0 0 -9.81" cone="{cone}"/>
  <worldbody>
    <flexcomp name="F" type="grid" dim="{dim}" count="{count}" spacing=".1 .1 .1" pos="0 0 1"
              radius=".02" mass="1">
      <contact selfcollide="{mode}" condim="{condim}"/>
      <edge equality="{eq}"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""


def _contact_keys(c, act):
    """(geom pair, elem pair, vertex pair) and distance of each active jaxsim contact."""
    g, e, v = (np.asarray(x) for x in (c.geom, c.elem, c.vert))
    dist = np.asarray(c.dist)
    return sorted((tuple(g[i]) + tuple(e[i]) + tuple(v[i]), dist[i]) for i in np.nonzero(act)[0])


def _ref_keys(d):
    return sorted((tuple(r.geom) + tuple(r.elem) + tuple(r.vert), r.dist)
                  for r in d.contact[:d.ncon])


def _same_contacts(ours, ref, tol):
    assert [k for k, _ in ours] == [k for k, _ in ref]
    np.testing.assert_allclose([x for _, x in ours], [x for _, x in ref], atol=tol)


@pytest.mark.parametrize("dim,count,scale,mode,cone,condim,eq", [
    (1, "8 1 1", 0.08, "auto", "pyramidal", 3, "true"),
    (2, "4 4 1", 0.08, "sap", "elliptic", 4, "false"),
    (3, "3 3 3", 0.06, "bvh", "pyramidal", 3, "true"),
], ids=["dim1", "dim2", "dim3"])
def test_flex_self_collisions_match_mujoco(dim, count, scale, mode, cone, condim, eq):
    """Self-collisions of edges (capsule pairs), triangles and the outer layer of
    tetrahedra (native CCD between elements inflated by the radius), in random crumpled
    states: the same element pairs and depths as MuJoCo, the element-side Jacobians
    (barycentric weights of the closest element point) through qacc; when MuJoCo finds more
    self-contacts than jaxsim's buffer holds, `overflow` says so."""
    xml = SELF_XML.format(dim=dim, count=count, mode=mode, cone=cone, condim=condim, eq=eq)
    ref, m = _pair(xml)
    d = mujoco.MjData(ref)
    rng = np.random.default_rng(0)
    fwd = jax.jit(jaxsim.forward)
    state = jaxsim.make_state(m)
    nslot = state.contact.dist.shape[0]
    compared = 0
    for _ in range(12):
        mujoco.mj_resetData(ref, d)
        d.qpos[:] = ref.qpos0 + rng.normal(size=ref.nq) * scale
        d.qvel[:] = rng.normal(size=ref.nv) * 0.1
        mujoco.mj_forward(ref, d)
        out = fwd(m, state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel)))
        assert bool(out.overflow) == (d.ncon > nslot)
        if d.ncon == 0 or d.ncon > nslot:
            continue
        compared += 1
        _same_contacts(_contact_keys(out.contact, np.asarray(out.contact.active)),
                       _ref_keys(d), 1e-10)
        np.testing.assert_allclose(np.asarray(out.qacc), d.qacc, rtol=1e-8, atol=1e-8)
        if compared == 3:
            break
    assert compared == 3


EDGE_XML = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="obstacles" pos="0 0 .97"><joint type="slide" axis="0 0 1"/>
      <geom type="sphere" size=".06" pos="-.25 0 0"/>
      <geom type="capsule" size=".03 .05" euler="0 80 10" priority="1" condim="4"/>
      <geom type="box" size=".04 .05 .03" pos=".25 0 .02" euler="10 20 30"/>
    </body>
    <flexcomp name="F" type="grid" dim="{dim}" count="{count}" spacing="{spacing}" pos="0 0 1"
              radius="{radius}" mass="1">
      <contact condim="3" margin=".005" selfcollide="none"/>
      <edge equality="true"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("dim,count,spacing,radius,scale", [
    (1, "10 1 1", ".08 .1 .1", ".02", 0.04), (2, "6 3 1", ".1 .1 .1", ".01", 0.03)],
    ids=["edges", "triangles"])
def test_flex_element_geom_contacts_match_mujoco(dim, count, spacing, radius, scale):
    """Edges (capsules of the flex radius; MuJoCo's primitive routines, the box normal
    reversed) and triangles (mjraw_SphereTriangle, CapsuleTriangle, BoxTriangle) against
    spheres, capsules and boxes of a moving body, with priorities, condim and margins mixed
    as for geom pairs; contacts, forward, one step and inverse."""
    ref, m = _pair(EDGE_XML.format(dim=dim, count=count, spacing=spacing, radius=radius))
    d = mujoco.MjData(ref)
    rng = np.random.default_rng(1)
    fwd, stp, inv = jax.jit(jaxsim.forward), jax.jit(jaxsim.step), jax.jit(jaxsim.inverse)
    state = jaxsim.make_state(m)
    kinds = set()
    for _ in range(3):
        mujoco.mj_resetData(ref, d)
        d.qpos[:] = ref.qpos0 + rng.normal(size=ref.nq) * scale
        d.qvel[:] = rng.normal(size=ref.nv) * 0.1
        mujoco.mj_forward(ref, d)
        st = state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel))
        out = fwd(m, st)
        _same_contacts(_contact_keys(out.contact, np.asarray(out.contact.active)),
                       _ref_keys(d), 1e-12)
        kinds |= {int(r.geom[0]) for r in d.contact[:d.ncon]}
        for f in ("qfrc_constraint", "qacc"):
            np.testing.assert_allclose(np.asarray(getattr(out, f)), getattr(d, f), rtol=1e-8,
                                       atol=1e-8, err_msg=f)
        _same_step_and_inverse(ref, d, m, st, out, stp, inv, 1e-8, 1e-9, 1e-7)
    assert {1, 2, 3} <= kinds  # sphere, capsule and box all touched the flex


CCD_XML = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <asset><mesh name="m" vertex="0 0 0  .1 0 0  0 .1 0  0 0 .1  .08 .08 .06"/></asset>
  <worldbody>
    <body name="obstacles" pos="0 0 {z}"><joint type="slide" axis="0 0 1"/>
      {geoms}
    </body>
    <flexcomp name="F" type="grid" dim="{dim}" count="{count}" spacing=".1 .1 .1" pos="0 0 1"
              radius=".01" mass="1">
      <contact condim="3" margin=".005" selfcollide="none"/>
      <edge equality="true"/>
    </flexcomp>
  </worldbody>
</mujoco>
"""
CCD_GEOMS = {
    2: '<geom type="mesh" mesh="m" pos="-.1 0 0" euler="5 10 0"/>'
       '<geom type="ellipsoid" size=".05 .04 .03" pos=".12 .05 0" euler="10 20 30"/>'
       '<geom type="cylinder" size=".04 .03" pos=".15 -.06 .01" euler="80 30 0"/>',
    3: '<geom type="box" size=".04 .05 .03" pos=".12 0 0" euler="10 20 30"/>'
       '<geom type="mesh" mesh="m" pos="-.15 0 0" euler="5 10 0"/>'
       '<geom type="ellipsoid" size=".05 .04 .03" pos="0 .12 0"/>'
       '<geom type="cylinder" size=".04 .03" pos="0 -.12 0" euler="0 30 0"/>',
}


@pytest.mark.parametrize("dim", [2, 3], ids=["triangles-mesh", "tetrahedra"])
def test_flex_element_ccd_contacts_match_mujoco(dim):
    """mjc_ConvexElem: triangles against meshes, tetrahedra (outer layer) against boxes,
    meshes, ellipsoids and cylinders, through the native CCD with the element inflated by
    the radius; the same contacts and accelerations as MuJoCo."""
    xml = CCD_XML.format(dim=dim, count="3 3 3" if dim == 3 else "5 3 1",
                         geoms=CCD_GEOMS[dim], z=1.1 if dim == 3 else 0.95)
    ref, m = _pair(xml)
    d = mujoco.MjData(ref)
    rng = np.random.default_rng(1)
    fwd = jax.jit(jaxsim.forward)
    state = jaxsim.make_state(m)
    kinds = set()
    for _ in range(3):
        mujoco.mj_resetData(ref, d)
        d.qpos[:] = ref.qpos0 + rng.normal(size=ref.nq) * 0.03
        d.qvel[:] = rng.normal(size=ref.nv) * 0.1
        mujoco.mj_forward(ref, d)
        out = fwd(m, state.replace(qpos=np.array(d.qpos), qvel=np.array(d.qvel)))
        _same_contacts(_contact_keys(out.contact, np.asarray(out.contact.active)),
                       _ref_keys(d), 1e-8)
        kinds |= {int(r.geom[0]) for r in d.contact[:d.ncon]}
        np.testing.assert_allclose(np.asarray(out.qacc), d.qacc, rtol=1e-8, atol=1e-8)
    assert kinds == set(range(ref.ngeom))  # every geom touched the flex


@pytest.mark.parametrize("flag", ["contact", "constraint"])
def test_disabled_contacts_skip_flex_self_collisions(flag):
    """With contacts (or constraints) disabled MuJoCo's mj_collision returns at once: a
    self-colliding flex gets no contact slots either (and its element pairs cost nothing)."""
    xml = f"""<mujoco><option><flag {flag}="disable"/></option><worldbody>
      <flexcomp name="sheet" type="grid" dim="2" count="4 4 1" spacing=".1 .1 .1"
                pos="0 0 1" radius=".01"><contact selfcollide="auto"/></flexcomp>
      </worldbody></mujoco>"""
    ref, m = _pair(xml)
    d = mujoco.MjData(ref)
    mujoco.mj_forward(ref, d)
    out = jax.jit(jaxsim.forward)(m, jaxsim.make_state(m))
    assert d.ncon == 0 and out.contact.dist.shape[0] == 0
    # with contacts on, the element pairs get slots (what the test is about)
    from jaxsim.collision import driver

    on = xml.replace(f'<option><flag {flag}="disable"/></option>', "")
    assert driver.buffer_size(jaxsim.load_string(on)) > 0 and driver.buffer_size(m) == 0
