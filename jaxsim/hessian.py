"""J' diag(w) J, the constraint part of the Newton Hessian, by batch size: for a single world
or a small batch the written-out sum of the rows' outer products (a dense product beyond
_UNROLL_ROWS rows); over a large batch the same sum, on the rows with w != 0 only when
they are few (solver.py's Newton)."""

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


# up to this many rows the batched product is a written-out sum of row outer products (one
# fused kernel over the batch, in place of XLA's library call for the summed broadcast
# product: the gymnasium ant's 24 compact contact rows x 14 dofs at batch 1024, in-process
# alternations, 12,410 -> 13,247 steps/s, all 7 rounds faster; hopper 26,872 -> 27,874;
# the MJX humanoid's 32 rows unchanged). Beyond it the written-out sum grows the program.
_UNROLL_ROWS = 64


def _jdj_sum(J: jax.Array, w: jax.Array) -> jax.Array:
    Jw = J * w[:, None]
    if J.shape[0] <= _UNROLL_ROWS:
        H = jnp.zeros((J.shape[1], J.shape[1]), J.dtype)
        for i in range(J.shape[0]):
            H = H + Jw[i][:, None] * J[i][None, :]
        return H
    # as a broadcast product summed over the rows: batched, twice as fast as the batched
    # small dot on the CPU (1024 worlds x 32 rows x 27 dofs: 2.5 against 5.2 ms)
    return jnp.sum(Jw[:, :, None] * J[:, None, :], axis=0)


def _jdj_few(J: jax.Array, w: jax.Array, cap: int) -> jax.Array:
    on = w != 0

    def few():
        idx = loops.true_first(on, cap)
        return _jdj_sum(J[idx], w[idx])

    return loops.cond(jnp.sum(on) <= cap, few, lambda: _jdj_sum(J, w))


def _jdj_small(J: jax.Array, w: jax.Array) -> jax.Array:
    """A single world's or a small batch's product: the written-out sum up to _UNROLL_ROWS
    rows (one fused kernel where the dot is a library call: the MJX humanoid at batch 1,
    32 rows x 27 dofs, 38.6 -> 36.4 ms per 300 steps, medians of 21), the dot beyond."""
    return _jdj_sum(J, w) if J.shape[0] <= _UNROLL_ROWS else _jdj_dense(J, w)


@jax.custom_batching.custom_vmap
def jdj(J: jax.Array, w: jax.Array) -> jax.Array:
    """J' diag(w) J. Few rows are in the quadratic zone (the gymnasium ant: 1.6 of 116 on
    average; the mjx humanoid: 9 of 74), so over a large batch the product takes the first
    `_few_rows` rows with w != 0 (the other rows add exact zeros), and the whole J only in
    the worlds with more (a cond that runs the costly branch on those worlds alone). A
    single world or a small batch takes the whole J (the compaction's extra kernels cost
    more than they save there), `_jdj_small`."""
    return _jdj_small(J, w)


@jdj.def_vmap
def _jdj_batched(axis_size, in_batched, J, w):
    J, w = (x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip((J, w), in_batched, strict=True))
    cap = _few_rows(*J.shape[-2:])
    if axis_size <= linalg.SMALL_BATCH:
        return jnp.vectorize(_jdj_small, signature="(n,v),(n)->(v,v)")(J, w), True
    if not cap:
        return jnp.vectorize(_jdj_sum, signature="(n,v),(n)->(v,v)")(J, w), True
    return jnp.vectorize(lambda a, b: _jdj_few(a, b, cap),
                         signature="(n,v),(n)->(v,v)")(J, w), True
