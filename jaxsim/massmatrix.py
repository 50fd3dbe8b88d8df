"""The joint-space inertia's factorisation and solves: M = L' D L in the kinematic tree's
sparsity (MuJoCo: mj_factorM, mj_solveM). `smooth` builds M (crb) and re-exports these."""

from __future__ import annotations

import functools

import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching

from jaxsim import hostnp, linalg, math
from jaxsim.hostnp import jax, jnp  # numpy inside hostnp.host_backend(), see there
from jaxsim.types import Model, State


@functools.lru_cache(maxsize=256)
def _ldl_plan(dof_parentid: tuple) -> tuple:
    """Static plan of the tree L'DL: the (nv, nv) mask of each dof's proper ancestors and
    the dofs of each depth, deepest first."""
    nv = len(dof_parentid)
    anc = np.zeros((nv, nv), bool)
    depth = np.zeros(nv, np.int64)
    for k in range(nv):
        j = dof_parentid[k]
        while j >= 0:
            anc[k, j] = True
            depth[k] += 1
            j = dof_parentid[j]
    levels = tuple(np.nonzero(depth == lv)[0] for lv in range(int(depth.max()), -1, -1))
    return anc, levels


@functools.lru_cache(maxsize=256)
def _ldl_levels(dof_parentid: tuple) -> tuple:
    """The dofs of each depth (deepest first) as rows of a (levels, width) table padded
    with nv; the ancestor mask with a zero row nv for the padding; and each tabled dof's
    proper ancestors as a (levels, width, max depth) table padded with nv."""
    anc, levels = _ldl_plan(dof_parentid)
    nv = len(dof_parentid)
    width = max(len(K) for K in levels)
    idx = np.full((len(levels), width), nv, np.int32)
    for i, K in enumerate(levels):
        idx[i, :len(K)] = K
    depth = max(1, int(anc.sum(1).max()))
    ancl = np.full((len(levels), width, depth), nv, np.int32)
    for i, K in enumerate(levels):
        for j, k in enumerate(K):
            a = np.nonzero(anc[k])[0]
            ancl[i, j, :len(a)] = a
    return idx, np.concatenate([anc, np.zeros((1, nv), bool)]), ancl


# A level updates the (nv, nv) matrix densely while width * nv * nv stays below this (fast
# for small trees); wider levels (many trees: piles of free bodies) gather and scatter their
# dofs' ancestor blocks only, so memory and work grow with width * depth^2.
DENSE_LEVEL_MAX = 1 << 22


def factor_m(m: Model, d: State) -> State:
    """Factorises qM as MuJoCo: M = L' D L with L unit lower-triangular in the tree's
    sparsity (no fill-in), eliminating from the leaves to the roots; a pivot below mjMINVAL
    is raised to it (a singular M still factorises) and counts an INERTIA warning.
    MuJoCo: mj_factorM / mj_factorI.

    The dofs of one depth are eliminated together (they update only their ancestors), so
    there is one step per tree level, each a masked rank-n update; the steps are one loop
    over a table of the levels padded to the widest (compiled once, whatever the depth).
    A single world or a few run LAPACK's dense Cholesky instead when no pivot needs raising
    (see `_ldl_lapack`). qLD holds D on the diagonal and L below it (at [dof, ancestor]);
    qLDiagInv holds 1 / D.
    """
    if not m.nv:
        return d
    parents = tuple(int(p) for p in np.asarray(m.dof_parentid))
    shallow = len(_ldl_plan(parents)[1]) <= _LDL_LOOP_LEVELS
    ldl = _ldl_loop if hostnp.on_host() or shallow else _ldl
    L, D, clamped = ldl(parents, d.qM)
    w = d.warning.at[0].add(clamped.astype(d.warning.dtype))
    return d.replace(qLD=L + jnp.diag(D), qLDiagInv=1.0 / D, warning=w)


def _ldl_loop(parents: tuple, qM: jax.Array):
    """factor_m's (L strictly lower, D, any pivot raised) of one world, by tree levels."""
    nv = len(parents)
    idx, anc, ancl = _ldl_levels(parents)
    dt = qM.dtype
    pad = jnp.zeros((1, nv), dt)
    dense = idx.shape[1] * nv * nv <= DENSE_LEVEL_MAX

    def pivots(K, dk):
        real = K < nv
        low = real & (dk < math.MINVAL)
        return jnp.where(low, math.MINVAL, jnp.where(real, dk, 1.0)), low

    def level(i, carry):
        A, L, D, clamped = carry
        K = jnp.asarray(idx)[i]
        if dense:
            Ak = jnp.concatenate([A, pad])[K]  # rows of the level (zeros for the padding)
            dk, low = pivots(K, Ak[jnp.arange(K.shape[0]), jnp.minimum(K, nv - 1)])
            a = jnp.where(jnp.asarray(anc)[K], Ak, 0.0)  # M[k, ancestors of k]
            lk = a / dk[:, None]
            if lk.shape[0] <= 16:
                # lk' a as explicit multiply-adds (a sum over a narrow level becomes a
                # tiny batched dot, one slow library call per world under vmap)
                for r in range(lk.shape[0]):
                    A = A - lk[r, :, None] * a[r, None, :]
            else:
                A = A - jnp.sum(lk[:, :, None] * a[:, None, :], 0)
            L = L.at[K].set(lk, mode="drop")
        else:
            P = jnp.asarray(ancl)[i]  # (width, depth) ancestors of each dof of the level
            dk, low = pivots(K, A.at[K, K].get(mode="fill", fill_value=1.0))
            a = A.at[K[:, None], P].get(mode="fill", fill_value=0.0)
            lk = a / dk[:, None]
            A = A.at[P[:, :, None], P[:, None, :]].add(-lk[:, :, None] * a[:, None, :],
                                                      mode="drop")
            L = L.at[K[:, None], P].set(lk, mode="drop")
        D = D.at[K].set(dk, mode="drop")
        return A, L, D, clamped | jnp.any(low)

    init = (qM, jnp.zeros((nv, nv), dt), jnp.ones(nv, dt), jnp.zeros((), bool))
    _, L, D, clamped = jax.lax.fori_loop(0, idx.shape[0], level, init)
    return L, D, clamped


# A single world's level loop is a few kernels per tree level (the MJX humanoid: 15 levels,
# ~11 us at batch 1), LAPACK's Cholesky of the 27 x 27 matrix ~2 us. The factorisation is
# the same one in the reversed dof order (L'DL of M is LDL' of the reversed M), and the
# tree's sparsity has no fill-in in that order either, so the entries outside it come out
# exactly zero. A primitive: the lowering chooses on the final batch (`linalg.lapack_ok`;
# on the CPU, large batches in chunks); derivatives are the level loop's. Up to
# _LDL_LOOP_LEVELS levels XLA writes the loop out and it stays cheaper (gymnasium hopper,
# 6 levels: 0.3 us; with the call and its check the hopper's step was 6 % slower).
_LDL_LOOP_LEVELS = 6


def _ldl_lapack(M: jax.Array):
    C = lax.linalg.cholesky(M[..., ::-1, ::-1], symmetrize_input=False)
    c = jnp.diagonal(C, axis1=-2, axis2=-1)
    U = jnp.swapaxes(C / c[..., None, :], -1, -2)
    return jnp.tril(U[..., ::-1, ::-1], -1), (c * c)[..., ::-1]


def _ldl_impl(qM, *, parents, cpu=False):
    loop = jnp.vectorize(functools.partial(_ldl_loop, parents),
                         signature="(n,n)->(n,n),(n),()")
    nv = qM.shape[-1]
    batch, work = int(np.prod(qM.shape[:-2])), nv * nv * nv // 3
    if not linalg.lapack_ok(batch, work):
        c = linalg.chunk_size(batch, work) if cpu and qM.ndim == 3 else 0  # CHUNK_MAX
        if not c:
            return loop(qM)
        return linalg.map_chunks(functools.partial(_ldl_impl, parents=parents), qM, c)
    L, D = _ldl_lapack(qM)
    fine = jnp.all(D >= math.MINVAL)  # no pivot to raise (false for a failed one, NaN)
    none = jnp.zeros(qM.shape[:-2], bool)
    return lax.cond(fine, lambda: (L, D, none), lambda: loop(qM))


def _ldl_abstract(qM, *, parents):
    return (jax.core.ShapedArray(qM.shape, qM.dtype),
            jax.core.ShapedArray(qM.shape[:-1], qM.dtype),
            jax.core.ShapedArray(qM.shape[:-2], np.bool_))


def _ldl_batched(args, dims, *, parents):
    (qM,), (dim,) = args, dims
    return _ldl_p.bind(jnp.moveaxis(qM, dim, 0), parents=parents), (0, 0, 0)


_ldl_p = Primitive("jaxsim_tree_ldl")
_ldl_p.multiple_results = True
_ldl_p.def_impl(_ldl_impl)
_ldl_p.def_abstract_eval(_ldl_abstract)
linalg.cpu_lowering(_ldl_p, _ldl_impl, multiple_results=True)
batching.primitive_batchers[_ldl_p] = _ldl_batched


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _ldl(parents: tuple, qM: jax.Array):
    return tuple(_ldl_p.bind(qM, parents=parents))


@_ldl.defjvp
def _ldl_jvp(parents, primals, tangents):
    return jax.jvp(functools.partial(_ldl_loop, parents), primals, tangents)


def _inv_unit_lower(m: Model, L: jax.Array) -> jax.Array:
    """The inverse of qLD's unit lower-triangular factor, row by row: row r is e_r minus
    L[r, j] times row j over r's ancestor dofs j (the inverse keeps the tree's sparsity)."""
    anc, _ = _ldl_plan(tuple(int(p) for p in np.asarray(m.dof_parentid)))
    eye = jnp.eye(m.nv, dtype=L.dtype)
    rows = []
    for r in range(m.nv):
        v = eye[r]
        for j in np.nonzero(anc[r])[0]:
            v = v - L[r, j] * rows[j]
        rows.append(v)
    return jnp.stack(rows)


def _kept(x: jax.Array) -> jax.Array:
    """x computed once (XLA would otherwise fuse its producer into every use of it)."""
    return x if hostnp.on_host() else lax.optimization_barrier(x)


def solve_m(m: Model, d: State, x: jax.Array) -> jax.Array:
    """Solves M y = x with the factorisation in d.qLD (L' D L). MuJoCo: mj_solveM.

    x is (nv,) or (n, nv) (rows are right-hand sides, as in MuJoCo): y = L^-1 D^-1 L'^-1 x,
    two unit-triangular solves (the diagonal of qLD, D, is skipped by them).
    """
    if not m.nv:
        return x
    if x.ndim == 2:
        # rows of right-hand sides (constraint rows): ((x L^-1) / D) L^-T, L^-1 formed once
        # in the tree's sparsity, as two dots (not nv substitution trips, nor math.mm, which
        # fused into a row-wise sum ran 8x slower: docs/performance.md, "Tiny products")
        Li = _kept(_inv_unit_lower(m, d.qLD))
        return jnp.matmul(jnp.matmul(x, Li) * d.qLDiagInv, Li.T)
    X = jnp.atleast_2d(x).T
    tri = linalg.solve_triangular
    Y = tri(d.qLD, X, trans=True, lower=True, unit_diagonal=True)
    Y = tri(d.qLD, Y * d.qLDiagInv[:, None], lower=True, unit_diagonal=True)
    return Y.T.reshape(x.shape)


def half_solve_m(m: Model, d: State, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(x L^-1, D^-1) for rows x (n, nv): x M^-1 y' = (x L^-1) D^-1 (y L^-1)' (J M^-1 J'
    in one matrix product instead of two)."""
    Li = _kept(_inv_unit_lower(m, d.qLD))
    return jnp.matmul(x, Li), d.qLDiagInv
