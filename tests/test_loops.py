"""jaxsim.loops.while_loop: lax.while_loop's results world by world, batched or not."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxsim import loops


def _loop(while_loop, x, k, w):
    # a loop whose trip count differs per world, closing over batched and unbatched values
    def cond(c):
        return c[0] < k

    def body(c):
        return c[0] + 1, c[1] * x + w, c[2].at[c[0] % 3].add(x)

    return while_loop(cond, body, (jnp.int32(0), jnp.float32(0.5), jnp.zeros(3)))


# plain batched loop; one chunk (the whole batch); chunks of _MIN_CHUNK, peeled
@pytest.mark.parametrize("batch", [5, 100, 200])
@pytest.mark.parametrize("axes", [(0, 0, None), (None, 0, 0), (0, None, None)])
@pytest.mark.parametrize("peel", [False, True])
def test_batched_loop_equals_lax_while_loop(batch, axes, peel):
    rng = np.random.default_rng(batch)
    args = [jnp.asarray(rng.uniform(0.1, 0.9, batch), jnp.float32),
            # a quarter of the worlds never enter the loop (k = 0)
            jnp.asarray(rng.integers(0, 20, batch), jnp.int32).at[1::4].set(0),
            jnp.asarray(rng.normal(size=batch), jnp.float32)]
    args = [a if ax == 0 else a[0] for a, ax in zip(args, axes, strict=True)]
    ours = jax.jit(jax.vmap(lambda *a: _loop(functools.partial(loops.while_loop, peel=peel), *a),
                            in_axes=axes))(*args)
    ref = jax.jit(jax.vmap(lambda *a: _loop(lax.while_loop, *a), in_axes=axes))(*args)
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if axes[1] == 0:
        assert len(set(np.asarray(ours[0]).tolist())) > 1  # the worlds stop apart


def test_unbatched_and_nested_vmap():
    x, k, w = jnp.float32(0.3), jnp.int32(7), jnp.float32(1.0)
    for a, b in zip(_loop(loops.while_loop, x, k, w), _loop(lax.while_loop, x, k, w),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ks = jnp.arange(60, dtype=jnp.int32).reshape(3, 20) % 11

    def nested(wl):
        return jax.jit(jax.vmap(jax.vmap(lambda k: _loop(wl, x, k, w))))(ks)

    for a, b in zip(nested(loops.while_loop), nested(lax.while_loop), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _branches(x, k, cond):
    a = x * 2.0
    return cond(k < 5, lambda: (a + 1.0, jnp.int32(1)), lambda: (jnp.sin(a) * k, k))


@pytest.mark.parametrize("axes", [(0, 0), (None, 0), (0, None)])
def test_batched_cond_equals_lax_cond(axes):
    """The false branch runs on the worlds that take it only; results as lax.cond's, for
    batched and unbatched predicates."""
    rng = np.random.default_rng(1)
    args = [jnp.linspace(0.1, 0.9, 100), jnp.asarray(rng.integers(0, 20, 100), jnp.int32)]
    args = [a if ax == 0 else a[3] for a, ax in zip(args, axes, strict=True)]
    ours = jax.jit(jax.vmap(lambda x, k: _branches(x, k, loops.cond), in_axes=axes))(*args)
    ref = jax.jit(jax.vmap(lambda x, k: _branches(x, k, lax.cond), in_axes=axes))(*args)
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for k in (2, 9):  # unbatched, both branches
        k = jnp.int32(k)
        for a, b in zip(_branches(0.3, k, loops.cond), _branches(0.3, k, lax.cond), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_cond_large_batch_only():
    """With large_batch_only, a single world and batches of at most _MIN_BATCH take the
    false branch whatever the predicate; larger batches choose per world as lax.cond. (The
    branches differ here, to see which ran.)"""
    def ours(x, k):
        return _branches(x, k, lambda p, t, f: loops.cond(p, t, f, large_batch_only=True))

    def whole(x, k):
        return _branches(x, k, lambda p, t, f: f())

    for n in (1, loops._MIN_BATCH, 100):
        x = jnp.linspace(0.1, 0.9, n)
        k = jnp.arange(n, dtype=jnp.int32) % 9
        got = jax.jit(jax.vmap(ours))(x, k)
        ref = jax.jit(jax.vmap(lambda x, k, n=n: _branches(x, k, lax.cond)
                               if n > loops._MIN_BATCH else whole(x, k)))(x, k)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for k in (2, 9):  # unbatched
        got = jax.jit(ours)(jnp.float32(0.3), jnp.int32(k))
        for a, b in zip(got, whole(jnp.float32(0.3), jnp.int32(k)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_cond_branch_small():
    """With branch_small, a single world and batches of at most _MIN_BATCH take the true
    branch when every predicate holds and the false one otherwise, all worlds alike;
    unbatched it is lax.cond, and larger batches choose per world. (The branches differ
    here, to see which ran.)"""
    def ours(x, k):
        return _branches(x, k, lambda p, t, f: loops.cond(p, t, f, branch_small=True))

    def one(x, k, branch):
        return _branches(x, k, lambda p, t, f: (t if branch else f)())

    for n in (1, 3, loops._MIN_BATCH, 100):
        x = jnp.linspace(0.1, 0.9, n)
        every_k = jnp.arange(n, dtype=jnp.int32) % 3  # every pred holds (k < 5)
        for k, every in ((every_k, True), (every_k.at[n // 2].set(9), False)):
            got = jax.jit(jax.vmap(ours))(x, k)
            if n > loops._MIN_BATCH:
                ref = jax.jit(jax.vmap(lambda x, k: _branches(x, k, lax.cond)))(x, k)
            else:
                ref = jax.jit(jax.vmap(functools.partial(one, branch=every)))(x, k)
            for a, b in zip(got, ref, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for k in (2, 9):  # unbatched
        k = jnp.int32(k)
        got = jax.jit(ours)(jnp.float32(0.3), k)
        for a, b in zip(got, _branches(jnp.float32(0.3), k, lax.cond), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_by_batch_chooses_by_the_innermost_batch_size():
    """by_batch runs the small form unbatched and for batches `small` accepts, the large one
    otherwise, on batched and unbatched operands alike. (The forms differ here, to see which
    ran.)"""
    def f(x, w):
        return loops.by_batch(lambda: (jnp.sin(x) * w, x + 1), lambda: (jnp.cos(x) * w, x - 1),
                              lambda batch: batch <= 8)

    def small(x, w):
        return jnp.sin(x) * w, x + 1

    def large(x, w):
        return jnp.cos(x) * w, x - 1

    w = jnp.float32(2.0)
    got = jax.jit(f)(jnp.float32(0.3), w)
    for a, b in zip(got, small(jnp.float32(0.3), w), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    for n, ref in ((3, small), (8, small), (9, large), (100, large)):
        x = jnp.linspace(0.1, 0.9, n, dtype=jnp.float32)
        for axes in ((0, None), (0, 0)):
            ww = w if axes[1] is None else jnp.full(n, w)
            got = jax.jit(jax.vmap(f, in_axes=axes))(x, ww)
            want = jax.vmap(ref, in_axes=axes)(x, ww)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def _pair_fn(args, shared):
    x, y = args
    return jnp.sin(x) * y + shared, jnp.stack([x, y * y])


@pytest.mark.parametrize("batched_mask", [True, False])
def test_masked_map_values_and_derivatives(batched_mask):
    """Values where the mask holds and zeros elsewhere, batched or not; jvp and grad equal
    those of the dense map with the unmasked rows zeroed."""
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(30, 40)))
    y = jnp.asarray(rng.normal(size=(30, 40)))
    mask = jnp.asarray(rng.uniform(size=(30, 40)) < 0.3)
    if not batched_mask:
        mask = mask[0]
    sh = jnp.float32(0.5)

    def dense(x, y, mk):
        out = jax.vmap(_pair_fn, in_axes=(0, None))((x, y), sh)
        return jax.tree.map(lambda o: jnp.where(mk.reshape(mk.shape + (1,) * (o.ndim - 1)), o,
                                                0.0), out)

    def ours(x, y, mk):
        return loops.masked_map(_pair_fn, mk, (x, y), sh)

    ax = 0 if batched_mask else None

    def one(f):  # one world
        return lambda x, y, mk: f(x[0], y[0], mk if ax is None else mk[0])

    def two(f):  # worlds of 5 x 6 (a map nested in two vmaps: its rows flattened twice)
        def g(x, y, mk):
            sh3 = lambda a: a.reshape((5, 6) + a.shape[1:])  # noqa: E731
            out = jax.vmap(jax.vmap(f, in_axes=(0, 0, ax)), in_axes=(0, 0, ax))(
                sh3(x), sh3(y), mk if ax is None else sh3(mk))
            return jax.tree.map(lambda o: o.reshape((30,) + o.shape[2:]), out)
        return g

    cases = [(one(ours), one(dense)),
             (jax.vmap(ours, in_axes=(0, 0, ax)), jax.vmap(dense, in_axes=(0, 0, ax))),
             (two(ours), two(dense))]
    for fn, ref_fn in cases:
        a, r = jax.jit(fn)(x, y, mask), jax.jit(ref_fn)(x, y, mask)
        for u, v in zip(a, r, strict=True):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-7)
        g, gr = (jax.jit(jax.grad(lambda x, f=f: jnp.sum(f(x, y, mask)[0] ** 2)
                                  + jnp.sum(f(x, y, mask)[1])))(x) for f in (fn, ref_fn))
        np.testing.assert_allclose(np.asarray(g), np.asarray(gr), rtol=1e-5, atol=1e-6)
        t, tr = (jax.jvp(lambda x, f=f: f(x, y, mask)[0], (x,), (jnp.ones_like(x),))[1]
                 for f in (fn, ref_fn))
        np.testing.assert_allclose(np.asarray(t), np.asarray(tr), rtol=1e-5, atol=1e-6)


def test_true_first_equals_stable_argsort():
    rng = np.random.default_rng(3)
    masks = [rng.uniform(size=n) < p for n in (1, 7, 190) for p in (0.0, 0.1, 0.6, 1.0)]
    for mask in masks:
        n = mask.size
        for k in sorted({1, max(1, n // 3), n}):
            want = np.argsort(~mask, kind="stable")[:k]
            got = jax.jit(loops.true_first, static_argnums=1)(jnp.asarray(mask), k)
            np.testing.assert_array_equal(np.asarray(got), want)
    batch = jnp.asarray(rng.uniform(size=(50, 30)) < 0.2)
    got = jax.jit(jax.vmap(lambda x: loops.true_first(x, 8)))(batch)
    np.testing.assert_array_equal(np.asarray(got),
                                  np.argsort(~np.asarray(batch), axis=1, kind="stable")[:, :8])


@pytest.mark.parametrize("npred", [0, 1, 5])
def test_where_equals_dense_select(npred):
    """Batched with no, one or several worlds' predicate true, with an unbatched leaf and
    an integer leaf: the values of the dense per-world select; derivatives likewise."""
    rng = np.random.default_rng(4)
    n = 12
    pred = jnp.zeros(n, bool).at[jnp.asarray([3, 7, 0, 11, 5][:npred], jnp.int32)].set(True)
    new = (jnp.asarray(rng.normal(size=(3,))), jnp.arange(2, dtype=jnp.int32))  # unbatched
    old = (jnp.asarray(rng.normal(size=(n, 3))), jnp.ones((n, 2), jnp.int32) * 9)

    def dense(p, a, b):
        return jax.tree.map(lambda x, y: jnp.where(p, x, y), a, b)

    got = jax.jit(jax.vmap(loops.where, in_axes=(0, None, 0)))(pred, new, old)
    ref = jax.vmap(dense, in_axes=(0, None, 0))(pred, new, old)
    for u, v in zip(got, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    # unbatched predicate, and a single world
    for p in (True, False):
        one = jax.jit(loops.where)(jnp.asarray(p), new, (old[0][0], old[1][0]))
        np.testing.assert_array_equal(np.asarray(one[0]), np.asarray(new[0] if p else old[0][0]))

    def loss(f, a, b):
        out = jax.vmap(f, in_axes=(0, None, 0))(pred, (a, new[1]), (b, old[1]))
        return jnp.sum(jnp.sin(out[0]) * jnp.arange(3.0))

    g = jax.jit(jax.grad(lambda a, b: loss(loops.where, a, b), argnums=(0, 1)))(new[0], old[0])
    gr = jax.grad(lambda a, b: loss(dense, a, b), argnums=(0, 1))(new[0], old[0])
    for u, v in zip(g, gr, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-12, atol=1e-12)


def _masked_body(x, w, n):
    # a body that masks its own updates past trip n (as fori_masked asks)
    def body(t, c):
        s, v = c
        on = t < n
        s = jnp.where(on, s * x + w + t, s)
        return s, v.at[jnp.where(on, t % 4, 4)].add(x, mode="drop")
    return body


@pytest.mark.parametrize("axes", [(0, 0, 0), (None, 0, 0), (0, None, None)])
def test_fori_masked_equals_lax_fori_loop(axes):
    """Batched over worlds with different trip counts (some zero), over a shared count, or
    unbatched: the values of lax.fori_loop(0, n, body) world by world."""
    rng = np.random.default_rng(3)
    batch = 37
    args = [jnp.asarray(rng.uniform(0.1, 0.9, batch), jnp.float32),
            jnp.asarray(rng.normal(size=batch), jnp.float32),
            jnp.asarray(rng.integers(0, 12, batch), jnp.int32).at[::5].set(0)]
    args = [a if ax == 0 else a[1] for a, ax in zip(args, axes, strict=True)]
    init = (jnp.float32(0.25), jnp.zeros(4, jnp.float32))

    def run(loop, x, w, n):
        return loop(n, _masked_body(x, w, n), init)

    ours = jax.jit(jax.vmap(lambda *a: run(loops.fori_masked, *a), in_axes=axes))(*args)
    ref = jax.jit(jax.vmap(lambda *a: run(lambda n, b, i: lax.fori_loop(0, n, b, i), *a),
                           in_axes=axes))(*args)
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    one = [a[2] if ax == 0 else a for a, ax in zip(args, axes, strict=True)]
    alone = jax.jit(lambda *a: run(loops.fori_masked, *a))(*one)
    np.testing.assert_array_equal(np.asarray(alone[0]), np.asarray(ours[0][2]))


def test_masked_map_shared_large_rows():
    """Batched over worlds with per-row items shared by the worlds: small ones (copied per
    world) and one with more than `loops._SHARED_ROW` values per row (gathered by row, as a
    height field's data): values equal the dense map's, rows of every world."""
    rng = np.random.default_rng(5)
    nw, n, big = 6, 10, loops._SHARED_ROW + 44
    x = jnp.asarray(rng.normal(size=(nw, n)))  # per world
    table = jnp.asarray(rng.normal(size=(n, big)))  # shared, large rows
    scale = jnp.asarray(rng.normal(size=n))  # shared, small rows
    mask = jnp.asarray(rng.uniform(size=(nw, n)) < 0.4)

    def f(args, _):
        xi, ti, si = args
        return jnp.sum(ti * jnp.sin(xi * jnp.arange(ti.shape[0]))) * si

    def ours(x, mk):
        return loops.masked_map(f, mk, (x, table, scale))

    def dense(x, mk):
        return jnp.where(mk, jax.vmap(f, in_axes=(0, None))((x, table, scale), ()), 0.0)

    got = jax.jit(jax.vmap(ours))(x, mask)
    want = jax.jit(jax.vmap(dense))(x, mask)
    assert np.asarray(mask).any() and not np.asarray(mask).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(got)[~np.asarray(mask)] == 0)
