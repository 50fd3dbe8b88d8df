"""The primal solvers' line search (Newton, CG). MuJoCo: PrimalPrepare, PrimalEval and
PrimalSearch (engine_solver.c).

Along a search direction v the cost is a sum of quadratic pieces per row (and, for
elliptic cones, per contact), so it and its first two derivatives at a step alpha come from
the rows' coefficients (`prepare`, `_eval`). `search` runs MuJoCo's search, Newton steps
then bracketing (`_bracket_search`), or below float64, for problems without elliptic cones
or islands, the line's exact minimum without a loop (`_exact_search`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim import loops
from jaxsim.math import MINVAL
from jaxsim.solver import _EQ, _FRIC, _INEQ, _Isl, _Problem, _safe


class Line(NamedTuple):
    """Quadratic pieces of the cost along a search direction. MuJoCo: PrimalPrepare."""

    jaref: jax.Array
    jv: jax.Array
    q0: jax.Array
    q1: jax.Array
    q2: jax.Array
    g1: jax.Array
    g2: jax.Array
    cone: tuple | None  # (U0, V0, UU, UV, VV, Dm, q0, q1, q2) per contact


def prepare(p: _Problem, has_cone, jaref, jv, Ma, Mv, v, isl: _Isl | None = None) -> Line:
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
    return Line(jaref, jv, q0, q1, q2, g1, g2, cone)


def _cone_zone(N, tsq, mu):
    """1 top, 2 bottom, 3 middle; also T = sqrt(tsq) (0 when tsq <= 0)."""
    pos = tsq > 0
    T = jnp.where(pos, jnp.sqrt(_safe(tsq, pos)), 0.0)
    z = jnp.where(N >= mu * T, 1, jnp.where(mu * N + T <= 0, 2, 3))
    return jnp.where(pos, z, jnp.where(N < 0, 2, 1)), T


def _eval(p: _Problem, ln: Line, alpha, isl: _Isl | None = None):
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


def _exact_search(p: _Problem, ln: Line, skip):
    """The exact minimiser along the line of a cost made of quadratic pieces (no elliptic
    cone), without a loop: the cost's derivative is continuous, piecewise linear and
    non-decreasing, its kinks where a row changes piece (an inequality row at x = 0, a
    friction-loss row at x = +-R floss). The derivative at every kink brackets the minimum
    between the last kink of negative slope and the first of positive slope; no kink lies
    between them, so one Newton step from a point inside lands on the minimum. Same
    returns as `search`; three evaluations of the rows in all (the kinks' slopes, the
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
    slope = 2 * ln.g2 * inner + ln.g1 + jnp.sum(djv * jnp.clip(x, bottom, top))
    curv = 2 * ln.g2 + jnp.sum(jnp.where((x > bottom) & (x < top), djv * jv, 0.0))
    alpha = inner - slope / jnp.maximum(curv, MINVAL)
    alpha = jnp.where(has_lo, jnp.maximum(alpha, lo_f), alpha)
    alpha = jnp.where(has_hi, jnp.minimum(alpha, hi_f), alpha)
    r = _eval(p, ln, alpha)
    better = (r[C] < 0) & ~jnp.asarray(skip, bool)
    return (jnp.where(better, alpha, 0.0), jnp.where(better, -r[C], 0.0),
            jnp.where(jnp.asarray(skip, bool), 0, 3).astype(jnp.int32),
            jnp.where(better, jnp.abs(r[G]), 0.0))


def search(p: _Problem, ln: Line, gtol, ls_iterations: int, skip=False,
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


def _bracket_search(p: _Problem, ln: Line, gtol, ls_iterations: int, skip, isl):
    """MuJoCo's line search (see `search`)."""
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
