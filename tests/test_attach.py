"""<asset><model> + <attach> (and self-attach) against MuJoCo 4.0 (jaxsim/mjcf/attach.py)."""

import os

import jax
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim.mjcf.errors import MJCFError
from jaxsim.types import ObjType

jax.config.update("jax_enable_x64", True)

from compare import SKIP  # noqa: E402
from conftest import CORPUS as _CORPUS_DIR  # noqa: E402

CORPUS = str(_CORPUS_DIR)
MODELS = [
    "xml/testdata/parent.xml",
    "xml/testdata/parent_merge.xml",
    "xml/testdata/parent_warn.xml",
]
# the larger attach models (the 2x humanoid + 100 objects scenes)
SLOW_MODELS = [
    "xml/testdata/parent_model.xml",
    "engine/testdata/core_smooth/ten_armature_0_compare.xml",
    "engine/testdata/core_smooth/ten_armature_1_compare.xml",
    "engine/testdata/sensor/contact_subtree.xml",
    "engine/testdata/forward/perf/2humanoid100_PGS.xml",
    "engine/testdata/island/2humanoid100.xml",
]
_OPT = ("timestep", "iterations", "gravity", "disableflags", "enableflags", "impratio",
        "integrator", "cone", "solver")


def _mismatches(j, m) -> list[str]:
    """Model fields (and a few options) that differ by more than 1e-6 relative."""
    bad = []
    for name in jaxsim.Model.field_info():
        if not hasattr(m, name) or name in SKIP:
            continue
        a, b = np.asarray(getattr(j, name)), np.asarray(getattr(m, name))
        if a.size != b.size:
            bad.append(f"{name}: shape {a.shape} vs {b.shape}")
            continue
        if a.size == 0:
            continue
        b = b.astype(float)
        err = np.max(np.abs(a.reshape(b.shape).astype(float) - b)) / (1 + np.max(np.abs(b)))
        if err > 1e-6:
            bad.append(f"{name}: err {err:.2e}")
    for name in _OPT:
        if not np.allclose(np.asarray(getattr(j.opt, name)), getattr(m.opt, name)):
            bad.append(f"opt.{name}")
    return bad


def _path(rel: str) -> str:
    path = os.path.join(CORPUS, rel)
    if not os.path.exists(path):
        pytest.skip(f"corpus model {rel} not available")
    return path


# loads are fast now that set_const runs on numpy at compile time: run them all
@pytest.mark.parametrize("rel", MODELS + SLOW_MODELS)
def test_corpus_models_match_mujoco(rel):
    path = _path(rel)
    m = mujoco.MjModel.from_xml_path(path)
    j = jaxsim.load(path, dtype=np.float64)
    assert _mismatches(j, m) == []


@pytest.mark.parametrize("rel,needle", [
    ("xml/testdata/parent_error.xml", "policy is 'error'"),
    ("xml/testdata/parent_merge_unmergable.xml", "gravity: parent has 0 0 -10, child has 0 0 0"),
])
def test_conflicts_raise(rel, needle):
    path = _path(rel)
    with pytest.raises(ValueError):
        mujoco.MjModel.from_xml_path(path)
    with pytest.raises(MJCFError) as info:
        jaxsim.load(path)
    err = info.value
    assert needle in str(err)
    assert err.element == "attach" and err.line == 10 and err.file.endswith(os.path.basename(rel))


CHILD = b"""<mujoco model="kid">
  <compiler angle="radian"/>
  <default><geom rgba="1 0 0 1" friction=".5"/><joint damping=".3"/>
    <default class="arm"><geom type="capsule" size=".05" material="red"/><joint range="-1 1"/></default>
  </default>
  <asset><material name="red" rgba="1 0 0 1"/><texture name="grid" type="2d" builtin="checker" width="8" height="8"/></asset>
  <worldbody>
    <body name="base" pos="0 0 1" euler="0 0 1.5707963">
      <joint name="j0" type="slide" axis="0 0 1"/>
      <geom size=".1"/>
      <body name="link" childclass="arm" pos=".2 0 0">
        <joint name="j1" ref="0.3"/>
        <geom fromto="0 0 0 .3 0 0"/>
        <site name="tip" pos=".3 0 0"/>
      </body>
    </body>
    <body name="other"><geom size=".1"/></body>
  </worldbody>
  <tendon><fixed name="t"><joint joint="j0" coef="1"/><joint joint="j1" coef="-1"/></fixed></tendon>
  <actuator><motor name="m0" joint="j0"/><position name="m1" joint="j1" kp="10" class="arm"/>
    <motor name="mo" joint="nothere"/></actuator>
  <sensor><jointpos name="s1" joint="j1"/><framepos name="s2" objtype="site" objname="tip"/>
    <subtreecom name="s3" body="other"/></sensor>
  <keyframe><key name="home" qpos="0.1 0.2" ctrl="0.5 -0.5 0"/></keyframe>
</mujoco>"""

PARENT = """<mujoco model="p">
  <default><geom friction=".9 .01 .001" condim="4"/><joint armature=".1"/></default>
  <option timestep="0.004"/>
  <asset><model name="kid" file="child.xml"/></asset>
  <worldbody>
    <geom type="plane" size="1 1 .1"/>
    <body name="b" pos="0 1 0"><freejoint/><geom size=".2"/>
      <attach model="kid" body="base" prefix="a/"/>
    </body>
    <frame pos="1 0 0" euler="0 0 30"><attach model="kid" body="base" prefix="b/"/></frame>
    <body name="c" pos="0 -1 0"><joint type="hinge"/><geom size=".1"/></body>
    <attach body="c" prefix="c2/"/>
  </worldbody>
  <keyframe><key name="k0" qpos="0 1 0.5 1 0 0 0"/></keyframe>
</mujoco>"""


def _names(j, m, objtype, count, accessor):
    ours = list(j.names[int(objtype)])
    ref = [accessor(i).name for i in range(count)]
    assert ours == ref


def test_synthetic_attach_defaults_assets_actuators_keys():
    """Prefixed defaults (child in radians), assets, sections copied only when their
    references resolve, keyframes of two attaches, and a self-attach."""
    assets = {"child.xml": CHILD}
    m = mujoco.MjModel.from_xml_string(PARENT, assets)
    j = jaxsim.load_string(PARENT, assets=assets, dtype=np.float64)
    assert _mismatches(j, m) == []
    _names(j, m, ObjType.BODY, m.nbody, m.body)
    _names(j, m, ObjType.ACTUATOR, m.nu, m.actuator)
    _names(j, m, ObjType.SENSOR, m.nsensor, m.sensor)
    _names(j, m, ObjType.KEY, m.nkey, m.key)
    _names(j, m, ObjType.MATERIAL, m.nmat, m.material)


REPLICATED = """<mujoco model="r">
  <asset><model name="kid" file="child.xml"/></asset>
  <worldbody>
    <body name="own" pos="0 0 2"><joint name="oj"/><geom size=".1"/></body>
    <replicate count="3" offset=".5 0 0" sep="-">
      <frame pos="0 -1 0"><attach model="kid" body="base" prefix="k/"/></frame>
    </replicate>
  </worldbody>
  <keyframe><key name="top" qpos="0.3"/></keyframe>
</mujoco>"""


def test_attached_keyframes_under_a_replicate():
    """An attachment inside a <replicate>: the child's keyframe holds its values for the
    first copy's joints and actuators, the other copies' defaults (qpos0, zero controls)."""
    assets = {"child.xml": CHILD}
    m = mujoco.MjModel.from_xml_string(REPLICATED, assets)
    j = jaxsim.load_string(REPLICATED, assets=assets, dtype=np.float64)
    assert m.nkey == 2 and np.any(m.key_qpos[1] != m.qpos0)  # what the test is about
    assert _mismatches(j, m) == []
    _names(j, m, ObjType.KEY, m.nkey, m.key)


SELF = """<mujoco>
  <default><default class="big"><geom size=".3"/></default></default>
  <worldbody>
    <frame childclass="big">
      <body name="a" pos="0 0 1"><joint name="h" axis="0 1 0"/><geom name="g"/>
        <body name="a2" pos="0 0 .5"><joint axis="1 0 0"/><geom type="box" size=".1 .1 .1"/></body>
      </body>
    </frame>
    <frame pos="2 0 0" euler="0 0 45"><attach body="a" prefix="copy_"/></frame>
  </worldbody>
  <tendon><fixed name="t"><joint joint="h" coef="2"/></fixed></tendon>
  <actuator><motor joint="h"/><motor name="tm" tendon="t"/></actuator>
</mujoco>"""


def test_synthetic_self_attach():
    m = mujoco.MjModel.from_xml_string(SELF)
    j = jaxsim.load_string(SELF, dtype=np.float64)
    assert _mismatches(j, m) == []
    _names(j, m, ObjType.BODY, m.nbody, m.body)
    _names(j, m, ObjType.ACTUATOR, m.nu, m.actuator)
    _names(j, m, ObjType.TENDON, m.ntendon, m.tendon)
