"""Constraint rows (jaxsim.constraint) against MuJoCo's efc arrays after mj_forward.

MuJoCo runs with a dense Jacobian. Our rows come from our own pipeline stages on the same
qpos / qvel; the active rows, compacted in order, must equal MuJoCo's. Non-contact rows
are compared in order; contacts are matched by geom pair and position (our buffer order
is fixed by the collision driver), then their row blocks are compared.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import gym_assets

import jaxsim
from jaxsim import constraint, smooth
from jaxsim.collision import driver
from jaxsim.types import ConstraintType, DisableBit, EnableBit

TOL = 1e-9
FIELDS = ("J", "pos", "margin", "frictionloss", "R", "D", "aref", "vel")


def _stages(m, d):
    """The stages make_constraint needs (position, collision, com_vel), then the rows."""
    d = smooth.com_pos(m, smooth.kinematics(m, d))
    d = smooth.tendon(m, d)
    if m.opt.enableflags & EnableBit.DIAGEXACT:
        d = smooth.factor_m(m, smooth.make_m(m, d))
    d = driver.collision(m, d)
    d = smooth.com_vel(m, d)
    return d, constraint.make_constraint(m, d)


_run = jax.jit(_stages)


def _mj_rows(m, d):
    n = d.nefc
    return dict(J=np.array(d.efc_J[: n * m.nv]).reshape(n, m.nv), pos=d.efc_pos.copy(),
                margin=d.efc_margin.copy(), frictionloss=d.efc_frictionloss.copy(),
                R=d.efc_R.copy(), D=d.efc_D.copy(), aref=d.efc_aref.copy(),
                vel=d.efc_vel.copy(), type=d.efc_type.copy(), id=d.efc_id.copy())


def _pair(m, d, st, efc):
    """Row index pairs (MuJoCo, ours): non-contact rows in order, contacts matched."""
    act = np.asarray(efc.active)
    typ = np.asarray(efc.type)
    ours = np.nonzero(act)[0]
    ref_nc = np.nonzero(d.efc_type < ConstraintType.CONTACT_FRICTIONLESS)[0]
    our_nc = ours[typ[ours] < ConstraintType.CONTACT_FRICTIONLESS]
    assert len(our_nc) == len(ref_nc), (typ[our_nc], d.efc_type[ref_nc])
    pairs = [(ref_nc, our_nc, d.efc_id[ref_nc])]
    cdim = np.asarray(efc.contact_dim)
    adr = np.asarray(efc.contact_adr)
    mine = np.nonzero(cdim > 0)[0]
    theirs = [j for j in range(d.ncon) if d.contact[j].efc_address >= 0]
    assert len(mine) == len(theirs), (len(mine), len(theirs))
    geoms = np.asarray(st.contact.geom)
    cpos = np.asarray(st.contact.pos)
    used = set()
    for i in mine:
        cands = [j for j in theirs if j not in used and tuple(d.contact[j].geom) == tuple(geoms[i])]
        assert cands, f"no MuJoCo contact for geoms {geoms[i]}"
        j = min(cands, key=lambda j: np.linalg.norm(d.contact[j].pos - cpos[i]))
        used.add(j)
        c = d.contact[j]
        assert cdim[i] == c.dim
        n = 2 * (c.dim - 1) if c.dim > 1 and m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL else c.dim
        block = adr[i] + np.arange(int(efc.contact_rows[i]))
        assert np.array_equal(np.nonzero(act[block])[0], np.arange(n)), (act[block], n)
        assert np.all(np.asarray(efc.id)[block[:n]] == i)
        assert abs(float(efc.contact_mu[i]) - c.mu) <= TOL * (1 + abs(c.mu))
        pairs.append((c.efc_address + np.arange(n), block[:n], np.full(n, i)))
    return [np.concatenate(x).astype(int) for x in zip(*pairs, strict=True)]


def check(m, model, d, eq_active=None):
    """Runs MuJoCo and our rows on d's qpos / qvel; asserts every efc field agrees."""
    if eq_active is not None:
        d.eq_active[:] = eq_active
    mujoco.mj_forward(m, d)
    ref = _mj_rows(m, d)
    st = jaxsim.make_state(model).replace(
        qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel),
        eq_active=jnp.asarray(d.eq_active, jnp.float64))
    st, efc = _run(model, st)
    rr, oo, oid = _pair(m, d, st, efc)
    assert len(rr) == d.nefc
    np.testing.assert_array_equal(np.asarray(efc.type)[oo], ref["type"][rr])
    np.testing.assert_array_equal(np.asarray(efc.id)[oo], oid)
    bad = []
    for f in FIELDS:
        a = np.asarray(getattr(efc, f))[oo]
        b = ref[f][rr]
        if b.size:
            e = float(np.max(np.abs(a - b)) / (1 + np.max(np.abs(b))))
            if e > TOL:
                bad.append(f"{f}: {e:.1e}")
    assert not bad, bad
    inactive = ~np.asarray(efc.active)
    assert np.all(np.asarray(efc.D)[inactive] == 0) and np.all(np.asarray(efc.R) > 0)
    return ref


def _load(xml):
    m = mujoco.MjModel.from_xml_string(xml)
    m.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
    return m, jaxsim.load_string(xml, dtype=jnp.float64)


# ------------------------------------------------------------------- equality, limits

EQ_XML = """
<mujoco>
<option timestep="0.02" {opt}/>
<worldbody>
 <body name="a" pos="0 0 1"><freejoint/><geom size=".1"/><site name="sa" pos=".1 0 0" quat="1 0 0 1"/>
  <body name="b" pos="0.3 0 0">
   <joint name="h1" axis="0 1 0" range="-0.3 0.2" margin="0.05" frictionloss="0.3"/>
   <geom size=".1"/><site name="sb" pos="0 .1 0" quat="1 1 0 0"/>
   <body name="b2" pos="0.3 0 0">
    <joint name="h2" axis="0 1 0" range="-0.2 0.2" solreflimit="-500 -20"
           solimplimit="0.5 0.99 0.1 0.4 1"/>
    <geom size=".1"/><site name="s3" pos="0 .1 0"/></body></body></body>
 <body name="c" pos="1 0 1" quat="1 0 1 0">
  <joint name="ball" type="ball" range="0 0.4" margin="0.1" frictionloss="0.1"
         solreffriction="0.01 2"/>
  <geom size=".1"/><site name="sc" pos=".1 .1 0"/>
  <body name="e" pos=".2 0 0">
   <joint name="sl" type="slide" range="-0.1 0.1" frictionloss="2"
          solimpfriction="0.2 0.3 0.001 0.5 2" solreflimit="0.001 1"/>
   <geom size=".05"/></body></body>
</worldbody>
<tendon>
 <fixed name="t1" frictionloss="0.5" limited="true" range="-0.05 0.05" margin="0.02">
  <joint joint="h1" coef="1"/><joint joint="h2" coef="-.5"/></fixed>
 <spatial name="t2" frictionloss="0.2" limited="true" range="0.9 1.3" solreflimit="0.05 0.5">
  <site site="sa"/><site site="sc"/></spatial>
 <spatial name="t3" limited="true" range="0.5 1.1"><site site="s3"/><site site="sc"/></spatial>
</tendon>
<equality>
 <connect body1="a" body2="c" anchor="0.1 0.2 0.3" solref="0.01 0.5"/>
 <connect site1="sa" site2="sb"/>
 <weld body1="a" body2="c" anchor="0.1 0.2 0.3" torquescale="2" solimp="0.8 0.95 0.01 0.3 3"/>
 <weld body1="b2" relpose="1 2 3 1 0 0 0"/>
 <weld site1="s3" site2="sc" torquescale="0.5"/>
 <joint joint1="h1" joint2="h2" polycoef="0.1 0.5 0.2 0.1 0.05"/>
 <joint joint1="sl" polycoef="0.1 0 0 0 0" solref="-100 -10"/>
 <tendon tendon1="t1" tendon2="t2" polycoef="0 1 0.3 0 0"/>
 <tendon tendon1="t2"/>
</equality>
</mujoco>"""


def test_equality_friction_limits():
    """Connect / weld (body and site, torquescale, relpose, Jdot*v), joint and tendon
    couplings, eq_active toggled at run time, friction loss and limits with margins."""
    m, model = _load(EQ_XML.format(opt=""))
    rng = np.random.default_rng(0)
    seen = set()
    for active in ([1] * 9, [1, 0, 1, 0, 1, 0, 1, 0, 1], [0, 1, 0, 1, 0, 1, 0, 1, 0]):
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0 + 0.3 * rng.standard_normal(m.nq)
        d.qvel[:] = rng.standard_normal(m.nv)
        ref = check(m, model, d, eq_active=active)
        seen |= set(zip(ref["type"].tolist(), ref["id"].tolist(), strict=True))
    # every kind of row shows up: all nine equalities, dof and tendon friction, the hinge,
    # ball and slide limits and a tendon limit
    assert {(0, i) for i in range(9)} <= seen
    assert {(1, 6), (1, 8), (1, 11), (2, 0), (2, 1), (3, 1), (3, 3), (3, 4), (4, 0)} <= seen


def test_disable_flags():
    """A disabled kind has no row slots here and no rows in MuJoCo; the others keep theirs.

    (refsafe="disable" is compared row by row in test_contacts.)"""
    m0, base = _load(EQ_XML.format(opt=""))
    full = constraint.plan(base)
    rng = np.random.default_rng(1)
    qpos = m0.qpos0 + 0.3 * rng.standard_normal(m0.nq)
    kinds = {DisableBit.EQUALITY: ("eq_connect", "eq_weld", "eq_joint", "eq_tendon"),
             DisableBit.FRICTIONLOSS: ("fri_dof", "fri_ten"),
             DisableBit.LIMIT: ("lim_jnt", "lim_ball", "lim_ten"),
             DisableBit.CONSTRAINT: constraint.Plan._fields[:9]}
    types = {DisableBit.EQUALITY: {0}, DisableBit.FRICTIONLOSS: {1, 2},
             DisableBit.LIMIT: {3, 4}, DisableBit.CONSTRAINT: set(range(8))}
    for bit, names in kinds.items():
        p = constraint.plan(base.replace(opt=base.opt.replace(disableflags=int(bit))))
        for k in constraint.Plan._fields[:9]:
            assert len(getattr(p, k)) == (0 if k in names else len(getattr(full, k))), (bit, k)
        m = mujoco.MjModel.from_xml_string(EQ_XML.format(opt=""))
        m.opt.disableflags = int(bit)
        d = mujoco.MjData(m)
        d.qpos[:] = qpos
        mujoco.mj_forward(m, d)
        assert not set(d.efc_type.tolist()) & types[bit], bit


def test_plan_friction_rows():
    """Friction-loss rows: those compiled with a friction loss, traced or not, so the state
    jit returns has the shapes make_state gives (a scan over steps needs that)."""
    model = jaxsim.load_string(EQ_XML.format(opt=""), dtype=jnp.float64)
    p = constraint.plan(model)
    assert p.fri_dof.tolist() == [6, 8, 9, 10, 11] and p.fri_ten.tolist() == [0, 1]

    def count(m):
        q = constraint.plan(m)
        assert q.fri_dof.tolist() == p.fri_dof.tolist()
        assert q.fri_ten.tolist() == p.fri_ten.tolist()
        return jnp.zeros(())

    jax.eval_shape(count, model)
    state = jaxsim.make_state(model)
    out = jax.eval_shape(jaxsim.forward, model, state)
    assert out.efc_force.shape == state.efc_force.shape
    # a friction loss where the compiled model has none would be silently lost: refused
    bad = model.replace(dof_frictionloss=model.dof_frictionloss.at[7].set(0.5))
    with pytest.raises(ValueError, match="dof_frictionloss"):
        constraint.plan(bad)
    # a zero friction loss on a dof with a row: the row is there, inactive
    off = model.replace(dof_frictionloss=model.dof_frictionloss.at[6].set(0.0))
    efc = jax.eval_shape(lambda m, s: constraint.make_constraint(m, smooth.kinematics(m, s)),
                         off, state)
    assert efc.J.shape[0] == state.efc_force.shape[0]


# -------------------------------------------------------------------------- contacts

CONTACT_XML = """
<mujoco>
<option cone="{cone}" {opt}/>
<default><geom contype="2" conaffinity="0"/></default>
<worldbody>
 <geom name="floor" type="plane" size="5 5 .1" contype="1" conaffinity="2" condim="1" surfacevel="0.1 0.2 0 0 0 0.3"/>
 <body pos="0 0 .09"><freejoint/><geom type="sphere" size=".1" condim="1"/></body>
 <body pos="1 0 .095"><freejoint/>
  <geom type="sphere" size=".1" condim="3" friction="0.7 0.01 0.002" solref="-2000 -50"/></body>
 <body pos="2 0 .045"><freejoint/>
  <geom type="capsule" size=".05 .2" euler="0 90 0" condim="4" friction="0.5 0.05 0.003"
        solimp="0.8 0.9 0.01 0.2 3" margin="0.01"/></body>
 <body pos="3 0 .09"><freejoint/>
  <geom type="box" size=".1 .1 .1" condim="6" friction="0.9 0.02 0.01" solref="0.001 0.8"
        priority="1"/></body>
 <body pos="4 0 .2"><joint type="hinge" axis="0 1 0"/><joint type="slide" axis="0 0 1"/>
  <geom type="sphere" size=".21" condim="6" surfacevel="0.3 -0.2 0.1 0.5 0.2 -0.4"/></body>
 <body pos="5 0 .09"><freejoint/><geom name="p1" type="sphere" size=".1" condim="3"/></body>
 <body pos="6 0 .09"><freejoint/><geom name="p2" type="sphere" size=".1" condim="1"/></body>
 <body pos="7 0 .095"><freejoint/>
  <geom type="sphere" size=".1" condim="6" adhesion="3" margin="0.02"/></body>
 <body pos="8 0 .11"><freejoint/>
  <geom type="sphere" size=".1" condim="3" adhesion="2" margin="0.005" gap="0.015"/></body>
</worldbody>
<contact>
 <pair geom1="floor" geom2="p1" condim="4" friction="0.8 0.6 0.02 0.001 0.001"
       solreffriction="0.05 0.3" solimp="0.85 0.95 0.002 0.5 2"/>
 <pair geom1="floor" geom2="p2" condim="6" solreffriction="-300 -10" solref="-3000 -30"/>
</contact>
</mujoco>"""

_OVERRIDE = ('timestep="0.02" o_solref="0.03 0.7" o_solimp="0.7 0.9 0.02 0.4 2" '
             'o_margin="0.005"><flag override="enable" refsafe="disable" diagexact="enable"/>'
             '</option><option')


@pytest.mark.parametrize("cone,opt", [("pyramidal", ""), ("elliptic", ""),
                                      ("elliptic", _OVERRIDE)],
                         ids=["pyramidal", "elliptic", "override-refsafe-diagexact"])
def test_contacts(cone, opt):
    """condim 1/3/4/6, both cones, impratio, torsional / rolling friction, <pair>
    solreffriction, negative solref, margins, surface velocity, adhesion (also in the gap)."""
    m, model = _load(CONTACT_XML.format(cone=cone, opt=opt))
    rng = np.random.default_rng(2)
    for impratio in (1.0, 3.5, 0.5):
        m.opt.impratio = impratio
        mod = model.replace(opt=model.opt.replace(impratio=jnp.asarray(impratio)))
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0
        d.qvel[:] = rng.standard_normal(m.nv)
        ref = check(m, mod, d)
        want = {5, 6} if cone == "pyramidal" else {5, 7}
        assert want <= set(ref["type"].tolist())


# ----------------------------------------------------------------------------- gym


@pytest.mark.parametrize("name", ["ant", "humanoid"])
def test_gym(name):
    assets = gym_assets()
    if assets is None:
        pytest.skip("gymnasium not installed")
    path = str(assets / f"{name}.xml")
    m = mujoco.MjModel.from_xml_path(path)
    m.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
    model = jaxsim.load(path, dtype=jnp.float64)
    rng = np.random.default_rng(4)
    types = set()
    for k in range(3):
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0
        d.qpos[7:] += 0.5 * rng.standard_normal(m.nq - 7)
        d.qpos[2] = (0.3, 0.35, 0.5)[k] if name == "ant" else (0.9, 1.0, 1.2)[k]
        d.qvel[:] = rng.standard_normal(m.nv)
        types |= set(check(m, model, d)["type"].tolist())
    assert {ConstraintType.LIMIT_JOINT, ConstraintType.CONTACT_PYRAMIDAL} <= types


# ------------------------------------------------------------------- transformations


def test_vmap_and_gradients():
    """vmap over states equals one state at a time; gradients through the rows are finite."""
    m, model = _load(CONTACT_XML.format(cone="elliptic", opt=""))
    rng = np.random.default_rng(5)
    st = jaxsim.make_state(model)
    lifted = st.qpos.at[2].add(0.05)  # the first sphere leaves the floor
    states = [st.replace(qpos=q, qvel=jnp.asarray(rng.standard_normal(m.nv)))
              for q in (st.qpos, lifted)]
    runs = [_run(model, s) for s in states]
    states = [r[0] for r in runs]
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states)
    out = jax.jit(jax.vmap(constraint.make_constraint, (None, 0)))(model, batch)
    for k, (_, one) in enumerate(runs):
        for f in ("J", "R", "D", "aref", "vel", "type", "id", "active", "contact_mu"):
            np.testing.assert_allclose(np.asarray(getattr(out, f)[k]), np.asarray(getattr(one, f)),
                                       rtol=1e-12, atol=1e-12, err_msg=f)

    def loss(friction, solimp, s):
        mm = model.replace(geom_friction=friction)
        c = s.contact
        s = s.replace(contact=c.replace(solimp=solimp, friction=jnp.repeat(
            friction[:1], c.friction.shape[0], 0)[:, [0, 0, 1, 2, 2]]))
        e = constraint.make_constraint(mm, s)
        return jnp.sum(e.aref * e.D) + jnp.sum(e.R * e.active)

    g = jax.jit(jax.grad(loss, (0, 1)))(model.geom_friction, states[0].contact.solimp, states[0])
    assert all(np.all(np.isfinite(np.asarray(x))) for x in g)
    assert any(np.any(np.asarray(x) != 0) for x in g)
