"""The section passes (tendons, actuators, sensors, equality, contact, custom, keyframes).

Every field the passes fill is compared with MuJoCo's compiled model, on the model corpus
and on synthetic models exercising each feature; the kinematic-tree part of the compiler
context comes from MuJoCo itself (see sections_fixture.py). Bad input must raise MJCFError.
"""

from __future__ import annotations

import glob
import itertools
import os
import sys

import mujoco
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import CORPUS as _CORPUS_DIR  # noqa: E402
from conftest import gym_assets, mjx_test_data  # noqa: E402
from sections_fixture import compare, compile_sections, make_ctx  # noqa: E402

from jaxsim.mjcf.errors import MJCFError  # noqa: E402

CORPUS = (sorted(glob.glob(f"{_CORPUS_DIR}/**/*.xml", recursive=True))
          + sorted(glob.glob(f"{gym_assets()}/*.xml") if gym_assets() else [])
          + sorted(glob.glob(f"{mjx_test_data()}/**/*.xml", recursive=True)
                   if mjx_test_data() else []))
# features expanded or rejected elsewhere (replicate/attach/flex/plugins are the tree's)
SKIP = (b"<replicate", b"<attach", b"<flex", b"<plugin", b"<composite", b"<extension",
        b"deformable")
# features the section passes reject on purpose
UNSUPPORTED = ("SO3", "multi-input", "lengthrange must be given explicitly")


def _corpus():
    out = []
    for p in CORPUS:
        try:
            txt = open(p, "rb").read()
        except OSError:
            continue
        if any(s in txt for s in SKIP):
            continue
        if not any(t in txt for t in (b"<tendon", b"<actuator", b"<sensor", b"<equality",
                                       b"<contact", b"<custom", b"<keyframe", b"nkey")):
            continue
        out.append(p)
    return out


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: os.path.relpath(p, "/work"))
def test_corpus_matches_mujoco(path):
    try:
        model = mujoco.MjModel.from_xml_path(path)
    except ValueError:
        pytest.skip("MuJoCo rejects the model")
    ctx = make_ctx(open(path, "rb").read(), path, model)
    try:
        compile_sections(ctx)
    except MJCFError as e:
        if any(u in str(e) for u in UNSUPPORTED):
            pytest.skip(f"unsupported: {e}")
        raise
    assert compare(ctx, model) == []


WORLD = """
<worldbody>
  <geom name="floor" type="plane" size="5 5 .1"/>
  <site name="w0" pos="0 0 1"/>
  <camera name="cam" pos="0 0 3" resolution="4 3"/>
  <body name="b1" pos="0 0 1">
    <joint name="h1" type="hinge" axis="0 1 0" range="-45 45"/>
    <joint name="s1" type="slide" axis="1 0 0" range="-0.5 0.5"/>
    <geom name="g1" type="capsule" size=".05 .2" margin="0.01" priority="2" friction="0.7 0.01 0.001" condim="4"/>
    <geom name="cyl" type="cylinder" size=".1 .1" pos="0 0 .3"/>
    <site name="s_a" pos="0 0 .2"/><site name="s_b" pos="0 .1 .4"/><site name="side" pos=".2 0 .3"/>
    <body name="b2" pos="0 0 .5">
      <joint name="h2" type="hinge" axis="1 0 0"/>
      <joint name="ball" type="ball"/>
      <geom name="g2" type="sphere" size=".1" margin="0.02" gap="0.005" solref="0.01 0.5" solmix="2"/>
      <site name="s_c" pos="0 0 .1"/><site name="s_d" pos=".1 0 .1"/>
    </body>
  </body>
  <body name="free" pos="1 0 1"><freejoint name="fj"/><geom name="g3" size=".1"/><site name="s_f"/></body>
  <body name="mc" mocap="true" pos="2 2 2" quat="0 1 0 0"><geom name="gm" size=".1" contype="0" conaffinity="0"/></body>
  <body name="mc2" mocap="true" pos="3 3 3"/>
</worldbody>
"""

CASES = {}
def case(name, body, pre=''):
    CASES[name] = f'<mujoco model="{name}">{pre}{WORLD}{body}</mujoco>'

case('tendons', '''
<default><tendon width="0.01" rgba="1 0 0 1" solreflimit="0.05"/>
  <default class="t2"><tendon stiffness="3 4" damping="1" solimplimit="0.8 0.9" springlength="0.2" frictionloss="0.1"/></default></default>
<tendon>
  <spatial name="sp" range="0.1 2" class="t2" margin="0.01" armature="0"><site site="s_a"/><geom geom="cyl" sidesite="side"/><site site="s_c"/><pulley divisor="2"/><site site="s_d"/><site site="s_f"/></spatial>
  <fixed name="fx" limited="true" range="-1 1" user="1 2 3" springlength="0.1 0.3" actuatorfrcrange="-5 5"><joint joint="h1" coef="1"/><joint joint="s1" coef="-0.5"/></fixed>
  <spatial class="t2" armature="0.2" stiffness="1 2 3" damping="0.5 0.1"><site site="s_a"/><site site="s_f"/></spatial>
</tendon>''')

case('actuators', '''
<default>
  <general ctrlrange="-2 2" gainprm="5 6 7" biasprm="0 1 2 3"/>
  <default class="p"><position kp="30" kv="2" ctrlrange="-1 1"/></default>
  <default class="pd"><position kp="10" dampratio="0.7" forcerange="-3 3"/><general gear="2 0 0 0 0 1"/></default>
  <default class="mus"><muscle ctrlrange="0 1" force="100" lmin="0.6"/></default>
  <default class="vel"><velocity kv="4"/></default>
  <default class="dm"><general ctrlrange="0 1"/><damper kv="3"/></default>
</default>
<tendon><fixed name="fx" range="-1 1"><joint joint="h1" coef="1"/></fixed>
  <spatial name="spt" range="0.1 1.5"><site site="s_a"/><site site="s_f"/></spatial></tendon>
<actuator>
  <motor name="m1" joint="h1" gear="3" ctrlrange="-1 1" forcerange="-10 10" user="1 2"/>
  <general joint="s1" dyntype="filter" dynprm="0.2" gaintype="affine" gainprm="1 2" biastype="affine" actrange="-1 1"/>
  <position class="p" joint="h2"/>
  <position class="pd" joint="h1" timeconst="0.1"/>
  <position joint="s1" kp="5" inheritrange="0.9"/>
  <intvelocity joint="h1" kp="7" inheritrange="1"/>
  <velocity class="vel" tendon="fx" ctrlrange="-3 3"/>
  <damper class="dm" joint="h2" ctrlrange="0 1"/><damper joint="h2" kv="2" ctrlrange="0 3"/>
  <cylinder site="s_a" area="0.01" timeconst="0.2" bias="1 2 3"/>
  <cylinder site="s_b" diameter="0.1" refsite="w0"/>
  <adhesion body="b2" gain="5" ctrlrange="0 1"/>
  <muscle class="mus" tendon="spt" lengthrange="0.2 1.2" timeconst="0.02 0.05" range="0.7 1.1"/>
  <muscle tendon="fx" lengthrange="0.2 1.2" ctrlrange="0 1" tausmooth="0.1"/>
  <general cranksite="s_c" slidersite="s_d" cranklength="0.3" ctrlrange="-1 1"/>
  <general jointinparent="h2" dyntype="integrator" actlimited="true" actrange="-1 2" actearly="true"/>
  <general joint="ball" gear="1 2 3" gainprm="2"/>
  <general site="s_f" refsite="w0" gear="0 0 1 0 0 0" nsample="5" delay="0.01" interp="linear"/>
  <motor joint="h1" damping="0.1 0.2" armature="0.3" group="3"/>
  <general joint="s1" dyntype="user" actdim="3" gaintype="user" biastype="user"/>
  <pid joint="h1" kp="10" ki="2" imax="1" input="pos" posrange="-1 1"/>
  <pid joint="s1" kp="10" kv="1" input="pos"/>
  <dcmotor joint="h2" motorconst="0.05" resistance="2" inductance="0.001" saturation="0 3" thermal="1 2 0 0.004 20 25" lugre="100 1 0.1 0.2 0.3" cogging="0.01 6 0"/>
  <dcmotor joint="h1" nominal="12 0.5 100" damping="0.001" input="voltage"/>
</actuator>''')

case('sensors', '''
<tendon><fixed name="fx" limited="true" range="-1 1"><joint joint="h1" coef="1"/></fixed></tendon>
<actuator><motor name="m1" joint="h1"/></actuator>
<sensor>
  <touch site="s_a" name="t"/><accelerometer site="s_a" noise="0.1" cutoff="2"/><velocimeter site="s_a"/><gyro site="s_a"/>
  <force site="s_a" nsample="3" delay="0.02"/><torque site="s_a" interval="0.1 -0.05"/><magnetometer site="s_a"/>
  <camprojection site="s_a" camera="cam"/>
  <rangefinder site="s_a"/><rangefinder camera="cam" data="dist point normal"/>
  <jointpos joint="h1" user="1 2 3"/><jointvel joint="s1"/><tendonpos tendon="fx"/><tendonvel tendon="fx"/>
  <actuatorpos actuator="m1"/><actuatorvel actuator="m1"/><actuatorfrc actuator="m1"/>
  <jointactuatorfrc joint="h1"/><tendonactuatorfrc tendon="fx"/>
  <ballquat joint="ball"/><ballangvel joint="ball" nsample="2" interp="cubic"/>
  <jointlimitpos joint="h1"/><jointlimitvel joint="s1"/><jointlimitfrc joint="h1"/>
  <tendonlimitpos tendon="fx"/><tendonlimitvel tendon="fx"/><tendonlimitfrc tendon="fx"/>
  <framepos objtype="site" objname="s_a" reftype="body" refname="b2"/><framequat objtype="body" objname="b1"/>
  <framexaxis objtype="geom" objname="g1"/><frameyaxis objtype="xbody" objname="b2"/><framezaxis objtype="camera" objname="cam"/>
  <framelinvel objtype="site" objname="s_b" reftype="site" refname="s_c"/><frameangvel objtype="body" objname="b2"/>
  <framelinacc objtype="site" objname="s_b"/><frameangacc objtype="body" objname="free"/>
  <subtreecom body="b1"/><subtreelinvel body="b1"/><subtreeangmom body="free"/>
  <insidesite site="s_a" objtype="geom" objname="g2"/>
  <distance geom1="g1" geom2="g2" cutoff="1"/><normal body1="b1" geom2="g3"/><fromto geom1="g3" body2="b2"/>
  <contact geom1="g1" geom2="g2"/><contact site="s_a" data="found force dist" num="3" reduce="mindist"/>
  <contact body1="b1" subtree2="free" data="torque normal tangent" reduce="netforce"/><contact/>
  <contact subtree1="b1" data="pos"/>
  <e_potential/><e_kinetic/><clock/>
  <user dim="2" needstage="vel" datatype="positive" objtype="body" objname="b2"/><user dim="4" datatype="quaternion"/>
</sensor>''')

case('equality', '''
<default><equality solref="0.03"/><default class="e2"><equality solimp="0.8 0.9" active="false"/></default></default>
<tendon><fixed name="t1"><joint joint="h1" coef="1"/></fixed><fixed name="t2"><joint joint="s1" coef="1"/></fixed></tendon>
<equality>
  <connect name="c1" body1="b2" body2="b1" anchor="0 0 .1"/><connect site1="s_a" site2="s_c" class="e2"/>
  <connect body1="free" anchor="1 0 0"/>
  <weld body1="b2" relpose="1 2 3 0 1 0 0" torquescale="3"/><weld body1="free" body2="b1" anchor="0 1 0" solref="0.05 2"/>
  <weld site1="s_a" site2="s_f"/>
  <joint joint1="h1" joint2="s1" polycoef="1 2"/><joint joint1="h2" class="e2"/>
  <tendon tendon1="t1" tendon2="t2" polycoef="0 1 0.5 0.1 0.2"/><tendon tendon1="t2"/>
</equality>''')

case('contact', '''
<default><pair margin="0.05" friction="0.5 0.4"/><default class="pc"><pair condim="1" solref="0.01 0.5" solreffriction="-1 -2" gap="0.01" solimp="0.8"/></default></default>
<contact>
  <pair name="p1" geom1="g3" geom2="g1"/><pair geom1="g2" geom2="floor" class="pc" adhesion="0.3"/>
  <exclude name="e1" body1="free" body2="b1"/><exclude body1="b2" body2="b1"/>
  <pair geom1="g1" geom2="g2" condim="6" friction="1 2 3 4 5"/>
  <exclude body1="world" body2="free"/>
</contact>''')

case('custom', '''
<custom>
  <numeric name="n1" data="1 2 3"/><numeric name="n2" size="5" data="4"/><numeric name="n3" size="2"/>
  <text name="tx" data="hello world"/><text name="t2" data="x"/>
  <tuple name="tp"><element objtype="body" objname="b1" prm="0.5"/><element objtype="geom" objname="g2"/><element objtype="site" objname="s_a" prm="2"/><element objtype="key" objname="k2"/></tuple>
</custom>
<keyframe><key name="k1"/><key name="k2" time="1"/></keyframe>''')

case('keys', '''
<actuator><motor joint="h1"/><general joint="s1" dyntype="integrator"/></actuator>
<keyframe>
  <key name="a" qpos="0.1 0.2" qvel="1" ctrl="0.5"/>
  <key time="2" qpos="0 0 0 2 0 0 0 1 1 1 0 0 0 3" act="3" mpos="1 1 1" mquat="0 0 0 2"/>
  <key mpos="1 1 1 2 2 2" mquat="1 0 0 0 0 0 1 0" qvel="1 2 3 4 5 6 7 8 9 10 11"/>
</keyframe>''', pre='<size nkey="5"/>')

CASES['autolimits'] = '''<mujoco><compiler autolimits="false"/><worldbody><body><joint name="h1" limited="true" range="-1 1"/><geom size=".1"/></body></worldbody>
<tendon><fixed limited="true" range="0 1"><joint joint="h1" coef="1"/></fixed></tendon>
<actuator><motor joint="h1" ctrllimited="true" ctrlrange="-1 1" forcelimited="false" forcerange="-1 1"/></actuator></mujoco>'''

case('lengthrange', '''
<tendon><fixed name="fx" range="-1 1"><joint joint="h1" coef="1"/></fixed></tendon>
<actuator><muscle tendon="fx"/><muscle joint="h1"/><motor joint="s1"/></actuator>''',
pre='<compiler><lengthrange uselimit="true"/></compiler>')
case('lengthrange_none', '''
<actuator><muscle joint="h2"/></actuator>''', pre='<compiler><lengthrange mode="none"/></compiler>')
case('userdata', '''
<tendon><fixed user="1"><joint joint="h1" coef="1"/></fixed></tendon>
<actuator><motor joint="h1" user="1 2"/></actuator><sensor><jointpos joint="h1" user="3"/></sensor>''',
pre='<size nuser_tendon="3" nuser_actuator="4" nuser_sensor="2"/>')


def _check(xml: str):
    model = mujoco.MjModel.from_xml_string(xml)
    ctx = make_ctx(xml.encode(), None, model)
    compile_sections(ctx)
    return ctx, model


@pytest.mark.parametrize("name", sorted(CASES))
def test_synthetic_matches_mujoco(name):
    ctx, model = _check(CASES[name])
    assert compare(ctx, model) == []


# Shortcut elements over default records of every kind: which parameters a shortcut
# inherits and which it rewrites is MuJoCo 4.0 behaviour that the source alone leaves open.
_W = ('<worldbody><body><joint name="s1" type="slide" range="-0.5 0.5"/><geom size=".1"/>'
      '<site name="st"/></body></worldbody>')
_DEFAULTS = [
    "", '<general dynprm="11 12 13 14 15 16" gainprm="21 22 23 24 25 26" biasprm="31 32 33"/>',
    '<position kp="30" kv="2" timeconst="0.5"/>',
    '<pid kp="5" kv="1" ki="2" imax="3" slewmax="4" input="pos"/>', '<pid kp="5" kv="1"/>',
    '<cylinder timeconst=".3" area="2" bias="1 2 3"/>', '<muscle force="100" timeconst=".2 .3"/>',
    '<velocity kv="3"/>', '<position kp="30"/><general biasprm="0 0 0 5" gainprm="1 1 1 1 1" '
    'dynprm="7 8"/>', '<general dyntype="filter" dynprm="0.3" gaintype="affine" '
    'biastype="affine" biasprm="1 2 3 4"/>', '<damper kv="3"/>', '<position kp="4"/>',
    '<general gaintype="affine" gainprm="0 0 -7"/>',
    '<dcmotor motorconst="2" resistance="3" cogging="1 2 3"/>', '<intvelocity kp="6" kv="1"/>',
    '<adhesion gain="3"/>', '<general gainprm="0.5"/><muscle scale="300"/>',
    '<position dampratio="0.5" kp="2"/><velocity/>', '<general ctrlrange="-2 2"/>',
    '<position inheritrange="0.5"/>', '<intvelocity inheritrange="0.5"/>']
_ELEMENTS = [
    '<motor joint="s1"/>', '<position joint="s1"/>', '<position joint="s1" kp="3" timeconst=".5"/>',
    '<intvelocity joint="s1"/>', '<velocity joint="s1"/>', '<damper joint="s1" ctrlrange="0 1"/>',
    '<cylinder site="st"/>', '<muscle joint="s1" lengthrange="0 1"/>',
    '<adhesion body="world" ctrlrange="0 1"/>', '<pid joint="s1" input="pos"/>',
    '<pid joint="s1" input="pos" ki="1"/>', '<dcmotor joint="s1" motorconst="1" resistance="1"/>',
    '<general joint="s1" lengthrange="0 1"/>', '<position joint="s1" kv="3"/>',
    '<velocity joint="s1" kv="2"/>', '<general joint="s1" gainprm="7" lengthrange="0 1"/>',
    '<position joint="s1" inheritrange="0.9"/>', '<position joint="s1" ctrlrange="-1 1"/>',
    '<intvelocity joint="s1" inheritrange="1" ctrlrange="-1 1"/>']


def test_shortcut_grid_matches_mujoco():
    failures = []
    for d, a in itertools.product(_DEFAULTS, _ELEMENTS):
        xml = f"<mujoco><default>{d}</default>{_W}<actuator>{a}</actuator></mujoco>"
        try:
            model = mujoco.MjModel.from_xml_string(xml)
        except ValueError:
            base = mujoco.MjModel.from_xml_string(f"<mujoco><default>{d}</default>{_W}</mujoco>")
            ctx = make_ctx(xml.encode(), None, base)
            try:
                compile_sections(ctx)
                failures.append(f"{d} {a}: MuJoCo rejects it, we accept it")
            except MJCFError:
                pass
            continue
        ctx = make_ctx(xml.encode(), None, model)
        try:
            compile_sections(ctx)
        except MJCFError as e:
            if not any(u in str(e) for u in UNSUPPORTED):
                failures.append(f"{d} {a}: {e}")
            continue
        bad = compare(ctx, model)
        if bad:
            failures.append(f"{d} {a}: {bad}")
    assert failures == []


_BAD = {
    "unknown joint in actuator": '<actuator><motor joint="nope"/></actuator>',
    "unknown tendon in actuator": '<actuator><motor tendon="nope"/></actuator>',
    "missing transmission": '<actuator><motor/></actuator>',
    "kv and dampratio": '<actuator><position joint="h1" kv="1" dampratio="1"/></actuator>',
    "bad muscle range": '<actuator><muscle joint="h1" range="1 0.5" lengthrange="0 1"/>'
                        '</actuator>',
    "actrange without dynamics": '<actuator><general joint="h1" actrange="0 1"/></actuator>',
    "slidercrank without slider": '<actuator><general cranksite="s_a" cranklength="1"/>'
                                  '</actuator>',
    "damping on site transmission": '<actuator><motor site="s_a" damping="1"/></actuator>',
    "so3 site without refsite": '<actuator><orientation site="s_a"/></actuator>',
    "so3 on a hinge": '<actuator><orientation joint="h1"/></actuator>',
    "so3 negative force bound": '<actuator><orientation joint="ball" forcelimited="true" '
                                'forcerange="-1 1"/></actuator>',
    "so3 quat integrator": '<actuator><general joint="ball" gaintype="so3" biastype="so3" '
                           'dyntype="integrator" biasprm="0 -1 0" input="quat"/></actuator>',
    "so3 gain not servo": '<actuator><general joint="ball" gaintype="so3" biastype="so3" '
                          'gainprm="2" biasprm="0 -1 0"/></actuator>',
    "so3 affine bias": '<actuator><general joint="ball" gaintype="so3" biastype="affine" '
                       'biasprm="0 -1 0"/></actuator>',
    "orientation kv and dampratio": '<actuator><orientation joint="ball" kv="1" dampratio="1"/>'
                                    '</actuator>',
    "key qpos too long": '<keyframe><key qpos="' + " ".join(["0"] * 30) + '"/></keyframe>',
    "key ctrl too long": '<keyframe><key ctrl="1 2"/></keyframe>',
    "key mpos too long": '<keyframe><key mpos="' + " ".join(["0"] * 9) + '"/></keyframe>',
    "empty tendon": '<tendon><fixed/></tendon>',
    "tendon ball joint": '<tendon><fixed><joint joint="ball" coef="1"/></fixed></tendon>',
    "tendon unknown site": '<tendon><spatial><site site="s_a"/><site site="nope"/></spatial>'
                           '</tendon>',
    "spatial single site": '<tendon><spatial><site site="s_a"/></spatial></tendon>',
    "geom not bracketed": '<tendon><spatial><site site="s_a"/><geom geom="g2"/></spatial>'
                          '</tendon>',
    "wrap geom not sphere": '<tendon><spatial><site site="s_a"/><geom geom="g1"/>'
                            '<site site="s_c"/></spatial></tendon>',
    "consecutive pulleys": '<tendon><spatial><site site="s_a"/><site site="s_b"/>'
                           '<pulley divisor="1"/><pulley divisor="1"/><site site="s_c"/>'
                           '<site site="s_d"/></spatial></tendon>',
    "tendon bad range": '<tendon><fixed range="1 0" limited="true"><joint joint="h1" '
                        'coef="1"/></fixed></tendon>',
    "sensor unknown site": '<sensor><touch site="nope"/></sensor>',
    "sensor ball jointpos": '<sensor><jointpos joint="ball"/></sensor>',
    "sensor hinge ballquat": '<sensor><ballquat joint="h1"/></sensor>',
    "sensor unlimited joint": '<sensor><jointlimitpos joint="h2"/></sensor>',
    "sensor quat cutoff": '<sensor><framequat objtype="body" objname="b1" cutoff="1"/></sensor>',
    "sensor negative noise": '<sensor><gyro site="s_a" noise="-1"/></sensor>',
    "sensor delay no buffer": '<sensor><gyro site="s_a" delay="1"/></sensor>',
    "equality same body": '<equality><weld body1="b1" body2="b1"/></equality>',
    "equality ball joint": '<equality><joint joint1="ball"/></equality>',
    "equality unknown tendon": '<equality><tendon tendon1="nope"/></equality>',
    "pair bad condim": '<contact><pair geom1="g1" geom2="g2" condim="2"/></contact>',
    "pair unknown geom": '<contact><pair geom1="g1" geom2="nope"/></contact>',
    "exclude unknown body": '<contact><exclude body1="b1" body2="nope"/></contact>',
    "numeric too much data": '<custom><numeric name="n" size="1" data="1 2"/></custom>',
    "numeric empty": '<custom><numeric name="n"/></custom>',
    "tuple unknown object": '<custom><tuple name="t"><element objtype="body" objname="nope"/>'
                            '</tuple></custom>',
}


# valid MJCF that jaxsim rejects on purpose (MuJoCo accepts it)
_UNSUPPORTED_OK: set = set()


@pytest.mark.parametrize("name", sorted(_BAD))
def test_bad_input_raises(name):
    xml = f"<mujoco>{WORLD}{_BAD[name]}</mujoco>"
    if name not in _UNSUPPORTED_OK:
        with pytest.raises(ValueError):
            mujoco.MjModel.from_xml_string(xml)
    base = mujoco.MjModel.from_xml_string(f"<mujoco>{WORLD}</mujoco>")
    with pytest.raises(MJCFError):
        compile_sections(make_ctx(xml.encode(), None, base))


def test_error_names_element_and_line():
    xml = f"<mujoco>{WORLD}\n<actuator>\n<motor name='m' joint='nope'/></actuator></mujoco>"
    base = mujoco.MjModel.from_xml_string(f"<mujoco>{WORLD}</mujoco>")
    ctx = make_ctx(xml.encode(), None, base)
    with pytest.raises(MJCFError) as e:
        compile_sections(ctx)
    assert e.value.attribute == "joint" and "motor" in e.value.element and e.value.line


def test_empty_model_shapes():
    xml = "<mujoco/>"
    ctx, model = _check(xml)
    assert ctx.out["actuator_gear"].shape == (0, 6)
    assert ctx.out["tendon_solimp_lim"].shape == (0, 5)
    assert ctx.out["sensor_intprm"].shape == (0, 3)
    assert ctx.out["eq_data"].shape == (0, 12)
    assert ctx.out["key_qpos"].shape == (0, 0)
    assert compare(ctx, model) == []
