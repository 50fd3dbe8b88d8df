"""Control flow whose batched form does only the work the worlds need: a while loop that
iterates only the worlds still iterating, a cond whose costly branch runs only for the
worlds that take it, a map evaluated only on masked rows.

Under `jax.vmap`, `lax.while_loop` runs until the last world of the batch stops, and every
trip evaluates the body for the whole batch (the stopped worlds' results are discarded).
The primal solvers stop after very different numbers of iterations across worlds: on the
gymnasium ant at batch 1024 Newton stops after 1.3 iterations on average and 4 at most, so
the batched loop does three times the work the worlds need.

`while_loop` here has `lax.while_loop`'s semantics world by world. Unbatched it is
`lax.while_loop`. Batched (a custom batching rule) each trip gathers a fixed-size chunk of
worlds, those still iterating first (lowest index first), applies the body once to the
chunk's iterating worlds and scatters the chunk back, until no world iterates. A world sees
the same sequence of body evaluations as alone; shapes stay static; the body is compiled
once, at the chunk's width; the work is the worlds' total iteration count over the chunk
width, in trips, instead of the batch's largest count.

The loop is not differentiable (its primitive has no derivative rules): use it where
derivatives come from elsewhere (the solvers' implicit derivatives).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

# batches up to this size run as one plain batched loop
_MIN_BATCH = 16
# the chunk: this fraction of the batch (the gymnasium ant at batch 1024, Newton at 1.01
# iterations on average: eighths 10.8k -> 12.1k steps/s over quarters since the
# factorisations went to LAPACK, sixteenths the same as eighths; the hopper, half_cheetah
# and the humanoid unchanged. Before that quarters had beaten halves and eighths.)
_CHUNK_DIV = 8
# and at least this many worlds (or the whole batch if smaller): a loop nested in a
# `cond`'s rare branch runs on that branch's chunk of 32 worlds, where eighths were trips of
# 4 worlds (the gymnasium humanoid lying down after 400 steps, batch 1024, PGS on its
# whole problem for the worlds with many live rows, alternated: 591-619 -> 801-835
# steps/s; from the initial pose the ant, Newton, 11.1-11.6k -> 11.9-12.2k and the
# humanoid 5.3-5.5k -> 5.0-5.4k, within the machine's swing)
_MIN_CHUNK = 128
# `cond`'s rare branch: this fraction of the batch per trip (the lying humanoid above:
# 32nds 786-858 steps/s, eighths 632-649)
_COND_CHUNK_DIV = 32
# `while_loop(peel=True)` peels a trip from batches of at least this size (smaller ones,
# such as the chunks of a `cond`'s rare branch, would only compile the body once more)
_PEEL_MIN = 128


# `custom_vmap` would do, but it turns the constants its function closes over into
# operands, and a batched operand there is an error: a `lax.cond` with a batched predicate
# broadcasts all its operands, constants included. This primitive keeps them in the
# function (compiled in, where XLA folds them) and takes the traced values as operands.
_batched_p = Primitive("jaxsim_custom_batched")
_batched_p.multiple_results = True
_batched_p.def_impl(lambda *args, fn, **_: fn(*args))
_batched_p.def_abstract_eval(lambda *avals, out_avals, **_: out_avals)
mlir.register_lowering(_batched_p, mlir.lower_fun(lambda *args, fn, **_: fn(*args),
                                                  multiple_results=True))


def _batched_rule(args, dims, *, fn, rule, in_tree, out_avals):
    del fn, out_avals
    axis_size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)
    args = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims, strict=True)]
    out, out_batched = rule(axis_size, jax.tree.unflatten(in_tree, [d is not None for d in dims]),
                            *jax.tree.unflatten(in_tree, args))
    return jax.tree.leaves(out), [0 if b else None for b in jax.tree.leaves(out_batched)]


batching.primitive_batchers[_batched_p] = _batched_rule


def _custom_batched(fn, rule, *args):
    """`fn(*args)`, whose batched form is `rule(axis_size, in_batched, *args)` returning
    (out, out_batched), as `custom_vmap`."""
    flat, in_tree = jax.tree.flatten(args)
    out_shape = jax.eval_shape(fn, *args)
    out_leaves, out_tree = jax.tree.flatten(out_shape)

    def flat_fn(*xs):
        return jax.tree.leaves(fn(*jax.tree.unflatten(in_tree, xs)))

    out = _batched_p.bind(*flat, fn=flat_fn, rule=rule, in_tree=in_tree, out_avals=tuple(
        jax.core.ShapedArray(o.shape, o.dtype) for o in out_leaves))
    return jax.tree.unflatten(out_tree, out)


class _Fn:
    """A traced function: its jaxpr, output tree and closed-over constants. The traced
    constants travel as operands (the batching rules see them); the concrete ones stay in
    the function, where XLA folds them (static indices stay static)."""

    def __init__(self, fn, carry):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(carry)
        self.jaxpr, self.tree = closed.jaxpr, jax.tree.structure(out_shape)
        self.traced = [isinstance(c, jax.core.Tracer) for c in closed.consts]
        self.fixed = [c for c, t in zip(closed.consts, self.traced, strict=True) if not t]
        self.operands = [c for c, t in zip(closed.consts, self.traced, strict=True) if t]

    def __call__(self, operands, carry):
        ops, fixed = iter(operands), iter(self.fixed)
        consts = [next(ops) if t else next(fixed) for t in self.traced]
        out = jax.core.eval_jaxpr(self.jaxpr, consts, *jax.tree.leaves(carry))
        return jax.tree.unflatten(self.tree, out)


def true_first(mask: jax.Array, k: int) -> jax.Array:
    """`jnp.argsort(~mask, stable=True)[:k]` of a 1-D boolean mask, without a sort: the
    indices of the true entries in order, then those of the false ones, from a running count
    and a scatter (the comparison sort is far slower on the CPU: 1024 masks of 190 contact
    slots, 15 -> 1.9 ms; one mask of 1024 worlds, 0.21 -> 0.04 ms)."""
    n = mask.shape[0]
    assert k <= n, (k, n)
    at = jnp.arange(n, dtype=jnp.int32)
    c = jnp.cumsum(mask.astype(jnp.int32))
    rank = jnp.where(mask, c - 1, c[-1] + at - c)
    return jnp.zeros(k, jnp.int32).at[jnp.where(rank < k, rank, k)].set(
        at, mode="drop", unique_indices=True)


def _select(go, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(go.reshape(go.shape + (1,) * (a.ndim - 1)), a, b), new, old)


def while_loop(cond, body, init, peel: bool = False):
    """`lax.while_loop(cond, body, init)`; batched, the iterating worlds go in chunks.

    With `peel`, the batched form first takes one trip over the whole batch (the worlds
    whose cond holds), then the chunks: for loops that nearly every world enters, whose
    first iteration is cheaper at the batch's width than in chunks. Newton on the
    gymnasium ant at batch 1024: 1845 -> 1758 ms per 20 steps, hopper 857 -> 819, compile
    +0.8 s (the body is compiled at both widths); PGS on the gymnasium humanoid is slower
    with it (4412 -> 4697)."""
    cond_fn, body_fn = _Fn(cond, init), _Fn(body, init)
    cconsts, bconsts = cond_fn.operands, body_fn.operands

    def run(cc, bc, c):
        return lax.while_loop(lambda x: cond_fn(cc, x), lambda x: body_fn(bc, x), c)

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
        chunk = max(-(-axis_size // _CHUNK_DIV), min(axis_size, _MIN_CHUNK))

        def trip(x):
            go = vcond(cc, x)
            idx = true_first(go, chunk)
            sub = jax.tree.map(lambda v: v[idx], x)
            new = vbody([v[idx] if f else v for v, f in zip(bc, bb, strict=True)], sub)
            new = _select(go[idx], new, sub)
            return jax.tree.map(lambda v, s: v.at[idx].set(s, unique_indices=True), x, new)

        if peel and axis_size >= _PEEL_MIN:
            c = _select(vcond(cc, c), vbody(bc, c), c)
        return lax.while_loop(lambda x: jnp.any(vcond(cc, x)), trip, c), out_batched

    return _custom_batched(run, rule, cconsts, bconsts, init)


def fori_masked(n, body, init):
    """`lax.fori_loop(0, n, body, init)` for a `body(t, carry)` that leaves the carry as it
    is on trips t >= n (it masks its own updates: writes dropped, increments zeroed).
    Batched over worlds with different n, the loop runs to the batch's largest n with the
    body applied to every world, where `lax`'s batched loop also selects every carried
    array between the body's result and the old value on each trip (a kernel per array:
    PGS's row sweep, ~30 small kernels per trip, had 6 such selects and their copies)."""
    n = jnp.asarray(n, jnp.int32)
    bf = _Fn(lambda tc: body(*tc), (jnp.zeros((), jnp.int32), init))

    def run(n, bc, c):
        return lax.fori_loop(0, n, lambda t, x: bf(bc, (t, x)), c)

    def rule(axis_size, in_batched, n, bc, c):
        nb, bb, ib = in_batched
        c = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + x.shape),
                         c, ib)
        vbody = jax.vmap(lambda ops, t, x: bf(ops, (t, x)),
                         in_axes=([0 if f else None for f in bb], None, 0))
        out = lax.fori_loop(0, jnp.max(n) if nb else n, lambda t, x: vbody(bc, t, x), c)
        return out, jax.tree.map(lambda _: True, out)

    return _custom_batched(run, rule, n, bf.operands, init)


def cond(pred, true_fn, false_fn, large_batch_only: bool = False, branch_small: bool = False):
    """`lax.cond(pred, true_fn, false_fn)` for two functions of no arguments (their
    operands are what they close over); batched, `true_fn` runs on the whole batch and
    `false_fn` only on the worlds whose `pred` is false, a fixed-size chunk at a time
    (nothing runs it when every `pred` holds). For a cheap common case and a costly
    rare one. Not differentiable (as `while_loop`).

    With `large_batch_only` or `branch_small` the two functions must agree wherever `pred`
    holds (a faster form of the same result). With `large_batch_only`, unbatched or
    batched over at most _MIN_BATCH worlds, `false_fn` alone runs (and alone is
    compiled). With `branch_small`, batches of at most _MIN_BATCH worlds take `true_fn`
    when every `pred` holds and `false_fn` otherwise (one `lax.cond`, as unbatched): for
    a single world, running the costly function alone beats running both."""
    assert not (large_batch_only and branch_small), "one small-batch form at a time"
    tf, ff = _Fn(lambda _: true_fn(), ()), _Fn(lambda _: false_fn(), ())
    tconsts, fconsts = tf.operands, ff.operands

    def t_fn(tc):
        return tf(tc, ())

    def f_fn(fc):
        return ff(fc, ())

    def run(p, tc, fc):
        if large_batch_only:
            return f_fn(fc)
        return lax.cond(p, lambda: t_fn(tc), lambda: f_fn(fc))

    def rule(axis_size, in_batched, p, tc, fc):
        pb, tb, fb = in_batched
        tax = [0 if f else None for f in tb]
        fax = [0 if f else None for f in fb]

        vt = jax.vmap(t_fn, in_axes=(tax,), out_axes=0, axis_size=axis_size)
        vf = jax.vmap(f_fn, in_axes=(fax,), out_axes=0, axis_size=axis_size)
        if large_batch_only and axis_size <= _MIN_BATCH:
            out = vf(fc)
            return out, jax.tree.map(lambda _: True, out)
        if branch_small and axis_size <= _MIN_BATCH:
            out = lax.cond(jnp.all(p), lambda: vt(tc), lambda: vf(fc))
            return out, jax.tree.map(lambda _: True, out)
        if not pb:
            out = lax.cond(p, lambda: vt(tc), lambda: vf(fc))
            return out, jax.tree.map(lambda _: True, out)
        out = vt(tc)
        chunk = max(1, -(-axis_size // _COND_CHUNK_DIV))

        def trip(c):
            out, todo = c
            idx = true_first(todo, chunk)
            sub = jax.vmap(f_fn, in_axes=(fax,), axis_size=chunk)(
                [v[idx] if f else v for v, f in zip(fc, fb, strict=True)])
            go = todo[idx]
            new = _select(go, sub, jax.tree.map(lambda v: v[idx], out))
            out = jax.tree.map(lambda v, s: v.at[idx].set(s, unique_indices=True), out, new)
            return out, todo.at[idx].set(False, unique_indices=True)

        out, _ = lax.while_loop(lambda c: jnp.any(c[1]), trip, (out, ~p))
        return out, jax.tree.map(lambda _: True, out)

    return _custom_batched(run, rule, pred, tconsts, fconsts)


def by_batch(small_fn, large_fn, small):
    """`small_fn()` unbatched and where `small(axis_size)` holds for the innermost batch
    axis, `large_fn()` otherwise: two forms of the same result (functions of no arguments,
    their operands what they close over) whose best choice depends on the batch size.
    Only the chosen one is compiled. Not differentiable (as `while_loop`)."""
    sf, lf = _Fn(lambda _: small_fn(), ()), _Fn(lambda _: large_fn(), ())

    def run(sc, lc):
        return sf(sc, ())

    def rule(axis_size, in_batched, sc, lc):
        fn, ops, batched = (sf, sc, in_batched[0]) if small(axis_size) else (lf, lc, in_batched[1])
        axes = [0 if b else None for b in batched]
        out = jax.vmap(lambda o: fn(o, ()), in_axes=(axes,), axis_size=axis_size)(ops)
        return out, jax.tree.map(lambda _: True, out)

    return _custom_batched(run, rule, sf.operands, lf.operands)


def _dense_jvp(fast, dense):
    """`fast(p, *xs)` (a batched rule that skips work), differentiated as `dense(p, *xs)`,
    the plain form of the same values (`p` a mask or predicate, not differentiated)."""

    @jax.custom_jvp
    def run(p, *xs):
        return fast(p, *xs)

    @run.defjvp
    def run_jvp(primals, tangents):
        p, *xs = primals
        _, tout = jax.jvp(lambda *ys: dense(p, *ys), tuple(xs), tuple(tangents[1:]))
        return run(p, *xs), tout

    return run


def where(pred, on_true, on_false):
    """`jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)` for a scalar
    `pred` (one per world), for a rare event (a blown-up world's reset). Batched, the
    selection runs only when some world's `pred` holds: otherwise one reduction and a
    conditional, instead of a select kernel per leaf over the whole batch (the reset of the
    state's ~50 arrays was a quarter of a small model's step). Derivatives are the dense
    select's."""

    def dense(p, a, b):
        return jax.tree.map(lambda x, y: jnp.where(p, x, y), a, b)

    def rule(axis_size, in_batched, p, a, b):
        pb, ab, bb = in_batched

        def full(x, batched):
            return x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)

        a = jax.tree.map(full, a, ab)
        b = jax.tree.map(full, b, bb)
        if pb:
            out = lax.cond(jnp.any(p), lambda: _select(p, a, b), lambda: b)
        else:
            out = lax.cond(p, lambda: a, lambda: b)
        return out, jax.tree.map(lambda _: True, out)

    return _dense_jvp(lambda p, a, b: _custom_batched(dense, rule, p, a, b), dense)(
        pred, on_true, on_false)


def unless_all(pred, cheap_fn, full_fn):
    """`full_fn()`, whose result equals `cheap_fn()` wherever `pred` holds (both functions
    of no arguments; their operands are what they close over). Unbatched, a `lax.cond`;
    batched, `cheap_fn` runs alone when `pred` holds for every world, `full_fn` on the whole
    batch otherwise. For work that a batch often needs nowhere (the constraint solver of
    worlds with no active rows). Not differentiable (as `while_loop`)."""
    cf, ff = _Fn(lambda _: cheap_fn(), ()), _Fn(lambda _: full_fn(), ())

    def run(p, cc, fc):
        return lax.cond(p, lambda: cf(cc, ()), lambda: ff(fc, ()))

    def rule(axis_size, in_batched, p, cc, fc):
        pb, cb, fb = in_batched
        vc, vf = (jax.vmap(lambda ops, f=f: f(ops, ()), in_axes=([0 if x else None for x in b],),
                           axis_size=axis_size) for f, b in ((cf, cb), (ff, fb)))
        out = lax.cond(jnp.all(p) if pb else p, lambda: vc(cc), lambda: vf(fc))
        return out, jax.tree.map(lambda _: True, out)

    return _custom_batched(run, rule, pred, cf.operands, ff.operands)


def zero_unless(fn, x, *rest):
    """`fn(x, *rest)`, a function that is zero wherever x is zero (a force from an applied
    wrench). Batched, it runs only when some world's x is not all zero, and returns zeros
    otherwise (one reduction and a conditional); unbatched, a `lax.cond`. Derivatives are
    those of `fn`."""
    out = jax.eval_shape(fn, x, *rest)

    def fast(p, *args):
        return unless_all(p, lambda: jax.tree.map(lambda o: jnp.zeros(o.shape, o.dtype), out),
                          lambda: fn(*args))

    return _dense_jvp(fast, lambda p, *args: fn(*args))(jnp.all(x == 0), x, *rest)


def _chunked_map(f, mask, items, shared, chunk: int, period=None):
    """f over the rows of `items` where `mask`, `chunk` rows per trip (zeros elsewhere).
    With `period` (a pytree of bools like `items`), the leaves marked True hold one row per
    `period` rows of the mask, row r taking their row r % period: the batch's shared rows
    (a height field's data, say) gathered as needed instead of copied per world."""
    n = mask.shape[0]
    if period is None:
        period = jax.tree.map(lambda _: False, items)

    def take(idx):
        return jax.tree.map(lambda v, cyc: v[idx % v.shape[0]] if cyc else v[idx], items,
                            period)

    out0 = jax.eval_shape(lambda it: jax.vmap(f, in_axes=(0, None))(it, shared),
                          take(jnp.zeros(chunk, jnp.int32)))
    out = jax.tree.map(lambda s: jnp.zeros((n,) + s.shape[1:], s.dtype), out0)
    pos = jnp.cumsum(mask) - 1  # rank of each masked row

    def trip(c):
        t, out = c
        slot = jnp.where(mask & (pos >= t * chunk) & (pos < (t + 1) * chunk), pos - t * chunk,
                         chunk)
        idx = jnp.zeros(chunk, jnp.int32).at[slot].set(jnp.arange(n, dtype=jnp.int32),
                                                        mode="drop")
        used = jnp.arange(chunk) < jnp.sum(mask) - t * chunk
        sub = jax.vmap(f, in_axes=(0, None))(take(idx), shared)
        dest = jnp.where(used, idx, n)
        return t + 1, jax.tree.map(lambda o, s: o.at[dest].set(s, mode="drop"), out, sub)

    ntrip = (jnp.sum(mask) + chunk - 1) // chunk
    return lax.while_loop(lambda c: c[0] < ntrip, trip, (jnp.int32(0), out))[1]


# masked_map's batched rule gathers by row the shared leaves with more values per row
_SHARED_ROW = 256

# a single world's masked_map takes up to this many rows per trip whatever chunk_div says:
# its trips cost their kernel launches, not their width (one trip for a group of 8 pairs)
_MIN_CHUNK = 8


def masked_map(f, mask, items, shared=(), chunk_div: int = 8):
    """`vmap(f, in_axes=(0, None))(items, shared)` on the rows where `mask`, zeros on the
    others, evaluating f only on the masked rows (in chunks of 1/chunk_div of the rows;
    batched, of all the batch's rows at once). Derivatives (forward and reverse) are those
    of the dense map with the unmasked rows zeroed: the tangents are computed densely."""
    row = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape[1:], v.dtype), items)
    fn = _Fn(lambda a: f(*a), (row, shared))

    def g(item, sh):  # f with its traced closure as an argument: sh = (shared, operands)
        return fn(sh[1], (item, sh[0]))

    def dense(mask, items, sh):
        out = jax.vmap(g, in_axes=(0, None))(items, sh)
        return _select(mask, out, jax.tree.map(jnp.zeros_like, out))

    def sparse(mask, items, sh):  # a single world: chunks of at least _MIN_CHUNK rows
        n = mask.shape[0]
        return _chunked_map(g, mask, items, sh, max(min(n, _MIN_CHUNK), -(-n // chunk_div)))

    def rule(axis_size, in_batched, mask, items, sh):
        mb, ib, sb = in_batched
        if any(jax.tree.leaves(sb)):  # per-world shared values: no flattening
            out = jax.vmap(dense, in_axes=(0 if mb else None,) + jax.tree.map(
                lambda b: 0 if b else None, (ib, sb)))(mask, items, sh)
            return out, jax.tree.map(lambda _: True, out)
        n = mask.shape[-1]
        mask = jnp.broadcast_to(mask, (axis_size, n)).reshape(-1)
        # the worlds' rows one after the other; a large leaf shared by the worlds (a height
        # field's data) is gathered by row instead of copied per world (the small ones are
        # copied: the gymnasium humanoid's pair sizes by row cost 15 % of its step)
        period = jax.tree.map(lambda v, b: not b and math.prod(v.shape[1:]) > _SHARED_ROW,
                              items, ib)
        items = jax.tree.map(
            lambda v, b, cyc: v if cyc else (v if b else jnp.broadcast_to(
                v, (axis_size,) + v.shape)).reshape((axis_size * n,) + v.shape[2 if b else 1:]),
            items, ib, period)
        if any(jax.tree.leaves(period)):
            out = _chunked_map(g, mask, items, sh, max(1, -(-(axis_size * n) // chunk_div)),
                               period)
        else:  # the flat rows again: an outer vmap (a map nested in another) flattens on
            out = _custom_batched(sparse, rule, mask, items, sh)
        out = jax.tree.map(lambda v: v.reshape((axis_size, n) + v.shape[1:]), out)
        return out, jax.tree.map(lambda _: True, out)

    run = _dense_jvp(lambda mk, it, sh: _custom_batched(sparse, rule, mk, it, sh), dense)
    return run(mask, items, (shared, fn.operands))
