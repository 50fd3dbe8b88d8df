"""Constraint solvers: Newton, CG and PGS, plus the noslip pass. MuJoCo: mj_fwdConstraint.

PGS and the noslip pass (both dual, block Gauss-Seidel) are in `jaxsim.pgs`.

The primal solvers (Newton, CG) minimise MuJoCo's reduced cost over the acceleration a,

    cost(a) = 0.5 (M a - qfrc_smooth)'(a - qacc_smooth) + s(J a - aref),

where s is a sum of per-row (per-contact for elliptic cones) convex piecewise-quadratic
terms; PGS minimises the dual 0.5 f'(A + R) f + f'(J qacc_smooth - aref) over the constraint
forces, one block at a time. The semantics follow MuJoCo 4.0.0 (engine_solver.c,
engine_forward.c, engine_core_constraint.c): cost zones and constraint states, the exact
line search with its bracketing and stopping rules, Hager-Zhang CG directions, Newton's
decrement and the zero-iteration certificate, PGS with Nesterov momentum and the
PCG32-shuffled visitation order, and the per-iteration statistics of mjData.solver.
Everything is computed on fixed shapes: rows that MuJoCo would not have (`Efc.active`
false) are masked out, whatever values they hold.

The primal solvers' line search is in `jaxsim.linesearch`. Below float64 they stop on
stagnation as well (a step that no longer moves qacc at the working precision), and small
problems without elliptic cones or islands minimise along the line in closed form
(`linesearch._exact_search`) rather than by MuJoCo's bracketing loop, whose tolerance
float32 cannot resolve. float64 follows MuJoCo throughout.

Gradients do not go through the iterations. `solve` returns the solver's answer with
derivatives from the implicit function theorem applied to the optimality condition
M (qacc - qacc_smooth) = J' f(J qacc - aref) at the solution, with the constraint states
(zones) held fixed; the tangent system's matrix is the Newton Hessian there. Forward and
reverse mode both work, at any iteration count and with early exit, with memory that does
not grow with the number of iterations. qfrc_smooth is treated as M qacc_smooth, so its
influence reaches `solve` through qacc_smooth (as it does in the forward pipeline).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim import linalg, loops
from jaxsim.collision.common import contact_bodies
from jaxsim.efc import Efc
from jaxsim.hessian import jdj
from jaxsim.math import MINVAL
from jaxsim.smooth import solve_m
from jaxsim.types import (
    Cone,
    ConstraintState,
    ConstraintType,
    DisableBit,
    EqType,
    Model,
    Solver,
    State,
)

_SAT = int(ConstraintState.SATISFIED)
_QUAD = int(ConstraintState.QUADRATIC)
_LNEG = int(ConstraintState.LINEARNEG)
_LPOS = int(ConstraintState.LINEARPOS)
_CONE = int(ConstraintState.CONE)

# row kinds: how a row enters the cost (0: inactive)
_EQ, _FRIC, _INEQ, _ELL = 1, 2, 3, 4


class SolverInfo(NamedTuple):
    """Solver statistics (mjData.solver_niter and mjData.solver, monolithic, island 0).

    The per-iteration arrays have length iterations + noslip_iterations; entries past
    `niter` are zero. PGS and noslip record no gradient, line slope or evaluations.
    """

    niter: jax.Array  # () int32 iterations of the main solver plus the noslip pass
    improvement: jax.Array  # (n,) cost decrease of each iteration, scaled by 1 / tr(M)
    gradient: jax.Array  # (n,) gradient norm after each iteration, scaled by 1 / tr(M)
    lineslope: jax.Array  # (n,) |d cost / d alpha| at the line-search answer, scaled
    nactive: jax.Array  # (n,) int32 rows not in the SATISFIED state
    nchange: jax.Array  # (n,) int32 rows whose state changed in the iteration
    neval: jax.Array  # (n,) int32 line-search cost evaluations


class _Problem(NamedTuple):
    """Masked solver inputs (inactive rows: J = D = floss = aref = 0, R = 1)."""

    M: jax.Array  # (nv, nv)
    qfrc_smooth: jax.Array  # (nv,)
    qacc_smooth: jax.Array  # (nv,)
    J: jax.Array  # (nefc, nv)
    D: jax.Array  # (nefc,)
    R: jax.Array  # (nefc,)
    floss: jax.Array  # (nefc,)
    aref: jax.Array  # (nefc,)
    kind: jax.Array  # (nefc,) int32 row kind (_EQ, _FRIC, _INEQ, _ELL; 0 inactive)
    pyr: jax.Array  # (nefc,) bool: row of a pyramidal contact
    rc: jax.Array  # (nefc,) int32 contact owning the row (rows of contact blocks)
    rj: jax.Array  # (nefc,) int32 position of the row in its contact block
    ci: jax.Array  # (ncon, K) int32 rows of each contact block
    cm: jax.Array  # (ncon, K) bool: row of an elliptic contact in use
    cdim: jax.Array  # (ncon,) int32 contact dimension
    mu: jax.Array  # (ncon,) regularised cone slope (1 where not elliptic)
    s: jax.Array  # (ncon, K) (mu, friction[0], ...) on rows in use, else 0
    fric: jax.Array  # (ncon, K - 1) friction[:K - 1] on rows in use, else 1
    scale: jax.Array  # () 1 / trace(M)
    # which row kinds can occur (static; the line search skips the cost terms of absent kinds)
    may_eq: bool = True
    may_fric: bool = True
    # rows whose Jacobian is one entry (slide and hinge limits, dof friction loss): their
    # rows and dofs, and the other rows as (start, stop) runs (static; None: not known)
    unit: tuple | None = None
    # the kinematic trees each row joins into an island (`_row_trees`): (nefc, 2) int32
    # (-1: none), and (nefc,) bool for the rows whose trees are those their Jacobian touches
    # (None: no such row; static)
    rtree: jax.Array | None = None
    rscan: jax.Array | None = None


# ------------------------------------------------------------------------------ problem


def _row_kinds(m: Model, d: State, nefc: int) -> tuple[bool, bool]:
    """Whether equality rows and friction-loss rows can occur (static, from the row plan)."""
    from jaxsim import constraint

    plan = constraint.plan(m, d.contact.dist.shape[0])
    if plan.nefc != nefc:  # rows not laid out by the plan: assume every kind
        return True, True
    types, _ = constraint.fixed_row_objects(plan)
    fric = (types == ConstraintType.FRICTION_DOF) | (types == ConstraintType.FRICTION_TENDON)
    return bool(np.any(types == ConstraintType.EQUALITY)), bool(np.any(fric))


def _unit_rows(m: Model, d: State, efc: Efc) -> tuple | None:
    """(rows, dofs, other rows' runs) of the rows whose Jacobian row is a single entry at a
    known dof (static, from the row plan), or None."""
    from jaxsim import constraint

    plan = constraint.plan(m, d.contact.dist.shape[0])
    nefc = efc.J.shape[0]
    if plan.nefc != nefc or not np.array_equal(np.asarray(plan.cadr),
                                                np.asarray(efc.contact_adr)):
        return None  # rows not laid out by the plan
    rows, dofs = [], []
    if len(plan.lim_jnt):
        rows.append(constraint.row_positions(plan, "lim_jnt").reshape(-1))
        dofs.append(np.repeat(np.asarray(m.jnt_dofadr)[plan.lim_jnt], 2))
    if len(plan.fri_dof):
        rows.append(constraint.row_positions(plan, "fri_dof").reshape(-1))
        dofs.append(np.asarray(plan.fri_dof))
    if not rows:
        return None
    rows, dofs = np.concatenate(rows), np.concatenate(dofs)
    other = np.ones(nefc, bool)
    other[rows] = False
    edges = np.flatnonzero(np.diff(np.concatenate([[0], other.astype(np.int8), [0]])))
    runs = tuple(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))
    return tuple(rows.tolist()), tuple(dofs.tolist()), runs


def _row_trees(m: Model, d: State, efc: Efc):
    """The trees each active row joins, as MuJoCo's mj_island takes them: a contact between
    geoms, the trees of the geoms' bodies; a connect or weld equality, the trees of its
    bodies; a dof friction loss or a joint limit, the dof's tree; every other row (joint and
    tendon equalities and tendon rows, flex rows, flex contacts), the trees of the dofs its
    Jacobian touches. The difference shows where a row's Jacobian is zero on a tree it
    belongs to (a contact whose normal no dof can move, in a planar model): MuJoCo still
    puts the row, and the cone it shares with the other rows of its contact, into that
    tree's island. Returns ((nefc, 2) int32 trees, -1 for none; (nefc,) bool rows to scan,
    or None for none)."""
    from jaxsim import constraint, sleep

    nefc = efc.J.shape[0]
    plan = constraint.plan(m, d.contact.dist.shape[0])
    if plan.nefc != nefc or not np.array_equal(np.asarray(plan.cadr),
                                                np.asarray(efc.contact_adr)):
        # rows not laid out by the plan: the Jacobian's trees for all
        return jnp.full((nefc, 2), -1, jnp.int32), jnp.ones(nefc, bool)
    bt = np.asarray(m.body_treeid, np.int64)
    types, ids = constraint.fixed_row_objects(plan)
    fixed = np.full((plan.nfixed, 2), -1, np.int64)
    scan = np.zeros(plan.nfixed, bool)
    flex_row = constraint.row_flex_edges(plan) >= 0
    for r, (t, i) in enumerate(zip(types, ids, strict=True)):
        if t == ConstraintType.FRICTION_DOF:
            fixed[r, 0] = int(m.dof_treeid[i])
        elif t == ConstraintType.LIMIT_JOINT:
            fixed[r, 0] = bt[int(m.jnt_bodyid[i])]
        elif (t == ConstraintType.EQUALITY and not flex_row[r]
              and int(m.eq_type[i]) in (EqType.CONNECT, EqType.WELD)):
            fixed[r] = bt[list(sleep._eq_bodies(m, int(i)))]
        else:
            scan[r] = True
    trees = [jnp.asarray(fixed, jnp.int32)]
    scans = [jnp.asarray(scan)]
    if nefc > plan.nfixed:
        slot = constraint.block_index(plan)[0]
        geoms = jnp.all(d.contact.geom >= 0, axis=1)  # else a flex contact: scanned
        ct = jnp.asarray(bt.astype(np.int32))[contact_bodies(m, d.contact)]
        trees.append(jnp.where(geoms[:, None], ct, -1)[slot])
        scans.append(~geoms[slot])
    trees, scans = jnp.concatenate(trees), jnp.concatenate(scans)
    on = efc.active
    trees = jnp.where(on[:, None] & ~scans[:, None], trees, -1)
    maybe = bool(scan.any()) or (nefc > plan.nfixed and bool(m.nflex))
    return trees, (scans & on) if maybe else None


def _blocks(efc: Efc):
    """Static block layout: each contact's row window (ncon, K), K wide, which of the window
    is the contact's own, and per row its contact, its place in the block and whether it is
    in a block."""
    nefc = efc.J.shape[0]
    K = int(efc.contact_nrow)
    ncon = efc.contact_adr.shape[0]
    j = np.arange(K)
    rows = np.full(ncon, K) if efc.contact_rows is None else np.asarray(efc.contact_rows)
    own = j[None, :] < rows[:, None]
    ci = np.clip(np.asarray(efc.contact_adr)[:, None] + j, 0, nefc - 1)
    rows_c, rows_j = np.nonzero(own)
    rc, rj = np.zeros(nefc, np.int32), np.zeros(nefc, np.int32)
    inblk = np.zeros(nefc, bool)
    rc[ci[own]], rj[ci[own]], inblk[ci[own]] = rows_c, rows_j, True
    return ci, own, rc, rj, inblk


def _problem(m: Model, d: State, efc: Efc, has_cone: bool) -> _Problem:
    dt = d.qacc_smooth.dtype
    act = efc.active
    nefc = efc.J.shape[0]
    K = int(efc.contact_nrow)
    ncon = efc.contact_adr.shape[0]
    t = efc.type
    j = np.arange(K)
    ci_np, own, rc_np, rj_np, inblk_np = _blocks(efc)
    ci = jnp.asarray(ci_np, jnp.int32)
    rc, rj, inblk = jnp.asarray(rc_np), jnp.asarray(rj_np), jnp.asarray(inblk_np)
    cdim = efc.contact_dim.astype(jnp.int32)

    first = ci[:, 0]
    ell_on = act[first] & (t[first] == ConstraintType.CONTACT_ELLIPTIC) & (cdim > 1)
    cm = ell_on[:, None] & jnp.asarray(own) & (j < cdim[:, None]) & act[ci]
    if not has_cone:
        cm = jnp.zeros_like(cm)
    fr = efc.contact_friction.astype(dt)
    if K > 1:
        fr = jnp.pad(fr, ((0, 0), (0, max(0, K - 1 - fr.shape[1]))))[:, : K - 1]
        s = jnp.concatenate([efc.contact_mu.astype(dt)[:, None], fr], axis=1)
    else:
        fr = jnp.zeros((ncon, 0), dt)
        s = efc.contact_mu.astype(dt)[:, None]
    s = jnp.where(cm, s, 0.0)
    mu = jnp.where(ell_on, efc.contact_mu, 1.0).astype(dt)
    fric = jnp.where(cm[:, 1:], fr, 1.0)

    is_fric = (t == ConstraintType.FRICTION_DOF) | (t == ConstraintType.FRICTION_TENDON)
    row_cone = inblk & cm[rc, rj]
    kind = jnp.where(t == ConstraintType.EQUALITY, _EQ, jnp.where(is_fric, _FRIC, _INEQ))
    kind = jnp.where(t == ConstraintType.CONTACT_ELLIPTIC, jnp.where(row_cone, _ELL, 0), kind)
    kind = jnp.where(act, kind, 0).astype(jnp.int32)
    pyr = act & inblk & (t == ConstraintType.CONTACT_PYRAMIDAL)

    may_eq, may_fric = _row_kinds(m, d, nefc)
    rtree, rscan = (None, None) if _one_problem(m) else _row_trees(m, d, efc)
    return _Problem(
        may_eq=may_eq, may_fric=may_fric, unit=_unit_rows(m, d, efc),
        M=d.qM, qfrc_smooth=d.qfrc_smooth, qacc_smooth=d.qacc_smooth,
        # J, D, R and aref are those of the inactive rows already (see Efc); a copy of J
        # here cost the ant at batch 1024 0.8 ms per forward
        J=efc.J.astype(dt), D=efc.D.astype(dt), R=efc.R.astype(dt),
        floss=jnp.where(act & is_fric, efc.frictionloss, 0.0).astype(dt),
        aref=efc.aref.astype(dt),
        kind=kind, pyr=pyr, rc=rc, rj=rj, ci=ci, cm=cm, cdim=cdim, mu=mu, s=s, fric=fric,
        scale=1.0 / jnp.sum(jnp.diagonal(d.qM)),
        rtree=rtree, rscan=rscan,
    )


def _safe(x, ok):
    """x where ok, else 1: keeps divisions (and their derivatives) finite in unused branches."""
    return jnp.where(ok, x, 1.0)


def _norm(x, axis=-1):
    sq = jnp.sum(x * x, axis=axis)
    return jnp.where(sq > 0, jnp.sqrt(_safe(sq, sq > 0)), 0.0)


# --------------------------------------------------------------------------- islands


class _Isl(NamedTuple):
    """Constraint islands of a problem: MuJoCo 4.0 solves each on its own unless the island
    flag is disabled. Rows are joined through the kinematic trees their Jacobians touch; an
    island is named by its smallest tree id (n slots, some unused); label n means none (an
    inactive row, a dof of a tree no row touches)."""

    n: int
    row: jax.Array  # (nefc,) int32
    dof: jax.Array  # (nv,) int32
    scale: jax.Array  # (n,) 1 / trace of the island's dofs' inertia

    def rsum(self, x):
        """Per-island sums of a row quantity."""
        return jnp.zeros(self.n, x.dtype).at[self.row].add(x, mode="drop")

    def dsum(self, x):
        """Per-island sums of a dof quantity."""
        return jnp.zeros(self.n, x.dtype).at[self.dof].add(x, mode="drop")

    def on_rows(self, x, fill=0):
        """An island quantity on each row (`fill` on rows of no island)."""
        return jnp.where(self.row < self.n, x[jnp.minimum(self.row, self.n - 1)], fill)

    def on_dofs(self, x, fill=0):
        return jnp.where(self.dof < self.n, x[jnp.minimum(self.dof, self.n - 1)], fill)


def _one_problem(m: Model) -> bool:
    """Whether the constraint problem is solved whole (a single tree, the island flag
    disabled, or no dofs): `_islands` is then None. Static."""
    return int(m.ntree) <= 1 or bool(m.opt.disableflags & DisableBit.ISLAND) or m.nv == 0


def _islands(m: Model, d: State, p: _Problem) -> _Isl | None:
    """The problem's constraint islands, or None for one problem (a single tree, the island
    flag disabled): the solvers then keep their monolithic form."""
    if _one_problem(m):
        return None
    n = int(m.ntree)
    tree_of = np.asarray(m.dof_treeid)
    ar = jnp.arange(n, dtype=jnp.int32)
    touch = (p.rtree[:, :1] == ar) | (p.rtree[:, 1:] == ar)  # (nefc, n)
    if p.rscan is not None:  # the trees of the Jacobian's dofs
        onehot = tree_of[:, None] == np.arange(n)[None, :]
        scanned = ((p.J != 0).astype(p.J.dtype) @ jnp.asarray(onehot, p.J.dtype)) > 0
        touch = touch | (p.rscan[:, None] & scanned)
    big = jnp.int32(n)

    def body(c):
        tree, _ = c
        row = jnp.min(jnp.where(touch, tree[None, :], big), axis=1)
        new = jnp.minimum(tree, jnp.min(jnp.where(touch, row[:, None], big), axis=0))
        return new, jnp.any(new != tree)

    tree, _ = lax.while_loop(lambda c: c[1], body, (jnp.arange(n, dtype=jnp.int32),
                                                    jnp.ones((), bool)))
    row = jnp.min(jnp.where(touch, tree[None, :], big), axis=1).astype(jnp.int32)
    used = jnp.zeros(n, bool).at[row].set(True, mode="drop")
    dof = jnp.where(used[tree[tree_of]], tree[tree_of], big).astype(jnp.int32)
    diag = jnp.diagonal(p.M)
    trace = jnp.zeros(n, p.M.dtype).at[dof].add(diag, mode="drop")
    return _Isl(n, row, dof, 1.0 / jnp.where(trace > 0, trace, 1.0))


# ------------------------------------------------------------------ constraint update


class _Update(NamedTuple):
    force: jax.Array  # (nefc,)
    state: jax.Array  # (nefc,) int32
    cost: jax.Array  # () constraint cost s(jar)
    cone_h: jax.Array | None  # (ncon, K, K) cone Hessians (zero outside the CONE state)


def _update(p: _Problem, jar: jax.Array, has_cone: bool, hessian: bool = False) -> _Update:
    """Forces, states and cost of the rows at jar = J a - aref. MuJoCo: mj_constraintUpdate."""
    k = p.kind
    D, fl = p.D, p.floss
    rf = p.R * fl
    neg = jar <= -rf
    pos = jar >= rf
    quad = 0.5 * D * jar * jar
    lin = -D * jar
    sat = jar >= 0

    f_fric = jnp.where(neg, fl, jnp.where(pos, -fl, lin))
    c_lin = -0.5 * rf * fl
    c_fric = jnp.where(neg, c_lin - fl * jar, jnp.where(pos, c_lin + fl * jar, quad))
    s_fric = jnp.where(neg, _LNEG, jnp.where(pos, _LPOS, _QUAD))

    kinds = [k == _EQ, k == _FRIC, k == _INEQ]
    force = jnp.select(kinds, [lin, f_fric, jnp.where(sat, 0.0, lin)], 0.0)
    cost = jnp.select(kinds, [quad, c_fric, jnp.where(sat, 0.0, quad)], 0.0)
    state = jnp.select(kinds, [_QUAD, s_fric, jnp.where(sat, _SAT, _QUAD)], _SAT)
    state = state.astype(jnp.int32)
    cost = jnp.sum(cost)
    if not has_cone:
        return _Update(force, state, cost, None)

    on = p.cm[:, 0]
    jr = jnp.where(p.cm, jar[p.ci], 0.0)
    Dr = jnp.where(p.cm, D[p.ci], 0.0)
    U = jr * p.s
    mu = p.mu
    N = U[:, 0]
    Ut = U[:, 1:]
    T = _norm(Ut)
    top = (N >= mu * T) | ((T <= 0) & (N >= 0))
    bot = ~top & ((mu * N + T <= 0) | ((T <= 0) & (N < 0)))
    mid = ~top & ~bot
    Dm = Dr[:, 0] / (mu * mu * (1 + mu * mu))
    nmt = N - mu * T
    Ts = _safe(T, T > 0)
    f0 = -Dm * nmt * mu
    f_mid = jnp.concatenate([f0[:, None], -(f0 / Ts)[:, None] * Ut * p.s[:, 1:]], axis=1)
    fb = jnp.where(top[:, None], 0.0, jnp.where(bot[:, None], -Dr * jr, f_mid))
    cb = jnp.where(top, 0.0, jnp.where(bot, 0.5 * jnp.sum(Dr * jr * jr, 1), 0.5 * Dm * nmt * nmt))
    sb = jnp.where(top, _SAT, jnp.where(bot, _QUAD, _CONE)).astype(jnp.int32)

    ell = k == _ELL
    force = jnp.where(ell, fb[p.rc, p.rj], force)
    state = jnp.where(ell, sb[p.rc], state)
    cost = cost + jnp.sum(jnp.where(on, cb, 0.0))

    cone_h = None
    if hessian:
        Kd = U.shape[1]
        eye = jnp.eye(Kd - 1, dtype=U.dtype)
        h_tt = (mu * N / Ts**3)[:, None, None] * Ut[:, :, None] * Ut[:, None, :]
        h_tt = h_tt + (mu * mu - mu * N / Ts)[:, None, None] * eye
        h_nt = -(mu / Ts)[:, None] * Ut
        top_row = jnp.concatenate([jnp.ones_like(N)[:, None], h_nt], axis=1)
        rest = jnp.concatenate([h_nt[:, :, None], h_tt], axis=2)
        hu = jnp.concatenate([top_row[:, None, :], rest], axis=1)
        cone_h = Dm[:, None, None] * p.s[:, :, None] * p.s[:, None, :] * hu
        cone_h = jnp.where((mid & on)[:, None, None], cone_h, 0.0)
    return _Update(force, state, cost, cone_h)


def _hessian(p: _Problem, up: _Update) -> jax.Array:
    """H = M + J' D_quadratic J (+ cone Hessians): the Newton Hessian at a state.

    The rows whose Jacobian is one entry (limits of slide and hinge joints, dof friction
    loss: 42 of the mjx humanoid's 74 rows) add to H's diagonal; the product takes the
    others."""
    Dq = jnp.where(up.state == _QUAD, p.D, 0.0)
    if p.unit is None:
        H = p.M + jdj(p.J, Dq)
    else:
        rows, dofs, runs = np.asarray(p.unit[0]), np.asarray(p.unit[1]), p.unit[2]
        ju = p.J[rows, dofs]
        H = p.M.at[dofs, dofs].add(Dq[rows] * ju * ju)
        if runs:
            def take(x):
                return jnp.concatenate([x[a:b] for a, b in runs])
            H = H + jdj(take(p.J), take(Dq))
    if up.cone_h is not None:
        Jc = jnp.where(p.cm[:, :, None], p.J[p.ci], 0.0)
        H = H + jnp.einsum("cjv,cjk,ckw->vw", Jc, up.cone_h, Jc)
    return H


def _residual(p: _Problem, has_cone: bool, qacc: jax.Array) -> jax.Array:
    """Optimality condition M (a - qacc_smooth) - J' f(J a - aref) (zero at the solution)."""
    up = _update(p, p.J @ qacc - p.aref, has_cone)
    return p.M @ (qacc - p.qacc_smooth) - p.J.T @ up.force


def _gauss(p: _Problem, qacc, Ma):
    return 0.5 * jnp.dot(Ma - p.qfrc_smooth, qacc - p.qacc_smooth)


# ------------------------------------------------------------------------------ warmstart


def _start_primal(m: Model, p: _Problem, qacc_warmstart, has_cone):
    """Initial acceleration: the better of qacc_warmstart and qacc_smooth. MuJoCo: warmstart."""
    if m.opt.disableflags & DisableBit.WARMSTART:
        return p.qacc_smooth
    w = qacc_warmstart
    jar = jnp.stack([p.J @ w, p.J @ p.qacc_smooth]) - p.aref
    cost = jax.vmap(lambda j: _update(p, j, has_cone).cost)(jar)
    # the Gauss term vanishes at qacc_smooth
    return jnp.where(cost[0] + _gauss(p, w, p.M @ w) > cost[1], p.qacc_smooth, w)


def _stats(n: int, dt):
    z = jnp.zeros(n, dt)
    zi = jnp.zeros(n, jnp.int32)
    return SolverInfo(jnp.int32(0), z, z, z, zi, zi, zi)


def _record(info: SolverInfo, i, ok, improvement, gradient, slope, nactive, nchange, neval):
    def put(a, v):
        if not a.shape[0]:
            return a
        return a.at[i].set(jnp.where(ok, v, a[jnp.clip(i, 0, a.shape[0] - 1)]), mode="drop")

    return info._replace(
        improvement=put(info.improvement, improvement), gradient=put(info.gradient, gradient),
        lineslope=put(info.lineslope, slope), nactive=put(info.nactive, nactive),
        nchange=put(info.nchange, nchange), neval=put(info.neval, neval),
    )


# --------------------------------------------------------------------- Newton and CG


def _primal(m: Model, d: State, p: _Problem, has_cone: bool, newton: bool, nstat: int):
    """Newton or CG on the reduced primal. MuJoCo: mj_solPrimal, one island at a time.

    Islands share no dofs and no rows: one iteration moves every island still running by its
    own line search (steps, improvements, gradients, termination and CG's conjugate
    directions per island, scaled by the island's own inertia); the Newton Hessian is block
    diagonal by island, so one factorisation serves all. Dofs of no island keep qacc_smooth.
    The statistics sum (improvement, evaluations) or take the largest (gradient, slope) over
    the islands that moved; niter is the most iterations of any island."""
    from jaxsim import linesearch  # it builds on this module's problem (as pgs)

    tol = m.opt.tolerance
    maxiter = m.opt.iterations
    ls_tol = m.opt.tolerance * m.opt.ls_tolerance
    hess = newton and has_cone
    isl = _islands(m, d, p)
    if isl is None:
        scale = p.scale
        dot, norm = jnp.dot, jnp.linalg.norm

        def on_d(x, fill=0):
            return x

        on_r = on_d
        every = anyof = total = most = on_d
    else:
        scale = isl.scale

        def dot(a, b):
            return isl.dsum(a * b)

        def norm(a):
            return jnp.sqrt(isl.dsum(a * a))

        on_d, on_r = isl.on_dofs, isl.on_rows
        every, anyof, total, most = jnp.all, jnp.any, jnp.sum, jnp.max

    qacc = _start_primal(m, p, d.qacc_warmstart, has_cone)
    if isl is not None:  # unconstrained dofs: qacc_smooth
        qacc = jnp.where(isl.dof < isl.n, qacc, p.qacc_smooth)
    Ma = p.M @ qacc
    jaref = p.J @ qacc - p.aref
    up = _update(p, jaref, has_cone, hess)
    grad = Ma - p.qfrc_smooth - p.J.T @ up.force

    # zero-iteration certificate: the cost gap is bounded by 0.5 grad' M^-1 grad; Newton
    # also accepts 0.5 grad' H^-1 grad with a small gradient. H = M + (positive
    # semidefinite terms), so grad' H^-1 grad <= grad' M^-1 grad: with a small gradient
    # M's certificate implies H's, and Newton needs H's alone (no M^-1 solve)
    if newton:
        gradok = scale * norm(grad) < tol
        mgrad = linalg.cho_solve(linalg.cholesky(_hessian(p, up)), grad)
        done = gradok & (jnp.maximum(0.0, 0.5 * scale * dot(grad, mgrad)) < tol)
    else:
        mgrad = solve_m(m, d, grad)
        done = jnp.maximum(0.0, 0.5 * scale * dot(grad, mgrad)) < tol
    search = -mgrad

    carry = dict(it=jnp.int32(0), done=done, qacc=qacc, Ma=Ma, jaref=jaref, force=up.force,
                 state=up.state, grad=grad, mgrad=mgrad, search=search,
                 info=_stats(nstat, qacc.dtype))

    # With one iteration the loop ends after its first trip whatever the termination test
    # says, so the trip skips what only the next iteration reads: the preconditioned
    # gradient and the search direction (for Newton the Hessian and its factorisation,
    # half of the solver's work at iterations="1", as RL models often set).
    last = maxiter == 1

    def cond(c):
        return ~every(c["done"]) & (c["it"] < maxiter)

    def body(c):
        v = c["search"]
        snorm = norm(v)
        Mv = p.M @ v
        jv = p.J @ v
        ln = linesearch.prepare(p, has_cone, c["jaref"], jv, c["Ma"], Mv, v, isl)
        # under vmap the loop runs while any world iterates: the stopped ones evaluate
        # nothing (their line search would otherwise run to ls_iterations every trip); so
        # do the converged islands of a world
        alpha, ls_imp, neval, slope = linesearch.search(p, ln, ls_tol * snorm / scale,
                                                  m.opt.ls_iterations, skip=c["done"], isl=isl)
        small = snorm < MINVAL
        alpha = jnp.where(small, 0.0, alpha)
        stop = alpha == 0

        qacc = c["qacc"] + on_d(alpha) * v
        Ma = c["Ma"] + on_d(alpha) * Mv
        jaref = c["jaref"] + on_r(alpha) * jv
        up = _update(p, jaref, has_cone, hess and not last)
        grad = Ma - p.qfrc_smooth - p.J.T @ up.force
        if last:
            mgrad = grad  # read by nothing (see `last`)
        elif newton:
            mgrad = linalg.cho_solve(linalg.cholesky(_hessian(p, up)), grad)
        else:
            mgrad = solve_m(m, d, grad)
        nchange = jnp.sum(up.state != c["state"]).astype(jnp.int32)
        nactive = jnp.sum(up.state != _SAT).astype(jnp.int32)
        improvement = scale * ls_imp
        gradient = scale * norm(grad)
        moved = ~stop
        info = _record(c["info"], c["it"], anyof(moved),
                       total(jnp.where(moved, improvement, 0.0)),
                       most(jnp.where(moved, gradient, 0.0)),
                       most(jnp.where(moved, slope * scale / snorm, 0.0)),
                       nactive, nchange, total(jnp.where(moved, neval, 0)).astype(jnp.int32))
        term = ((improvement > 0) & (improvement < tol)) | (gradient < tol)
        if qacc.dtype != jnp.float64:
            # stagnation below float64: a step that no longer moves qacc at the working
            # precision ends the iterations (float64 keeps MuJoCo's tests only)
            ulps = 4 * jnp.finfo(qacc.dtype).eps
            term = term | (jnp.abs(alpha) * snorm <= ulps * norm(qacc))
        if last:
            search = c["search"]
        elif newton:
            term = term | (jnp.maximum(0.0, 0.5 * scale * dot(grad, mgrad)) < tol)
            search = -mgrad
        else:
            # Hager-Zhang direction, restarted when conjugacy is lost
            y = grad - c["grad"]
            my = mgrad - c["mgrad"]
            s = c["search"]
            dy = dot(s, y)
            dys = _safe(dy, dy >= MINVAL)
            beta_hz = (dot(y, mgrad) - 2 * (dot(y, my) / dys) * dot(s, grad)) / dys
            gnorm = jnp.minimum(0.01, norm(grad))
            eta = -1.0 / jnp.maximum(MINVAL, norm(s) * gnorm)
            beta = jnp.where(dy < MINVAL, 0.0, jnp.maximum(eta, beta_hz))
            search = -mgrad + on_d(beta) * s

        new = dict(it=c["it"] + 1, done=term, qacc=qacc, Ma=Ma, jaref=jaref, force=up.force,
                   state=up.state, grad=grad, mgrad=mgrad, search=search, info=info)
        if isl is None:
            out = jax.tree.map(lambda a, b: jnp.where(stop, a, b), c, new)
        else:  # the islands that did not move keep their dofs and rows
            keep_d, keep_r = on_d(stop, True), on_r(stop, True)
            out = {k: jnp.where(keep_r if k in ("jaref", "force", "state") else keep_d,
                                c[k], new[k])
                   for k in ("qacc", "Ma", "jaref", "force", "state", "grad", "mgrad",
                             "search")}
            out["it"] = jnp.where(every(stop), c["it"], c["it"] + 1)
        out["done"] = c["done"] | stop | term
        out["info"] = info
        return out

    if last:
        # at most one trip: a cond (batched, the trip runs on the whole batch, which the
        # chunked loop would only add gathers and scatters to)
        c = lax.cond(cond(carry), body, lambda c: c, carry)
    else:
        # nearly every world takes the first trip: batched, it runs at the batch's width
        c = loops.while_loop(cond, body, carry, peel=True)
    info = c["info"]._replace(niter=c["it"])
    return c["qacc"], c["force"], c["state"], info


# --------------------------------------------------------------------------------- solve


def _run(m: Model, d: State, p: _Problem, has_cone: bool, nstat: int, any_active):
    solver = m.opt.solver
    from jaxsim import pgs  # the dual solvers build on this module's problem and update

    if solver == Solver.PGS:
        force, state, info = pgs.pgs(m, d, p, has_cone, nstat)
        qacc = None
    else:
        qacc, force, state, info = _primal(m, d, p, has_cone, solver == Solver.NEWTON, nstat)
    if solver == Solver.PGS or m.opt.noslip_iterations > 0:
        if m.opt.noslip_iterations > 0:
            force, state, info = pgs.noslip(m, d, p, force, info, has_cone)
        qacc = p.qacc_smooth + solve_m(m, d, p.J.T @ force)
    # no rows: the unconstrained answer, as MuJoCo's early return
    qacc = jnp.where(any_active, qacc, p.qacc_smooth)
    info = jax.tree.map(lambda x: jnp.where(any_active, x, jnp.zeros_like(x)), info)
    return qacc, force, state, info


def _tangent_solve(g, y):
    """Solves the linearised optimality condition: its matrix is the Newton Hessian."""
    H = jax.jacfwd(g)(jnp.zeros_like(y))
    return linalg.cho_solve(linalg.cholesky(H), y)


def solve(m: Model, d: State, efc: Efc):
    """Constraint forces and the constrained acceleration. MuJoCo: mj_fwdConstraint.

    Uses m.opt.solver (Newton, CG, PGS), cone, iterations, tolerance, ls_iterations,
    ls_tolerance, noslip_iterations, noslip_tolerance and the warmstart disable flag; the
    state's qM, its factorisation (qLD), qacc_smooth, qfrc_smooth and qacc_warmstart.
    Termination is scaled by 1 / trace(qM) (MuJoCo 4.0; earlier versions used
    stat.meaninertia * nv, the same at qpos0).

    Returns:
      (qacc (nv,), efc_force (nefc,), efc_state (nefc,) int32, SolverInfo). Inactive rows
      get force 0 and state SATISFIED.
    """
    nefc = efc.J.shape[0]
    dt = d.qacc_smooth.dtype
    nstat = m.opt.iterations + m.opt.noslip_iterations
    if int(efc.contact_nrow) == 0 or efc.contact_adr.shape[0] == 0:
        # no contact rows: one empty block (dim 0) keeps the block arrays non-empty
        efc = efc.replace(contact_adr=np.zeros(1, np.int32), contact_nrow=1, contact_rows=None,
                          contact_dim=jnp.zeros(1, jnp.int32), contact_mu=jnp.zeros(1, dt),
                          contact_friction=jnp.zeros((1, 5), dt))
    if nefc == 0 or m.nv == 0:
        return d.qacc_smooth, jnp.zeros(nefc, dt), jnp.zeros(nefc, jnp.int32), _stats(nstat, dt)
    has_cone = (m.opt.cone == Cone.ELLIPTIC and int(efc.contact_nrow) > 1
                and efc.contact_adr.shape[0] > 0)
    p = _problem(m, d, efc, has_cone)
    any_active = jnp.any(efc.active)

    # integer outputs travel as floats: custom_root gives aux outputs float tangents
    def run(_, guess):
        del guess

        def idle():  # what the solver returns without active rows
            return (p.qacc_smooth, jnp.zeros(nefc, dt), jnp.full(nefc, _SAT, jnp.int32),
                    _stats(nstat, dt))

        # a batch in which no world has active rows (a free pendulum, a model whose limits
        # are rarely reached) skips the solver and its set-up
        qacc, force, state, info = loops.unless_all(
            ~any_active, idle, lambda: _run(m, d, p, has_cone, nstat, any_active))
        return qacc, (force, jax.tree.map(lambda x: x.astype(dt), (state, info)))

    def residual(x):
        return _residual(p, has_cone, x)

    qacc, (force, ints) = lax.custom_root(residual, p.qacc_smooth, run, _tangent_solve,
                                          has_aux=True)
    state, info = jax.tree.map(lambda x, r: lax.stop_gradient(x).astype(r.dtype), ints,
                               (jnp.zeros(nefc, jnp.int32), _stats(nstat, dt)))
    # the reported forces are the solver's; their derivatives those of f(J qacc - aref)
    f_diff = _update(p, p.J @ qacc - p.aref, has_cone).force
    force = force + (f_diff - lax.stop_gradient(f_diff))
    return qacc, force, state, info
