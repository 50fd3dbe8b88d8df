"""Control flow whose batched form does only the work the worlds need: a while loop that
iterates only the worlds still iterating, a cond whose costly branch runs only for the
worlds that take it, a map evaluated only on masked rows.

Under `jax.vmap`, `lax.while_loop` runs until the last world of the batch stops, and every
trip evaluates the body for the whole batch (the stopped worlds' results are discarded).
The primal solvers stop after very different numbers of iterations across worlds: on the
gymnasium ant at batch 1024 Newton stops after 1.3 iterations on average and 4 at most, so
the batched loop does three times the work the worlds need.

`while_loop` here has `lax.while_loop`'s semantics world by world. Unbatched it is
`lax.while_loop`. Batched (a `custom_vmap` rule) each trip gathers a fixed-size chunk of
worlds, those still iterating first (lowest index first), applies the body once to the
chunk's iterating worlds and scatters the chunk back, until no world iterates. A world sees
the same sequence of body evaluations as alone; shapes stay static; the body is compiled
once, at the chunk's width; the work is the worlds' total iteration count over the chunk
width, in trips, instead of the batch's largest count.

The loop is not differentiable (`custom_vmap` has no reverse mode): use it where
derivatives come from elsewhere (the solvers' implicit derivatives).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

# batches up to this size run as one plain batched loop
_MIN_BATCH = 16
# the chunk: this fraction of the batch (measured on the gymnasium ant at batch 1024:
# quarters beat halves and eighths)
_CHUNK_DIV = 4


def _closed(fn, carry):
    """fn traced at `carry`: (jaxpr, its closed-over values, output tree)."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(carry)
    return closed.jaxpr, closed.consts, jax.tree.structure(out_shape)


def _call(jaxpr, out_tree, consts, carry):
    out = jax.core.eval_jaxpr(jaxpr, consts, *jax.tree.leaves(carry))
    return jax.tree.unflatten(out_tree, out)


def _select(go, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(go.reshape(go.shape + (1,) * (a.ndim - 1)), a, b), new, old)


def while_loop(cond, body, init):
    """`lax.while_loop(cond, body, init)`; batched, the iterating worlds go in chunks."""
    cj, cconsts, ctree = _closed(cond, init)
    bj, bconsts, btree = _closed(body, init)

    def cond_fn(cc, c):
        return _call(cj, ctree, cc, c)

    def body_fn(bc, c):
        return _call(bj, btree, bc, c)

    @custom_vmap
    def run(cc, bc, c):
        return lax.while_loop(lambda x: cond_fn(cc, x), lambda x: body_fn(bc, x), c)

    @run.def_vmap
    def rule(axis_size, in_batched, cc, bc, c):
        cb, bb, ib = in_batched
        c = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + x.shape),
                         c, ib)
        out_batched = jax.tree.map(lambda _: True, c)
        cax = [0 if f else None for f in cb]
        bax = [0 if f else None for f in bb]
        vcond = jax.vmap(cond_fn, in_axes=(cax, 0))
        if axis_size <= _MIN_BATCH:
            loop = jax.vmap(lambda cc_, bc_, x: lax.while_loop(
                lambda y: cond_fn(cc_, y), lambda y: body_fn(bc_, y), x), in_axes=(cax, bax, 0))
            return loop(cc, bc, c), out_batched
        vbody = jax.vmap(body_fn, in_axes=(bax, 0))
        chunk = -(-axis_size // _CHUNK_DIV)

        def trip(x):
            go = vcond(cc, x)
            idx = jnp.argsort(~go, stable=True)[:chunk]
            sub = jax.tree.map(lambda v: v[idx], x)
            new = vbody([v[idx] if f else v for v, f in zip(bc, bb, strict=True)], sub)
            new = _select(go[idx], new, sub)
            return jax.tree.map(lambda v, s: v.at[idx].set(s, unique_indices=True), x, new)

        return lax.while_loop(lambda x: jnp.any(vcond(cc, x)), trip, c), out_batched

    return run(cconsts, bconsts, init)


def cond(pred, true_fn, false_fn):
    """`lax.cond(pred, true_fn, false_fn)` for two functions of no arguments (their
    operands are what they close over); batched, `true_fn` runs on the whole batch and
    `false_fn` only on the worlds whose `pred` is false, a fixed-size chunk at a time
    (nothing runs it when every `pred` holds). For a cheap common case and a costly
    rare one. Not differentiable (as `while_loop`)."""
    tj, tconsts, ttree = _closed(lambda _: true_fn(), ())
    fj, fconsts, ftree = _closed(lambda _: false_fn(), ())

    def t_fn(tc):
        return _call(tj, ttree, tc, ())

    def f_fn(fc):
        return _call(fj, ftree, fc, ())

    @custom_vmap
    def run(p, tc, fc):
        return lax.cond(p, lambda: t_fn(tc), lambda: f_fn(fc))

    @run.def_vmap
    def rule(axis_size, in_batched, p, tc, fc):
        pb, tb, fb = in_batched
        tax = [0 if f else None for f in tb]
        fax = [0 if f else None for f in fb]

        vt = jax.vmap(t_fn, in_axes=(tax,), out_axes=0, axis_size=axis_size)
        vf = jax.vmap(f_fn, in_axes=(fax,), out_axes=0, axis_size=axis_size)
        if not pb:
            out = lax.cond(p, lambda: vt(tc), lambda: vf(fc))
            return out, jax.tree.map(lambda _: True, out)
        out = vt(tc)
        chunk = max(1, -(-axis_size // (4 * _CHUNK_DIV)))

        def trip(c):
            out, todo = c
            idx = jnp.argsort(~todo, stable=True)[:chunk]
            sub = jax.vmap(f_fn, in_axes=(fax,), axis_size=chunk)(
                [v[idx] if f else v for v, f in zip(fc, fb, strict=True)])
            go = todo[idx]
            new = _select(go, sub, jax.tree.map(lambda v: v[idx], out))
            out = jax.tree.map(lambda v, s: v.at[idx].set(s, unique_indices=True), out, new)
            return out, todo.at[idx].set(False, unique_indices=True)

        out, _ = lax.while_loop(lambda c: jnp.any(c[1]), trip, (out, ~p))
        return out, jax.tree.map(lambda _: True, out)

    return run(pred, tconsts, fconsts)


def _chunked_map(f, mask, items, shared, chunk: int):
    """f over the rows of `items` where `mask`, `chunk` rows per trip (zeros elsewhere)."""
    n = mask.shape[0]
    out0 = jax.eval_shape(lambda it: jax.vmap(f, in_axes=(0, None))(it, shared),
                          jax.tree.map(lambda v: v[:chunk], items))
    out = jax.tree.map(lambda s: jnp.zeros((n,) + s.shape[1:], s.dtype), out0)
    pos = jnp.cumsum(mask) - 1  # rank of each masked row

    def trip(c):
        t, out = c
        slot = jnp.where(mask & (pos >= t * chunk) & (pos < (t + 1) * chunk), pos - t * chunk,
                         chunk)
        idx = jnp.zeros(chunk, jnp.int32).at[slot].set(jnp.arange(n, dtype=jnp.int32),
                                                        mode="drop")
        used = jnp.arange(chunk) < jnp.sum(mask) - t * chunk
        sub = jax.vmap(f, in_axes=(0, None))(jax.tree.map(lambda v: v[idx], items), shared)
        dest = jnp.where(used, idx, n)
        return t + 1, jax.tree.map(lambda o, s: o.at[dest].set(s, mode="drop"), out, sub)

    ntrip = (jnp.sum(mask) + chunk - 1) // chunk
    return lax.while_loop(lambda c: c[0] < ntrip, trip, (jnp.int32(0), out))[1]


def masked_map(f, mask, items, shared=(), chunk_div: int = 8):
    """`vmap(f, in_axes=(0, None))(items, shared)` on the rows where `mask`, zeros on the
    others, evaluating f only on the masked rows (in chunks of 1/chunk_div of the rows;
    batched, of all the batch's rows at once). Derivatives (forward and reverse) are those
    of the dense map with the unmasked rows zeroed: the tangents are computed densely."""
    def dense(mask, items, shared):
        out = jax.vmap(f, in_axes=(0, None))(items, shared)
        return _select(mask, out, jax.tree.map(jnp.zeros_like, out))

    @custom_vmap
    def sparse(mask, items, shared):
        n = mask.shape[0]
        return _chunked_map(f, mask, items, shared, max(1, -(-n // chunk_div)))

    @sparse.def_vmap
    def rule(axis_size, in_batched, mask, items, shared):
        mb, ib, sb = in_batched
        if any(jax.tree.leaves(sb)):  # per-world shared values: no flattening
            out = jax.vmap(lambda m_, i_, s_: dense(m_, i_, s_),
                           in_axes=(0 if mb else None, jax.tree.map(lambda b: 0 if b else None,
                                                                    ib), 0))(mask, items, shared)
            return out, jax.tree.map(lambda _: True, out)
        n = mask.shape[-1]
        mask = jnp.broadcast_to(mask, (axis_size, n)).reshape(-1)
        items = jax.tree.map(
            lambda v, b: (v if b else jnp.broadcast_to(v, (axis_size,) + v.shape)).reshape(
                (axis_size * n,) + v.shape[2 if b else 1:]), items, ib)
        out = _chunked_map(f, mask, items, shared, max(1, -(-(axis_size * n) // chunk_div)))
        out = jax.tree.map(lambda v: v.reshape((axis_size, n) + v.shape[1:]), out)
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def run(mask, items, shared):
        return sparse(mask, items, shared)

    @run.defjvp
    def run_jvp(primals, tangents):
        mask, items, shared = primals
        _, ti, ts = tangents
        _, tout = jax.jvp(lambda i, s: dense(mask, i, s), (items, shared), (ti, ts))
        return run(mask, items, shared), tout

    return run(mask, items, shared)
