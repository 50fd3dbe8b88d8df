"""Small dense linear algebra: plain JAX loops, and LAPACK only where it cannot hang.

jaxlib runs batched LAPACK calls (Cholesky, triangular solves, LU, eigh) through an FFI
kernel that splits a large batch over XLA's intra-op thread pool and blocks its own pool
thread until the pieces finish. When two such calls run concurrently (the CPU runtime
executes independent operations in parallel) on a machine whose pool has as many threads
as calls, every pool thread waits for work that no thread is free to run: the program
hangs with no CPU use. On a 2-core machine a vmapped Newton step of the gymnasium ant
hung this way from about 1000 worlds up.

The simulator's matrices are small (nv x nv inertia and Newton Hessians, 6 x 6 free-body
blocks, cone blocks of at most 6 x 6), so these routines do the factorisations and solves
as loops of vector operations that XLA fuses and vectorises across a vmapped batch;
matrices larger than `BLOCK` are split in two recursively (blocked Cholesky, block
triangular solves, block elimination with the Schur complement), so large factorisations
are mostly matrix products. All functions accept leading batch dimensions. Batches of at
most SMALL_BATCH worlds (and single worlds) run the loops in a form that launches fewer
kernels per trip; the batching rules choose (see "small-batch kernels"), and the smallest
of those go to LAPACK in calls too small for jaxlib to split (see `LAPACK_WORK`). Larger
batches go to LAPACK in a loop over chunks of worlds, each call as small (`CHUNK_MAX`),
and a matrix too large for that goes to LAPACK alone, one world per call (a call on one
matrix is never split; see `lapack_ok`). Which form runs is decided when the program is
lowered, on the final shapes; the blocked recursion past `BLOCK` happens there too, for
the forms that are not LAPACK's (`_chol_rec`, `_tri_rec`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jaxsim import hostnp

# matrices of this order or smaller are factorised by the loops; larger ones in blocks
BLOCK = 48
# ... and of this order or smaller by straight-line code (see "unrolled kernels")
UNROLL = 6


def _chol2_vec(a: jax.Array) -> jax.Array:
    n = a.shape[-1]
    idx = jnp.arange(n)

    def body(j, L):
        lj = jnp.where(idx < j, L[j], 0.0)  # row j of the finished columns
        col = a[:, j] - L @ lj
        d = jnp.sqrt(col[j])
        new = jnp.where(idx > j, col / d, jnp.where(idx == j, d, 0.0))
        return L.at[:, j].set(new)

    return lax.fori_loop(0, n, body, jnp.zeros_like(a))


# --------------------------------------------------------------------- unrolled kernels
#
# The smallest matrices (a cart-pole's 2 x 2 inertia, a hopper's 6 x 6 Newton Hessian, the
# cone blocks) cost the loops' fixed price, a few kernels per trip, for a handful of flops.
# Written out entry by entry the whole factorisation or solve is one expression over the
# batch, which XLA fuses into a few kernels (cart-pole: ~60 fewer instructions per step).


def _chol_unrolled(a: jax.Array) -> jax.Array:
    """_chol2_loop written out for a small order n, over any leading dimensions."""
    n = a.shape[-1]
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        d = a[..., j, j]
        for k in range(j):
            d = d - L[j][k] * L[j][k]
        d = jnp.sqrt(d)
        L[j][j] = d
        for i in range(j + 1, n):
            v = a[..., i, j]
            for k in range(j):
                v = v - L[i][k] * L[j][k]
            L[i][j] = v / d
    zero = jnp.zeros_like(a[..., 0, 0])
    return jnp.stack([jnp.stack([L[i][j] if j <= i else zero for j in range(n)], axis=-1)
                      for i in range(n)], axis=-2)


def _tri_unrolled(A: jax.Array, B: jax.Array, lower: bool, unit: bool) -> jax.Array:
    """_tri2_loop written out for a small order n: A (..., n, n), B (..., n, k)."""
    n = A.shape[-1]
    X = [None] * n
    for i in range(n):
        r = i if lower else n - 1 - i
        s = B[..., r, :]
        for c in (range(r) if lower else range(r + 1, n)):
            s = s - A[..., r, c, None] * X[c]
        X[r] = s if unit else s / A[..., r, r, None]
    return jnp.stack(X, axis=-2)


# ----------------------------------------------------------------- small-batch kernels
#
# The loops above suit a large vmapped batch: each trip is a batched product (XLA hands it
# to an optimised kernel) and an indexed update, which vmap turns into a scatter with its
# index and bounds arithmetic, about a dozen kernels per trip. One world, or a few, pays
# for the kernel count instead (the gymnasium ant at batch 1 ran ~1100 kernels per step in
# its factorisations). The loops below take the batch as explicit leading dimensions: the
# column or row update is a plain in-place dynamic-update-slice and the product a
# multiply-and-sum that fuses with its neighbours (4-5 kernels per trip; 14 x 14 at batch
# 1: ~22 -> ~6 us). `_chol2` and `_tri2` pick one or the other by batch size (a custom
# batching rule sees it), so large batches keep the vectorised form.

SMALL_BATCH = 16


def _index(x: jax.Array, i, axis: int) -> jax.Array:
    return lax.dynamic_index_in_dim(x, i, axis=axis, keepdims=False,
                                    allow_negative_indices=False)


def _put(x: jax.Array, v: jax.Array, i, axis: int) -> jax.Array:
    """x with index i of `axis` replaced by v (v lacks that axis)."""
    axis = axis % x.ndim
    start = [jnp.zeros((), jnp.int32)] * x.ndim
    start[axis] = jnp.asarray(i, jnp.int32)
    return lax.dynamic_update_slice(x, jnp.expand_dims(v, axis), start,
                                    allow_negative_indices=False)


def _chol2_loop(a: jax.Array) -> jax.Array:
    """_chol2_vec over explicit leading batch dimensions of a (..., n, n)."""
    n = a.shape[-1]
    idx = jnp.arange(n)
    at = jnp.swapaxes(a, -1, -2)

    def body(j, L):
        # L's columns from j on are still zero, so row j holds its finished part only
        lj = _index(L, j, -2)
        col = _index(at, j, -2) - jnp.sum(L * lj[..., None, :], axis=-1)
        d = jnp.sqrt(_index(col, j, -1))[..., None]
        new = jnp.where(idx > j, col / d, jnp.where(idx == j, d, 0.0))
        return _put(L, new, j, -1)

    return lax.fori_loop(0, n, body, jnp.zeros_like(a))


def _tri2_loop(A: jax.Array, B: jax.Array, lower: bool, unit: bool) -> jax.Array:
    """_tri2_vec over explicit leading batch dimensions of A (..., n, n), B (..., n, k)."""
    n = A.shape[-1]
    idx = jnp.arange(n)

    def body(i, X):
        r = i if lower else n - 1 - i
        a_r = _index(A, r, -2)
        row = jnp.where((idx < r) if lower else (idx > r), a_r, 0.0)
        s = _index(B, r, -2) - jnp.sum(row[..., :, None] * X, axis=-2)
        if not unit:
            s = s / _index(a_r, r, -1)[..., None]
        return _put(X, s, r, -2)

    return lax.fori_loop(0, n, body, jnp.zeros_like(B))


# ------------------------------------------------------------------ LAPACK, unsplit
#
# A few worlds' factorisations are a few hundred flops each; the loops above still launch
# a few kernels per column. jaxlib's LAPACK kernels do a whole (small) batch in one call,
# and they only hand pieces of a batch to the thread pool (the hang described at the top)
# when the batch's work reaches 2e5 flops by their own estimate (n^3 / 3 per Cholesky,
# n^2 k per triangular solve with k right-hand sides; jaxlib 0.10; later releases do not
# split at all in open-source builds). Below half of that the call runs its batch on the
# calling thread and cannot wait for the pool: such calls go to LAPACK (the gymnasium ant
# at batch 1: its 14 x 14 Newton Hessian, one call instead of ~14 trips of 4-5 kernels).
# The decision is taken when the program is lowered, on the final shapes, so an outer
# vmap can never enlarge a LAPACK call past it. 0 turns LAPACK off.
LAPACK_WORK = 100_000


def lapack_ok(batch: int, work: int) -> bool:
    """Whether a LAPACK call on `batch` matrices of `work` flops each (jaxlib's estimate)
    may be made: small enough that jaxlib runs it on the calling thread, or a single
    matrix, whatever its size (jaxlib splits a call over its batch only: two concurrent
    calls on one 600 x 600 matrix each ran 300 times without a hang on the 2-core
    machine, where the same two calls on two matrices each hung at once;
    `tests/test_linalg.py` keeps checking it)."""
    return batch == 1 or batch * work < LAPACK_WORK


# A large batch goes to LAPACK too, in a loop over chunks each small enough to stay on the
# calling thread: the worlds' matrices are then factorised one after another in cache,
# where the vectorised loops sweep the whole batch once per column (1024 Cholesky
# factorisations of 27 x 27: 4.3-5.8 -> 1.9-2.6 ms; of 14 x 14: 1.25 -> 0.68 ms; a
# cho_solve of one right-hand side, 27 x 27: 2.0-2.6 -> 1.0 ms, 14 x 14: 0.63-0.76 ->
# 0.59-0.64 ms).
CHUNK_MAX = 32


def chunk_size(batch: int, work: int) -> int:
    """Worlds per LAPACK call when a batch of `batch` matrices of `work` flops each is done
    in chunks (1 for matrices past half of LAPACK_WORK, at any batch size); 0 when it
    should not be (a small batch of small matrices, or LAPACK off)."""
    if batch == 1 or not LAPACK_WORK:
        return 0
    if 2 * work >= LAPACK_WORK:  # large matrices: one per call (see lapack_ok)
        return 1
    if batch <= SMALL_BATCH:
        return 0
    c = min(CHUNK_MAX, (LAPACK_WORK - 1) // max(work, 1))
    # a divisor of the batch if one is not much smaller: padding copies the whole batch
    # (1024 x 27 x 27: 1.5 ms)
    div = max(k for k in range(1, c + 1) if batch % k == 0)
    return div if 2 * div >= c else c


def map_chunks(f, x, c: int):
    """f over chunks of `c` along the leading axis of x (an array or a tuple of them) in a
    loop, the results concatenated back; the last chunk is padded with copies of the
    first entry."""
    b = jax.tree.leaves(x)[0].shape[0]
    k = -(-b // c)

    def split(a):
        if k * c > b:
            a = jnp.concatenate([a, jnp.broadcast_to(a[:1], (k * c - b,) + a.shape[1:])])
        return a.reshape((k, c) + a.shape[1:])

    out = lax.map(f, jax.tree.map(split, x))
    return jax.tree.map(lambda y: y.reshape((k * c,) + y.shape[2:])[:b], out)


# The Cholesky factorisation of the loops is a primitive too: its lowering sees the final
# shapes and picks the form (LAPACK whole or, on the CPU, in chunks; the loops with explicit
# batch dimensions up to SMALL_BATCH worlds, vectorised above). Its derivatives are those
# of `_chol` (a custom_jvp), so the primitive itself needs none.
_chol_p = Primitive("jaxsim_cholesky")


def _chol_impl(a, *, cpu=False):
    n = a.shape[-1]
    batch, work = math.prod(a.shape[:-2]), n * n * n // 3
    if lapack_ok(batch, work):
        return lax.linalg.cholesky(a, symmetrize_input=False)
    c = chunk_size(batch, work) if cpu else 0
    if c:  # LAPACK over chunks of worlds (see CHUNK_MAX)
        return map_chunks(lambda x: lax.linalg.cholesky(x, symmetrize_input=False),
                          a.reshape((batch, n, n)), c).reshape(a.shape)
    if n > BLOCK:
        return _chol_rec(a, cpu)
    if a.ndim == 3 and batch > SMALL_BATCH:
        return jnp.vectorize(_chol2_vec, signature="(n,n)->(n,n)")(a)
    return _chol2_loop(a)


def cpu_lowering(prim: Primitive, impl, multiple_results: bool = False) -> None:
    """Lowers `prim` by `impl`, with `cpu=True` on the CPU (LAPACK over chunks of worlds
    there; elsewhere a loop of small library calls would serialise the device)."""
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=multiple_results))
    mlir.register_lowering(prim, mlir.lower_fun(functools.partial(impl, cpu=True),
                                                multiple_results=multiple_results),
                           platform="cpu")


_chol_p.def_impl(_chol_impl)
_chol_p.def_abstract_eval(lambda a: jax.core.ShapedArray(a.shape, a.dtype))
cpu_lowering(_chol_p, _chol_impl)


def _chol_batched(args, dims):
    (a,), (d,) = args, dims
    a = jnp.moveaxis(a, d, 0)
    if a.shape[0] <= SMALL_BATCH or a.ndim == 3:  # the lowering picks the form
        return _chol_p.bind(a), 0
    # an inner vmap's small-batch form: its loops over all of the batch
    return (_chol_rec(a, False) if a.shape[-1] > BLOCK else _chol2_loop(a)), 0


batching.primitive_batchers[_chol_p] = _chol_batched


def _chol2(a: jax.Array) -> jax.Array:
    return _chol_p.bind(a)


# The triangular solve is a primitive of its own: its lowering picks the form as the
# Cholesky's does, and it has derivative rules (linear in B; the transpose solves with A'),
# so every solve, differentiated or not, takes the same forms.
_tri_p = Primitive("jaxsim_triangular_solve")


def _tri_impl(A, B, *, lower, unit, cpu=False):
    n = A.shape[-1]
    if n <= UNROLL:
        return _tri_unrolled(A, B, lower, unit)
    batch, work = math.prod(B.shape[:-2]), n * n * B.shape[-1]
    if lapack_ok(batch, work):
        return lax.linalg.triangular_solve(A, B, left_side=True, lower=lower,
                                           unit_diagonal=unit)
    flat = A.ndim == B.ndim == 3  # one batch dimension
    c = chunk_size(batch, work) if cpu and A.shape[:-2] == B.shape[:-2] else 0
    if c:  # LAPACK over chunks of worlds (see CHUNK_MAX)
        return map_chunks(lambda ab: lax.linalg.triangular_solve(
            ab[0], ab[1], left_side=True, lower=lower, unit_diagonal=unit),
            (A.reshape((batch, n, n)), B.reshape((batch,) + B.shape[-2:])), c
        ).reshape(B.shape)
    if n > BLOCK:
        return _tri_rec(A, B, lower, unit, cpu)
    if flat and batch > SMALL_BATCH:
        return jnp.vectorize(lambda a_, b_: _tri2_vec(a_, b_, lower, unit),
                             signature="(n,n),(n,k)->(n,k)")(A, B)
    return _tri2_loop(A, B, lower, unit)


_tri_p.def_impl(_tri_impl)
_tri_p.def_abstract_eval(lambda A, B, **_: jax.core.ShapedArray(B.shape, B.dtype))
cpu_lowering(_tri_p, _tri_impl)


def _tri_batched(args, dims, *, lower, unit):
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    A, B = (x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims, strict=True))
    if size <= SMALL_BATCH or A.shape[-1] <= UNROLL or max(A.ndim, B.ndim) == 3:
        A, B = (x if d is not None else jnp.broadcast_to(x, (size,) + x.shape)
                for x, d in zip((A, B), dims, strict=True))
        return _tri_p.bind(A, B, lower=lower, unit=unit), 0  # the lowering picks the form
    # A and B may carry more leading dimensions (an inner vmap's small-batch form)
    if A.shape[-1] > BLOCK:
        lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        A, B = (jnp.broadcast_to(x, lead + x.shape[-2:]) for x in (A, B))
        return _tri_rec(A, B, lower, unit, False), 0
    out = jnp.vectorize(lambda a_, b_: _tri2_vec(a_, b_, lower, unit),
                        signature="(n,n),(n,k)->(n,k)")(A, B)
    return out, 0


def _tri_jvp(primals, tangents, *, lower, unit):
    # X = A^-1 B: dX = A^-1 (dB - dA X), dA restricted to the entries the solve reads
    (A, B), (dA, dB) = primals, tangents
    X = _tri_p.bind(A, B, lower=lower, unit=unit)
    rhs = ad.instantiate_zeros(dB)
    if type(dA) is not ad.Zero:
        dA = jnp.tril(dA, -1 if unit else 0) if lower else jnp.triu(dA, 1 if unit else 0)
        rhs = rhs - dA @ X
    return X, _tri_p.bind(A, rhs, lower=lower, unit=unit)


def _tri_transpose(ct, A, B, *, lower, unit):
    assert not ad.is_undefined_primal(A)
    if type(ct) is ad.Zero:
        return None, ad.Zero(B.aval)
    return None, _tri_p.bind(jnp.swapaxes(A, -1, -2), ct, lower=not lower, unit=unit)


batching.primitive_batchers[_tri_p] = _tri_batched
ad.primitive_jvps[_tri_p] = _tri_jvp
ad.primitive_transposes[_tri_p] = _tri_transpose


def _tri2(A: jax.Array, B: jax.Array, lower: bool, unit: bool) -> jax.Array:
    # the lowering picks LAPACK or the loops, in blocks past BLOCK (_tri_rec)
    return _tri_p.bind(A, B, lower=lower, unit=unit)


def cholesky(a: jax.Array) -> jax.Array:
    """Lower Cholesky factor L (L L' = a) of symmetric positive definite `a` (..., n, n).

    Reads the lower triangle. A matrix that is not positive definite gives NaN entries
    from the first failing pivot on (all of them when LAPACK does it, see LAPACK_WORK).
    """
    if not a.shape[-1]:
        return a
    if hostnp.on_host():
        return hostnp.jnp.linalg.cholesky(a)
    return jnp.vectorize(_chol, signature="(n,n)->(n,n)")(a)


@jax.custom_jvp
def _chol(a: jax.Array) -> jax.Array:
    return _chol_blocked(a)


@_chol.defjvp
def _chol_jvp(primals, tangents):
    # dL = L Phi(L^-1 dA L^-T), Phi: the strict lower triangle plus half the diagonal; dA
    # symmetric from its lower triangle (what the factorisation reads).
    (a,), (da,) = primals, tangents
    L = _chol(a)
    da = jnp.tril(da) + jnp.tril(da, -1).T
    y = _tri2(L, da, lower=True, unit=False)
    x = _tri2(L, y.T, lower=True, unit=False).T
    phi = jnp.tril(x, -1) + 0.5 * jnp.diag(jnp.diagonal(x))
    return L, L @ phi


def _chol_blocked(a: jax.Array) -> jax.Array:
    # the primitive's lowering picks LAPACK or the loops, in blocks past BLOCK (_chol_rec)
    return _chol_unrolled(a) if a.shape[-1] <= UNROLL else _chol2(a)


def _mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def _chol_rec(a: jax.Array, cpu: bool) -> jax.Array:
    """The blocked Cholesky of a (..., n, n): its halves' factorisations and the panel's
    solve by `_chol_impl` / `_tri_impl` (LAPACK where allowed, else the loops or further
    halves), the rest matrix products."""
    n = a.shape[-1]
    h = n // 2
    L11 = _chol_impl(a[..., :h, :h], cpu=cpu)
    # L21 L11' = A21
    L21 = _mT(_tri_impl(L11, _mT(a[..., h:, :h]), lower=True, unit=False, cpu=cpu))
    L22 = _chol_impl(a[..., h:, h:] - L21 @ _mT(L21), cpu=cpu)
    top = jnp.concatenate([L11, jnp.zeros(a.shape[:-2] + (h, n - h), a.dtype)], axis=-1)
    return jnp.concatenate([top, jnp.concatenate([L21, L22], axis=-1)], axis=-2)


def _tri2_vec(A: jax.Array, B: jax.Array, lower: bool, unit: bool) -> jax.Array:
    n = A.shape[0]
    idx = jnp.arange(n)

    def body(i, X):
        r = i if lower else n - 1 - i
        row = A[r]
        row = jnp.where((idx < r) if lower else (idx > r), row, 0.0)
        s = B[r] - row @ X
        return X.at[r].set(s if unit else s / A[r, r])

    return lax.fori_loop(0, n, body, jnp.zeros_like(B))


def _tri_rec(A: jax.Array, B: jax.Array, lower: bool, unit: bool, cpu: bool) -> jax.Array:
    """The block triangular solve of A (..., n, n), B (..., n, k) (equal leading shapes):
    two half-size solves by `_tri_impl` and a product."""
    n = A.shape[-1]
    h = n // 2
    solve = functools.partial(_tri_impl, lower=lower, unit=unit, cpu=cpu)
    if lower:
        X1 = solve(A[..., :h, :h], B[..., :h, :])
        X2 = solve(A[..., h:, h:], B[..., h:, :] - A[..., h:, :h] @ X1)
    else:
        X2 = solve(A[..., h:, h:], B[..., h:, :])
        X1 = solve(A[..., :h, :h], B[..., :h, :] - A[..., :h, h:] @ X2)
    return jnp.concatenate([X1, X2], axis=-2)


def solve_triangular(a: jax.Array, b: jax.Array, *, lower: bool = True, trans: bool = False,
                     unit_diagonal: bool = False) -> jax.Array:
    """Solves op(a) x = b for triangular `a` (..., n, n); op(a) = a, or a' when `trans`.

    Only the triangle named by `lower` is read (the other one and, with `unit_diagonal`,
    the diagonal may hold anything finite). b is (..., n) or (..., n, k).
    """
    n = a.shape[-1]
    if not n:
        return b
    if hostnp.on_host():  # the compiler's numpy pass (see hostnp)
        return hostnp.jax.scipy.linalg.solve_triangular(
            a, b, trans=1 if trans else 0, lower=lower, unit_diagonal=unit_diagonal)
    vec = b.ndim == a.ndim - 1
    A = jnp.swapaxes(a, -1, -2) if trans else a
    low = lower != trans
    B = b[..., None] if vec else b
    # many right-hand sides: each substitution step would sweep all of B, so invert the
    # triangle (n right-hand sides) and apply it in one product that reads B once
    many = B.shape[-1] > n
    rhs = jnp.broadcast_to(jnp.eye(n, dtype=A.dtype), A.shape) if many else B
    out = jnp.vectorize(lambda A_, B_: _tri2(A_, B_, low, unit_diagonal),
                        signature="(n,n),(n,k)->(n,k)")(A, rhs)
    if many:
        out = jnp.matmul(out, B, precision=lax.Precision.HIGHEST)
    return out[..., 0] if vec else out


def cho_solve(L: jax.Array, b: jax.Array) -> jax.Array:
    """Solves (L L') x = b given the lower Cholesky factor L (..., n, n); b (..., n[, k])."""
    y = solve_triangular(L, b, lower=True)
    return solve_triangular(L, y, lower=True, trans=True)


def _lu_solve2(A: jax.Array, B: jax.Array) -> jax.Array:
    n = A.shape[0]
    idx = jnp.arange(n)

    def eliminate(j, c):
        M, R = c
        # partial pivoting: the largest remaining entry of column j becomes the pivot
        p = jnp.argmax(jnp.where(idx >= j, jnp.abs(M[:, j]), -1.0))
        perm = jnp.where(idx == j, p, jnp.where(idx == p, j, idx))
        M, R = M[perm], R[perm]
        f = jnp.where(idx > j, M[:, j] / M[j, j], 0.0)
        return M - f[:, None] * M[j][None, :], R - f[:, None] * R[j][None, :]

    U, Y = lax.fori_loop(0, n, eliminate, (A, B))
    return _tri2(U, Y, lower=False, unit=False)


def _solve_blocked(A: jax.Array, B: jax.Array) -> jax.Array:
    n = A.shape[0]
    if n <= BLOCK:
        return _lu_solve2(A, B)
    # block elimination: pivoting happens within the leading blocks only
    h = n // 2
    YZ = _solve_blocked(A[:h, :h], jnp.concatenate([A[:h, h:], B[:h]], axis=1))
    Y, Z = YZ[:, : n - h], YZ[:, n - h:]
    X2 = _solve_blocked(A[h:, h:] - A[h:, :h] @ Y, B[h:] - A[h:, :h] @ Z)
    return jnp.concatenate([Z - Y @ X2, X2], axis=0)


def solve(a: jax.Array, b: jax.Array) -> jax.Array:
    """Solves a x = b for a general square `a` (..., n, n) (LU with partial pivoting);
    b is (..., n) or (..., n, k)."""
    if not a.shape[-1]:
        return b
    vec = b.ndim == a.ndim - 1
    B = b[..., None] if vec else b
    out = jnp.vectorize(_solve_blocked, signature="(n,n),(n,k)->(n,k)")(a, B)
    return out[..., 0] if vec else out


def _jacobi_rot(a, p, q):
    """One Jacobi rotation zeroing a[p, q] of a symmetric 3 x 3 matrix; returns (a, V)."""
    apq = a[p, q]
    small = jnp.abs(apq) < 1e-300
    apq_s = jnp.where(small, 1.0, apq)
    theta = (a[q, q] - a[p, p]) / (2.0 * apq_s)
    t = jnp.sign(theta) / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1.0))
    t = jnp.where(theta == 0, 1.0, t)
    c = 1.0 / jnp.sqrt(t * t + 1.0)
    s = t * c
    c, s = jnp.where(small, 1.0, c), jnp.where(small, 0.0, s)
    G = jnp.eye(3, dtype=a.dtype)
    G = G.at[p, p].set(c).at[q, q].set(c).at[p, q].set(s).at[q, p].set(-s)
    return G.T @ a @ G, G


def eigh3(a: jax.Array, sweeps: int = 6) -> tuple[jax.Array, jax.Array]:
    """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric 3 x 3 matrix, by
    cyclic Jacobi rotations (a fixed number of sweeps; converged to rounding for 3 x 3)."""
    def one(m):
        V = jnp.eye(3, dtype=m.dtype)
        for _ in range(sweeps):
            for p, q in ((0, 1), (0, 2), (1, 2)):
                m, G = _jacobi_rot(m, p, q)
                V = V @ G
        w = jnp.diagonal(m)
        order = jnp.argsort(w)
        return w[order], V[:, order]

    return jnp.vectorize(one, signature="(3,3)->(3),(3,3)")(a)
