"""Constraint solvers: Newton, CG and PGS, plus the noslip pass. MuJoCo: mj_fwdConstraint.

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

from jaxsim.efc import Efc
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

# PCG32 multiplier as two 32-bit halves (MuJoCo's PGS visitation order)
_PCG_HI, _PCG_LO = 0x5851F42D, 0x4C957F2D


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


# ------------------------------------------------------------------------------ problem


def _problem(m: Model, d: State, efc: Efc, has_cone: bool) -> _Problem:
    dt = d.qacc_smooth.dtype
    act = efc.active
    nefc = efc.J.shape[0]
    K = int(efc.contact_nrow)
    ncon = efc.contact_adr.shape[0]
    t = efc.type
    j = jnp.arange(K)
    ci = jnp.clip(efc.contact_adr[:, None] + j, 0, nefc - 1).astype(jnp.int32)
    cdim = efc.contact_dim.astype(jnp.int32)
    flat = ci.reshape(-1)
    rc = jnp.zeros(nefc, jnp.int32).at[flat].set(jnp.repeat(jnp.arange(ncon, dtype=jnp.int32), K))
    rj = jnp.zeros(nefc, jnp.int32).at[flat].set(jnp.tile(j.astype(jnp.int32), ncon))
    inblk = jnp.zeros(nefc, bool).at[flat].set(True)

    first = ci[:, 0]
    ell_on = act[first] & (t[first] == ConstraintType.CONTACT_ELLIPTIC) & (cdim > 1)
    cm = ell_on[:, None] & (j < cdim[:, None]) & act[ci]
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

    return _Problem(
        M=d.qM, qfrc_smooth=d.qfrc_smooth, qacc_smooth=d.qacc_smooth,
        J=jnp.where(act[:, None], efc.J, 0.0).astype(dt),
        D=jnp.where(act, efc.D, 0.0).astype(dt),
        R=jnp.where(act, efc.R, 1.0).astype(dt),
        floss=jnp.where(act & is_fric, efc.frictionloss, 0.0).astype(dt),
        aref=jnp.where(act, efc.aref, 0.0).astype(dt),
        kind=kind, pyr=pyr, rc=rc, rj=rj, ci=ci, cm=cm, cdim=cdim, mu=mu, s=s, fric=fric,
        scale=1.0 / jnp.trace(d.qM),
    )


def _safe(x, ok):
    """x where ok, else 1: keeps divisions (and their derivatives) finite in unused branches."""
    return jnp.where(ok, x, 1.0)


def _norm(x, axis=-1):
    sq = jnp.sum(x * x, axis=axis)
    return jnp.where(sq > 0, jnp.sqrt(_safe(sq, sq > 0)), 0.0)


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
    """H = M + J' D_quadratic J (+ cone Hessians): the Newton Hessian at a state."""
    Dq = jnp.where(up.state == _QUAD, p.D, 0.0)
    H = p.M + (p.J * Dq[:, None]).T @ p.J
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


def _prepare(p: _Problem, has_cone, jaref, jv, Ma, Mv, v) -> _Line:
    D = p.D
    q0 = 0.5 * D * jaref * jaref
    q1 = jv * D * jaref
    q2 = 0.5 * jv * D * jv
    g1 = jnp.dot(v, Ma) - jnp.dot(p.qfrc_smooth, v)
    g2 = 0.5 * jnp.dot(v, Mv)
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


def _eval(p: _Problem, ln: _Line, alpha):
    """cost(alpha) - cost(0) and its first two derivatives. MuJoCo: PrimalEval."""
    k = p.kind
    x = ln.jaref + alpha * ln.jv
    dq0 = 2 * alpha * ln.q2 + ln.q1
    dq1 = 2 * ln.q2
    cq = alpha * alpha * ln.q2 + alpha * ln.q1

    # inequalities: active where x < 0; the cost at alpha = 0 is subtracted
    c0 = jnp.where(ln.jaref < 0, ln.q0, 0.0)
    on = x < 0
    c_in = jnp.where(on, ln.q0 - c0 + cq, -c0)

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
                  jnp.where((z0 == 1) & (z1 == 1), fl * (x - s0), fcost(x, z1) - fcost(s0, z0))))
    d0_fr = jnp.where(z1 == 0, D * x * dv, jnp.where(z1 == -1, -fl * dv, fl * dv))
    d1_fr = jnp.where(z1 == 0, D * dv * dv, 0.0)

    eq, fr, ineq = k == _EQ, k == _FRIC, k == _INEQ
    cost = jnp.sum(jnp.where(eq, cq, 0.0) + jnp.where(fr, c_fr, 0.0) + jnp.where(ineq, c_in, 0.0))
    d0 = jnp.sum(jnp.where(eq | (ineq & on), dq0, 0.0) + jnp.where(fr, d0_fr, 0.0))
    d1 = jnp.sum(jnp.where(eq | (ineq & on), dq1, 0.0) + jnp.where(fr, d1_fr, 0.0))

    if ln.cone is not None:
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
        cost = cost + jnp.sum(jnp.where(con, c_cone, 0.0))
        d0 = d0 + jnp.sum(jnp.where(con, dd0, 0.0))
        d1 = d1 + jnp.sum(jnp.where(con, dd1, 0.0))

    cost = cost + alpha * alpha * ln.g2 + alpha * ln.g1
    d0 = d0 + 2 * alpha * ln.g2 + ln.g1
    d1 = d1 + 2 * ln.g2
    d1 = jnp.where(d1 <= 0, MINVAL, d1)
    return jnp.stack([alpha, cost, d0, d1])


def _linesearch(p: _Problem, ln: _Line, gtol, ls_iterations: int):
    """Exact line search: Newton steps, then bracketing. MuJoCo: PrimalSearch.

    Points are [alpha, cost - cost(0), d cost, d2 cost]. MuJoCo's sequence of evaluations
    runs as a state machine with one evaluation per loop step (one copy of the cost code):
    0 the origin, 1 its Newton point, 2 one-sided Newton steps, 3 the first bracket's
    Newton point, 4 the bracket's midpoint, 5 and 6 the updated brackets' Newton points.
    Returns (alpha, improvement, number of evaluations, |derivative| at alpha); alpha = 0
    means no improvement.
    """
    A, C, G = 0, 1, 2
    zero = jnp.zeros(4, ln.g1.dtype)

    def newton(q):
        return q[A] - q[G] / q[3]

    def converged(q):
        return jnp.abs(q[G]) < gtol

    def update(q, cands):
        flag = jnp.bool_(False)
        for c in cands:
            lower = (q[G] < 0) & (c[G] < 0) & (q[G] < c[G])
            upper = ~lower & (q[G] > 0) & (c[G] > 0) & (q[G] > c[G])
            q = jnp.where(lower | upper, c, q)
            flag = flag | lower | upper
        return q, flag

    def body(c):
        ph, n = c["phase"], c["n"]
        p0, p1, p2, p1n, p2n = c["p0"], c["p1"], c["p2"], c["p1n"], c["p2n"]
        alpha = jnp.select(
            [ph == 0, ph == 1, ph == 4, ph == 6],
            [0.0 * p0[A], newton(p0), 0.5 * (p1[A] + p2[A]), newton(p2)], newton(p1))
        q = _eval(p, ln, alpha)
        n = n + 1
        direction = c["dir"]
        done, res, ok = jnp.bool_(False), zero, jnp.bool_(True)
        b1, b2 = c["b1"], c["b2"]
        nph = ph

        # 0, 1: origin and its Newton point (converged at once, or pick a direction)
        p0 = jnp.where(ph == 0, q, p0)
        first = ph == 1
        conv0 = first & converged(q) & ((q[A] == 0) | (q[C] < 0))
        direction = jnp.where(first, jnp.where(q[G] < 0, 1.0, -1.0), direction)
        p2 = jnp.where(first, p0, p2)
        # 2: one-sided steps; the previous point becomes the far bracket end
        step = ph == 2
        p2 = jnp.where(step, p1, p2)
        p1 = jnp.where(first | step, q, p1)
        conv1 = step & converged(q) & (q[C] < 0)
        done, res = done | conv0 | conv1, jnp.where(conv0 | conv1, q, res)
        one_sided = (first | step) & ~conv0 & ~conv1
        keep = one_sided & (p1[G] * direction <= -gtol) & (n < ls_iterations)
        leave = one_sided & ~keep
        nph = jnp.where(ph == 0, 1, jnp.where(keep, 2, nph))
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
            take = converged(cand) & (~got | (cand[C] < best_cost))
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
        nph = jnp.where(again, 4, nph)
        out = to_mid & ~again
        pick1 = (p1[C] <= p2[C]) & (p1[C] < 0)
        pick2 = ~pick1 & (p2[C] <= p1[C]) & (p2[C] < 0)
        done = done | out
        res = jnp.where(out, jnp.where(pick1, p1, jnp.where(pick2, p2, zero)), res)
        ok = ~(out & ~pick1 & ~pick2)
        return dict(phase=nph, n=n, p0=p0, p1=p1, p2=p2, p1n=p1n, p2n=p2n, b1=b1, b2=b2,
                    dir=direction, done=done, res=jnp.where(done, res, c["res"]),
                    ok=jnp.where(done, ok, c["ok"]))

    init = dict(phase=jnp.int32(0), n=jnp.int32(0), p0=zero, p1=zero, p2=zero, p1n=zero,
                p2n=zero, b1=jnp.bool_(False), b2=jnp.bool_(False), dir=zero[0],
                done=jnp.bool_(False), res=zero, ok=jnp.bool_(True))
    c = lax.while_loop(lambda c: ~c["done"], body, init)
    r = c["res"]
    return r[A], -r[C], c["n"], jnp.where(c["ok"], jnp.abs(r[G]), 0.0)


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
    """Newton or CG on the reduced primal. MuJoCo: mj_solPrimal (monolithic)."""
    tol = m.opt.tolerance
    maxiter = m.opt.iterations
    ls_tol = m.opt.tolerance * m.opt.ls_tolerance
    scale = p.scale
    hess = newton and has_cone

    qacc = _start_primal(m, p, d.qacc_warmstart, has_cone)
    Ma = p.M @ qacc
    jaref = p.J @ qacc - p.aref
    up = _update(p, jaref, has_cone, hess)
    grad = Ma - p.qfrc_smooth - p.J.T @ up.force
    mgrad = solve_m(m, d, grad)

    # zero-iteration certificate: the cost gap is bounded by 0.5 grad' M^-1 grad
    gradok = scale * jnp.linalg.norm(grad) < tol
    done = jnp.maximum(0.0, 0.5 * scale * jnp.dot(grad, mgrad)) < tol
    if newton:
        done = done & gradok
        mgrad = jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(_hessian(p, up)), True), grad)
        done = done | (gradok & (jnp.maximum(0.0, 0.5 * scale * jnp.dot(grad, mgrad)) < tol))
    search = -mgrad

    carry = dict(it=jnp.int32(0), done=done, qacc=qacc, Ma=Ma, jaref=jaref, force=up.force,
                 state=up.state, grad=grad, mgrad=mgrad, search=search,
                 info=_stats(nstat, qacc.dtype))

    def cond(c):
        return ~c["done"] & (c["it"] < maxiter)

    def body(c):
        v = c["search"]
        snorm = jnp.linalg.norm(v)
        Mv = p.M @ v
        jv = p.J @ v
        ln = _prepare(p, has_cone, c["jaref"], jv, c["Ma"], Mv, v)
        alpha, ls_imp, neval, slope = _linesearch(p, ln, ls_tol * snorm / scale,
                                                  m.opt.ls_iterations)
        small = snorm < MINVAL
        alpha = jnp.where(small, 0.0, alpha)
        stop = alpha == 0

        qacc = c["qacc"] + alpha * v
        Ma = c["Ma"] + alpha * Mv
        jaref = c["jaref"] + alpha * jv
        up = _update(p, jaref, has_cone, hess)
        grad = Ma - p.qfrc_smooth - p.J.T @ up.force
        if newton:
            L = jnp.linalg.cholesky(_hessian(p, up))
            mgrad = jax.scipy.linalg.cho_solve((L, True), grad)
        else:
            mgrad = solve_m(m, d, grad)
        nchange = jnp.sum(up.state != c["state"]).astype(jnp.int32)
        nactive = jnp.sum(up.state != _SAT).astype(jnp.int32)
        improvement = scale * ls_imp
        gradient = scale * jnp.linalg.norm(grad)
        info = _record(c["info"], c["it"], ~stop, improvement, gradient, slope * scale / snorm,
                       nactive, nchange, neval)
        term = ((improvement > 0) & (improvement < tol)) | (gradient < tol)
        if newton:
            term = term | (jnp.maximum(0.0, 0.5 * scale * jnp.dot(grad, mgrad)) < tol)
            search = -mgrad
        else:
            # Hager-Zhang direction, restarted when conjugacy is lost
            y = grad - c["grad"]
            my = mgrad - c["mgrad"]
            s = c["search"]
            dy = jnp.dot(s, y)
            dys = _safe(dy, dy >= MINVAL)
            beta_hz = (jnp.dot(y, mgrad) - 2 * (jnp.dot(y, my) / dys) * jnp.dot(s, grad)) / dys
            gnorm = jnp.minimum(0.01, jnp.linalg.norm(grad))
            eta = -1.0 / jnp.maximum(MINVAL, jnp.linalg.norm(s) * gnorm)
            beta = jnp.where(dy < MINVAL, 0.0, jnp.maximum(eta, beta_hz))
            search = -mgrad + beta * s

        new = dict(it=c["it"] + 1, done=term, qacc=qacc, Ma=Ma, jaref=jaref, force=up.force,
                   state=up.state, grad=grad, mgrad=mgrad, search=search, info=info)
        out = jax.tree.map(lambda a, b: jnp.where(stop, a, b), c, new)
        out["done"] = stop | term
        out["info"] = info
        return out

    c = lax.while_loop(cond, body, carry)
    info = c["info"]._replace(niter=c["it"])
    return c["qacc"], c["force"], c["state"], info


# ---------------------------------------------------------------------------------- PGS


def _pcg32(hi, lo):
    """One PCG32 step on a 64-bit state held as two uint32: (new hi, new lo, output)."""
    u = jnp.uint32
    xlo = ((lo >> u(18)) | (hi << u(14))) ^ lo
    xhi = (hi >> u(18)) ^ hi
    xs = (xlo >> u(27)) | (xhi << u(5))
    rot = hi >> u(27)
    out = (xs >> rot) | (xs << ((u(32) - rot) & u(31)))
    # state * multiplier + 1 (mod 2^64), from 16-bit partial products
    a0, a1 = lo & u(0xFFFF), lo >> u(16)
    b0, b1 = u(_PCG_LO & 0xFFFF), u(_PCG_LO >> 16)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    midp = (p00 >> u(16)) + (p01 & u(0xFFFF)) + (p10 & u(0xFFFF))
    nhi = p11 + (p01 >> u(16)) + (p10 >> u(16)) + (midp >> u(16))
    nlo = (midp << u(16)) | (p00 & u(0xFFFF))
    nhi = nhi + lo * u(_PCG_HI) + hi * u(_PCG_LO)
    nlo1 = nlo + u(1)
    nhi = nhi + (nlo1 < nlo).astype(jnp.uint32)
    return nhi, nlo1, out


def _shuffle(perm, n, rng):
    """Fisher-Yates over perm[:n] with PCG32 (MuJoCo's shuffle_int)."""

    def body(t, c):
        perm, hi, lo = c
        i = n - 1 - t
        hi, lo, r = _pcg32(hi, lo)
        j = (r % (i + 1).astype(jnp.uint32)).astype(jnp.int32)
        a, b = perm[i], perm[j]
        return perm.at[i].set(b).at[j].set(a), hi, lo

    perm, hi, lo = lax.fori_loop(0, jnp.maximum(n - 1, 0), body, (perm, rng[0], rng[1]))
    return perm, (hi, lo)


def _pgs_setup(m: Model, d: State, p: _Problem):
    MinvJT = solve_m(m, d, p.J)  # rows: M^-1 J_i
    AR = p.J @ MinvJT.T + jnp.diag(p.R)
    b = p.J @ p.qacc_smooth - p.aref
    return AR, b


def _dual_state(p: _Problem, f, has_cone):
    """Constraint states from dual forces. MuJoCo: dualState."""
    k = p.kind
    fl = p.floss
    s_fr = jnp.where(f <= -fl, _LPOS, jnp.where(f >= fl, _LNEG, _QUAD))
    state = jnp.select([k == _EQ, k == _FRIC, k == _INEQ],
                       [_QUAD, s_fr, jnp.where(f <= 0, _SAT, _QUAD)], _SAT)
    if has_cone:
        fb = jnp.where(p.cm, f[p.ci], 0.0)
        N = fb[:, 0] / p.mu
        T = _norm(fb[:, 1:] / p.fric)
        mu = p.mu
        sb = jnp.where(mu * N >= T, _SAT, jnp.where(N + mu * T <= 0, _QUAD, _CONE))
        state = jnp.where(k == _ELL, sb[p.rc], state)
    return state.astype(jnp.int32)


def _project_ellipsoid(ft, fn, mu, mask, feasible: bool):
    """Scales friction forces onto (or, if feasible, into) sum (ft / mu)^2 <= fn^2."""
    s = jnp.sum(jnp.where(mask, ft * ft / (mu * mu), 0.0), -1)
    scl = jnp.sqrt(fn * fn / jnp.maximum(MINVAL, s))
    if feasible:
        scl = jnp.where(s > fn * fn, scl, 1.0)
    return ft * scl[..., None] if ft.ndim > 1 else ft * scl


def _qcqp(A, b, dv, r, mask):
    """min 0.5 x'Ax + x'b s.t. sum (x / dv)^2 <= r^2 (MuJoCo: mju_QCQP2/3/QCQP).

    Newton's method on the multiplier of the one constraint, at most 20 steps. Dimensions
    outside `mask` are padding. Returns (x, constrained).
    """
    nuse = jnp.sum(mask)
    dv = jnp.where(mask, dv, 0.0)
    bs = b * dv
    As = A * dv[:, None] * dv[None, :] + jnp.diag(jnp.where(mask, 0.0, 1.0))
    on = mask.astype(A.dtype)

    def body(_, c):
        la, v, stop, fail = c
        L = jnp.linalg.cholesky(As + la * jnp.diag(on))
        piv = jnp.diagonal(L) ** 2
        finite = jnp.all(jnp.isfinite(piv))
        piv = jnp.where(finite, piv, 0.0)
        # 2 and 3 dimensions test the determinant, more the Cholesky pivots
        bad = jnp.where(nuse <= 3, jnp.prod(piv) < 1e-10, jnp.min(piv) < 1e-10) | ~finite
        L = jnp.where(finite, L, jnp.eye(L.shape[0], dtype=L.dtype))
        vn = -jax.scipy.linalg.cho_solve((L, True), bs)
        val = jnp.dot(vn, vn) - r * r
        delta = val / (2.0 * jnp.dot(vn, jax.scipy.linalg.cho_solve((L, True), vn)))
        run = ~stop & ~fail
        good = run & ~bad
        v = jnp.where(good, vn, v)
        halt = good & ((val < 1e-10) | (delta < 1e-10))
        la = jnp.where(good & ~halt, la + delta, la)
        return la, v, stop | halt, fail | (run & bad)

    init = (jnp.zeros((), A.dtype), jnp.zeros_like(b), jnp.bool_(False), jnp.bool_(False))
    la, v, _, fail = lax.fori_loop(0, 20, body, init)
    return jnp.where(fail, 0.0, v * dv), ~fail & (la != 0)


def _cost_change(A, new, old, res):
    """Cost change of a block update, undone when positive. MuJoCo: costChange."""
    delta = new - old
    change = 0.5 * delta @ A @ delta + delta @ res
    keep = change > 1e-10
    return jnp.where(keep, old, new), jnp.where(keep, 0.0, change)


def _pgs(m: Model, d: State, p: _Problem, has_cone: bool, nstat: int):
    """Projected Gauss-Seidel on the dual. MuJoCo: mj_solPGS (monolithic)."""
    dt = p.qacc_smooth.dtype
    nefc = p.J.shape[0]
    K = p.ci.shape[1] if has_cone else 1
    tol = m.opt.tolerance
    maxiter = m.opt.iterations
    AR, b = _pgs_setup(m, d, p)
    ARinv = 1.0 / jnp.diagonal(AR)
    k = p.kind

    if m.opt.disableflags & DisableBit.WARMSTART:
        f = jnp.zeros(nefc, dt)
    else:
        w = d.qacc_warmstart
        f = _update(p, p.J @ w - p.aref, has_cone).force
        f = jnp.where(jnp.dot(f, b) + 0.5 * jnp.dot(f, AR @ f) > 0, 0.0, f)

    start = (k == _EQ) | (k == _FRIC) | (k == _INEQ) | ((k == _ELL) & (p.rj == 0))
    nblocks = jnp.sum(start).astype(jnp.int32)
    blocks = jnp.nonzero(start, size=nefc, fill_value=0)[0].astype(jnp.int32)
    rng = _pcg32(jnp.uint32(0), jnp.uint32(0))[:2]  # seeded state after one step

    def scalar(f, i):
        res = b[i] + AR[i] @ f
        old = f[i]
        new = f[i] - res * ARinv[i]
        new = jnp.where(k[i] == _FRIC, jnp.clip(new, -p.floss[i], p.floss[i]),
                        jnp.where(k[i] == _INEQ, jnp.maximum(new, 0.0), new))
        new, change = _cost_change(AR[i, i][None, None], new[None], old[None], res[None])
        return f.at[i].set(new[0]), change

    def elliptic(f, i):
        jj = jnp.arange(K)
        idx = jnp.clip(i + jj, 0, nefc - 1)
        c = p.rc[i]
        msk = jj < p.cdim[c]
        res = jnp.where(msk, b[idx] + AR[idx] @ f, 0.0)
        old = jnp.where(msk, f[idx], 0.0)
        A = jnp.where(msk[:, None] & msk[None, :], AR[idx[:, None], idx[None, :]], 0.0)
        f0 = old[0]
        # normal update when the normal force vanishes, else along the ray through f
        fa = jnp.zeros(K, dt).at[0].set(jnp.maximum(0.0, f0 - res[0] * ARinv[i]))
        denom = old @ A @ old
        x = -jnp.dot(old, res) / _safe(denom, denom >= MINVAL)
        x = jnp.where(f0 + x * old[0] < 0, -old[0] / _safe(f0, f0 != 0), x)
        fb = jnp.where(denom >= MINVAL, old + x * old, old)
        new = jnp.where(f0 < MINVAL, fa, fb)
        # friction with the normal force fixed: a QCQP on the ellipsoid's slice
        Ac = A[1:, 1:]
        bc = res[1:] - Ac @ old[1:] + A[1:, 0] * (new[0] - old[0])
        fr = p.fric[c]
        ft, constrained = _qcqp(Ac, bc, fr, new[0], msk[1:])
        ft = jnp.where(constrained, _project_ellipsoid(ft, new[0], fr, msk[1:], False), ft)
        ft = jnp.where(new[0] < MINVAL, 0.0, ft)
        new = jnp.where(msk, new.at[1:].set(ft), 0.0)
        new, change = _cost_change(A, new, old, res)
        return f.at[jnp.where(msk, idx, nefc)].set(new, mode="drop"), change

    def sweep(f, perm):
        def body(t, c):
            f, imp = c
            i = blocks[perm[t]]
            if has_cone:
                f, change = lax.cond(k[i] == _ELL, elliptic, scalar, f, i)
            else:
                f, change = scalar(f, i)
            return f, imp - change

        return lax.fori_loop(0, nblocks, body, (f, jnp.zeros((), dt)))

    def project(f):
        f = jnp.where(k == _FRIC, jnp.clip(f, -p.floss, p.floss), f)
        f = jnp.where(k == _INEQ, jnp.maximum(f, 0.0), f)
        if has_cone:
            fb = jnp.where(p.cm, f[p.ci], 0.0)
            ft = _project_ellipsoid(fb[:, 1:], fb[:, 0], p.fric, p.cm[:, 1:], True)
            fb = jnp.where(fb[:, :1] < 0, 0.0, jnp.concatenate([fb[:, :1], ft], 1))
            f = jnp.where(k == _ELL, fb[p.rc, p.rj], f)
        return f

    state0 = _dual_state(p, f, has_cone)
    carry = dict(it=jnp.int32(0), done=jnp.bool_(False), f=f, fprev=f, fmom=f, nk=jnp.int32(0),
                 perm=jnp.arange(nefc, dtype=jnp.int32), rng=rng, state=state0,
                 info=_stats(nstat, dt))

    def cond(c):
        return ~c["done"] & (c["it"] < maxiter)

    def body(c):
        f, fprev, it = c["f"], c["fprev"], c["it"]
        # Nesterov extrapolation, projected back onto the constraint set
        beta = jnp.where(it > 0, (c["nk"] - 1) / (c["nk"] + 2.0), 0.0).astype(dt)
        ext = beta > 0
        fx = project(f + beta * (f - fprev))
        fprev = f
        f = jnp.where(ext, fx, f)
        fmom = f

        perm, rng = _shuffle(c["perm"], nblocks, c["rng"])
        f, improvement = sweep(f, perm)
        state = _dual_state(p, f, has_cone)
        nchange = jnp.sum(state != c["state"]).astype(jnp.int32)
        nactive = jnp.sum(state != _SAT).astype(jnp.int32)
        improvement = improvement * p.scale
        zero = jnp.zeros((), dt)
        info = _record(c["info"], it, True, improvement, zero, zero, nactive, nchange, 0)
        restart = (it > 0) & (jnp.sum((f - fmom) * (fmom - fprev)) < 0)
        nk = jnp.where(restart, 0, c["nk"] + 1)
        return dict(it=it + 1, done=improvement < tol, f=f, fprev=fprev, fmom=fmom, nk=nk,
                    perm=perm, rng=rng, state=state, info=info)

    c = lax.while_loop(cond, body, carry)
    return c["f"], c["state"], c["info"]._replace(niter=c["it"])


# ------------------------------------------------------------------------------- noslip


def _noslip(m: Model, d: State, p: _Problem, f, info: SolverInfo, has_cone: bool):
    """Friction re-solved without regularisation, as a PGS pass. MuJoCo: mj_solNoSlip."""
    dt = f.dtype
    nefc = p.J.shape[0]
    K = p.ci.shape[1]
    AR, b = _pgs_setup(m, d, p)
    A = AR - jnp.diag(p.R)
    Adiag = jnp.diagonal(A)
    Ainv = 1.0 / jnp.maximum(MINVAL, Adiag)
    k = p.kind
    tol = m.opt.noslip_tolerance
    maxiter = m.opt.noslip_iterations
    niter0 = info.niter

    # blocks in row order: friction-loss rows, pyramidal edge pairs, elliptic friction
    cdim_row = p.cdim[p.rc]
    pair = p.pyr & (p.rj % 2 == 0) & (p.rj < 2 * (cdim_row - 1))
    ell_first = (k == _ELL) & (p.rj == 0) if has_cone else jnp.zeros(nefc, bool)
    start = (k == _FRIC) | pair | ell_first
    nblocks = jnp.sum(start).astype(jnp.int32)
    blocks = jnp.nonzero(start, size=nefc, fill_value=0)[0].astype(jnp.int32)

    def block(i, n):
        idx = jnp.clip(i + jnp.arange(n), 0, nefc - 1)
        Ab = A[idx[:, None], idx[None, :]]
        Ab = Ab + jnp.diag(jnp.maximum(1e-10, jnp.diagonal(Ab)) - jnp.diagonal(Ab))
        return idx, Ab

    def friction(f, i):
        res = b[i] + A[i] @ f
        old = f[i]
        new = jnp.clip(old - res * Ainv[i], -p.floss[i], p.floss[i])
        delta = new - old
        return f.at[i].set(new), -(0.5 * delta * delta / Ainv[i] + delta * res)

    def pyramid(f, i):
        idx, Ac = block(i, 2)
        res = b[idx] + A[idx] @ f
        old = f[idx]
        bc = res - Ac @ old
        mid = 0.5 * (old[0] + old[1])
        k1 = Ac[0, 0] + Ac[1, 1] - Ac[0, 1] - Ac[1, 0]
        k0 = mid * (Ac[0, 0] - Ac[1, 1]) + bc[0] - bc[1]
        y = -k0 / _safe(k1, k1 >= MINVAL)
        new = jnp.where(y < -mid, jnp.stack([0.0 * mid, 2 * mid]),
                        jnp.where(y > mid, jnp.stack([2 * mid, 0.0 * mid]),
                                  jnp.stack([mid + y, mid - y])))
        new = jnp.where(k1 < MINVAL, jnp.stack([mid, mid]), new)
        new, change = _cost_change(Ac, new, old, res)
        return f.at[idx].set(new), -change

    def elliptic(f, i):
        idx, Ac = block(i + 1, K - 1)
        c = p.rc[i]
        msk = jnp.arange(K - 1) < p.cdim[c] - 1
        res = jnp.where(msk, b[idx] + A[idx] @ f, 0.0)
        old = jnp.where(msk, f[idx], 0.0)
        Ac = jnp.where(msk[:, None] & msk[None, :], Ac, 0.0)
        bc = res - Ac @ old
        fr = p.fric[c]
        ft, constrained = _qcqp(Ac, bc, fr, f[i], msk)
        ft = jnp.where(constrained, _project_ellipsoid(ft, f[i], fr, msk, False), ft)
        ft = jnp.where((f[i] < MINVAL) | ~msk, 0.0, ft)
        new, change = _cost_change(Ac, ft, old, res)
        return f.at[jnp.where(msk, idx, nefc)].set(new, mode="drop"), -change

    def sweep(f):
        def body(t, c):
            f, imp = c
            i = blocks[t]
            branches = [friction, pyramid] + ([elliptic] if has_cone and K > 1 else [])
            which = jnp.where(k[i] == _FRIC, 0, jnp.where(p.pyr[i], 1, 2))
            which = jnp.minimum(which, len(branches) - 1)
            f, dimp = lax.switch(which, branches, f, i)
            return f, imp + dimp

        return lax.fori_loop(0, nblocks, body, (f, jnp.zeros((), dt)))

    def cond(c):
        return ~c["done"] & (c["it"] < maxiter)

    def body(c):
        f, it = c["f"], c["it"]
        imp0 = jnp.where(it == 0, jnp.sum(0.5 * f * f * jnp.where(k > 0, p.R, 0.0)), 0.0)
        f, imp = sweep(f)
        state = _dual_state(p, f, has_cone)
        nchange = jnp.sum(state != c["state"]).astype(jnp.int32)
        nactive = jnp.sum(state != _SAT).astype(jnp.int32)
        improvement = (imp0 + imp) * p.scale
        zero = jnp.zeros((), dt)
        info = _record(c["info"], niter0 + it, True, improvement, zero, zero, nactive, nchange, 0)
        return dict(it=it + 1, done=improvement < tol, f=f, state=state, info=info)

    carry = dict(it=jnp.int32(0), done=jnp.bool_(False), f=f, state=_dual_state(p, f, has_cone),
                 info=info)
    c = lax.while_loop(cond, body, carry)
    return c["f"], c["state"], c["info"]._replace(niter=niter0 + c["it"])


# --------------------------------------------------------------------------------- solve


def _run(m: Model, d: State, p: _Problem, has_cone: bool, nstat: int, any_active):
    solver = m.opt.solver
    if solver == Solver.PGS:
        force, state, info = _pgs(m, d, p, has_cone, nstat)
        qacc = None
    else:
        qacc, force, state, info = _primal(m, d, p, has_cone, solver == Solver.NEWTON, nstat)
    if solver == Solver.PGS or m.opt.noslip_iterations > 0:
        if m.opt.noslip_iterations > 0:
            force, state, info = _noslip(m, d, p, force, info, has_cone)
        qacc = p.qacc_smooth + solve_m(m, d, p.J.T @ force)
    # no rows: the unconstrained answer, as MuJoCo's early return
    qacc = jnp.where(any_active, qacc, p.qacc_smooth)
    info = jax.tree.map(lambda x: jnp.where(any_active, x, jnp.zeros_like(x)), info)
    return qacc, force, state, info


def _tangent_solve(g, y):
    """Solves the linearised optimality condition: its matrix is the Newton Hessian."""
    H = jax.jacfwd(g)(jnp.zeros_like(y))
    return jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(H), True), y)


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
        efc = efc.replace(contact_adr=np.zeros(1, np.int32), contact_nrow=1,
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
        qacc, force, state, info = _run(m, d, p, has_cone, nstat, any_active)
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
