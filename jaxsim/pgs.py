"""The dual solvers: PGS and the noslip pass. MuJoCo: mj_solPGS, mj_solNoSlip.

Both sweep the constraint blocks of the dual problem 0.5 f'(A + R) f + f'(J qacc_smooth -
aref) (noslip: A alone, friction blocks only) one at a time, on the masked fixed-size
problem of `jaxsim.solver`: scalar rows with their box constraints, pyramidal edge pairs and
elliptic cones through a small QCQP, MuJoCo's visitation order (PCG32 shuffle) and
Nesterov momentum, each constraint island on its own as MuJoCo 4.0 does unless the island
flag is disabled, and the statistics of mjData.solver. `jaxsim.solver.solve` calls them
and supplies the implicit gradients. Small problems (few rows per dof, see DENSE_*) form the
dual matrix; others read its rows as J_i M^-1 J' f through v = M^-1 J' f, updated with each
block (memory nefc x nv, not nefc^2: large contact buffers no longer exhaust memory).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim import linalg, loops
from jaxsim.math import MINVAL
from jaxsim.smooth import half_solve_m, solve_m
from jaxsim.solver import (
    _CONE,
    _ELL,
    _EQ,
    _FRIC,
    _INEQ,
    _LNEG,
    _LPOS,
    _QUAD,
    _SAT,
    SolverInfo,
    _islands,
    _norm,
    _one_problem,
    _Problem,
    _record,
    _safe,
    _stats,
    _update,
)
from jaxsim.types import DisableBit, Model, State

# PCG32 multiplier as two 32-bit halves (MuJoCo's PGS visitation order)
_PCG_HI, _PCG_LO = 0x5851F42D, 0x4C957F2D


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


# PGS's visiting orders from a table instead of shuffling in the sweep: with one island
# the order of pass n depends only on the number of blocks and n (the generator is
# re-seeded for every solve), so problems with at most this many table entries ((rows + 1)
# x iterations x rows) look it up. The shuffle took 7 of the sweep's ~30 kernels per trip.
ORDER_TABLE_MAX = 1 << 20


def _np_pcg32(state: np.ndarray):
    """`_pcg32` on uint64 states in numpy: (new state, output)."""
    with np.errstate(over="ignore"):
        x = ((state >> np.uint64(18)) ^ state) >> np.uint64(27)
        x = (x & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        rot = (state >> np.uint64(59)).astype(np.uint32)
        out = (x >> rot) | (x << ((np.uint32(32) - rot) & np.uint32(31)))
        new = state * np.uint64((_PCG_HI << 32) | _PCG_LO) + np.uint64(1)
    return new, out


@functools.lru_cache(maxsize=32)
def _order_table(nefc: int, maxiter: int) -> np.ndarray:
    """(nefc + 1, maxiter, nefc): the block order of pass n of a problem with c blocks
    (table[c, n, :c]), as `_pgs`'s shuffles produce them (MuJoCo's Fisher-Yates shuffle
    with PCG32, re-applied to the previous pass's order before each pass)."""
    state, _ = _np_pcg32(np.zeros(nefc + 1, np.uint64))  # seeded state after one step
    cnt = np.arange(nefc + 1)
    perm = np.tile(np.arange(nefc), (nefc + 1, 1))
    rows = np.arange(nefc + 1)
    dtype = np.uint8 if nefc <= 256 else np.int32
    out = np.empty((nefc + 1, maxiter, nefc), dtype)
    for n in range(maxiter):
        for t in range(max(nefc - 1, 0)):
            go = t < cnt - 1
            i = np.where(go, cnt - 1 - t, 0)
            new, r = _np_pcg32(state)
            j = np.where(go, r % np.maximum(i + 1, 1).astype(np.uint32), 0).astype(np.int64)
            pi, pj = perm[rows, i], perm[rows, j]
            perm[rows, i] = np.where(go, pj, pi)
            perm[rows, j] = np.where(go, pi, perm[rows, j])
            state = np.where(go, new, state)
        out[:, n] = perm
    out.setflags(write=False)
    return out


# above this many rows the dual matrix J M^-1 J' (nefc x nefc) is not formed: rows of it
# are J_i v with v = M^-1 J' f kept up to date (memory nefc x nv instead of nefc^2)
DENSE_MAX_ROWS = 4096
# J M^-1 J' costs nefc^2 nv to form and each row of it nefc per update, where the
# matrix-free row costs 2 nv (J_i v, then v += M^-1 J_i' df); batched, the solver's loop
# also gathers the matrix (nefc^2 per world) for each trip's chunk of worlds: form it only
# for problems with at most 2 rows per dof, or tiny ones (gymnasium humanoid, PGS, batch
# 1024, float32, up to ~90 rows for 23 dofs: 1696-1747 -> 1863-1918 steps/s with the
# matrix-free rows; the bound was 4 rows per dof and 64 rows)
DENSE_ROWS_PER_DOF = 2
DENSE_MIN_ROWS = 16


class _Dual:
    """The dual matrix AR = J M^-1 J' + diag(R) (without R for noslip), as a dense matrix for
    small problems or matrix-free for large ones. Sweeps carry (f, v), v = M^-1 J' f in the
    matrix-free form (unused, zeros, in the dense one)."""

    def __init__(self, m: Model, d: State, p: _Problem, sub_r: bool = False):
        self.J = p.J
        self.R = jnp.zeros_like(p.R) if sub_r else p.R
        R = self.R
        nefc, nv = p.J.shape
        self.dense = nefc <= min(DENSE_MAX_ROWS, max(DENSE_MIN_ROWS, DENSE_ROWS_PER_DOF * nv))
        if self.dense:
            # J M^-1 J' = (J L^-1) D^-1 (J L^-1)': one product less than through M^-1 J'
            # (which the dense form needs for nothing else)
            X, dinv = half_solve_m(m, d, p.J)
            self.AR = (X * dinv) @ X.T + jnp.diag(p.R)
            if sub_r:  # (as MuJoCo: AR with R taken off its diagonal)
                self.AR = self.AR - jnp.diag(p.R)
            self.diag = jnp.diagonal(self.AR)
        else:
            self.MinvJT = solve_m(m, d, p.J)  # rows: M^-1 J_i
            self.diag = jnp.sum(p.J * self.MinvJT, axis=1) + R
        self.b = p.J @ p.qacc_smooth - p.aref

    def v_of(self, f):
        return jnp.zeros(self.J.shape[1], f.dtype) if self.dense else self.MinvJT.T @ f

    def rows(self, idx, f, v):
        """(AR f)[idx] + b[idx]."""
        if self.dense:
            return self.b[idx] + self.AR[idx] @ f
        return self.b[idx] + self.J[idx] @ v + self.R[idx] * f[idx]

    def block(self, idx):
        """AR[idx][:, idx] for a vector of row indices."""
        if self.dense:
            return self.AR[idx[:, None], idx[None, :]]
        return self.J[idx] @ self.MinvJT[idx].T + jnp.diag(self.R[idx])

    def push(self, v, idx, delta):
        """v after f[idx] += delta (idx and delta scalars or vectors)."""
        if self.dense:
            return v
        if jnp.ndim(delta):
            return v + self.MinvJT[idx].T @ delta
        return v + self.MinvJT[idx] * delta

    def quad(self, f):
        """f' AR f."""
        if self.dense:
            return jnp.dot(f, self.AR @ f)
        return jnp.dot(self.J.T @ f, self.MinvJT.T @ f) + jnp.dot(self.R * f, f)


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
        L = linalg.cholesky(As + la * jnp.diag(on))
        piv = jnp.diagonal(L) ** 2
        finite = jnp.all(jnp.isfinite(piv))
        piv = jnp.where(finite, piv, 0.0)
        # 2 and 3 dimensions test the determinant, more the Cholesky pivots
        bad = jnp.where(nuse <= 3, jnp.prod(piv) < 1e-10, jnp.min(piv) < 1e-10) | ~finite
        L = jnp.where(finite, L, jnp.eye(L.shape[0], dtype=L.dtype))
        vn = -linalg.cho_solve(L, bs)
        val = jnp.dot(vn, vn) - r * r
        delta = val / (2.0 * jnp.dot(vn, linalg.cho_solve(L, vn)))
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


# PGS over the live rows only: with scalar rows (no elliptic cone) and one island, a
# world of a batch larger than loops._MIN_BATCH with at most this many live rows solves a
# problem of that many (visiting order, momentum and statistics the same: the blocks are
# the live rows, in row order), others the whole one (`loops.cond`). None: never.
ROWS_DIV = 4


def _compact_rows(nefc: int) -> int | None:
    if ROWS_DIV is None:
        return None
    k = max(16, -(-nefc // ROWS_DIV))
    return k if 2 * k <= nefc else None


def pgs(m: Model, d: State, p: _Problem, has_cone: bool, nstat: int):
    """`_pgs`, on the live rows alone when they are few (see ROWS_DIV)."""
    nefc = p.J.shape[0]
    k = _compact_rows(nefc)
    if k is None or has_cone or not _one_problem(m):
        return _pgs(m, d, p, has_cone, nstat)
    live = p.kind != 0

    def few():
        idx = loops.true_first(live, k)
        valid = live[idx]
        sub = p._replace(J=p.J[idx], D=p.D[idx], R=p.R[idx], floss=p.floss[idx],
                         aref=p.aref[idx], kind=jnp.where(valid, p.kind[idx], 0),
                         pyr=p.pyr[idx], rc=p.rc[idx], rj=p.rj[idx], unit=None)
        f, state, info = _pgs(m, d, sub, has_cone, nstat)
        f = jnp.zeros(nefc, f.dtype).at[idx].set(jnp.where(valid, f, 0.0),
                                                  unique_indices=True)
        state = jnp.full(nefc, _SAT, state.dtype).at[idx].set(
            jnp.where(valid, state, _SAT), unique_indices=True)
        return f, state, info

    # a single world or a small batch: the whole problem (the cond costs more there: the
    # gymnasium humanoid at batch 1, 234 -> 155 steps/s)
    return loops.cond(jnp.sum(live) <= k, few, lambda: _pgs(m, d, p, has_cone, nstat),
                      large_batch_only=True)


def _pgs(m: Model, d: State, p: _Problem, has_cone: bool, nstat: int):
    """Projected Gauss-Seidel on the dual. MuJoCo: mj_solPGS, one island at a time.

    Islands share no dofs, so their blocks are swept in one pass (in any interleaving) while
    each keeps its own visiting order (its own PCG32 stream, seeded alike), momentum,
    improvement and termination; an island that has converged stops changing. The
    statistics hold the sum over the islands still iterating; niter is the largest island's
    count (MuJoCo: per island)."""
    dt = p.qacc_smooth.dtype
    nefc = p.J.shape[0]
    K = p.ci.shape[1] if has_cone else 1
    tol = m.opt.tolerance
    maxiter = m.opt.iterations
    op = _Dual(m, d, p)
    b = op.b
    ARinv = 1.0 / op.diag
    k = p.kind

    if m.opt.disableflags & DisableBit.WARMSTART:
        f = jnp.zeros(nefc, dt)
    else:
        w = d.qacc_warmstart
        f = _update(p, p.J @ w - p.aref, has_cone).force
        f = jnp.where(jnp.dot(f, b) + 0.5 * op.quad(f) > 0, 0.0, f)

    start = (k == _EQ) | (k == _FRIC) | (k == _INEQ) | ((k == _ELL) & (p.rj == 0))
    nblocks = jnp.sum(start).astype(jnp.int32)
    blocks = jnp.nonzero(start, size=nefc, fill_value=0)[0].astype(jnp.int32)
    isl = _islands(m, d, p)
    if isl is None:
        rowisl, nisl, scale = jnp.zeros(nefc, jnp.int32), 1, p.scale[None]
    else:
        rowisl, nisl, scale = isl.row, isl.n, isl.scale
    # blocks grouped by island (in row order within each): island i's order is kept in
    # perm[seg[i] : seg[i] + cnt[i]]
    bisl = jnp.where(jnp.arange(nefc) < nblocks, rowisl[blocks], nisl)
    cnt = jnp.sum(bisl[None, :] == jnp.arange(nisl)[:, None], axis=1).astype(jnp.int32)
    seg = (jnp.cumsum(cnt) - cnt).astype(jnp.int32)
    if isl is None:  # one island: the blocks are in order already (no sort at run time)
        perm0 = jnp.arange(nefc, dtype=jnp.int32)
    else:
        perm0 = jnp.argsort(bisl, stable=True).astype(jnp.int32)
    table = None
    if isl is None and (nefc + 1) * maxiter * nefc <= ORDER_TABLE_MAX:
        table = jnp.asarray(_order_table(nefc, maxiter))
    hi0, lo0, _ = _pcg32(jnp.uint32(0), jnp.uint32(0))  # seeded state after one step
    rng = (jnp.full(nisl, hi0), jnp.full(nisl, lo0))

    def shuffle_step(perm, t, hi, lo):
        """Step t of each island's Fisher-Yates shuffle of its segment (shuffle_int)."""
        i = cnt - 1 - t
        nhi, nlo, r = _pcg32(hi, lo)
        go = t < cnt - 1
        j = (r % jnp.maximum(i + 1, 1).astype(jnp.uint32)).astype(jnp.int32)
        a = jnp.where(go, seg + i, nefc)
        bb = jnp.where(go, seg + j, nefc)
        pa, pb = perm[jnp.minimum(a, nefc - 1)], perm[jnp.minimum(bb, nefc - 1)]
        perm = perm.at[a].set(pb, mode="drop").at[bb].set(pa, mode="drop")
        return perm, jnp.where(go, nhi, hi), jnp.where(go, nlo, lo)

    def shuffle(perm, rng):
        def body(t, c):
            return shuffle_step(c[0], t, c[1], c[2])

        perm, hi, lo = lax.fori_loop(0, jnp.maximum(jnp.max(cnt) - 1, 0), body,
                                     (perm, rng[0], rng[1]))
        return perm, (hi, lo)

    # the scalar update's per-row values, gathered together (one gather per trip, not six)
    packed = jnp.stack([b, ARinv, p.floss, op.diag, op.R, k.astype(dt)], axis=-1)

    def scalar(fv, i, on):
        f, v = fv
        row = lax.optimization_barrier(packed[i])  # else XLA gathers each value apart
        b_i, arinv_i, floss_i, diag_i, r_i, k_i = (row[j] for j in range(6))
        old = f[i]
        res = b_i + op.AR[i] @ f if op.dense else b_i + op.J[i] @ v + r_i * old
        new = old - res * arinv_i
        new = jnp.where(k_i == _FRIC, jnp.clip(new, -floss_i, floss_i),
                        jnp.where(k_i == _INEQ, jnp.maximum(new, 0.0), new))
        new, change = _cost_change(diag_i[None, None], new[None], old[None], res[None])
        v = jnp.where(on, op.push(v, i, new[0] - old), v)
        return (f.at[jnp.where(on, i, nefc)].set(new[0], mode="drop"), v), \
            jnp.where(on, change, 0.0)

    def elliptic(fv, i, on):
        f, v = fv
        jj = jnp.arange(K)
        idx = jnp.clip(i + jj, 0, nefc - 1)
        c = p.rc[i]
        msk = jj < p.cdim[c]
        res = jnp.where(msk, op.rows(idx, f, v), 0.0)
        old = jnp.where(msk, f[idx], 0.0)
        A = jnp.where(msk[:, None] & msk[None, :], op.block(idx), 0.0)
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
        v = jnp.where(on, op.push(v, idx, jnp.where(msk, new - old, 0.0)), v)
        return ((f.at[jnp.where(msk & on, idx, nefc)].set(new, mode="drop"), v),
                jnp.where(on, change, 0.0))

    def update(fv, i, on):
        """Block i's update; nothing where `on` is false (a trip past the world's blocks
        in the batched sweep, see loops.fori_masked)."""
        if has_cone:
            return lax.cond(k[i] == _ELL, elliptic, scalar, fv, i, on)
        return scalar(fv, i, on)

    def sweep(f, perm, rng, running, it):
        """One pass over the blocks of the running islands in the order `perm` (or the
        order table's, `it` the pass); without the table the same trips shuffle a copy of
        perm, the next pass's order (half the sequential trips of shuffling apart)."""
        def body(t, c):
            fv, imp, nxt, hi, lo = c
            on = t < nblocks
            if table is None:
                i = blocks[perm[t]]
            else:
                i = blocks[table[nblocks, it, t].astype(jnp.int32)]
            isl = jnp.minimum(rowisl[i], nisl - 1)
            if nisl == 1:
                fv, change = update(fv, i, on)
            else:
                fv, change = update(fv, i, on & running[isl])
            if table is None:
                nxt, hi, lo = shuffle_step(nxt, t, hi, lo)
            return fv, (imp - change if nisl == 1 else imp.at[isl].add(-change)), nxt, hi, lo

        init = ((f, op.v_of(f)), jnp.zeros(nisl, dt), perm, rng[0], rng[1])
        (f, _), imp, nxt, hi, lo = loops.fori_masked(nblocks, body, init)
        return f, imp, nxt, (hi, lo)

    def project(f):
        f = jnp.where(k == _FRIC, jnp.clip(f, -p.floss, p.floss), f)
        f = jnp.where(k == _INEQ, jnp.maximum(f, 0.0), f)
        if has_cone:
            fb = jnp.where(p.cm, f[p.ci], 0.0)
            ft = _project_ellipsoid(fb[:, 1:], fb[:, 0], p.fric, p.cm[:, 1:], True)
            fb = jnp.where(fb[:, :1] < 0, 0.0, jnp.concatenate([fb[:, :1], ft], 1))
            f = jnp.where(k == _ELL, fb[p.rc, p.rj], f)
        return f

    if isl is None:  # one island: its quantities broadcast over the rows as scalars
        def per_row(x):
            return x[0]

        def island_sum(x):
            return jnp.sum(x)[None]
    else:
        per_row, island_sum = isl.on_rows, isl.rsum

    state0 = _dual_state(p, f, has_cone)
    if table is None:
        perm, rng = shuffle(perm0, rng)
    else:  # the orders come from the table: perm and rng are not used
        perm, rng = jnp.zeros(1, jnp.int32), (jnp.zeros(1, jnp.uint32),) * 2
    carry = dict(it=jnp.int32(0), done=cnt == 0, f=f, fprev=f, fmom=f,
                 nk=jnp.zeros(nisl, jnp.int32), perm=perm, rng=rng, state=state0,
                 info=_stats(nstat, dt))

    def cond(c):
        return jnp.any(~c["done"]) & (c["it"] < maxiter)

    def body(c):
        f, it, running = c["f"], c["it"], ~c["done"]
        run_r = per_row(running)
        # Nesterov extrapolation, projected back onto the constraint set
        nk = c["nk"].astype(dt)  # small integer: exact in any float dtype
        beta = per_row(jnp.where(it > 0, (nk - 1) / (nk + 2.0), 0.0))
        ext = run_r & (beta > 0)
        fx = project(f + beta * (f - c["fprev"]))
        fprev = jnp.where(run_r, f, c["fprev"])
        f = jnp.where(ext, fx, f)
        fmom = jnp.where(run_r, f, c["fmom"])

        f, imp, perm, rng = sweep(f, c["perm"], c["rng"], running, it)
        state = _dual_state(p, f, has_cone)
        nchange = jnp.sum(state != c["state"]).astype(jnp.int32)
        nactive = jnp.sum(state != _SAT).astype(jnp.int32)
        imp = imp * scale
        zero = jnp.zeros((), dt)
        info = _record(c["info"], it, True, jnp.sum(jnp.where(running, imp, 0.0)), zero, zero,
                       nactive, nchange, 0)
        restart = (it > 0) & (island_sum((f - fmom) * (fmom - fprev)) < 0)
        nk = jnp.where(running, jnp.where(restart, 0, c["nk"] + 1), c["nk"])
        return dict(it=it + 1, done=c["done"] | (running & (imp < tol)), f=f, fprev=fprev,
                    fmom=fmom, nk=nk, perm=perm, rng=rng, state=state, info=info)

    # batched, only the worlds still iterating take trips (loops.while_loop): PGS stops
    # after very different iteration counts across worlds (the gymnasium ant with PGS at
    # batch 1024, float32: 5.3 on average, 23 at most; fwd_constraint 410-474 -> 279-305 ms
    # per call, measured in alternation on a loaded machine)
    c = loops.while_loop(cond, body, carry)
    return c["f"], c["state"], c["info"]._replace(niter=c["it"])


# ------------------------------------------------------------------------------- noslip


def noslip(m: Model, d: State, p: _Problem, f, info: SolverInfo, has_cone: bool):
    """Friction re-solved without regularisation, as a PGS pass. MuJoCo: mj_solNoSlip."""
    dt = f.dtype
    nefc = p.J.shape[0]
    K = p.ci.shape[1]
    op = _Dual(m, d, p, sub_r=True)  # A alone: no regularisation
    Ainv = 1.0 / jnp.maximum(MINVAL, op.diag)
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
        Ab = op.block(idx)
        Ab = Ab + jnp.diag(jnp.maximum(1e-10, jnp.diagonal(Ab)) - jnp.diagonal(Ab))
        return idx, Ab

    def friction(fv, i):
        f, v = fv
        res = op.rows(i, f, v)
        old = f[i]
        new = jnp.clip(old - res * Ainv[i], -p.floss[i], p.floss[i])
        delta = new - old
        return ((f.at[i].set(new), op.push(v, i, delta)),
                -(0.5 * delta * delta / Ainv[i] + delta * res))

    def pyramid(fv, i):
        f, v = fv
        idx, Ac = block(i, 2)
        res = op.rows(idx, f, v)
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
        return (f.at[idx].set(new), op.push(v, idx, new - old)), -change

    def elliptic(fv, i):
        f, v = fv
        idx, Ac = block(i + 1, K - 1)
        c = p.rc[i]
        msk = jnp.arange(K - 1) < p.cdim[c] - 1
        res = jnp.where(msk, op.rows(idx, f, v), 0.0)
        old = jnp.where(msk, f[idx], 0.0)
        Ac = jnp.where(msk[:, None] & msk[None, :], Ac, 0.0)
        bc = res - Ac @ old
        fr = p.fric[c]
        ft, constrained = _qcqp(Ac, bc, fr, f[i], msk)
        ft = jnp.where(constrained, _project_ellipsoid(ft, f[i], fr, msk, False), ft)
        ft = jnp.where((f[i] < MINVAL) | ~msk, 0.0, ft)
        new, change = _cost_change(Ac, ft, old, res)
        v = op.push(v, idx, jnp.where(msk, new - old, 0.0))
        return (f.at[jnp.where(msk, idx, nefc)].set(new, mode="drop"), v), -change

    def sweep(f):
        def body(t, c):
            fv, imp = c
            i = blocks[t]
            branches = [friction, pyramid] + ([elliptic] if has_cone and K > 1 else [])
            which = jnp.where(k[i] == _FRIC, 0, jnp.where(p.pyr[i], 1, 2))
            which = jnp.minimum(which, len(branches) - 1)
            fv, dimp = lax.switch(which, branches, fv, i)
            return fv, imp + dimp

        (f, _), imp = lax.fori_loop(0, nblocks, body, ((f, op.v_of(f)), jnp.zeros((), dt)))
        return f, imp

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
    c = loops.while_loop(cond, body, carry)
    return c["f"], c["state"], c["info"]._replace(niter=niter0 + c["it"])


