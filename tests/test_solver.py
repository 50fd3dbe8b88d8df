"""Constraint solvers against MuJoCo: MuJoCo's own constraint rows fed to `solver.solve`.

Each case steps MuJoCo to a state with contacts, limits, friction loss and equalities,
copies its rows (dense Jacobian) into a fixed-size `Efc` with inactive padding rows full
of random finite values, and compares qacc, efc_force, efc_state, the iteration count and
the per-iteration statistics with MuJoCo's mj_forward. Islands are disabled in MuJoCo so
that its statistics are those of one monolithic solve, as ours.
"""

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from conftest import MODELS, gym_assets  # noqa: E402

import jaxsim  # noqa: E402
from jaxsim import constraint, hessian, linesearch, solver  # noqa: E402
from jaxsim.efc import Efc  # noqa: E402
from jaxsim.types import ConstraintState, ConstraintType  # noqa: E402

NEWTON, CG, PGS = 2, 1, 0
PYRAMIDAL, ELLIPTIC = 0, 1

SMALL = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body pos="0 0 0.3"><freejoint/><geom type="box" size=".1 .2 .05" condim="3" mass="2"/></body>
    <body pos="0.5 0 0.3"><freejoint/><geom type="box" size=".1 .1 .05" condim="4"/></body>
    <body pos="-0.5 0 0.3"><freejoint/><geom type="sphere" size=".08" condim="6"/></body>
    <body pos="0 1 1.5">
      <joint type="hinge" axis="0 1 0" limited="true" range="-30 30" frictionloss="0.5"/>
      <geom type="capsule" fromto="0 0 0 .3 0 -.3" size=".03" contype="0" conaffinity="0"/>
      <body pos=".3 0 -.3">
        <joint type="hinge" axis="0 1 0" limited="true" range="-10 40" frictionloss="0.2"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" contype="0" conaffinity="0"/>
      </body>
    </body>
    <body name="a" pos="1 -1 1"><freejoint/>
      <geom type="box" size=".05 .05 .05" contype="0" conaffinity="0"/></body>
    <body name="b" pos="1.2 -1 1"><freejoint/>
      <geom type="box" size=".05 .05 .05" contype="0" conaffinity="0"/></body>
  </worldbody>
  <equality><weld body1="a" body2="b"/><connect body1="a" anchor="0 0 .1"/></equality>
</mujoco>
"""


# ----------------------------------------------------------------------------- helpers


def _mujoco(xml, cone, solver_, iterations, tol, steps=400, noslip=0, flags=0, seed=0,
            islands=False):
    """MuJoCo after a short rollout with random controls, then noisy qvel and forces; one
    monolithic problem unless `islands`."""
    m = mujoco.MjModel.from_xml_string(xml)
    m.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
    m.opt.cone = cone
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    for i in range(steps):
        if m.nu and i % 20 == 0:
            d.ctrl[:] = rng.uniform(-1, 1, m.nu)
        mujoco.mj_step(m, d)
    m.opt.solver, m.opt.iterations, m.opt.tolerance = solver_, iterations, tol
    m.opt.noslip_iterations = noslip
    m.opt.disableflags |= (0 if islands else mujoco.mjtDisableBit.mjDSBL_ISLAND) | flags
    d.qvel[:] += 0.3 * rng.standard_normal(m.nv)
    d.qfrc_applied[:] = 3.0 * rng.standard_normal(m.nv)
    mujoco.mj_forward(m, d)
    return m, d


def _efc(m, d, seed=1):
    """MuJoCo's rows in a padded Efc; returns (efc, MuJoCo row of each slot, active)."""
    rng = np.random.default_rng(seed)
    elliptic = m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    maxdim = max([int(c) for c in m.geom_condim] + [1])
    K = maxdim if elliptic else max(1, 2 * (maxdim - 1))

    def nrow(dim):
        return dim if elliptic and dim > 1 else (1 if dim == 1 else 2 * (dim - 1))

    con_rows = set()
    for c in range(d.ncon):
        a = d.contact.efc_address[c]
        if a >= 0:
            con_rows.update(range(a, a + nrow(d.contact.dim[c])))
    slots = []  # MuJoCo row of each slot, None for padding
    for i in range(d.nefc):
        if i not in con_rows:
            slots.append(i)
            if rng.random() < 0.3:
                slots.append(None)
    slots += [None] * 3
    adr, dim, mu, fr = [], [], [], []
    for c in range(d.ncon):
        a, n = d.contact.efc_address[c], d.contact.dim[c]
        adr.append(len(slots))
        used = list(range(a, a + nrow(n))) if a >= 0 else []
        slots += used + [None] * (K - len(used))
        dim.append(n if a >= 0 else 0)
        mu.append(d.contact.mu[c])
        fr.append(d.contact.friction[c])
    for _ in range(2):  # unused contact slots
        adr.append(len(slots))
        slots += [None] * K
        dim.append(0)
        mu.append(rng.random())
        fr.append(rng.random(5))

    act = np.array([s is not None for s in slots])
    idx = np.array([s if s is not None else 0 for s in slots])
    n = len(slots)

    def rows(x, pad):
        x = np.asarray(x)[idx]
        return jnp.asarray(np.where(act.reshape((-1,) + (1,) * (x.ndim - 1)), x, pad(x.shape)))

    def rnd(shape):
        return rng.standard_normal(shape)

    def pos(shape):
        return rng.random(shape) + 0.1

    # padding holds junk, except where Efc promises zeros on inactive rows (J, D, aref)
    efc = Efc(
        J=rows(d.efc_J.reshape(d.nefc, m.nv), np.zeros), pos=rows(d.efc_pos, rnd),
        margin=rows(d.efc_margin, rnd), frictionloss=rows(d.efc_frictionloss, pos),
        R=rows(d.efc_R, pos), D=rows(d.efc_D, np.zeros), aref=rows(d.efc_aref, np.zeros),
        vel=rows(d.efc_vel, rnd),
        type=jnp.asarray(np.where(act, d.efc_type[idx], rng.integers(0, 8, n)), jnp.int32),
        id=jnp.asarray(np.where(act, d.efc_id[idx], 0), jnp.int32),
        active=jnp.asarray(act),
        contact_adr=np.array(adr, np.int32), contact_nrow=K,
        contact_dim=jnp.asarray(np.array(dim, np.int32)),
        contact_mu=jnp.asarray(np.array(mu, float)),
        contact_friction=jnp.asarray(np.array(fr, float).reshape(-1, 5)),
    )
    return efc, idx, act


@functools.cache
def _load(xml, dtype=None):
    return jaxsim.load_string(xml) if dtype is None else jaxsim.load_string(xml, dtype=dtype)


def _jaxsim(xml, m, d, dtype=None):
    """Our model (options copied from MuJoCo) and a state holding MuJoCo's inputs."""
    jm = _load(xml, dtype)
    dt = jnp.float64 if dtype is None else dtype
    o = m.opt
    opt = jm.opt.replace(
        cone=int(o.cone), solver=int(o.solver), iterations=int(o.iterations),
        ls_iterations=int(o.ls_iterations), noslip_iterations=int(o.noslip_iterations),
        disableflags=int(o.disableflags), tolerance=jnp.asarray(o.tolerance, dt),
        ls_tolerance=jnp.asarray(o.ls_tolerance, dt),
        noslip_tolerance=jnp.asarray(o.noslip_tolerance, dt),
        impratio=jnp.asarray(o.impratio, dt),
    )
    jm = jm.replace(opt=opt)
    M = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M)
    # MuJoCo's own L'DL (sparse rows of M's pattern) in our dense layout
    qLD = np.zeros((m.nv, m.nv))
    for i in range(m.nv):
        adr = m.M_rowadr[i]
        qLD[i, m.M_colind[adr:adr + m.M_rownnz[i]]] = d.qLD[adr:adr + m.M_rownnz[i]]
    js = jaxsim.make_state(jm).replace(
        qM=jnp.asarray(M, dt), qLD=jnp.asarray(qLD, dt), qLDiagInv=jnp.asarray(d.qLDiagInv, dt),
        qacc_smooth=jnp.asarray(d.qacc_smooth, dt), qfrc_smooth=jnp.asarray(d.qfrc_smooth, dt),
        qacc_warmstart=jnp.asarray(d.qacc_warmstart, dt),
    )
    return jm, js


@functools.cache
def _solve(K):
    # Efc.contact_nrow must be static: close over it. Compilation dominates these tests;
    # XLA's backend optimisation buys nothing for them.
    return jax.jit(lambda m, d, e: solver.solve(m, d, e._replace(contact_nrow=K)),
                   compiler_options={"xla_backend_optimization_level": 0})


def _run(xml, m, d, rows=None):
    efc, idx, act = _efc(m, d) if rows is None else rows
    jm, js = _jaxsim(xml, m, d)
    out = _solve(efc.contact_nrow)(jm, js, efc)
    return (jm, js, efc, idx, act), jax.tree.map(np.asarray, out)


def _mj_stats(d):
    n = d.solver_niter[0]
    s = d.solver[:n]
    return n, {k: np.array([getattr(x, k) for x in s]) for k in
               ("improvement", "gradient", "lineslope", "nactive", "nchange", "neval")}


def _rel(a, b):
    return np.max(np.abs(np.asarray(a) - b), initial=0) / (1 + np.max(np.abs(b), initial=0))


def _on_cone_boundary(m, d):
    """MuJoCo rows of elliptic contacts whose dual forces lie on the cone's surface.

    The dual states (PGS, noslip) of such rows depend on the last bit of mu N - T.
    """
    rows = set()
    for c in range(d.ncon):
        a, dim = d.contact.efc_address[c], d.contact.dim[c]
        if a < 0 or d.efc_type[a] != ConstraintType.CONTACT_ELLIPTIC:
            continue
        f = d.efc_force[a:a + dim]
        t = np.linalg.norm(f[1:] / d.contact.friction[c, : dim - 1])
        if abs(f[0] - t) <= 1e-9 * (1 + abs(f[0])):
            rows.update(range(a, a + dim))
    return rows


def _check(m, d, case, out, tol, dual=False, states=True):
    _, _, _, idx, act = case
    qacc, force, state, info = out
    assert _rel(qacc, d.qacc) < tol
    assert _rel(force[act], d.efc_force[idx[act]]) < tol
    if not states:
        return
    skip = _on_cone_boundary(m, d) if dual else set()
    bad = [i for i in np.nonzero(state[act] != d.efc_state[idx[act]])[0] if idx[act][i] not in skip]
    assert not bad, (state[act][bad], d.efc_state[idx[act]][bad])
    # padding rows: no force, SATISFIED
    assert np.all(force[~act] == 0) and np.all(state[~act] == ConstraintState.SATISFIED)


def _check_stats(d, info, primal, nmax=None, tol=1e-9, niter=True, counts=True):
    # counts: elliptic dual states (PGS, noslip) on the cone surface are round-off
    n, ref = _mj_stats(d)
    assert not niter or int(info.niter) == n
    k = n if nmax is None else min(n, nmax)
    scale = np.abs(ref["improvement"][:k]).max(initial=0) + 1e-300
    assert np.abs(info.improvement[:k] - ref["improvement"][:k]).max(initial=0) / scale < tol
    for key in ("nactive", "nchange") if counts else ():
        np.testing.assert_array_equal(getattr(info, key)[:k], ref[key][:k], err_msg=key)
    if primal:
        g = ref["gradient"][:k]
        assert np.all(np.abs(info.gradient[:k] - g) <= tol * np.abs(g) + 1e-12 * g.max(initial=0))
        # line-search stopping tests compare derivatives with a gradient tolerance near
        # their round-off, so one evaluation more or less is within rounding
        assert np.all(np.abs(info.neval[:k] - ref["neval"][:k]) <= 2)
        # the slope at the line minimum is round-off: compare absolutely
        assert np.allclose(info.lineslope[:k], ref["lineslope"][:k], rtol=1e-6, atol=1e-12)


# ------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("cone", [PYRAMIDAL, ELLIPTIC])
@pytest.mark.parametrize("solver_", [NEWTON, CG, PGS])
def test_small_model(cone, solver_):
    """Contacts (condim 3, 4, 6), limits, friction loss, weld and connect."""
    pgs = solver_ == PGS
    m, d = _mujoco(SMALL, cone, solver_, 3000 if pgs else 200, 1e-15 if pgs else 1e-12)
    kinds = set(d.efc_type)
    assert {0, 1, 3}.issubset(kinds) and d.ncon >= 3, kinds
    case, out = _run(SMALL, m, d)
    elliptic_pgs = pgs and cone == ELLIPTIC
    _check(m, d, case, out, 1e-7 if elliptic_pgs else 1e-12, dual=pgs)
    # rounding grows over PGS's many elliptic iterations: compare its first ones only
    if elliptic_pgs:
        _check_stats(d, out[3], False, nmax=20, tol=1e-6, niter=False, counts=False)
    else:
        _check_stats(d, out[3], not pgs)

    # early exit by tolerance (a leaf: no recompilation)
    m.opt.tolerance = 1e-3
    mujoco.mj_forward(m, d)
    jm, js, efc, idx, act = case
    jm = jm.replace(opt=jm.opt.replace(tolerance=jnp.asarray(1e-3)))
    out = jax.tree.map(np.asarray, _solve(efc.contact_nrow)(jm, js, efc))
    assert 0 < int(out[3].niter) < 200
    _check(m, d, case, out, 1e-9, dual=pgs)
    _check_stats(d, out[3], not pgs, tol=1e-6, counts=not elliptic_pgs)


@pytest.mark.parametrize("cone", [PYRAMIDAL, ELLIPTIC])
def test_pgs_order_table(cone, monkeypatch):
    """PGS's visiting orders: from the order table (one island, few enough rows and
    iterations) they are MuJoCo's shuffles. 60 unconverged iterations, whose answer depends
    on every pass's order, against MuJoCo and against the in-sweep shuffle (the two
    programs fuse differently: equal to rounding)."""
    from jaxsim import pgs

    m, d = _mujoco(SMALL, cone, PGS, 60, 0.0)
    efc, idx, act = _efc(m, d)
    nefc = efc.J.shape[0]
    assert (nefc + 1) * 60 * nefc <= pgs.ORDER_TABLE_MAX  # the table is used
    case, out = _run(SMALL, m, d, rows=(efc, idx, act))
    assert int(out[3].niter) == 60 == d.solver_niter[0]
    _check(m, d, case, out, 1e-9 if cone == PYRAMIDAL else 1e-6, dual=True,
           states=cone == PYRAMIDAL)
    jm, js = case[:2]
    monkeypatch.setattr(pgs, "ORDER_TABLE_MAX", 0)  # a new trace: shuffles in the sweep
    shuffled = jax.jit(lambda m, d, e: solver.solve(m, d, e._replace(contact_nrow=efc.contact_nrow)),
                       compiler_options=_FAST_OPT)(jm, js, efc)
    np.testing.assert_allclose(out[0], shuffled[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[1], shuffled[1], rtol=1e-12, atol=1e-12)
    if cone == PYRAMIDAL:  # (elliptic states on the cone's surface are round-off)
        np.testing.assert_array_equal(out[2], shuffled[2])


def test_pgs_order_table_values():
    """The table's orders for every block count against the sweep's own shuffle code
    (`_pcg32` in uint32 halves), for 7 passes of up to 12 blocks."""
    from jaxsim import pgs

    table = pgs._order_table(12, 7)
    hi, lo, _ = pgs._pcg32(jnp.uint32(0), jnp.uint32(0))
    for c in range(13):
        perm, h, lo_ = list(range(12)), hi, lo
        for n in range(7):
            for t in range(c - 1):
                i = c - 1 - t
                h, lo_, r = pgs._pcg32(h, lo_)
                j = int(r) % (i + 1)
                perm[i], perm[j] = perm[j], perm[i]
            assert list(table[c, n]) == perm, (c, n)


@pytest.mark.parametrize("cone", [PYRAMIDAL, ELLIPTIC])
@pytest.mark.parametrize("solver_", [NEWTON, CG])
def test_one_iteration(cone, solver_):
    """iterations="1" (as RL models often set): the one trip skips what only a next
    iteration would read (the next search direction: Newton's Hessian and factorisation,
    CG's preconditioned gradient). MuJoCo's unconverged answer after one iteration, its
    statistics included."""
    m, d = _mujoco(SMALL, cone, solver_, 1, 1e-12)
    case, out = _run(SMALL, m, d)
    assert int(out[3].niter) == 1 == d.solver_niter[0]
    _check(m, d, case, out, 1e-12)
    _check_stats(d, out[3], True)

    # vmapped: each world as alone, one that needs no iteration (no force) included
    jm, js, efc, _, _ = case
    K = efc.contact_nrow

    def one(s):
        return solver.solve(jm, js, efc._replace(
            aref=efc.aref * s, D=efc.D * s, frictionloss=efc.frictionloss * s,
            contact_nrow=K))

    # (scale 3 would be no test: its line search ends at ls_iterations on a slope of 1e-14,
    # where the step is rounding noise, 2e-7 apart between the vmapped and the lone world)
    scales = jnp.asarray([0.0, 1.0, 2.0])
    opts = {"xla_backend_optimization_level": 0}
    batch = jax.tree.map(np.asarray, jax.jit(jax.vmap(one), compiler_options=opts)(scales))
    for i, s in enumerate(scales):
        ref = jax.tree.map(np.asarray, jax.jit(one, compiler_options=opts)(s))
        np.testing.assert_allclose(batch[0][i], ref[0], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(batch[1][i], ref[1], rtol=1e-10, atol=1e-10)
        assert int(batch[3].niter[i]) == int(ref[3].niter) == (1 if s else 0)


def _line_cost(kind, D, floss, jaref, jv, g1, g2, alpha):
    """The primal cost along a line minus its value at 0, written out in float64 (rows:
    1 equality, 2 friction loss (Huber), 3 inequality, 0 absent)."""
    def rows(x):
        rf = floss / np.where(D > 0, D, 1)  # R floss
        huber = np.where(np.abs(x) < rf, 0.5 * D * x * x, floss * np.abs(x) - 0.5 * floss * rf)
        c = np.where(kind == 1, 0.5 * D * x * x, 0.0)
        c = c + np.where(kind == 2, huber, 0.0)
        return c + np.where((kind == 3) & (x < 0), 0.5 * D * x * x, 0.0)
    return (g2 * alpha * alpha + g1 * alpha
            + np.sum(rows(jaref + alpha * jv)) - np.sum(rows(jaref)))


def test_exact_line_search_minimises_the_line():
    """float32's loop-free line search lands on the minimum of the piecewise quadratic
    cost along the line: no point of a fine grid around it, nor a bounded scalar
    minimiser's answer, is lower (float64 reference); a stopped world does not move."""
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(7)
    n = 24
    search = linesearch._exact_search  # eager: the problem's static flags stay Python values
    for trial in range(40):
        kind = rng.choice([0, 1, 2, 3, 3, 3], n)
        D = np.where(kind == 0, 0.0, rng.uniform(0.2, 5.0, n))
        floss = np.where(kind == 2, rng.uniform(0.05, 2.0, n), 0.0)
        jaref = np.where(kind == 0, 0.0, rng.standard_normal(n))
        jv = np.where((kind == 0) | (rng.random(n) < 0.15), 0.0, rng.standard_normal(n))
        g2 = rng.uniform(0.01, 2.0)
        g1 = -rng.uniform(0.1, 5.0) * (1 if trial % 4 else -1)  # some ascent directions
        f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
        R = np.where(D > 0, 1 / np.where(D > 0, D, 1), 1.0)
        p = solver._Problem(
            M=None, qfrc_smooth=None, qacc_smooth=None, J=None, D=f32(D), R=f32(R),
            floss=f32(floss), aref=None, kind=jnp.asarray(kind, jnp.int32), pyr=None, rc=None,
            rj=None, ci=None, cm=None, cdim=None, mu=None, s=None, fric=None, scale=None)
        ln = linesearch.Line(f32(jaref), f32(jv), f32(0.5 * D * jaref * jaref),
                          f32(jv * D * jaref), f32(0.5 * jv * D * jv), f32(g1), f32(g2), None)
        alpha, imp, neval, slope = map(np.asarray, search(p, ln, False))

        cost = functools.partial(_line_cost, kind, D, floss, jaref, jv, g1, g2)

        ref = minimize_scalar(cost, bracket=(-1.0, 1.0), tol=1e-12)
        lo = min(float(alpha), ref.x) - 1.0
        grid = np.linspace(lo, max(float(alpha), ref.x) + 1.0, 20001)
        best = min(cost(a) for a in grid)
        scale = 1.0 + abs(best)
        assert cost(float(alpha)) <= min(best, ref.fun) + 1e-5 * scale, trial
        assert abs(cost(float(alpha)) + float(imp)) <= 1e-5 * scale, trial  # improvement
        assert float(imp) > 0 and int(neval) > 0
        a2, imp2, neval2, _ = map(np.asarray, search(p, ln, True))
        assert float(a2) == 0 and float(imp2) == 0 and int(neval2) == 0


@pytest.mark.parametrize("solver_", [NEWTON, CG])
def test_float32_exact_line_search_reaches_mujocos_optimum(solver_, monkeypatch):
    """A float32 problem of one island with pyramidal contacts, limits, friction loss and
    equalities (MuJoCo's rows of the small model, its islands off) goes through the exact
    line search and converges to MuJoCo's float64 answer."""
    m, d = _mujoco(SMALL, PYRAMIDAL, solver_, 100, 1e-10)
    efc, idx, act = _efc(m, d)
    f32 = jnp.float32
    efc = jax.tree.map(lambda x: x.astype(f32) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                       efc)
    jm, js = _jaxsim(SMALL, m, d, dtype=f32)
    calls = []
    exact = linesearch._exact_search
    monkeypatch.setattr(linesearch, "_exact_search", lambda *a: calls.append(1) or exact(*a))
    monkeypatch.setattr(linesearch, "EXACT_SEARCH", efc.J.shape[0])
    qacc, force, _, info = jax.jit(lambda m_, d_, e: solver.solve(
        m_, d_, e._replace(contact_nrow=efc.contact_nrow)))(jm, js, efc)
    assert calls
    assert qacc.dtype == f32
    assert 1 <= int(info.niter) < 100
    assert _rel(np.asarray(qacc), d.qacc) < 2e-4
    assert _rel(np.asarray(force)[act], d.efc_force[idx[act]]) < 2e-4


@pytest.mark.parametrize("cone", [PYRAMIDAL, ELLIPTIC])
@pytest.mark.parametrize("solver_", [NEWTON, CG, PGS])
def test_by_island(cone, solver_):
    """MuJoCo 4.0 solves each constraint island on its own: PGS with its own visiting order
    (a PCG32 stream per island) and momentum, Newton and CG with their own line searches and
    conjugate directions; termination is scaled by the island's inertia. After a few
    iterations the answer depends on that; at the end, on each island's stopping (CG
    solved whole stops 2e-4 away from MuJoCo's answer here)."""
    few = 3 if solver_ == PGS else 2
    for iterations, tol in ((few, 1e-15), (60, 1e-8)):
        m, d = _mujoco(SMALL, cone, solver_, iterations, tol, islands=True)
        assert d.nisland >= 3, d.nisland
        case, out = _run(SMALL, m, d)
        # (MuJoCo 4.0's Newton and CG by island leave efc_state as the warmstart's update
        # found it; ours are the states at the solution)
        _check(m, d, case, out, 1e-8, dual=solver_ == PGS, states=solver_ == PGS)
        assert int(out[3].niter) == d.solver_niter[:d.nisland].max()
        # the same problem solved whole reaches other forces after a few iterations
        if iterations == few:
            jm, js, efc, idx, act = case
            flags = jm.opt.disableflags | int(mujoco.mjtDisableBit.mjDSBL_ISLAND)
            whole = _solve(efc.contact_nrow)(jm.replace(opt=jm.opt.replace(disableflags=flags)),
                                             js, efc)
            assert _rel(np.asarray(whole[1])[act], d.efc_force[idx[act]]) > 1e-6


# A planar body (x and z slides, a hinge about y) pressed into a wall whose face is normal
# to y: no dof moves along the contact normal, so the normal row's Jacobian is zero, while
# its friction rows are not; a second tree (a pendulum on a joint limit) makes islands.
PLANAR_WALL = """
<mujoco>
  <option cone="elliptic" solver="{solver}" tolerance="1e-12"/>
  <worldbody>
    <geom type="plane" size="1 1 .1"/>
    <geom type="box" pos="0 .05 .3" size=".5 .01 .5"/>
    <body pos="0 0 .3">
      <joint type="slide" axis="1 0 0"/><joint type="slide" axis="0 0 1"/>
      <joint type="hinge" axis="0 1 0"/>
      <geom type="sphere" size=".05" friction=".7"/>
    </body>
    <body pos="0 -1 1">
      <joint type="hinge" axis="1 0 0" limited="true" range="-5 5"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("solver_", [NEWTON, PGS])
def test_contact_rows_join_their_geoms_trees(solver_):
    """A contact's rows belong to the islands of its geoms' trees even where a row's
    Jacobian is zero (MuJoCo's mj_island): the normal row of a planar body pressed into a
    wall still holds the cone its friction rows share (dm_control's manipulator, whose peg
    sits in a slot)."""
    xml = PLANAR_WALL.format(solver=["PGS", "CG", "Newton"][solver_])
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(3)
    jm = _load(xml, jnp.float64)
    fwd = jax.jit(jaxsim.forward)
    for _ in range(3):
        d.qvel[:] = rng.normal(size=m.nv)
        d.qpos[3] = 0.1  # past the pendulum's limit (5 degrees)
        mujoco.mj_forward(m, d)
        assert d.ncon == 1 and d.nisland == 2
        c = d.contact[0]
        assert np.allclose(d.efc_J.reshape(d.nefc, m.nv)[c.efc_address], 0)  # the normal
        st = jaxsim.make_state(jm).replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel))
        out = fwd(jm, st)
        assert _rel(np.asarray(out.qacc), d.qacc) < 1e-8


@pytest.mark.skipif(gym_assets() is None, reason="gymnasium not installed")
@pytest.mark.parametrize("name,cone,solver_,seed", [
    ("ant.xml", PYRAMIDAL, NEWTON, 2), ("ant.xml", ELLIPTIC, PGS, 2),
    ("humanoid.xml", PYRAMIDAL, CG, 0), ("humanoid.xml", ELLIPTIC, NEWTON, 0),
])
def test_gym(name, cone, solver_, seed):
    xml = (gym_assets() / name).read_text()
    pgs = solver_ == PGS
    m, d = _mujoco(xml, cone, solver_, 2000 if pgs else 200, 1e-15 if pgs else 1e-12,
                   steps=1000, seed=seed)
    assert d.ncon > 0
    case, out = _run(xml, m, d)
    _check(m, d, case, out, 1e-7 if pgs else 1e-12, dual=pgs)
    ell_pgs = pgs and cone == ELLIPTIC
    _check_stats(d, out[3], not pgs, nmax=20 if pgs else None, tol=1e-6, niter=not ell_pgs,
                 counts=not ell_pgs)


@pytest.mark.parametrize("solver_", [NEWTON, PGS])
def test_warmstart(solver_):
    """Warmstart disabled; a useless warmstart (qacc_smooth wins); a converged one."""
    pgs = solver_ == PGS
    it, tol = (3000, 1e-15) if pgs else (200, 1e-12)
    flag = mujoco.mjtDisableBit.mjDSBL_WARMSTART
    m, d = _mujoco(SMALL, PYRAMIDAL, solver_, it, tol, flags=flag)
    case, out = _run(SMALL, m, d)
    _check(m, d, case, out, 1e-10, dual=pgs)
    _check_stats(d, out[3], not pgs)

    m.opt.disableflags &= ~int(flag)
    for warm in (1e3 * np.random.default_rng(5).standard_normal(m.nv), d.qacc.copy()):
        d.qacc_warmstart[:] = warm
        mujoco.mj_forward(m, d)
        _, out = _run(SMALL, m, d, rows=case[2:])
        _check(m, d, case, out, 1e-10, dual=pgs)
        _check_stats(d, out[3], not pgs, tol=1e-6)
    # the converged warmstart: the primal certificate ends before the first iteration
    if not pgs:
        assert int(out[3].niter) == 0


_FAST_OPT = {"xla_backend_optimization_level": 0}


@pytest.mark.parametrize("cone,solver_", [(PYRAMIDAL, NEWTON), (ELLIPTIC, CG)])
def test_noslip(cone, solver_):
    m, d = _mujoco(SMALL, cone, solver_, 200, 1e-12, noslip=30)
    case, out = _run(SMALL, m, d)
    _check(m, d, case, out, 1e-12, dual=True)
    _check_stats(d, out[3], False, tol=1e-6, counts=cone == PYRAMIDAL)


@pytest.mark.parametrize("cone,solver_,noslip", [(PYRAMIDAL, PGS, 0), (ELLIPTIC, PGS, 0),
                                                  (ELLIPTIC, NEWTON, 30)])
def test_dual_matrix_free(cone, solver_, noslip, monkeypatch):
    """PGS and noslip without forming J M^-1 J' (the path of problems with many rows, forced
    here on a small one): the same solution as MuJoCo's."""
    from jaxsim import pgs as pgs_module

    monkeypatch.setattr(pgs_module, "DENSE_MAX_ROWS", 0)
    pgs = solver_ == PGS
    m, d = _mujoco(SMALL, cone, solver_, 3000 if pgs else 200, 1e-15 if pgs else 1e-12,
                   noslip=noslip)
    efc, idx, act = _efc(m, d)
    jm, js = _jaxsim(SMALL, m, d)
    K = efc.contact_nrow
    out = jax.jit(lambda m_, d_, e: solver.solve(m_, d_, e._replace(contact_nrow=K)),
                  compiler_options=_FAST_OPT)(jm, js, efc)
    out = jax.tree.map(np.asarray, out)
    _check(m, d, (jm, js, efc, idx, act), out, 1e-7 if cone == ELLIPTIC else 1e-10, dual=True)


_FAST = {"xla_backend_optimization_level": 0}


@functools.cache
def _grad_case(cone, iterations=200):
    """A loss of (qacc_smooth, aref) through `solve`, its compiled gradient, its inputs."""
    m, d = _mujoco(SMALL, cone, NEWTON, iterations, 1e-14)
    efc, _, act = _efc(m, d)
    jm, js = _jaxsim(SMALL, m, d)
    w = jnp.asarray(np.random.default_rng(3).standard_normal(m.nv))
    K = efc.contact_nrow

    def loss(x, aref):
        # qfrc_smooth follows qacc_smooth, as in the forward pipeline
        s = js.replace(qacc_smooth=x, qfrc_smooth=js.qM @ x)
        qacc, force, _, _ = solver.solve(jm, s, efc._replace(aref=aref, contact_nrow=K))
        return jnp.dot(w, qacc) + 1e-3 * jnp.dot(force, force)

    args = (js.qacc_smooth, efc.aref)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), compiler_options=_FAST).lower(*args).compile()
    return m, jm, js, efc, act, loss, grad, w


@pytest.mark.parametrize("cone", [PYRAMIDAL, ELLIPTIC])
def test_grad_implicit(cone):
    """Reverse mode against central differences; forward mode against reverse."""
    m, jm, js, efc, act, loss, grad, w = _grad_case(cone)
    x0, a0 = js.qacc_smooth, efc.aref
    solve = _solve(efc.contact_nrow)  # compiled already by test_small_model

    def value(x, aref):
        s = js.replace(qacc_smooth=x, qfrc_smooth=js.qM @ x)
        qacc, force, _, _ = solve(jm, s, efc._replace(aref=aref))
        return float(jnp.dot(w, qacc) + 1e-3 * jnp.dot(force, force))

    gx, ga = grad(x0, a0)
    h = 1e-6
    fx = [(value(x0.at[i].add(h), a0) - value(x0.at[i].add(-h), a0)) / (2 * h)
          for i in range(m.nv)]
    rows = np.nonzero(act)[0]
    fa = [(value(x0, a0.at[i].add(h)) - value(x0, a0.at[i].add(-h))) / (2 * h) for i in rows]
    assert np.abs(gx - np.array(fx)).max() < 1e-5 * np.abs(fx).max()
    assert np.abs(np.asarray(ga)[rows] - np.array(fa)).max() < 1e-5 * np.abs(fa).max()
    assert np.all(np.asarray(ga)[~act] == 0)
    assert np.abs(ga).max() > 0

    if cone == PYRAMIDAL:
        v = jnp.asarray(np.random.default_rng(4).standard_normal(m.nv))
        jvp = jax.jit(lambda x, v: jax.jvp(lambda y: loss(y, a0), (x,), (v,)),
                      compiler_options=_FAST)
        _, jv = jvp(x0, v)
        assert abs(float(jv) - float(jnp.dot(gx, v))) < 1e-10 * (1 + abs(float(jv)))


def test_grad_iterations():
    """The VJP neither unrolls nor depends on the iteration count or early exit."""
    cases = [_grad_case(PYRAMIDAL, it) for it in (200, 20)]
    temp = [c[6].memory_analysis().temp_size_in_bytes for c in cases]
    grads = [np.asarray(c[6](c[2].qacc_smooth, c[3].aref)[0]) for c in cases]
    assert temp[0] == temp[1]
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-12)


def test_vmapped_worlds_stop_independently():
    """Worlds of a vmapped batch that need different numbers of iterations: each gets the
    result, iteration count and line-search evaluations of its own unbatched solve (the
    worlds that have stopped evaluate nothing while the others iterate)."""
    m, d = _mujoco(SMALL, PYRAMIDAL, NEWTON, 200, 1e-12)
    case, _ = _run(SMALL, m, d)
    jm, js, efc, _, _ = case
    K = efc.contact_nrow

    def one(s):
        e = efc._replace(aref=efc.aref * s, contact_nrow=K)
        return solver.solve(jm, js.replace(qacc_warmstart=js.qacc_warmstart * s), e)

    scales = jnp.asarray([0.0, 0.5, 1.0, 4.0])
    opts = {"xla_backend_optimization_level": 0}
    batch = jax.tree.map(np.asarray, jax.jit(jax.vmap(one), compiler_options=opts)(scales))
    single = jax.jit(one, compiler_options=opts)
    niters = []
    for i, s in enumerate(scales):
        ref = jax.tree.map(np.asarray, single(s))
        np.testing.assert_allclose(batch[0][i], ref[0], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(batch[1][i], ref[1], rtol=1e-10, atol=1e-10)
        assert int(batch[3].niter[i]) == int(ref[3].niter)
        np.testing.assert_array_equal(batch[3].neval[i], ref[3].neval)
        niters.append(int(ref[3].niter))
    assert len(set(niters)) > 1, niters


_BALLS = """<mujoco><option solver="{solver}" cone="{cone}" iterations="{it}" tolerance="{tol}"
  noslip_iterations="{noslip}"/>
  <worldbody><geom type="plane" size="5 5 .1"/>{balls}</worldbody></mujoco>"""


@pytest.mark.parametrize("solver_,cone,it,tol,noslip", [
    ("Newton", "pyramidal", 100, 1e-12, 0), ("PGS", "elliptic", 2000, 1e-15, 0),
    ("Newton", "elliptic", 100, 1e-12, 20)])
def test_compact_problem_and_full_fallback(solver_, cone, it, tol, noslip):
    """12 free balls: 78 contact slots, of which a world uses a few. With the compact
    problem on (`ncompact=-1`, automatic, the default: 18 slots), worlds with at most 18
    active contacts are solved on the compact problem, the others (a packed row of balls)
    on the whole one; batched, the whole problem runs only for those worlds. Every world
    matches MuJoCo, batched and alone. The batch (20 worlds) is large enough for the
    iterative loops' batched form (jaxsim.loops), PGS's and noslip's included."""
    balls = "".join(f'<body pos="{i % 4 * 0.5} {i // 4 * 0.5} .2"><freejoint/>'
                    f'<geom size=".1" condim="{3 + (i % 2)}"/></body>' for i in range(12))
    xml = _BALLS.format(solver=solver_, cone=cone, it=it, tol=tol, noslip=noslip, balls=balls)
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    fw = sys.modules["jaxsim.forward"]
    assert fw._compact_slots(model.replace(ncompact=0), constraint.plan(model)) is None
    kc = fw._compact_slots(model, constraint.plan(model))  # automatic by default
    assert kc == 18  # 12 free spheres at rest (one contact each), half as much again
    rng = np.random.default_rng(0)
    worlds = []
    for w in range(20):
        d = mujoco.MjData(m)
        packed = w % 5 == 0  # balls in a row, touching and pressed together: > 18 contacts
        for i in range(12):
            x, y = (i * 0.199, 0.0) if packed else (i % 4 * 0.5, i // 4 * 0.5)
            # spread out, between 1 and 8 balls (of the first 8) touch the plane
            down = packed or i < 1 + w % 8
            d.qpos[7 * i:7 * i + 3] = [x, y, (0.099 if down else 0.3) - 0.002 * rng.uniform()]
        d.qvel[:] = 0.1 * rng.normal(size=m.nv)
        mujoco.mj_forward(m, d)
        assert (d.ncon > kc) == packed, d.ncon
        worlds.append(d)
    st = jaxsim.make_state(model)
    batch = jax.tree.map(lambda *x: jnp.stack(x), *[
        st.replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel)) for d in worlds])
    fwd = jax.jit(jaxsim.forward)
    out = jax.jit(jax.vmap(jaxsim.forward, in_axes=(None, 0)))(model, batch)
    for w, d in enumerate(worlds):
        alone = fwd(model, jax.tree.map(lambda x, w=w: x[w], batch))
        for res in (alone, jax.tree.map(lambda x, w=w: x[w], out)):
            assert int(res.ncon) == d.ncon
            assert _rel(res.qacc, d.qacc) < 1e-7, (w, _rel(res.qacc, d.qacc))
            assert _rel(res.qfrc_constraint, d.qfrc_constraint) < 1e-7
            # forces to 1e-6 relative, or 1e-8 of the largest force (PGS stops at its
            # iteration bound, where a small force of an elliptic cone has moved by a few
            # 1e-7 with the CPU's rounding)
            np.testing.assert_allclose(
                np.sort(np.asarray(res.efc_force)[np.asarray(res.efc_active)]),
                np.sort(d.efc_force), rtol=1e-6, atol=1e-8 * np.abs(d.efc_force).max())


def test_compact_size_counts_resting_free_bodies():
    """The automatic compact problem is at least half as large again as what the free
    bodies use at rest: models/pile10.xml's 5 boxes (4 contacts each) and 5 spheres (1),
    25 -> 38 slots of its 140; a robot on one free base keeps the slot-count rule."""
    fw = sys.modules["jaxsim.forward"]
    pile = jaxsim.load(str(MODELS / "pile10.xml"), dtype=jnp.float64)
    assert fw._resting_contacts(pile) == 5 * 4 + 5 * 1
    assert fw._compact_slots(pile, constraint.plan(pile)) == 38
    robot = jaxsim.load(str(MODELS / "quadruped.xml"), dtype=jnp.float64)
    p = constraint.plan(robot)
    assert fw._compact_slots(robot, p) == max(4, p.ncon // 16, min(8, p.ncon // 4))


def test_hessian_of_single_entry_rows():
    """The Newton Hessian adds the rows whose Jacobian is one entry (a hinge's limit, dof
    friction loss) to its diagonal and takes the product over the others: equal to
    M + J' D J over all rows in the quadratic zone, by numpy."""
    model = jaxsim.load_string(SMALL, dtype=jnp.float64)
    st = jaxsim.make_state(model)
    hinge = model.nq - 1
    d = jax.jit(jaxsim.forward)(model, st.replace(qpos=st.qpos.at[hinge].set(0.6)))  # > 30 deg
    efc = jax.jit(constraint.make_constraint)(model, d)
    p = solver._problem(model, d, efc, False)
    assert p.unit is not None
    rows = np.asarray(p.unit[0])
    assert np.asarray(p.D)[rows].astype(bool).sum() >= 2  # the limit and friction rows act
    up = solver._update(p, p.J @ d.qacc - p.aref, False)
    up = up._replace(state=jnp.full_like(up.state, ConstraintState.QUADRATIC))
    J, D = np.asarray(p.J), np.asarray(p.D)
    ref = np.asarray(p.M) + J.T @ (D[:, None] * J)
    np.testing.assert_allclose(solver._hessian(p, up), ref, rtol=1e-12, atol=1e-12)
    dense = solver._hessian(p._replace(unit=None), up)
    np.testing.assert_allclose(dense, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nefc", [48, 80])
def test_hessian_product_on_the_rows_in_use(nefc):
    """J' diag(w) J, the Newton Hessian's constraint part: over a large batch it takes the
    first `_few_rows` rows with w != 0 and the whole J only in the worlds with more; a small
    batch and a single world take the whole J. Equal to numpy in every world, those past the
    compacted row count included, and under nested vmaps; the whole J as a written-out sum
    of rows (48) and as a summed broadcast product (80)."""
    assert (nefc <= hessian._UNROLL_ROWS) == (nefc == 48)
    rng = np.random.default_rng(3)
    nv, B = 10, 24
    cap = hessian._few_rows(nefc, nv)
    assert cap == 16
    J = rng.normal(size=(B, nefc, nv))
    w = np.zeros((B, nefc))
    for b in range(B):
        k = [0, 1, 5, cap, cap + 1, nefc][b % 6]
        w[b, rng.choice(nefc, k, replace=False)] = rng.uniform(0.1, 2.0, k)
    ref = np.einsum("bki,bk,bkj->bij", J, w, J)
    big = jax.vmap(hessian.jdj)
    # the compacted form: the fallback runs in a loop over the worlds that need it
    assert "while" in str(jax.make_jaxpr(big)(J, w))
    assert "while" not in str(jax.make_jaxpr(big)(J[:4], w[:4]))
    np.testing.assert_allclose(jax.jit(big)(J, w), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.jit(big)(J[:4], w[:4]), ref[:4], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.jit(hessian.jdj)(J[4], w[4]), ref[4], rtol=1e-12,
                               atol=1e-12)
    nested = jax.jit(jax.vmap(jax.vmap(hessian.jdj)))  # 2 outer x 12 inner, and 12 x 2
    for shape in ((2, 12), (12, 2)):
        out = nested(J.reshape(shape + J.shape[1:]), w.reshape(shape + w.shape[1:]))
        np.testing.assert_allclose(np.reshape(out, ref.shape), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("damping", ["0", "0.3"])
def test_euler_integrates_an_unconverged_qacc(damping):
    """Two welded free spheres pressed into each other, CG stopped after 3 iterations (far
    from converged, so qacc is not M^-1 (qfrc_smooth + qfrc_constraint)): without damping
    Euler integrates qacc itself, with damping it solves (M + h B) qacc = that force, as
    mj_Euler; one step agrees with MuJoCo's in qvel either way."""
    xml = f"""<mujoco><option solver="CG" cone="elliptic" iterations="3"/>
      <default><joint damping="{damping}"/></default>
      <worldbody><body name="a"><joint type="free"/><geom size="1" pos="7 0 0"/></body>
        <body name="b"><joint type="free"/><geom size="1" pos="8.5 0 0"/></body></worldbody>
      <equality><weld body1="a" body2="b"/></equality></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    step = jax.jit(jaxsim.step)
    rng = np.random.default_rng(2)
    assert (m.dof_damping > 0).all() == (damping != "0")
    gaps = []
    for _ in range(3):
        d = mujoco.MjData(m)
        d.qvel[:] = rng.normal(size=m.nv)
        mujoco.mj_forward(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        gaps.append(_rel(np.linalg.solve(M, d.qfrc_smooth + d.qfrc_constraint), d.qacc))
        st = jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel))
        mujoco.mj_step(m, d)
        out = step(model, st)
        assert _rel(out.qvel, d.qvel) < 1e-9, (_rel(out.qvel, d.qvel), damping)
    assert max(gaps) > 1e-3, gaps  # the solver really stopped early


TWO_BOXES = """
<mujoco>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body pos="0 0 0.1"><freejoint/><geom type="box" size=".1 .2 .05" condim="3"/></body>
    <body pos="1 0 0.1"><freejoint/><geom type="box" size=".1 .1 .05" condim="3"/></body>
  </worldbody>
</mujoco>
"""


def _pad_contacts(efc, idx, act, n, seed=2):
    """The Efc with n more unused contact slots (inactive rows of random values)."""
    rng = np.random.default_rng(seed)
    K = int(efc.contact_nrow)
    rows = n * K
    nefc, nv = efc.J.shape

    def cat(x, extra):
        return jnp.concatenate([x, jnp.asarray(extra, x.dtype)])

    efc = efc._replace(
        J=cat(efc.J, rng.standard_normal((rows, nv))),
        **{f: cat(getattr(efc, f), rng.random(rows) + 0.1)
           for f in ("pos", "margin", "frictionloss", "R", "D", "aref", "vel")},
        type=cat(efc.type, np.full(rows, int(ConstraintType.CONTACT_PYRAMIDAL))),
        id=cat(efc.id, np.zeros(rows)), active=cat(efc.active, np.zeros(rows, bool)),
        contact_adr=np.concatenate([efc.contact_adr, nefc + K * np.arange(n)]).astype(np.int32),
        contact_dim=cat(efc.contact_dim, np.zeros(n)), contact_mu=cat(efc.contact_mu, rng.random(n)),
        contact_friction=cat(efc.contact_friction, rng.random((n, 5))))
    return efc, np.concatenate([idx, np.zeros(rows, idx.dtype)]), np.concatenate(
        [act, np.zeros(rows, bool)])


def test_pgs_on_live_rows(monkeypatch):
    """PGS solves only the live rows when they are few (`pgs.ROWS_DIV`): MuJoCo's forces,
    states, iteration count and statistics, and the whole problem's; batched, a world with
    more live rows than that solves the whole problem, each world as alone. (A single world
    and batches of at most loops._MIN_BATCH solve the whole problem: the bound is lowered
    here so that a batch of two takes the live rows.)"""
    from jaxsim import loops, pgs

    monkeypatch.setattr(loops, "_MIN_BATCH", 1)

    m, d = _mujoco(TWO_BOXES, PYRAMIDAL, PGS, 2000, 1e-15)
    efc, idx, act = _pad_contacts(*_efc(m, d), 10)
    k = pgs._compact_rows(efc.J.shape[0])
    assert d.nefc == 32 and k is not None and k < 32, (d.nefc, k)
    # world 0: the first box's rows alone (few), world 1: both boxes' (more than k)
    first = np.isin(idx, np.arange(16)) & act
    assert first.sum() == 16 <= k
    worlds = jnp.stack([jnp.asarray(first), jnp.asarray(act)])

    def solve_all(div):
        monkeypatch.setattr(pgs, "ROWS_DIV", div)
        case, out = _run(TWO_BOXES, m, d, rows=(efc, idx, act))
        jm, js = case[0], case[1]
        K = efc.contact_nrow
        batched = jax.jit(jax.vmap(lambda a: solver.solve(jm, js, efc._replace(
            active=a, contact_nrow=K))))(worlds)
        alone = [jax.jit(lambda a: solver.solve(jm, js, efc._replace(
            active=a, contact_nrow=K)))(w) for w in worlds]
        return case, out, jax.tree.map(np.asarray, batched), jax.tree.map(np.asarray, alone)

    case, out, batched, alone = solve_all(4)
    _check(m, d, case, out, 1e-7, dual=True)
    _check_stats(d, out[3], False, nmax=20, tol=1e-6)
    _, out0, batched0, alone0 = solve_all(None)
    np.testing.assert_allclose(out[0], out0[0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out[1], out0[1], rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(out[2], out0[2])
    assert int(out[3].niter) == int(out0[3].niter)
    for w in range(2):
        for i in range(3):
            np.testing.assert_allclose(batched[i][w], alone[w][i], rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(batched[i][w], batched0[i][w], rtol=1e-10, atol=1e-10)
        assert int(batched[3].niter[w]) == int(alone[w][3].niter) == int(batched0[3].niter[w])
