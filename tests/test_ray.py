"""Ray casting (jaxsim.ray, MuJoCo's mj_ray) and rangefinder sensors against MuJoCo."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim import raycast as R

_FWD = jax.jit(jaxsim.forward)  # shared by the tests: one compilation

_XML = '''
<mujoco>
  <option><flag contact="disable"/></option>
  <asset>
    <mesh name="tet" vertex="0 0 0  .3 0 0  0 .3 0  0 0 .3  .25 .25 .25"/>
    <hfield name="hf" nrow="4" ncol="5" size=".6 .5 .2 .1"
            elevation="0 .2 .5 .1 0  .3 .9 .4 .2 .1  .1 .5 1 .6 .3  0 .2 .3 .1 0"/>
    <material name="clear" rgba="1 1 1 0"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 .1" pos="0 0 -.5"/>
    <geom name="hf" type="hfield" hfield="hf" pos="1.5 0 -.3" euler="5 3 20"/>
    <geom name="ghost" type="sphere" size=".3" pos="0 1.2 0" rgba="1 0 0 0"/>
    <geom name="glass" type="box" size=".2 .2 .2" pos="0 -1.2 0" material="clear"/>
    <geom name="grouped" type="sphere" size=".25" pos="-1.2 0 0" group="3"/>
    <body name="a" pos="0 0 .3" euler="10 20 30">
      <joint type="ball"/>
      <geom name="sph" type="sphere" size=".2"/>
      <geom name="cap" type="capsule" size=".1 .2" pos=".4 0 0" euler="0 30 0"/>
      <geom name="ell" type="ellipsoid" size=".1 .2 .15" pos="-.4 .1 0"/>
      <site name="rf_a" pos="0 0 .25" euler="0 170 0"/>
      <body name="b" pos="0 .5 0">
        <joint axis="1 0 0"/>
        <geom name="cyl" type="cylinder" size=".12 .1" euler="40 0 0"/>
        <geom name="box" type="box" size=".1 .15 .05" pos=".3 .1 0" euler="0 0 25"/>
        <geom name="tet" type="mesh" mesh="tet" pos="-.3 0 .1" euler="15 25 35"/>
        <site name="rf_b" pos="0 .2 0" zaxis="0 -1 -.2"/>
        <camera name="persp" pos="0 .3 .8" xyaxes="1 0 0 0 .6 .8" resolution="5 3" fovy="70"/>
        <camera name="pinhole" pos=".2 -.3 1" xyaxes="1 .1 0 -.1 1 .2" resolution="6 4"
                sensorsize=".008 .006" focal=".005 .006" principalpixel="1 -.5"/>
      </body>
      <camera name="ortho" pos="0 0 1.5" resolution="4 4" fovy="2.5" projection="orthographic"/>
    </body>
  </worldbody>
  <sensor>
    <rangefinder site="rf_a"/>
    <rangefinder site="rf_b" data="dist dir origin point normal depth" cutoff="0.7"/>
    <rangefinder camera="persp" data="dist point normal depth"/>
    <rangefinder camera="ortho" data="dist dir origin"/>
    <rangefinder camera="pinhole" data="normal depth"/>
  </sensor>
</mujoco>'''


@pytest.fixture(scope="module")
def models():
    m = mujoco.MjModel.from_xml_string(_XML)
    model = jaxsim.load_string(_XML, dtype=jnp.float64)
    return m, model


def _states(m, n=3):
    rng = np.random.default_rng(3)
    for _ in range(n):
        d = mujoco.MjData(m)
        mujoco.mj_integratePos(m, d.qpos, rng.normal(size=m.nv) * 0.6, 1)
        mujoco.mj_forward(m, d)
        yield d


def test_ray_matches_mujoco(models):
    """Random rays aimed near the geoms: distance, geom id and normal as mj_ray, with and
    without geom groups, static geoms and an excluded body."""
    m, model = models
    rng = np.random.default_rng(0)
    n = 300
    options = [(None, True, -1), ((1, 1, 1, 0, 1, 1), True, -1), (None, False, 2)]
    from jaxsim.smooth import kinematics

    @jax.jit
    def cast(st, pnt, vec):
        st = kinematics(model, st)  # rays read the geoms' poses only
        return tuple(jax.vmap(lambda p, v, o=o: R.ray(model, st, p, v, *o))(pnt, vec)
                     for o in options)

    hits = np.zeros(m.ngeom, int)
    for d in _states(m, 2):
        st = jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos))
        target = d.geom_xpos[rng.integers(0, m.ngeom, n)]
        pnt = target + rng.normal(size=(n, 3))
        vec = target + rng.normal(size=(n, 3)) * 0.2 - pnt
        outs = cast(st, jnp.asarray(pnt), jnp.asarray(vec))
        for (group, static, exclude), (dist, gid, nrm) in zip(options, outs, strict=True):
            grp = None if group is None else np.array(group, np.uint8)
            for i in range(n):
                g = np.zeros(1, np.int32)
                nr = np.zeros(3)
                x = mujoco.mj_ray(m, d, pnt[i], vec[i], grp, int(static), exclude, g, nr)
                assert abs(float(dist[i]) - x) <= 1e-9 * (1 + abs(x)), (i, x, dist[i])
                assert int(gid[i]) == g[0], (i, g[0], gid[i])
                np.testing.assert_allclose(np.asarray(nrm[i]), nr, atol=1e-9)
                if g[0] >= 0:
                    hits[g[0]] += 1
    names = [m.geom(i).name for i in range(m.ngeom)]
    # every visible geom is hit by some ray; the invisible ones never
    for i, name in enumerate(names):
        assert (hits[i] > 0) == (name not in ("ghost", "glass")), (name, hits[i])


def test_rangefinders_match_mujoco(models):
    m, model = models
    hit = np.zeros(m.nsensordata, bool)
    for d in _states(m):
        st = _FWD(model, jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos)))
        ours = np.asarray(st.sensordata)
        np.testing.assert_allclose(ours, d.sensordata, atol=1e-9, rtol=1e-9)
        hit |= d.sensordata > 0
    # each sensor hits something in some state and misses in some (non-vacuous)
    for i in range(m.nsensor):
        a = m.sensor_adr[i]
        assert hit[a:a + m.sensor_dim[i]].any(), f"rangefinder {i} never hits"
    assert (d.sensordata == -1).any()


def test_ray_gradient_is_finite(models):
    """d(dist)/d(geom size) through a hit and a miss: finite, non-zero for the hit."""
    m, model = models
    st = _FWD(model, jaxsim.make_state(model))
    sph = [i for i in range(m.ngeom) if m.geom(i).name == "sph"][0]
    pnt = st.geom_xpos[sph] + jnp.array([0.0, 0.0, 2.0])

    def f(size, vec):
        return R.ray(model.replace(geom_size=size), st, pnt, vec)[0]

    grad = jax.jit(jax.grad(f))
    g_hit = grad(model.geom_size, jnp.array([0.0, 0.0, -1.0]))
    g_miss = grad(model.geom_size, jnp.array([1.0, 0.0, 0.0]))
    assert np.all(np.isfinite(g_hit)) and np.all(np.isfinite(g_miss))
    assert g_hit[sph, 0] == pytest.approx(-1.0, abs=1e-9)


def test_geom_distance_matches_mujoco(models):
    """jaxsim.geom_distance (mj_geomDistance) for every pair of geoms of different bodies:
    distance and segment, below and beyond distmax, flipped pair orders included."""
    from jaxsim.collision.distance import geom_distances

    m, model = models
    names = [("hf", "sph"), ("box", "hf"), ("tet", "sph"), ("cap", "tet"),
             ("tet", "box"), ("cyl", "ell"), ("floor", "tet"), ("floor", "cyl"),
             ("ell", "floor"), ("box", "cyl"), ("sph", "cap")]
    pairs = np.array([(m.geom(a).id, m.geom(b).id) for a, b in names])
    from jaxsim.smooth import kinematics

    # the geoms' poses are all the distances read: mj_kinematics, not the whole forward
    fn = jax.jit(lambda st, dmax: geom_distances(
        model, kinematics(model, st), pairs[:, 0], pairs[:, 1], dmax))
    found = np.zeros((len(pairs), 2), bool)
    for d, dmax in zip(_states(m, 2), (0.15, 2.0), strict=True):
        dist, fromto = fn(jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos)), dmax)
        for k, (a, b) in enumerate(pairs):
            ft = np.zeros(6)
            ref = mujoco.mj_geomDistance(m, d, int(a), int(b), dmax, ft)
            where = (m.geom(int(a)).name, m.geom(int(b)).name, dmax)
            assert abs(float(dist[k]) - ref) <= 1e-6 * (1 + abs(ref)), (where, dist[k], ref)
            np.testing.assert_allclose(np.asarray(fromto[k]), ft, atol=1e-6, err_msg=str(where))
            found[k, int(dmax > 1)] = ref < dmax
    # most pairs are measured, and the short distmax cuts some
    assert found[:, 1].sum() >= len(pairs) - 2 and 0 < found[:, 0].sum() < len(pairs)
