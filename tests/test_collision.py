"""Collision driver against MuJoCo: pair filters, contact parameters, buffers, sweep.

The narrow-phase functions have their own tests (test_collision_primitive/box/convex);
here whole models go through `collision` after forward kinematics and every active
contact is matched with one of MuJoCo's (same geom pair, distance, frame, parameters).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import run_with_default_xla

import jaxsim
from jaxsim import smooth
from jaxsim.collision import driver

warnings.filterwarnings("ignore", category=UserWarning, module="jaxsim")


@jax.jit
def _collide(model, state):
    return driver.collision(model, smooth.kinematics(model, state))


def _ours(model, qpos):
    st = jaxsim.make_state(model).replace(qpos=jnp.asarray(qpos))
    return _collide(model, st)


def _records_mj(m, d):
    out = []
    for i in range(d.ncon):
        c = d.contact[i]
        out.append(dict(geom=tuple(int(g) for g in c.geom), dist=float(c.dist),
                        pos=np.array(c.pos), frame=np.array(c.frame).reshape(3, 3),
                        dim=int(c.dim), friction=np.array(c.friction),
                        solref=np.array(c.solref), solreffriction=np.array(c.solreffriction),
                        solimp=np.array(c.solimp), includemargin=float(c.includemargin),
                        exclude=bool(c.exclude)))
    return out


def _records_ours(st):
    c = st.contact
    out = []
    for i in np.nonzero(np.asarray(c.active))[0]:
        out.append(dict(geom=tuple(int(g) for g in c.geom[i]), dist=float(c.dist[i]),
                        pos=np.asarray(c.pos[i]), frame=np.asarray(c.frame[i]),
                        dim=int(c.dim[i]), friction=np.asarray(c.friction[i]),
                        solref=np.asarray(c.solref[i]),
                        solreffriction=np.asarray(c.solreffriction[i]),
                        solimp=np.asarray(c.solimp[i]),
                        includemargin=float(c.includemargin[i]), exclude=bool(c.exclude[i])))
    return out


def assert_contacts_match(m, d, st, tol=1e-9):
    ref, ours = _records_mj(m, d), _records_ours(st)
    key = lambda r: (r["geom"], round(r["dist"], 6), tuple(np.round(r["pos"], 6)))  # noqa: E731
    ref.sort(key=key)
    ours.sort(key=key)
    assert [r["geom"] for r in ours] == [r["geom"] for r in ref], (ours, ref)
    for o, r in zip(ours, ref, strict=True):
        for f in ("dist", "pos", "frame", "friction", "solref", "solreffriction", "solimp",
                  "includemargin"):
            np.testing.assert_allclose(o[f], r[f], atol=tol, rtol=0, err_msg=f"{f} {r['geom']}")
        assert o["dim"] == r["dim"], (o, r)
        assert o["exclude"] == r["exclude"], (o, r)


_FILTERS = """
<mujoco>
  <option>{flag}</option>
  <default><geom contype="1" conaffinity="1"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" friction="0.5 0.01 0.001" priority="1"/>
    <body name="a" pos="0 0 0.09">
      <freejoint/>
      <geom name="a" type="sphere" size=".1" margin="0.02" gap="0.01" solmix="2"
            solref="0.03 1" solimp="0.8 0.9 0.002 0.4 3"/>
      <body name="a_child" pos="0.05 0 0">
        <joint type="hinge" axis="0 0 1"/>
        <geom name="a_child" type="capsule" size=".05 .1" euler="0 90 0" condim="4"/>
      </body>
    </body>
    <body name="b" pos="0.15 0 0.12">
      <freejoint/>
      <geom name="b" type="sphere" size=".1" friction="2 0.1 0.1" condim="6"
            solref="-1000 -50"/>
    </body>
    <body name="c" pos="0.3 0.05 0.1">
      <freejoint/>
      <geom name="c" type="capsule" size=".08 .1" solref="-800 -20" solmix="0"/>
    </body>
    <body name="d" pos="-0.15 0.0 0.1">
      <freejoint/>
      <geom name="d" type="sphere" size=".1" contype="2" conaffinity="2"/>
      <geom name="d2" type="sphere" size=".05" pos="0 0 .1" contype="2" conaffinity="1"/>
    </body>
    <body name="e" pos="-0.3 0.0 0.12">
      <freejoint/>
      <geom name="e" type="capsule" size=".1 .1" priority="2" condim="1" friction="0.2 0 0"/>
    </body>
  </worldbody>
  <contact>
    <exclude body1="b" body2="c"/>
    <pair geom1="d" geom2="a" margin="0.05" gap="0.02" friction="0.7 0.7 0.02 0.003 0.003"
          solreffriction="0.05 0.5" condim="3"/>
    <pair geom1="floor" geom2="e" condim="6" solref="0.01 0.5"/>
  </contact>
</mujoco>
"""


@pytest.mark.parametrize("flag", ["", '<flag filterparent="disable"/>',
                                  '<flag override="enable"/>'])
def test_filters_and_parameters(flag):
    if "override" in flag:
        flag = ('</option><option o_margin="0.03" o_solref="0.05 0.9" '
                'o_solimp="0.7 0.8 0.01 0.5 2" o_friction="0.3 0.3 0.01 0.001 0.001">' + flag)
    xml = _FILTERS.format(flag=flag)
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    rng = np.random.default_rng(0)
    for trial in range(4):
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0
        if trial:
            d.qpos[:] += rng.normal(scale=0.03, size=m.nq)
        mujoco.mj_forward(m, d)
        assert d.ncon >= 3
        st = _ours(model, d.qpos)
        assert_contacts_match(m, d, st)
        assert int(st.ncon) == d.ncon


def test_cap_keeps_deepest_and_reports_overflow():
    spheres = "".join(
        f'<body pos="{0.15 * i} 0 {0.05 + 0.01 * i}"><freejoint/><geom type="sphere" '
        f'size=".1"/></body>' for i in range(6))
    xml = (f'<mujoco><size nconmax="4"/><worldbody><geom type="plane" size="5 5 .1"/>'
           f'{spheres}</worldbody></mujoco>')
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    st = _ours(model, d.qpos)
    assert st.contact.dist.shape == (4,)
    ref = sorted(float(d.contact[i].dist) for i in range(d.ncon))
    assert d.ncon > 4
    ours = sorted(np.asarray(st.contact.dist)[np.asarray(st.contact.active)])
    np.testing.assert_allclose(ours, ref[:4], atol=1e-12)
    assert bool(st.overflow)
    assert int(st.maxuse_con) == d.ncon

    roomy = jaxsim.load_string(xml.replace('nconmax="4"', 'nconmax="100"'), dtype=jnp.float64)
    st2 = _ours(roomy, d.qpos)
    assert not bool(st2.overflow)
    assert int(st2.ncon) == d.ncon


def _pile_xml(n, seed=0, box=False):
    rng = np.random.default_rng(seed)
    side = int(np.ceil(n ** (1 / 3)))
    bodies = []
    for i in range(n):
        x, y, z = (i % side), (i // side) % side, i // (side * side)
        p = np.array([x, y, z], float) * 0.19 + rng.uniform(-0.02, 0.02, 3) + [0, 0, 0.1]
        g = ('<geom type="box" size=".08 .07 .06"/>' if box and i % 2 else
             '<geom type="sphere" size=".1"/>')
        bodies.append(f'<body pos="{p[0]} {p[1]} {p[2]}"><freejoint/>{g}</body>')
    return ('<mujoco><worldbody><geom type="plane" size="10 10 .1"/>' + "".join(bodies)
            + "</worldbody></mujoco>")


def test_sweep_finds_the_same_pairs_as_mujoco(monkeypatch):
    """... and puts their contacts in MuJoCo's order, after those of enumerated pairs
    (which decides the order of constraint rows, and so the Gauss-Seidel sweeps of PGS and
    noslip), including those of a two-sphere body on top whose contacts MuJoCo's midphase
    sorts."""
    n = 72  # 2556 sphere-sphere candidate pairs: found at run time below this threshold
    monkeypatch.setattr(driver, "SWEEP_MIN", 2000)
    monkeypatch.setattr(driver, "_PLANS", {})
    xml = _pile_xml(n).replace("</worldbody>", '<body pos=".19 .19 .62"><freejoint/>'
                               '<geom size=".1" pos=".1 0 0"/><geom size=".1" pos="-.1 0 0"/>'
                               '</body></worldbody>')
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    p = driver.plan(model)
    assert p.sweeps and p.sweeps[0].types == (2, 2)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ncon > n
    st = _ours(model, d.qpos)
    assert not bool(st.overflow)
    assert_contacts_match(m, d, st)
    act = np.asarray(st.contact.active)
    two = {m.ngeom - 2, m.ngeom - 1}
    assert sum(bool(two & set(g)) for g in d.contact.geom[:d.ncon].tolist()) >= 4
    assert np.asarray(st.contact.geom)[act].tolist() == d.contact.geom[:d.ncon].tolist()


def test_vmap_and_gradients_are_finite():
    xml = _FILTERS.format(flag="")
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    q0 = jnp.asarray(model.qpos0)
    qs = q0 + 0.02 * jax.random.normal(jax.random.PRNGKey(0), (3, model.nq))
    batch = jax.jit(jax.vmap(_ours_traced, in_axes=(None, 0)))(model, qs)
    for i in range(3):
        one = _ours(model, qs[i])
        np.testing.assert_allclose(batch.contact.dist[i], one.contact.dist, atol=1e-12)

    def depth(q):
        c = _ours_traced(model, q).contact
        return jnp.sum(jnp.where(c.active, c.dist, 0.0))

    g = jax.jit(jax.grad(depth))(q0)
    assert np.all(np.isfinite(np.asarray(g)))
    assert np.any(np.asarray(g) != 0)


def _ours_traced(model, q):
    st = jaxsim.make_state(model).replace(qpos=q)
    return driver.collision(model, smooth.kinematics(model, st))


_RESTING = '''<mujoco><worldbody><geom type="plane" size="5 5 .1"/>
  <body><joint type="slide" axis="1 0 0"/><joint type="slide" axis="0 1 0"/><joint axis="0 0 1"/>
    <geom type="sphere" size=".5" pos="0 0 .5"/><geom type="capsule" size=".1 .5" pos="2 0 .1"
    euler="0 90 0"/><geom type="box" size=".2 .3 .4" pos="0 2 .4"/></body>
  </worldbody></mujoco>'''


def test_exact_touches_as_mujoco():
    """Geoms resting exactly on a plane while their body turns about the vertical: the
    touches MuJoCo reports (dist <= 0 in its rounding) are exactly ours (quaternions kept
    unnormalised within mjMINVAL of unit length, as MuJoCo; no slack on the margin)."""
    m = mujoco.MjModel.from_xml_string(_RESTING)
    model = jaxsim.load_string(_RESTING, dtype=jnp.float64)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(1)
    for _ in range(12):
        d.qpos[:] = rng.uniform(-3, 3, size=3)
        mujoco.mj_forward(m, d)
        out = _ours(model, d.qpos)
        act = np.asarray(out.contact.active)
        ours = sorted(zip(np.asarray(out.contact.geom)[act].tolist(),
                          np.asarray(out.contact.dist)[act].tolist(), strict=True))
        ref = sorted(zip(d.contact.geom[:d.ncon].tolist(), d.contact.dist[:d.ncon].tolist(),
                         strict=True))
        assert [g for g, _ in ours] == [g for g, _ in ref]
        np.testing.assert_allclose([x for _, x in ours], [x for _, x in ref], atol=1e-15)


def _grid_xml(gap):
    boxes = "".join(
        f'<body pos="{0.1 * i + gap * i} {0.1 * j + gap * j} 0.05"><freejoint/>'
        f'<geom type="mesh" mesh="box"/></body>' for i in range(4) for j in range(2))
    return ('<mujoco><asset><mesh name="box" vertex="-1 -1 -1 1 -1 -1 1 1 -1 1 1 1 1 -1 1 '
            '-1 1 -1 -1 1 1 -1 -1 1" scale=".05 .05 .05"/></asset><worldbody>'
            f'<geom type="plane" size="1 1 .1"/>{boxes}</worldbody></mujoco>')


@pytest.mark.parametrize("gap", [0.0, 4e-10])
def test_broadphase_decides_near_touches_as_mujoco(gap):
    """Mesh boxes in a 4 x 2 grid whose float32 vertices overlap by about 1e-9: MuJoCo's
    sweep and prune compares the body boxes along the principal axis (here x) in float32
    and along the others in double, so with centres 0.1 + 4e-10 apart the y neighbours
    are pruned (their boxes are apart in double) while the x neighbours pair (tied in
    float32); with no gap every neighbour pairs. Geom distances alone would pair all."""
    xml = _grid_xml(gap)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    st = _ours(model, d.qpos)
    pairs = lambda gs: sorted({tuple(sorted(g)) for g in gs})  # noqa: E731
    act = np.asarray(st.contact.active)
    ours = pairs(np.asarray(st.contact.geom)[act].tolist())
    ref = pairs(d.contact.geom[:d.ncon].tolist())
    assert ours == ref
    between = [p for p in ref if 0 not in p]
    assert len(between) == (16 if gap == 0 else 6)  # all 16 neighbours / the 6 along x


def _poses_matching_mujoco(xml, model, nbody, sigma, seed, min_ncon, n=3):
    """n poses of a pile of free bodies (positions moved by sigma), at each of which MuJoCo
    finds at least min_ncon contacts and ours (a single world) are MuJoCo's; as (n, nq)."""
    m = mujoco.MjModel.from_xml_string(xml)
    rng = np.random.default_rng(seed)
    qs = []
    for _ in range(n):
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0 + np.concatenate(
            [np.r_[sigma * rng.normal(size=3), 0.0, 0.0, 0.0, 0.0] for _ in range(nbody)])
        mujoco.mj_forward(m, d)
        assert d.ncon >= min_ncon
        assert_contacts_match(m, d, _ours(model, d.qpos))
        qs.append(d.qpos.copy())
    return jnp.asarray(np.array(qs))


def test_sparse_narrow_phase_matches_mujoco_and_the_dense_one(monkeypatch):
    """A pile of 20 spheres: 190 sphere-sphere pairs, evaluated only where the bounding
    filters pass (loops.masked_map), batched and alone; contacts as MuJoCo's, and the same
    values and gradients as evaluating every pair."""
    xml = _pile_xml(20, seed=3)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    p = driver.plan(model)
    assert any(g.types == (2, 2) and len(g.pair) >= driver._SPARSE_MIN for g in p.groups)
    qs = _poses_matching_mujoco(xml, model, 20, 0.005, seed=0, min_ncon=21)

    def depth(q):
        c = _ours_traced(model, q).contact
        return jnp.sum(jnp.where(c.active, c.dist ** 2, 0.0))

    batched = jax.jit(jax.vmap(lambda q: _ours_traced(model, q).contact.dist))(qs)
    grads = jax.jit(jax.vmap(jax.grad(depth)))(qs)
    monkeypatch.setattr(driver, "_SPARSE_MIN", 10 ** 9)  # every pair evaluated
    dense = jax.jit(jax.vmap(lambda q: _ours_traced(model, q).contact.dist))(qs)
    dgrads = jax.jit(jax.vmap(jax.grad(depth)))(qs)
    np.testing.assert_allclose(np.asarray(batched), np.asarray(dense), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(grads), np.asarray(dgrads), rtol=1e-12, atol=1e-12)
    assert np.any(np.asarray(grads) != 0)


def test_convex_narrow_phase_only_where_the_filters_pass(monkeypatch):
    """GJK/EPA pairs (ellipsoids on a plane, in a loose grid: neighbours touch, diagonals
    and the upper layer's plane pairs are beyond their bounding spheres) are evaluated only
    where the bounding filters pass, whatever the group's size (`driver._sparse`): alone,
    contacts as MuJoCo's; batched, values and gradients as evaluating every pair."""
    xml = _pile_xml(4, seed=5).replace('type="sphere" size=".1"',
                                       'type="ellipsoid" size=".11 .1 .09"')
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    p = driver.plan(model)
    convex = [g for g in p.groups if g.merged or g.types not in driver._analytic()]
    assert convex
    qs = _poses_matching_mujoco(xml, model, 4, 0.004, seed=1, min_ncon=2)
    margin, gap = driver._margin_gap(model, p.geom1, p.geom2, p.ipair)
    keep = jax.vmap(lambda q: driver._sphere_filter(
        model, smooth.kinematics(model, jaxsim.make_state(model).replace(qpos=q)),
        p.geom1, p.geom2, margin + gap + driver.TOUCH))(qs)
    idx = np.concatenate([g.pair for g in convex])
    kept = np.asarray(keep)[:, idx]
    assert kept.any() and not kept.all()  # both kinds of pair in every test below

    def depth(q):  # and the contacts
        c = _ours_traced(model, q).contact
        return jnp.sum(jnp.where(c.active, c.dist ** 2, 0.0)), (c.dist, c.pos, c.active)

    run = jax.jit(jax.vmap(jax.grad(depth, has_aux=True)))
    grads, batched = run(qs)
    monkeypatch.setattr(driver, "_sparse", lambda *a: False)  # every pair evaluated
    dgrads, dense = jax.jit(jax.vmap(jax.grad(depth, has_aux=True)))(qs)
    for a, b in zip(batched, dense, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(grads), np.asarray(dgrads), rtol=1e-12, atol=1e-12)
    assert np.any(np.asarray(grads) != 0)


_CONVEX_MIX = """<mujoco><asset><mesh name="cube" vertex="-1 -1 -1 1 -1 -1 1 1 -1 -1 1 -1
  -1 -1 1 1 -1 1 1 1 1 -1 1 1" scale=".07 .08 .09"/><mesh name="oct" vertex="1 0 0 -1 0 0
  0 1 0 0 -1 0 0 0 1 0 0 -1" scale=".11 .1 .12"/></asset><worldbody>{}</worldbody></mujoco>"""
_SHAPES = ['type="sphere" size=".1"', 'type="ellipsoid" size=".06 .11 .08"',
           'type="ellipsoid" size=".1 .07 .08"', 'type="box" size=".08 .07 .06"',
           'type="mesh" mesh="oct"', 'type="mesh" mesh="cube"']


def test_merged_convex_groups_match_mujoco():
    """Six shapes in a cluster: their GJK/EPA type pairs share one compiled function per
    contact count (geom types traced per pair, driver.MERGE_MAX). Over random poses every
    contact is MuJoCo's (gradients through traced types: test_collision_convex). (No
    cylinder: its flat-feature contacts deep in a box differ from MuJoCo 4.0's in either
    path, see the notes.) With XLA's default CPU settings. A clipped face whose quadrilateral
    is a last-bit tie (world 8 here: which vertex MuJoCo keeps changes with the rounding,
    and XLA's rounding with the host's vector instructions) must give one of the answers
    MuJoCo gives at the pose moved by 1e-12; at least 10 of the 12 worlds give MuJoCo's
    answer at the pose itself."""
    run_with_default_xla(__file__, "_check_merged_convex_groups")


def _check_merged_convex_groups():
    xml = _CONVEX_MIX.format("".join(
        f'<body pos="{0.18 * (i % 3)} {0.18 * (i // 3)} 0"><freejoint/><geom {s}/></body>'
        for i, s in enumerate(_SHAPES)))
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    merged = [g for g in driver.plan(model).groups if g.merged]
    assert sorted(g.k for g in merged) == [1, 5]
    assert all(len({tuple(t) for t in np.c_[np.asarray(model.geom_type)[g.geom1],
                                           np.asarray(model.geom_type)[g.geom2]]}) >= 2
               for g in merged)
    m = mujoco.MjModel.from_xml_string(xml)
    rng, nudge = np.random.default_rng(1), np.random.default_rng(2)
    refs, qs = [], []
    for _ in range(12):
        d = mujoco.MjData(m)
        for i in range(6):
            q = rng.normal(size=4)
            d.qpos[7 * i:7 * i + 7] = np.r_[m.qpos0[7 * i:7 * i + 3]
                                          + 0.02 * rng.normal(size=3), q / np.linalg.norm(q)]
        qpos = d.qpos.copy()
        mujoco.mj_forward(m, d)
        # MuJoCo's contacts at the pose, then at poses moved by 1e-12: where a tie between
        # clipped polygon vertices is decided by the last bits (which XLA's code for the
        # host's vector instructions can round either way), a nudge shows MuJoCo's other
        # answer, and ours must be one of MuJoCo's
        alts = [_records_mj(m, d)]
        for _ in range(6):
            d2 = mujoco.MjData(m)
            d2.qpos[:] = qpos + 1e-12 * nudge.normal(size=m.nq)
            mujoco.mj_forward(m, d2)
            alts.append(_records_mj(m, d2))
        refs.append(alts)
        qs.append(qpos)
    out = jax.jit(jax.vmap(lambda q: _ours_traced(model, q)))(jnp.asarray(np.array(qs)))
    smooth_types = {2, 3, 4}  # EPA on curved shapes: positions to its accuracy
    kinds = set()

    def mismatch(w, ours, ref):
        """Why `ours` is not MuJoCo's `ref` (None when it is)."""
        key = lambda r: (r["geom"], r["dist"])  # noqa: E731
        ref, ours = sorted(ref, key=key), sorted(ours, key=key)
        if [r["geom"] for r in ours] != [r["geom"] for r in ref]:
            return (w, ours, ref)
        for o, r in zip(ours, ref, strict=True):
            types = set(np.asarray(m.geom_type)[list(r["geom"])].tolist())
            kinds.add(tuple(sorted(types)))
            tol = 1e-3 if types & smooth_types else 1e-6
            if abs(o["dist"] - r["dist"]) >= 1e-6:
                return (w, r["geom"], o["dist"], r["dist"])
            if not (np.allclose(o["pos"], r["pos"], rtol=0, atol=tol)
                    and np.allclose(o["frame"][0], r["frame"][0], rtol=0, atol=5 * tol)):
                return (w, r["geom"], o["pos"], r["pos"], o["frame"][0], r["frame"][0])
        return None

    exact = 0
    for w, alts in enumerate(refs):
        ours = _records_ours(jax.tree.map(lambda x, w=w: x[w], out))
        why = [mismatch(w, ours, ref) for ref in alts]
        assert any(y is None for y in why), why[0]
        exact += why[0] is None
    assert exact >= 10, exact  # ties are rare: most worlds match MuJoCo at the pose itself
    # merged: sphere-ellipsoid, ellipsoid-ellipsoid, ellipsoid-mesh, box-mesh, mesh-mesh
    assert {(2, 4), (4,), (4, 7), (6, 7), (7,)} <= kinds, sorted(kinds)


_ORDER = """<mujoco><worldbody>
  <geom type="plane" size="5 5 .1"/><geom type="box" size=".3 .3 .05" pos=".2 0 .05"/>
  <geom type="sphere" size=".1" pos="-.3 0 .05"/>
  <body pos="0 0 .14"><freejoint/>
    <geom type="box" size=".1 .1 .05"/><geom type="capsule" size=".05 .2" pos="0 .1 0"
      euler="0 90 0"/><geom type="sphere" size=".08" pos="-.25 0 0"/></body>
  <body pos="0 .5 .1"><freejoint/><geom type="sphere" size=".1"/></body>
  <body pos="0 .65 .1"><freejoint/><geom type="capsule" size=".05 .1"/></body>
</worldbody></mujoco>"""


@pytest.mark.parametrize("flag", ["", '<option><flag midphase="disable"/></option>'])
def test_contact_order_is_mujocos(flag):
    """Contacts in MuJoCo's order (which decides the order of constraint rows, and so the
    Gauss-Seidel sweeps of PGS and noslip): body pairs by signature; within a pair of
    single-geom bodies the one pair; with a multi-geom body MuJoCo's midphase sorts by geom
    ids as stored (lower geom type first), without it geom by geom of the lower body."""
    xml = _ORDER.replace("<worldbody>", flag + "<worldbody>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ncon >= 8
    out = _ours(jaxsim.load_string(xml, dtype=jnp.float64), d.qpos)
    act = np.asarray(out.contact.active)
    assert np.asarray(out.contact.geom)[act].tolist() == d.contact.geom[:d.ncon].tolist()


def test_broadphase_frame_float32_stops():
    """The broad phase's principal-axis frame (mju_eig3's Jacobi rotations) in float32: the
    loop stops within a few rotations once the next rotation is below float32's
    resolution (it used to repeat that null rotation up to mju_eig3's 500-iteration bound,
    in nearly every world of a batched gymnasium humanoid), and the frame still
    diagonalises the matrix, with numpy's eigenvalues in decreasing order."""
    from jaxsim.collision import broadphase

    rng = np.random.default_rng(3)
    a = rng.normal(size=(200, 3, 3))
    scale = 10.0 ** rng.uniform(-3, 1, size=(200, 1, 1))
    cov = scale * np.einsum("bij,bkj->bik", a, a) / 3
    # the covariance of the gymnasium humanoid's geom centres (a world that ran to 500)
    cov[0] = [[1.6975392e-02, -3.6439870e-04, 2.8661901e-02],
              [-3.6439870e-04, 2.1721853e-02, -1.4158031e-04],
              [2.8661901e-02, -1.4158031e-04, 2.2486360e-01]]
    c32 = jnp.asarray(cov, jnp.float32)
    _, _, its = jax.jit(jax.vmap(broadphase._jacobi))(c32)
    assert int(jnp.max(its)) <= 20, np.asarray(its)
    frame = np.asarray(jax.jit(jax.vmap(broadphase.eig3_frame))(c32), np.float64)
    d = np.einsum("bji,bjk,bkl->bil", frame, cov, frame)
    tr = np.trace(cov, axis1=1, axis2=2)[:, None]
    off = np.abs(d - np.einsum("bii->bi", d)[:, :, None] * np.eye(3))
    # the rotation angle comes from its cosine, so float32 cannot turn by less than about
    # 2e-4 rad: that is what remains off the diagonal (unchanged by the early stop; a loop
    # stopped before converging would leave entries of the order of the trace)
    assert np.all(off.max(axis=(1, 2)) <= 1e-3 * tr[:, 0])
    ref = np.linalg.eigvalsh(cov)[:, ::-1]
    assert np.all(np.abs(np.einsum("bii->bi", d) - ref) <= 1e-5 * tr)
