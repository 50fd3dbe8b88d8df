"""jaxsim.linalg (small dense linear algebra) against numpy / scipy, and a check that the
simulation programs contain no LAPACK custom call that jaxlib could split.

jaxlib 0.10's batched LAPACK kernels split large batches over XLA's intra-op thread pool
and block a pool thread while they wait; two such calls running concurrently hang a
2-core machine (a vmapped Newton step of the gymnasium ant over 1024 worlds did). The
lowering check below fails if a LAPACK call large enough to be split appears in forward,
step or their gradients.
"""

import math
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import jaxsim
from jaxsim import linalg

# 1, 3, 6: written out (UNROLL = 6); 7, 14: the loops; 49 and 101: the blocked recursion
# (BLOCK = 48) with odd splits
SIZES = (1, 3, 6, 7, 14, 49, 101)


@pytest.fixture(scope="module", autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _spd(rng, n, batch=3):
    X = rng.normal(size=(batch, n, n))
    return X @ X.transpose(0, 2, 1) + n * np.eye(n)


@pytest.mark.parametrize("n", SIZES)
def test_cholesky_and_cho_solve(n):
    rng = np.random.default_rng(n)
    A = _spd(rng, n)
    # garbage above the diagonal is never read
    A_low = np.tril(A) + np.triu(rng.normal(size=A.shape), 1)
    L = np.asarray(linalg.cholesky(A_low))
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=1e-10, atol=1e-10)
    b = rng.normal(size=(3, n))
    B = rng.normal(size=(3, n, 4))
    np.testing.assert_allclose(linalg.cho_solve(L, b), np.linalg.solve(A, b[..., None])[..., 0],
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(linalg.cho_solve(L, B), np.linalg.solve(A, B), rtol=1e-9,
                               atol=1e-12)


def test_cholesky_not_positive_definite_gives_nan():
    A = np.diag([1.0, -1.0, 2.0])
    assert np.isnan(np.asarray(linalg.cholesky(A))[1:, 1]).all()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(n, lower, trans, unit):
    rng = np.random.default_rng(7 * n + lower + 2 * trans + 4 * unit)
    T = rng.normal(size=(n, n)) / n + 2 * np.eye(n)
    junk = 5.0 + rng.normal(size=(n, n))  # the unread triangle (and diagonal) hold garbage
    A = np.where(np.tri(n, k=-1, dtype=bool) if lower else np.tri(n, k=-1, dtype=bool).T, T,
                 junk)
    if not unit:
        A[np.diag_indices(n)] = np.diag(T)
    B = rng.normal(size=(n, 2))
    ref = sl.solve_triangular(A, B, lower=lower, trans=int(trans), unit_diagonal=unit)
    got = linalg.solve_triangular(A, B, lower=lower, trans=trans, unit_diagonal=unit)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-11)
    got1 = linalg.solve_triangular(A, B[:, 0], lower=lower, trans=trans, unit_diagonal=unit)
    np.testing.assert_allclose(got1, ref[:, 0], rtol=1e-9, atol=1e-11)
    # more right-hand sides than rows: the inverse-then-product path
    Bm = rng.normal(size=(n, 3 * n + 1))
    ref = sl.solve_triangular(A, Bm, lower=lower, trans=int(trans), unit_diagonal=unit)
    got = linalg.solve_triangular(A, Bm, lower=lower, trans=trans, unit_diagonal=unit)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("batch", [None, 2, linalg.SMALL_BATCH + 4, 2 * linalg.CHUNK_MAX + 5])
@pytest.mark.parametrize("n", (3, 7, 14, 49))
def test_loops_by_batch_size(batch, n):
    """The factorisation and the solves pick their loops by batch size (explicit-batch loops
    up to SMALL_BATCH worlds, vectorised ones above, the factorisation of a large batch
    in LAPACK calls over chunks of worlds, the last one padded): unbatched, a small
    vmapped batch and large ones all equal numpy / scipy, the solves included, and a
    matrix that is not positive definite gives NaN from its failing pivot on in every form
    (LAPACK's, all of it), without touching the other worlds."""
    rng = np.random.default_rng(n + (batch or 0))
    k = batch or 1
    A = _spd(rng, n, k)
    A[0, 1, 1] = -A[0, 1, 1]  # world 0: not positive definite at pivot 1
    b = rng.normal(size=(k, n))

    def run(A, b):
        L = linalg.cholesky(A)
        outs = [L]
        for lower in (True, False):
            T = L if lower else L.T
            for trans in (False, True):
                for unit in (False, True):
                    outs.append(linalg.solve_triangular(T, b, lower=lower, trans=trans,
                                                        unit_diagonal=unit))
        return outs

    if batch == 2 * linalg.CHUNK_MAX + 5 and n > linalg.UNROLL:  # LAPACK, whole or chunked
        text = jax.jit(jax.vmap(run)).lower(A, b).as_text()
        assert "potrf" in text and "trsm" in text
        if n > linalg.BLOCK:  # its blocks' work over the batch is past LAPACK_WORK
            assert "while" in text
    outs = jax.jit(run)(A[0], b[0]) if batch is None else jax.jit(jax.vmap(run))(A, b)
    outs = [np.asarray(o).reshape((k,) + o.shape[-2 if i == 0 else -1:]) for i, o in
            enumerate(outs)]
    for w in range(k):
        L = outs[0][w]
        if w == 0:
            assert np.isnan(L[1:, 1]).all()
            continue
        Lref = np.linalg.cholesky(A[w])
        np.testing.assert_allclose(L, Lref, rtol=1e-10, atol=1e-10)
        i = 1
        for lower in (True, False):
            T = Lref if lower else Lref.T
            for trans in (False, True):
                for unit in (False, True):
                    ref = sl.solve_triangular(T, b[w], lower=lower, trans=int(trans),
                                              unit_diagonal=unit)
                    np.testing.assert_allclose(outs[i][w], ref, rtol=1e-9, atol=1e-11)
                    i += 1


@pytest.mark.parametrize("n", (5, 49))
def test_nested_vmaps(n):
    """A small inner batch (its loops take the batch as leading dimensions) inside a large
    outer one, and the reverse: equal numpy / scipy (49: past BLOCK, in halves)."""
    rng = np.random.default_rng(5)
    big, small = linalg.SMALL_BATCH + 3, 2
    for outer, inner in ((big, small), (small, big)):
        A = _spd(rng, n, outer * inner).reshape(outer, inner, n, n)
        b = rng.normal(size=(outer, inner, n))

        def f(A, b):
            return linalg.cho_solve(linalg.cholesky(A), b)

        got = jax.jit(jax.vmap(jax.vmap(f)))(A, b)
        want = np.linalg.solve(A, b[..., None])[..., 0]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("n", SIZES)
def test_solve_general(n):
    rng = np.random.default_rng(3 * n)
    A = rng.normal(size=(2, n, n)) + 0.5 * np.sqrt(n) * np.eye(n)
    if n > 1:
        A[0, 0, 0] = 0.0  # needs a row exchange
    b = rng.normal(size=(2, n))
    np.testing.assert_allclose(linalg.solve(A, b), np.linalg.solve(A, b[..., None])[..., 0],
                               rtol=1e-8, atol=1e-10)


def test_eigh3():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(20, 3, 3))
    S = S + S.transpose(0, 2, 1)
    S[0] = np.diag([2.0, 1.0, 3.0])  # already diagonal
    S[1] = np.eye(3)  # repeated eigenvalues
    w, V = linalg.eigh3(S)
    w0, _ = np.linalg.eigh(S)
    np.testing.assert_allclose(w, w0, atol=1e-12)
    np.testing.assert_allclose(np.einsum("bij,bjk->bik", S, V), V * np.asarray(w)[:, None, :],
                               atol=1e-12)
    np.testing.assert_allclose(np.einsum("bji,bjk->bik", V, V), np.broadcast_to(np.eye(3), S.shape),
                               atol=1e-12)


@pytest.mark.parametrize("batch", [None, 2, linalg.SMALL_BATCH + 4])
def test_gradients_match_lapack(batch):
    """Reverse mode through the factorisation and the solves (their JVP and transpose
    rules), unbatched and vmapped over a small and a large batch."""
    rng = np.random.default_rng(1)
    k = batch or 1
    A = _spd(rng, 6, k)
    b = rng.normal(size=(k, 6))

    def ours(A, b):
        A = 0.5 * (A + A.T)
        return jnp.sum(jnp.sin(linalg.cho_solve(linalg.cholesky(A), b)))

    def ref(A, b):
        A = 0.5 * (A + A.T)
        return jnp.sum(jnp.sin(jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(A), True), b)))

    g, r = jax.grad(ours, argnums=(0, 1)), jax.grad(ref, argnums=(0, 1))
    if batch is None:
        got, want = g(A[0], b[0]), r(A[0], b[0])
    else:
        got, want = jax.jit(jax.vmap(g))(A, b), jax.vmap(r)(A, b)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)


CONTACT = """
<mujoco>
  <option integrator="{integ}" cone="{cone}"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body pos="0 0 0.3"><freejoint/><geom type="box" size=".1 .2 .05" condim="{condim}"/>
      <body pos=".2 0 0"><joint type="hinge" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" size=".03" fromto="0 0 0 .2 0 0"/></body>
    </body>
  </worldbody>
</mujoco>
"""


# jaxlib 0.10 splits a LAPACK call's batch over the thread pool from this much work (its
# own estimate: n^3 / 3 flops per Cholesky, m^2 k per triangular solve of k columns)
JAXLIB_SPLIT_WORK = 200_000


def _lapack_calls(text):
    """(name, operand shapes) of every LAPACK custom call in a lowered program's text."""
    calls = []
    for line in text.splitlines():
        hit = re.search(r"custom_call @(\w*lapack\w*)", line)
        if hit:
            sig = line[line.rindex(" : (") + 4:line.rindex(") ->")]
            shapes = [tuple(int(x) for x in t.split("x")[:-1])
                      for t in re.findall(r"tensor<([^>]*)>", sig)]
            calls.append((hit.group(1), shapes))
    return calls


def _lapack_work(name, shapes):
    """(batch, work per matrix) of a LAPACK call, by jaxlib's estimate."""
    if "potrf" in name:
        *batch, n, _ = shapes[0]
        return math.prod(batch), n * n * n // 3
    if "trsm" in name:
        *batch, m, k = shapes[1]
        return math.prod(batch), m * m * k
    raise AssertionError(f"unexpected LAPACK call {name}")


@pytest.mark.parametrize("integ,cone,condim,solver", [
    ("implicit", "elliptic", 6, "Newton"), ("implicitfast", "pyramidal", 3, "PGS"),
    ("Euler", "elliptic", 4, "CG"),
])
def test_simulation_programs_lapack_calls_never_split(integ, cone, condim, solver):
    """Single worlds and small batches factorise with LAPACK, and no LAPACK call in forward, step or their gradients is large enough for jaxlib to split it
    over the thread pool (the hang described above), at any batch size."""
    xml = CONTACT.format(integ=integ, cone=cone, condim=condim).replace(
        "<option ", f'<option solver="{solver}" noslip_iterations="2" ')
    m = jaxsim.load_string(xml, dtype=jnp.float64)
    d = jaxsim.make_state(m)

    def loss(qvel):
        return jnp.sum(jaxsim.step(m, d.replace(qvel=qvel)).qpos)

    texts = {1: [jax.jit(lambda s: jaxsim.step(m, s)).lower(d).as_text(),
                 jax.jit(jax.grad(loss)).lower(d.qvel).as_text()]}
    for n in (4, 1024):
        batch = jax.tree.map(lambda x, n=n: jnp.broadcast_to(x, (n,) + jnp.shape(x)), d)
        texts[n] = [jax.jit(jax.vmap(lambda s: jaxsim.step(m, s))).lower(batch).as_text(),
                    jax.jit(jax.vmap(jax.grad(loss))).lower(batch.qvel).as_text()]
    for n, programs in texts.items():
        calls = [c for t in programs for c in _lapack_calls(t)]
        for name, shapes in calls:
            nb, work = _lapack_work(name, shapes)
            # a single matrix is never split (test_single_matrix_lapack_calls_do_not_hang)
            assert nb == 1 or nb * work < JAXLIB_SPLIT_WORK, (n, name, shapes)
        if n <= 4:
            assert any("potrf" in name for name, _ in calls), n


_TWO_CALLS = """
import jax, numpy as np
from jax import lax
n = 600
rng = np.random.default_rng(0)
A = rng.normal(size=(n, n)); A = (A @ A.T + n * np.eye(n)).astype(np.float32)
X = rng.normal(size=(n, 300)).astype(np.float32)

def body(i, c):
    a, b, x, y = c
    la = lax.linalg.cholesky(a[None], symmetrize_input=False)
    lb = lax.linalg.cholesky(b[None], symmetrize_input=False)
    ta = lax.linalg.triangular_solve(la, x[None], left_side=True, lower=True)[0]
    tb = lax.linalg.triangular_solve(lb, y[None], left_side=True, lower=True)[0]
    return a + 1e-6 * la[0], b + 1e-6 * lb[0], x + 1e-3 * ta, y + 1e-3 * tb

f = jax.jit(lambda *c: lax.fori_loop(0, 200, body, c))
print(bool(np.isfinite(np.asarray(jax.block_until_ready(f(A, 1.1 * A, X, X))[2])).all()))
"""


def test_single_matrix_lapack_calls_do_not_hang():
    """What `linalg.lapack_ok` relies on: jaxlib splits a LAPACK call over its batch only,
    so a call on one matrix runs on the calling thread however large it is. Two
    independent chains of such calls (600 x 600, each past jaxlib's splitting work) run
    concurrently 200 times; on two matrices per call the same program hangs at once on
    this 2-core machine."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", _TWO_CALLS], capture_output=True, text=True,
                       timeout=240, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]
