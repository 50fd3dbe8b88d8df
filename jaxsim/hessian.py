"""J' diag(w) J, the constraint part of the Newton Hessian, by batch size: one dense product
for a single world or a small batch; over a large batch a broadcast product summed over
the rows, on the rows with w != 0 only when they are few (solver.py's Newton)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsim import linalg, loops


def _few_rows(nefc: int, nv: int) -> int:
    """How many rows the compacted Hessian product takes (0: the whole J, no compaction)."""
    cap = -(-max(16, nv) // 8) * 8
    return cap if 2 * cap <= nefc else 0


def _jdj_dense(J: jax.Array, w: jax.Array) -> jax.Array:
    return (J * w[:, None]).T @ J


def _jdj_sum(J: jax.Array, w: jax.Array) -> jax.Array:
    # as a broadcast product summed over the rows: batched, twice as fast as the batched
    # small dot on the CPU (1024 worlds x 32 rows x 27 dofs: 2.5 against 5.2 ms)
    return jnp.sum((J * w[:, None])[:, :, None] * J[:, None, :], axis=0)


def _jdj_few(J: jax.Array, w: jax.Array, cap: int) -> jax.Array:
    on = w != 0

    def few():
        idx = loops.true_first(on, cap)
        return _jdj_sum(J[idx], w[idx])

    return loops.cond(jnp.sum(on) <= cap, few, lambda: _jdj_sum(J, w))


@jax.custom_batching.custom_vmap
def jdj(J: jax.Array, w: jax.Array) -> jax.Array:
    """J' diag(w) J. Few rows are in the quadratic zone (the gymnasium ant: 1.6 of 116 on
    average; the mjx humanoid: 9 of 74), so over a large batch the product takes the first
    `_few_rows` rows with w != 0 (the other rows add exact zeros), and the whole J only in
    the worlds with more (a cond that runs the costly branch on those worlds alone). A
    single world or a small batch keeps the one dense product (the compaction's extra
    kernels cost more than they save there)."""
    return _jdj_dense(J, w)


@jdj.def_vmap
def _jdj_batched(axis_size, in_batched, J, w):
    J, w = (x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip((J, w), in_batched, strict=True))
    cap = _few_rows(*J.shape[-2:])
    if axis_size <= linalg.SMALL_BATCH:
        return jnp.vectorize(_jdj_dense, signature="(n,v),(n)->(v,v)")(J, w), True
    if not cap:
        return jnp.vectorize(_jdj_sum, signature="(n,v),(n)->(v,v)")(J, w), True
    return jnp.vectorize(lambda a, b: _jdj_few(a, b, cap),
                         signature="(n,v),(n)->(v,v)")(J, w), True
