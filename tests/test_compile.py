"""The compiler against MuJoCo's: every model constant, field by field, on real models; the
errors for bad input; and a fuzzer that only ever sees our error type.

CI runs a representative slice of the corpus; `JAXSIM_FULL_CORPUS=1` runs every model.
"""

import os
import pathlib
import re

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from compare import model_errors
from conftest import CORPUS, MODELS, gym_assets, mjx_test_data, visible_xml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxsim
from jaxsim import MJCFError

FULL = os.environ.get("JAXSIM_FULL_CORPUS") == "1"

# Features the compiler rejects with an MJCFError on purpose (the engine cannot honour them
# yet); a model using them must raise, never load half-understood.
REJECTED = re.compile(
    r"flex|plugin|<attach>|<model> assets|sdf geoms|sleeping islands|libccd")

# A slice that exercises every compiler path, for the default (CI) run.
SLICE = [
    "engine/testdata/actuation/actearly.xml", "engine/testdata/actuation/dampratio.xml",
    "engine/testdata/actuation/tendon_force_clamp.xml", "engine/testdata/armature_equivalence.xml",
    "engine/testdata/collision_convex/box_boxmesh.xml", "engine/testdata/collision_convex/long_box.xml",
    "engine/testdata/collision_convex/frameless_contact_hfield.xml",
    "engine/testdata/collisions.xml", "engine/testdata/connect.xml",
    "engine/testdata/core_smooth/tendon_wrap_cylinder.xml", "engine/testdata/core_smooth/ten_J3.xml",
    "engine/testdata/core_smooth/ten_armature_4.xml", "engine/testdata/derivative/linear.xml",
    "engine/testdata/ellipsoidinertia.xml", "engine/testdata/equality_site.xml",
    "engine/testdata/weld.xml", "engine/testdata/spin_recoil.xml",
    "engine/testdata/tendon_springlength.xml", "engine/testdata/sensor/contact_net.xml",
    "user/testdata/auto_limits.xml", "user/testdata/capsule_inertia.xml",
    "user/testdata/fitmesh_aabb.xml", "user/testdata/frame1.xml", "user/testdata/frame2.xml",
    "user/testdata/hfield_png.xml", "user/testdata/inertia_shell.xml", "user/testdata/keyframe.xml",
    "user/testdata/torus_maxhullvert.xml", "xml/testdata/child.xml",
    "engine/testdata/collision_primitive/spheres_cylinders.xml",
]


def _loads_in_mujoco(path: pathlib.Path) -> bool:
    try:
        mujoco.MjModel.from_xml_path(str(path))
        return True
    except Exception:  # noqa: BLE001 -- an include fragment or an invalid model
        return False


def _corpus_models():
    paths = []
    if CORPUS.exists():
        if FULL:
            paths += visible_xml(CORPUS)
        else:
            paths += [CORPUS / p for p in SLICE if (CORPUS / p).exists()]
    for extra in (gym_assets(), mjx_test_data()):
        if extra is not None:
            found = visible_xml(extra)
            paths += found if FULL else found[:: max(1, len(found) // 8)]
    # the 1000-body pile takes ~40 s to compile: the full sweep only
    paths += [p for p in sorted(MODELS.glob("*.xml")) if FULL or p.name != "pile1000.xml"]
    return paths


CASES = _corpus_models()


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_model_constants_match_mujoco(path):
    if not _loads_in_mujoco(path):
        # MuJoCo rejects it (invalid on purpose) or it is an include fragment: ours must
        # reject it too, with our error type
        with pytest.raises(MJCFError):
            jaxsim.load(path, dtype=jnp.float64)
        return
    ref = mujoco.MjModel.from_xml_path(str(path))
    try:
        ours = jaxsim.load(path, dtype=jnp.float64)
    except MJCFError as e:
        assert REJECTED.search(str(e)), f"unexpected rejection: {e}"
        return
    assert model_errors(ours, ref) == []


LENGTHRANGE = """<mujoco>
  <compiler><lengthrange mode="all" timestep="0.02" inttotal="6"/></compiler>
  <worldbody><site name="a" pos="0 0 .3"/>
    <body name="b1"><joint name="j1" axis="0 1 0" range="-60 60"/>
      <geom type="capsule" fromto="0 0 0 .4 0 0" size=".03"/>
      <body name="b2" pos=".4 0 0"><joint name="j2" axis="0 1 0" range="0 90"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/><site name="b" pos=".2 0 0"/>
      </body>
    </body>
  </worldbody>
  <tendon><spatial name="t"><site site="a"/><site site="b"/></spatial></tendon>
  <actuator><muscle tendon="t"/><position joint="j2" kp="1"/>
    <motor joint="j1" lengthrange="-0.5 0.2"/></actuator>
</mujoco>"""


def test_lengthrange_by_simulation_matches_mujoco():
    """Actuators without a range get MuJoCo's simulated one (mj_setLengthRange); an explicit
    range is kept (useexisting)."""
    ref = mujoco.MjModel.from_xml_string(LENGTHRANGE)
    ours = jaxsim.load_string(LENGTHRANGE, dtype=jnp.float64)
    assert np.ptp(ref.actuator_lengthrange[:2], axis=1).min() > 0.1  # not trivially zero
    np.testing.assert_allclose(np.asarray(ours.actuator_lengthrange), ref.actuator_lengthrange,
                               atol=1e-9)
    bad = LENGTHRANGE.replace('inttotal="6"', 'inttotal="0.5"')  # stops before it converges
    with pytest.raises(ValueError, match="did not converge"):
        mujoco.MjModel.from_xml_string(bad)
    with pytest.raises(MJCFError, match="did not converge"):
        jaxsim.load_string(bad, dtype=jnp.float64)


DISCARD = """<mujoco><compiler discardvisual="true"/>
  <asset><texture name="t" type="2d" builtin="checker" width="8" height="8"/>
    <material name="m" texture="t"/>
    <mesh name="used" vertex="0 0 0  1 0 0  0 1 0  0 0 1"/>
    <mesh name="visual" vertex="0 0 0  1 0 0  0 1 0  0 0 .5"/></asset>
  <worldbody><geom name="floor" type="plane" size="1 1 .1" material="m"/>
    <body name="a" pos="0 0 1"><freejoint/><geom size=".1"/>
      <geom name="look" type="box" size=".3 .1 .1" pos=".2 0 0" contype="0" conaffinity="0"/>
      <geom type="mesh" mesh="visual" contype="0" conaffinity="0"/></body>
    <body name="b" pos="1 0 1"><freejoint/><geom type="mesh" mesh="used"/>
      <geom name="paired" size=".2" pos=".3 .1 -.2" contype="0" conaffinity="0"/>
      <site name="s"/></body></worldbody>
  <contact><pair geom1="paired" geom2="floor"/></contact>
</mujoco>"""


def test_discardvisual_matches_mujoco():
    """Visual geoms, meshes only they use, materials and textures go; bodies keep the
    inertia the visual geoms gave them."""
    ref = mujoco.MjModel.from_xml_string(DISCARD)
    assert (ref.ngeom, ref.nmesh, ref.nmat, ref.ntex) == (4, 1, 0, 0)
    ours = jaxsim.load_string(DISCARD, dtype=jnp.float64)
    assert model_errors(ours, ref) == []


def test_mujoco_invalid_models_raise():
    if not CORPUS.exists():
        pytest.skip("corpus not available")
    # every corpus file MuJoCo rejects (malformed meshes, bad attributes, attach conflicts,
    # ...), except include fragments, which are not models by themselves
    invalid = [p for p in visible_xml(CORPUS)
               if p.read_text(errors="replace").lstrip().startswith("<mujoco")
               and not _loads_in_mujoco(p)]
    assert len(invalid) >= 10
    for p in invalid:
        with pytest.raises(MJCFError):
            jaxsim.load(p, dtype=jnp.float64)


# ------------------------------------------------------------------------------- errors

GOOD = """<mujoco>
  <worldbody>
    <body name="b" pos="0 0 1">
      <joint name="j" type="hinge"/>
      <geom type="capsule" size=".1 .2"/>
    </body>
  </worldbody>
  <actuator><motor joint="j"/></actuator>
</mujoco>
"""


def _err(xml, assets=None) -> MJCFError:
    with pytest.raises(MJCFError) as info:
        jaxsim.load_string(xml, assets=assets)
    return info.value


def test_good_model_loads():
    m = jaxsim.load_string(GOOD)
    assert (m.nbody, m.njnt, m.nu) == (2, 1, 1)


def test_malformed_xml_names_line():
    e = _err(GOOD.replace("</body>", "</bod>"))
    assert e.line == 6 and "malformed XML" in str(e)


def test_unknown_attribute_names_element_attribute_line():
    e = _err(GOOD.replace('type="hinge"', 'type="hinge" stifness="3"'))
    assert e.attribute == "stifness" and e.line == 4 and "joint" in str(e.element)
    assert "stifness" in str(e) and ":4" in str(e)


def test_unknown_element():
    e = _err(GOOD.replace("<geom ", "<gem "))
    assert "gem" in str(e) and e.line == 5


def test_bad_reference():
    e = _err(GOOD.replace('joint="j"', 'joint="nope"'))
    assert "nope" in str(e) and e.attribute == "joint" and e.line == 8


def test_bad_value():
    e = _err(GOOD.replace('size=".1 .2"', 'size=".1 abc"'))
    assert e.attribute == "size" and "abc" in str(e)
    e = _err(GOOD.replace('type="hinge"', 'type="hing"'))
    assert e.attribute == "type"


def test_missing_mesh_file_names_file(tmp_path):
    xml = """<mujoco><asset><mesh name="m" file="missing.stl"/></asset>
      <worldbody><geom type="mesh" mesh="m"/></worldbody></mujoco>"""
    path = tmp_path / "model.xml"
    path.write_text(xml)
    with pytest.raises(MJCFError) as info:
        jaxsim.load(path)
    assert "missing.stl" in str(info.value) and info.value.line == 1


def test_error_in_included_file_names_that_file(tmp_path):
    (tmp_path / "part.xml").write_text(
        "<mujoco>\n<worldbody>\n<body><geom size='1' bogus='2'/></body>\n</worldbody>\n</mujoco>")
    (tmp_path / "main.xml").write_text("<mujoco>\n<include file='part.xml'/>\n</mujoco>")
    with pytest.raises(MJCFError) as info:
        jaxsim.load(tmp_path / "main.xml")
    assert info.value.file.endswith("part.xml") and info.value.line == 3


def test_unsupported_feature_is_rejected_not_ignored():
    xml = """<mujoco><worldbody><flexcomp name="f" type="grid" count="2 2 1" spacing=".1 .1 .1"
      dim="2" dof="trilinear"/></worldbody></mujoco>"""
    e = _err(xml)
    assert "flexcomp" in str(e) and "trilinear" in str(e)


@pytest.mark.parametrize("flag", ['nativeccd="disable"', 'speculative="enable"',
                                  'ipc="enable"'])
def test_unsupported_option_flag_is_rejected(flag):
    e = _err(f"<mujoco><option><flag {flag}/></option><worldbody/></mujoco>")
    assert flag.split("=")[0] in str(e) and e.line == 1
    assert "not supported by jaxsim" in str(e)


_MJ4 = """<mujoco><compiler {compiler}/><option {option}/>
  <worldbody><body><joint name="j" {joint}/><geom size=".1" {geom}/><site name="s"/></body>
  </worldbody>
  <tendon><fixed name="t" {tendon}><joint joint="j" coef="1"/></fixed></tendon>
  <sensor><insidesite site="s" objtype="site" objname="s" {sensor}/></sensor>
</mujoco>"""


@pytest.mark.parametrize("part,value,attr", [
    ("option", 'integrator="discrete"', "integrator"),
    ("sensor", 'enclosed="true"', "enclosed"),
])
def test_mujoco4_physics_jaxsim_lacks_is_named(part, value, attr):
    """MuJoCo 4.0 features jaxsim does not simulate: MuJoCo loads the model, jaxsim refuses it
    naming the attribute (not as an unrecognized one)."""
    fields = dict.fromkeys(("compiler", "option", "joint", "geom", "tendon", "sensor"), "")
    fields[part] = value
    xml = _MJ4.format(**fields)
    mujoco.MjModel.from_xml_string(xml)
    e = _err(xml)
    assert e.attribute == attr and "not supported by jaxsim" in str(e)


def test_mujoco4_rendering_and_saving_attributes_load_as_in_mujoco():
    """Attributes without physics (shadows, how a model is saved) and 4.0 physics attributes
    at MuJoCo's default load, and the model equals MuJoCo's."""
    xml = _MJ4.format(compiler='savecompiled="false" savecanonical="true"',
                      option="", joint='springyield="0"', geom='castshadow="false"',
                      tendon='springyield="0"', sensor='enclosed="false"')
    ours = jaxsim.load_string(xml, dtype=jnp.float64)
    assert model_errors(ours, mujoco.MjModel.from_xml_string(xml)) == []


def test_replicate_matches_mujoco():
    xml = """<mujoco><worldbody>
      <replicate count="3" offset="1 0 0" euler="0 0 30" sep="-">
        <body name="b" pos="0 0 1"><joint name="j"/><geom name="g" size=".1"/></body>
      </replicate></worldbody>
      <actuator><motor name="m" joint="j"/></actuator>
      <sensor><jointpos joint="j"/></sensor></mujoco>"""
    ours = jaxsim.load_string(xml, dtype=jnp.float64)
    ref = mujoco.MjModel.from_xml_string(xml)
    assert model_errors(ours, ref) == []
    assert ours.names[int(jaxsim.ObjType.ACTUATOR)] == ("m-0", "m-1", "m-2")


def test_nested_default_inherits_values_written_after_it():
    """A class's own element defaults apply to its nested classes wherever the nested
    <default> stands (menagerie's unitree_g1 disables contacts for the class after its
    visual and collision subclasses)."""
    xml = """<mujoco><default><default class="robot">
        <default class="col"><geom type="capsule" size=".02 .1"/></default>
        <geom condim="1" contype="0" conaffinity="0" friction=".5"/>
        <joint damping="2"/>
        <default class="leg"><joint armature=".1"/></default>
      </default></default>
      <worldbody><body pos="0 0 1" childclass="robot"><joint class="leg"/>
        <geom class="col"/><geom size=".1"/></body></worldbody></mujoco>"""
    ours = jaxsim.load_string(xml, dtype=jnp.float64)
    ref = mujoco.MjModel.from_xml_string(xml)
    assert list(ref.geom_contype) == [0, 0] and ref.dof_damping[0] == 2  # what it tests
    assert model_errors(ours, ref) == []


# --------------------------------------------------------------------------------- fuzz

_TOKENS = ["<", ">", "/>", "</body>", "<body>", "<geom/>", '"', "=", "size", "joint",
           "type", "inf", "nan", "-1", "1e400", "&amp;", "<!--", "class", "<default>",
           "<include file='x'/>", "mesh", "<replicate count='2'>", "euler", "quat", "0 0 0 0"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(GOOD)), st.sampled_from(_TOKENS + [""]),
                          st.integers(0, 5)), max_size=4))
def test_fuzzed_input_raises_only_our_error(edits):
    text = GOOD
    for pos, token, cut in edits:
        pos = min(pos, len(text))
        text = text[:pos] + token + text[pos + cut:]
    try:
        jaxsim.load_string(text)
    except MJCFError:
        pass


_DCMOTOR = """<mujoco><default><default class="c">{dflt}</default></default>
  <worldbody><body><joint name="j"/><geom size=".1" mass="1"/></body></worldbody>
  <actuator><dcmotor class="c" joint="j" {el}/></actuator></mujoco>"""


@pytest.mark.parametrize(("dflt", "el"), [
    ('<general forcerange="-3 3" forcelimited="true"/>', 'motorconst="1" resistance="1" saturation="2"'),
    ('<general forcerange="-3 3" forcelimited="true"/>', 'motorconst="1" resistance="1" saturation="0"'),
    ('<dcmotor motorconst="1" resistance="1" saturation="2 0 5"/>', 'saturation="0 3"'),
    ('<dcmotor motorconst="1" resistance="1" inductance="0.1 0"/>', 'inductance="0"'),
    ('<dcmotor motorconst="1" resistance="2" inductance="0.3 0.2"/>', 'inductance="0 0.1"'),
    ('<dcmotor motorconst="1" resistance="1"/>', 'input="none" motorconst="0"'),
    ('<dcmotor motorconst="1" resistance="1" thermal="2 3 4"/>', ''),
])
def test_dcmotor_parameters_match_mujoco(dflt, el):
    """MuJoCo 4.0's dcmotor rules: an authored saturation replaces inherited force limits, a
    zero inductance clears the inherited one, K = 0 without controller inputs, C from the
    thermal time constant."""
    xml = _DCMOTOR.format(dflt=dflt, el=el)
    ours = jaxsim.load_string(xml, dtype=jnp.float64)
    assert model_errors(ours, mujoco.MjModel.from_xml_string(xml)) == []
