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

Below float64 the primal solvers stop on stagnation as well (a step that no longer moves
qacc at the working precision), and a problem of at most `EXACT_SEARCH` rows without
elliptic cones or islands minimises along the line in closed form (`_exact_search`: the
line's exact minimum from the slopes at its kinks, no loop) rather than by MuJoCo's
bracketing loop, whose tolerance float32 cannot resolve. float64 follows MuJoCo throughout.

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
from jaxsim.efc import Efc
from jaxsim.hessian import jdj
from jaxsim.math import MINVAL
from jaxsim.smooth import solve_m
from jaxsim.types import Cone, ConstraintState, ConstraintType, DisableBit, Model, Solver, State

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
    onehot = tree_of[:, None] == np.arange(n)[None, :]
    touch = ((p.J != 0).astype(p.J.dtype) @ jnp.asarray(onehot, p.J.dtype)) > 0  # (nefc, n)
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


# -------------------------------------------------------------------------- line search


class _Line(NamedTuple):
    """Quadratic pieces of the cost along a search direction. MuJoCo: PrimalPrepare."""

    jaref: jax.Array
    jv: jax.Array
    q0: jax.Array
    q1: jax.Array
    q2: jax.Array
    g1: jax.Array
    g2: jax.Array
    cone: tuple | None  # (U0, V0, UU, UV, VV, Dm, q0, q1, q2) per contact


def _prepare(p: _Problem, has_cone, jaref, jv, Ma, Mv, v, isl: _Isl | None = None) -> _Line:
    """(With islands, g1 and g2 are per island.)"""
    D = p.D
    q0 = 0.5 * D * jaref * jaref
    q1 = jv * D * jaref
    q2 = 0.5 * jv * D * jv
    if isl is None:
        g1 = jnp.dot(v, Ma) - jnp.dot(p.qfrc_smooth, v)
        g2 = 0.5 * jnp.dot(v, Mv)
    else:
        g1 = isl.dsum(v * Ma) - isl.dsum(p.qfrc_smooth * v)
        g2 = 0.5 * isl.dsum(v * Mv)
    cone = None
    if has_cone:
        cm = p.cm
        jr = jnp.where(cm, jaref[p.ci], 0.0)
        vr = jnp.where(cm, jv[p.ci], 0.0)
        Dr = jnp.where(cm, D[p.ci], 0.0)
        U = jr * p.s
        V = vr * p.s
        mu = p.mu
        cone = (
            U[:, 0], V[:, 0], jnp.sum(U[:, 1:] ** 2, 1), jnp.sum(U[:, 1:] * V[:, 1:], 1),
            jnp.sum(V[:, 1:] ** 2, 1), Dr[:, 0] / (mu * mu * (1 + mu * mu)),
            0.5 * jnp.sum(Dr * jr * jr, 1), jnp.sum(vr * Dr * jr, 1),
            0.5 * jnp.sum(vr * Dr * vr, 1),
        )
    return _Line(jaref, jv, q0, q1, q2, g1, g2, cone)


def _cone_zone(N, tsq, mu):
    """1 top, 2 bottom, 3 middle; also T = sqrt(tsq) (0 when tsq <= 0)."""
    pos = tsq > 0
    T = jnp.where(pos, jnp.sqrt(_safe(tsq, pos)), 0.0)
    z = jnp.where(N >= mu * T, 1, jnp.where(mu * N + T <= 0, 2, 3))
    return jnp.where(pos, z, jnp.where(N < 0, 2, 1)), T


def _eval(p: _Problem, ln: _Line, alpha, isl: _Isl | None = None):
    """cost(alpha) - cost(0) and its first two derivatives. MuJoCo: PrimalEval.

    With islands, alpha holds one step per island and the result one row per island."""
    k = p.kind
    alpha_all = alpha
    if isl is None:
        rsum = csum = jnp.sum
    else:
        con_isl = isl.row[p.ci[:, 0]]
        rsum = isl.rsum

        def csum(x):
            return jnp.zeros(isl.n, x.dtype).at[con_isl].add(x, mode="drop")

        alpha_con = alpha[jnp.minimum(con_isl, isl.n - 1)]
        alpha = isl.on_rows(alpha)
    x = ln.jaref + alpha * ln.jv
    dq0 = 2 * alpha * ln.q2 + ln.q1
    dq1 = 2 * ln.q2
    cq = alpha * alpha * ln.q2 + alpha * ln.q1

    # inequalities: active where x < 0; the cost at alpha = 0 is subtracted
    c0 = jnp.where(ln.jaref < 0, ln.q0, 0.0)
    on = x < 0
    c_in = jnp.where(on, ln.q0 - c0 + cq, -c0)

    eq, ineq = k == _EQ, k == _INEQ
    quad = (eq | (ineq & on)) if p.may_eq else (ineq & on)
    cost_rows = jnp.where(ineq, c_in, 0.0)
    if p.may_eq:
        cost_rows = jnp.where(eq, cq, 0.0) + cost_rows
    d0_rows = jnp.where(quad, dq0, 0.0)
    d1_rows = jnp.where(quad, dq1, 0.0)
    if p.may_fric:
        # friction loss: Huber, cost difference by zones
        fl, D, dv, s0 = p.floss, p.D, ln.jv, ln.jaref
        rf = p.R * fl

        def zone(y):
            return jnp.where((-rf < y) & (y < rf), 0, jnp.where(y <= -rf, -1, 1))

        def fcost(y, z):
            lin = jnp.where(z == -1, fl * (-0.5 * rf - y), fl * (-0.5 * rf + y))
            return jnp.where(z == 0, 0.5 * D * y * y, lin)

        z0, z1 = zone(s0), zone(x)
        c_fr = jnp.where(
            (z0 == 0) & (z1 == 0), 0.5 * D * (x - s0) * (x + s0),
            jnp.where((z0 == -1) & (z1 == -1), fl * (s0 - x),
                      jnp.where((z0 == 1) & (z1 == 1), fl * (x - s0),
                                fcost(x, z1) - fcost(s0, z0))))
        d0_fr = jnp.where(z1 == 0, D * x * dv, jnp.where(z1 == -1, -fl * dv, fl * dv))
        d1_fr = jnp.where(z1 == 0, D * dv * dv, 0.0)
        fr = k == _FRIC
        cost_rows = cost_rows + jnp.where(fr, c_fr, 0.0)
        d0_rows = d0_rows + jnp.where(fr, d0_fr, 0.0)
        d1_rows = d1_rows + jnp.where(fr, d1_fr, 0.0)
    cost, d0, d1 = rsum(cost_rows), rsum(d0_rows), rsum(d1_rows)

    if ln.cone is not None:
        if isl is not None:
            alpha = alpha_con
        U0, V0, UU, UV, VV, Dm, e0, e1, e2 = ln.cone
        mu = p.mu
        za, T0 = _cone_zone(U0, UU, mu)
        N = U0 + alpha * V0
        tsq = UU + alpha * (2 * UV + alpha * VV)
        zb, T = _cone_zone(N, tsq, mu)
        eq2 = alpha * alpha * e2 + alpha * e1
        r0 = U0 - mu * T0
        r = N - mu * T
        t_delta = alpha * (2 * UV + alpha * VV) / _safe(T + T0, T + T0 > 0)
        r_delta = alpha * V0 - mu * t_delta
        b0 = mu * U0 + T0
        b1 = mu * N + T
        cases = [
            (za == 2) & (zb == 2), (za == 3) & (zb == 3), (za == 3) & (zb == 2),
            (za == 2) & (zb == 3), (za == 1) & (zb == 2), (za == 1) & (zb == 3),
            (za == 3) & (zb == 1), (za == 2) & (zb == 1),
        ]
        vals = [
            eq2, 0.5 * Dm * r_delta * (2 * r0 + r_delta), eq2 + 0.5 * Dm * b0 * b0,
            eq2 - 0.5 * Dm * b1 * b1, eq2 + e0, 0.5 * Dm * r * r, -0.5 * Dm * r0 * r0, -e0,
        ]
        c_cone = jnp.select(cases, vals, 0.0)
        Ts = _safe(T, T > 0)
        t1 = (UV + alpha * VV) / Ts
        t2 = VV / Ts - (UV + alpha * VV) * t1 / (Ts * Ts)
        dd0 = jnp.where(zb == 2, 2 * alpha * e2 + e1,
                        jnp.where(zb == 3, Dm * r * (V0 - mu * t1), 0.0))
        dd1 = jnp.where(
            zb == 2, 2 * e2,
            jnp.where(zb == 3, Dm * ((V0 - mu * t1) ** 2 + r * (-mu * t2)), 0.0))
        con = p.cm[:, 0]
        cost = cost + csum(jnp.where(con, c_cone, 0.0))
        d0 = d0 + csum(jnp.where(con, dd0, 0.0))
        d1 = d1 + csum(jnp.where(con, dd1, 0.0))

    alpha = alpha_all
    cost = cost + alpha * alpha * ln.g2 + alpha * ln.g1
    d0 = d0 + 2 * alpha * ln.g2 + ln.g1
    d1 = d1 + 2 * ln.g2
    d1 = jnp.where(d1 <= 0, MINVAL, d1)
    return jnp.stack([alpha, cost, d0, d1], -1)


# float32 (and narrower) problems without elliptic cones or islands take `_exact_search`
# when they have at most EXACT_SEARCH rows, or when the batch (innermost vmap axis, 1
# unbatched) times the square of their row count is at most EXACT_WORK: its slopes at the
# kinks are rows x rows work, where MuJoCo's loop is a few trips of a few kernels each
# over the rows. Measured at batch 1024 (2026-12-01), ms per forward: gymnasium ant (40
# rows) 29.6 -> 27.9, hopper (22) 11.4 -> 10.2, MJX humanoid (74) 34.7 -> 39.6; at batch 1
# the MJX humanoid's step 45.0 -> 39.9 ms per 300 steps.
EXACT_SEARCH = 48
EXACT_WORK = 1 << 18


def _halving_sum(y):
    """Sum over the leading axis by pairwise halving: elementwise adds that XLA fuses
    (jnp.sum there becomes a library reduction; the gymnasium ant's 40 x 40 slopes at batch
    1024: 0.80 -> 0.31 ms)."""
    while y.shape[0] > 1:
        h = y.shape[0] // 2
        y = jnp.concatenate([y[:h] + y[h:2 * h], y[2 * h:]], 0)
    return y[0]


def _exact_search(p: _Problem, ln: _Line, skip):
    """The exact minimiser along the line of a cost made of quadratic pieces (no elliptic
    cone), without a loop: the cost's derivative is continuous, piecewise linear and
    non-decreasing, its kinks where a row changes piece (an inequality row at x = 0, a
    friction-loss row at x = +-R floss). The derivative at every kink brackets the minimum
    between the last kink of negative slope and the first of positive slope; no kink lies
    between them, so one Newton step from a point inside lands on the minimum. Same
    returns as `_linesearch`; three evaluations of the rows in all (the kinks' slopes, the
    inner point, the answer)."""
    C, G = 1, 2
    jv, jr = ln.jv, ln.jaref
    moving = jv != 0
    inv = 1.0 / _safe(jv, moving)
    kinks, ok = [-jr * inv], [moving & (p.kind == _INEQ)]
    if p.may_fric:
        rf = p.R * p.floss
        fr = moving & (p.kind == _FRIC)
        kinks += [(rf - jr) * inv, (-rf - jr) * inv]
        ok += [fr, fr]
    kinks, ok = jnp.concatenate(kinks), jnp.concatenate(ok)
    kinks = jnp.where(ok, kinks, 0.0)
    # a row's slope is D jv clip(x, lo, hi): equality rows unclipped, inequality rows
    # below 0, friction loss within +-R floss (D R floss = floss); inactive rows have D = 0
    k = p.kind
    top = jnp.where(k == _EQ, jnp.inf, 0.0)
    bottom = jnp.full_like(jr, -jnp.inf)
    if p.may_fric:
        top = jnp.where(k == _FRIC, rf, top)
        bottom = jnp.where(k == _FRIC, -rf, bottom)
    djv = p.D * jv

    def slope(a):
        x = jr + a * jv
        return 2 * ln.g2 * a + ln.g1 + jnp.sum(djv * jnp.clip(x, bottom, top))

    # rows on the leading axis: the sum over rows runs along the kinks' vectors
    x = jr[:, None] + kinks[None, :] * jv[:, None]
    if p.may_eq or p.may_fric:
        x = jnp.clip(x, bottom[:, None], top[:, None])
    else:  # inequality rows alone (and inactive ones, D = 0)
        x = jnp.minimum(x, 0.0)
    s = 2 * ln.g2 * kinks + ln.g1 + _halving_sum(djv[:, None] * x)
    below, above = ok & (s <= 0), ok & (s > 0)
    has_lo, has_hi = jnp.any(below), jnp.any(above)
    lo = jnp.max(jnp.where(below, kinks, -jnp.inf))
    hi = jnp.min(jnp.where(above, kinks, jnp.inf))
    lo_f, hi_f = jnp.where(has_lo, lo, 0.0), jnp.where(has_hi, hi, 0.0)
    inner = jnp.where(has_lo & has_hi, 0.5 * (lo_f + hi_f),
                      jnp.where(has_lo, lo_f + jnp.maximum(1.0, jnp.abs(lo_f)),
                                jnp.where(has_hi, hi_f - jnp.maximum(1.0, jnp.abs(hi_f)), 0.0)))
    x = jr + inner * jv
    curv = 2 * ln.g2 + jnp.sum(jnp.where((x > bottom) & (x < top), djv * jv, 0.0))
    alpha = inner - slope(inner) / jnp.maximum(curv, MINVAL)
    alpha = jnp.where(has_lo, jnp.maximum(alpha, lo_f), alpha)
    alpha = jnp.where(has_hi, jnp.minimum(alpha, hi_f), alpha)
    r = _eval(p, ln, alpha)
    better = (r[C] < 0) & ~jnp.asarray(skip, bool)
    return (jnp.where(better, alpha, 0.0), jnp.where(better, -r[C], 0.0),
            jnp.where(jnp.asarray(skip, bool), 0, 3).astype(jnp.int32),
            jnp.where(better, jnp.abs(r[G]), 0.0))


def _linesearch(p: _Problem, ln: _Line, gtol, ls_iterations: int, skip=False,
                isl: _Isl | None = None):
    """Exact line search: Newton steps, then bracketing. MuJoCo: PrimalSearch.

    Points are [alpha, cost - cost(0), d cost, d2 cost]. MuJoCo's sequence of evaluations
    runs as a state machine with one evaluation per loop step (one copy of the cost code):
    1 the origin's Newton point, 2 one-sided Newton steps, 3 the first bracket's Newton
    point, 4 the bracket's midpoint, 5 and 6 the updated brackets' Newton points. The
    origin itself is evaluated before the loop (a loop step fewer per search: most
    searches end at the origin's Newton point, two evaluations in all).
    Returns (alpha, improvement, number of evaluations, |derivative| at alpha); alpha = 0
    means no improvement. With `skip` (a world of a vmapped batch whose solver has already
    stopped) no point is evaluated and alpha is 0. With islands, each runs its own search
    (gtol, skip and the results per island) and every loop step evaluates all of them in
    one pass over the rows. Below float64, problems without elliptic cones or islands take
    `_exact_search` instead when it is the cheaper (`EXACT_SEARCH`, `EXACT_WORK`).
    """
    n = ln.jv.shape[-1]
    if isl is None and ln.cone is None and ln.g1.dtype != jnp.float64:
        if n <= EXACT_SEARCH:
            return _exact_search(p, ln, skip)
        if n * n <= EXACT_WORK:
            return loops.by_batch(
                lambda: _exact_search(p, ln, skip),
                lambda: _bracket_search(p, ln, gtol, ls_iterations, skip, isl),
                lambda batch: batch * n * n <= EXACT_WORK)
    return _bracket_search(p, ln, gtol, ls_iterations, skip, isl)


def _bracket_search(p: _Problem, ln: _Line, gtol, ls_iterations: int, skip, isl):
    """MuJoCo's line search (see `_linesearch`)."""
    A, C, G = 0, 1, 2
    zero = jnp.zeros(4, ln.g1.dtype)
    # below float64, the derivative tolerance can lie under what the arithmetic resolves:
    # the Newton steps stop moving alpha and MuJoCo's loop would run to ls_iterations.
    # There a point also counts as converged when its Newton step is below the resolution
    # of alpha (|d| / d2 <= 4 ulps of |alpha|: a stagnated search), and a bracket
    # narrowed to a few ulps ends the search. float64 keeps MuJoCo's rule unchanged.
    stagnation = ln.g1.dtype != jnp.float64
    ulps = 4 * jnp.finfo(ln.g1.dtype).eps

    def newton(q):
        return q[A] - q[G] / q[3]

    def converged(q, gtol):
        if stagnation:
            return jnp.abs(q[G]) < jnp.maximum(gtol, ulps * q[3] * jnp.abs(q[A]))
        return jnp.abs(q[G]) < gtol

    def update(q, cands):
        flag = jnp.bool_(False)
        for c in cands:
            lower = (q[G] < 0) & (c[G] < 0) & (q[G] < c[G])
            upper = ~lower & (q[G] > 0) & (c[G] > 0) & (q[G] > c[G])
            q = jnp.where(lower | upper, c, q)
            flag = flag | lower | upper
        return q, flag

    def pick(c):
        """The next point to evaluate."""
        ph, p0, p1, p2 = c["phase"], c["p0"], c["p1"], c["p2"]
        return jnp.select([ph == 1, ph == 4, ph == 6],
                          [newton(p0), 0.5 * (p1[A] + p2[A]), newton(p2)], newton(p1))

    def advance(c, q):
        """The state after evaluating q = [alpha, cost, d cost, d2 cost]."""
        ph, n, gtol = c["phase"], c["n"], c["gtol"]
        p0, p1, p2, p1n, p2n = c["p0"], c["p1"], c["p2"], c["p1n"], c["p2n"]
        n = n + 1
        direction = c["dir"]
        done, res, ok = jnp.bool_(False), zero, jnp.bool_(True)
        b1, b2 = c["b1"], c["b2"]
        nph = ph

        # 1: the origin's Newton point (converged at once, or pick a direction)
        first = ph == 1
        conv0 = first & converged(q, gtol) & ((q[A] == 0) | (q[C] < 0))
        direction = jnp.where(first, jnp.where(q[G] < 0, 1.0, -1.0), direction)
        p2 = jnp.where(first, p0, p2)
        # 2: one-sided steps; the previous point becomes the far bracket end
        step = ph == 2
        p2 = jnp.where(step, p1, p2)
        p1 = jnp.where(first | step, q, p1)
        conv1 = step & converged(q, gtol) & (q[C] < 0)
        done, res = done | conv0 | conv1, jnp.where(conv0 | conv1, q, res)
        one_sided = (first | step) & ~conv0 & ~conv1
        keep = one_sided & (p1[G] * direction <= -gtol) & (n < ls_iterations)
        leave = one_sided & ~keep
        nph = jnp.where(keep, 2, nph)
        nobracket = leave & (n >= ls_iterations)
        done, res = done | nobracket, jnp.where(nobracket, p1, res)
        p2n = jnp.where(leave, p1, p2n)
        nph = jnp.where(leave, 3, nph)

        # 3, 5, 6: Newton points of the bracket ends
        p1n = jnp.where((ph == 3) | (ph == 5), q, p1n)
        p2n = jnp.where(ph == 6, q, p2n)
        to_mid = (ph == 3) | (ph == 6) | ((ph == 5) & ~b2)
        nph = jnp.where((ph == 5) & b2, 6, nph)

        # 4: midpoint; accept a converged candidate, else shrink the brackets
        mid = ph == 4
        cands = (p1n, p2n, q)
        best, best_cost, got = zero, 0.0 * q[C], jnp.bool_(False)
        for cand in cands:
            take = converged(cand, gtol) & (~got | (cand[C] < best_cost))
            best = jnp.where(take, cand, best)
            best_cost = jnp.where(take, cand[C], best_cost)
            got = got | take
        q1u, u1 = update(p1, cands)
        q2u, u2 = update(p2, cands)
        shrink = mid & ~got
        stuck = shrink & ~u1 & ~u2
        done = done | (mid & got) | stuck
        res = jnp.where(mid & got, best, jnp.where(stuck, q, res))
        p1 = jnp.where(shrink, q1u, p1)
        p2 = jnp.where(shrink, q2u, p2)
        b1, b2 = jnp.where(shrink, u1, b1), jnp.where(shrink, u2, b2)
        nph = jnp.where(shrink & u1, 5, jnp.where(shrink & u2, 6, nph))

        # out of evaluations before a midpoint: the better bracket end if it improves
        again = to_mid & (n < ls_iterations)
        if stagnation:  # or the bracket is as narrow as the arithmetic resolves
            again = again & (jnp.abs(p2[A] - p1[A])
                             > ulps * jnp.maximum(jnp.abs(p1[A]), jnp.abs(p2[A])))
        nph = jnp.where(again, 4, nph)
        out = to_mid & ~again
        pick1 = (p1[C] <= p2[C]) & (p1[C] < 0)
        pick2 = ~pick1 & (p2[C] <= p1[C]) & (p2[C] < 0)
        done = done | out
        res = jnp.where(out, jnp.where(pick1, p1, jnp.where(pick2, p2, zero)), res)
        ok = ~(out & ~pick1 & ~pick2)
        return dict(phase=nph, n=n, p0=p0, p1=p1, p2=p2, p1n=p1n, p2n=p2n, b1=b1, b2=b2,
                    dir=direction, done=done, res=jnp.where(done, res, c["res"]),
                    ok=jnp.where(done, ok, c["ok"]), gtol=gtol)

    origin = _eval(p, ln, jnp.zeros((isl.n,) if isl is not None else (), zero.dtype), isl)
    init = dict(phase=jnp.int32(1), n=jnp.int32(1), p0=zero, p1=zero, p2=zero, p1n=zero,
                p2n=zero, b1=jnp.bool_(False), b2=jnp.bool_(False), dir=zero[0],
                done=jnp.asarray(skip, bool), res=zero, ok=jnp.bool_(True),
                gtol=jnp.asarray(gtol, zero.dtype))

    # The loop carries the search's state as one vector (small integers and flags as exact
    # floats): each step then ends in one fused operation that writes it, where separate
    # fields made XLA emit (and compile) the shared decision logic once per field.
    # (gtol and skip may be per island: the layout is that of one search)
    layout = [(k, int(np.size(v)) if k not in ("gtol", "done") else 1, v.dtype)
              for k, v in init.items()]
    DONE = sum(size for _, size, _ in layout[:[k for k, _, _ in layout].index("done")])

    def pack(c):
        return jnp.concatenate([jnp.reshape(c[k], (-1,)).astype(zero.dtype)
                                for k, _, _ in layout])

    def unpack(s):
        out, o = {}, 0
        for k, size, t in layout:
            v = s[o:o + size] if size > 1 else s[o]
            out[k] = (v != 0) if t == jnp.bool_ else v.astype(t)
            o += size
        return out

    if isl is None:
        def body(s):
            c = unpack(s)
            return pack(advance(c, _eval(p, ln, pick(c))))

        init["p0"] = origin
        c = unpack(lax.while_loop(lambda s: s[DONE] == 0, body, pack(init)))
    else:
        init = {k: jnp.broadcast_to(v, (isl.n,) + v.shape) for k, v in init.items()}
        init["done"] = jnp.broadcast_to(jnp.asarray(skip, bool), (isl.n,))
        init["gtol"] = jnp.broadcast_to(jnp.asarray(gtol, zero.dtype), (isl.n,))
        init["p0"] = origin

        def body(s):
            c = jax.vmap(unpack)(s)
            q = _eval(p, ln, jax.vmap(pick)(c), isl)
            new = jax.vmap(lambda c_, q_: pack(advance(c_, q_)))(c, q)
            return jnp.where(c["done"][:, None], s, new)

        c = jax.vmap(unpack)(lax.while_loop(lambda s: ~jnp.all(s[:, DONE] != 0), body,
                                            jax.vmap(pack)(init)))
    r = c["res"]
    return r[..., A], -r[..., C], c["n"], jnp.where(c["ok"], jnp.abs(r[..., G]), 0.0)


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
        ln = _prepare(p, has_cone, c["jaref"], jv, c["Ma"], Mv, v, isl)
        # under vmap the loop runs while any world iterates: the stopped ones evaluate
        # nothing (their line search would otherwise run to ls_iterations every trip); so
        # do the converged islands of a world
        alpha, ls_imp, neval, slope = _linesearch(p, ln, ls_tol * snorm / scale,
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
        c = loops.while_loop(cond, body, carry)
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
