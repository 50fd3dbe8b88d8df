"""The numpy backend (jaxsim.hostnp) against JAX: `.at` semantics and set_const itself."""

from __future__ import annotations

import glob
import os
import sys
import threading

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from mjadapter import model_from_mujoco  # noqa: E402

from jaxsim import constants, hostnp, math  # noqa: E402

jax.config.update("jax_enable_x64", True)

_MJX = os.path.join(os.path.dirname(mujoco.__file__), "mjx", "test_data")
_HERE = os.path.dirname(__file__)

# Each model costs a jit of set_const (5-10 s). By default: site and refsite transmissions,
# slider-crank, all joint types, mocap, cameras, lights (smooth_features); sphere/cylinder
# wraps with side sites and inside wrapping (wrap_sidesite); fixed and site tendons
# (fixed_site). JAXSIM_TEST_ALL=1 adds every tendon model (pulleys, ...) and a humanoid.
MODELS = [
    os.path.join(_HERE, "smooth_features.xml"),
    os.path.join(_MJX, "tendon", "wrap_sidesite.xml"),
    os.path.join(_MJX, "tendon", "fixed_site.xml"),
]
if os.environ.get("JAXSIM_TEST_ALL"):
    MODELS += sorted(glob.glob(os.path.join(_MJX, "tendon", "*.xml")))
    MODELS += [os.path.join(_MJX, "humanoid", "humanoid.xml")]
MODELS = sorted({p for p in MODELS if os.path.exists(p)})


def _host(x):
    return np.asarray(x)


# ---------------------------------------------------------------------------- .at


_IDX = np.array([1, 3, 1, 0, 3, 3])


@pytest.mark.parametrize("op", ["set", "add", "multiply", "min", "max"])
def test_at_repeated_indices_match_jax(op):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3))
    # set with repeated indices: equal values, so the result does not depend on the order
    vals = rng.standard_normal((len(_IDX), 3))
    if op == "set":
        vals[2], vals[4], vals[5] = vals[0], vals[1], vals[1]
    got = getattr(hostnp.asarray(x).at[_IDX], op)(vals)
    want = getattr(jnp.asarray(x).at[_IDX], op)(vals)
    np.testing.assert_array_equal(_host(got), _host(want))
    assert isinstance(got, hostnp.HostArray)


def test_at_leaves_input_unchanged_and_casts_like_jax():
    x = hostnp.asarray(np.zeros(4, np.int32))
    y = x.at[np.array([0, 0, 2])].add(np.array([1, 2, 3], np.int64))
    np.testing.assert_array_equal(x, 0)
    np.testing.assert_array_equal(y, [3, 0, 3, 0])
    assert y.dtype == np.int32
    # read-only views (broadcast_to, diagonal) still update into a copy
    b = hostnp.host_numpy.broadcast_to(np.arange(3.0), (2, 3))
    np.testing.assert_array_equal(b.at[1, 0].set(7.0), [[0, 1, 2], [7, 1, 2]])


def test_at_mixed_indices_and_drop_match_jax():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5, 3))
    v = rng.standard_normal((2, 3, 3))
    rows, cols = np.array([[1], [3]]), np.array([0, 2, 2])
    cases = [
        (lambda a: a.at[rows, cols].add(v)),
        (lambda a: a.at[np.array([2, 0]), 1:3].set(1.5)),
        (lambda a: a.at[..., 0].set(-1.0)),
        (lambda a: a.at[np.array([0, 4, -1, 9, 0]), 0].add(np.arange(5.0)[:, None], mode="drop")),
        (lambda a: a.at[np.array([1, 7, 1])].set(np.ones((3, 5, 3)), mode="drop")),
        (lambda a: a.at[np.array([0, 7, -2])].get(mode="fill", fill_value=-3.0)),
        (lambda a: a.at[np.array([0, 7, -2])].get(mode="clip")),
    ]
    for k, f in enumerate(cases):
        got, want = f(hostnp.asarray(x)), f(jnp.asarray(x))
        np.testing.assert_array_equal(_host(got), _host(want), err_msg=f"case {k}")


# --------------------------------------------------------------------------- switch


def test_switch_is_scoped_restored_and_per_thread():
    assert hostnp.jnp.zeros is jnp.zeros and not hostnp.on_host()
    seen = []

    def other_thread():
        seen.append(hostnp.on_host())

    with pytest.raises(RuntimeError):
        with hostnp.host_backend():
            assert hostnp.on_host()
            z = hostnp.jnp.zeros(3)
            assert isinstance(z, hostnp.HostArray)
            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
            raise RuntimeError("restored on exceptions too")
    assert seen == [False]
    assert not hostnp.on_host() and hostnp.jnp.where is jnp.where
    assert hostnp.jax.lax is jax.lax


def test_missing_host_function_fails_loudly():
    with hostnp.host_backend(), pytest.raises(AttributeError, match="hostnp"):
        hostnp.jax.lax.scan  # noqa: B018


def test_custom_jvp_runs_undecorated_on_host():
    calls = []

    @hostnp.jax.custom_jvp
    def f(x):
        calls.append(type(x))
        return hostnp.jnp.sin(x)

    @f.defjvp
    def _f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 2.0 * t  # deliberately not cos(x): shows JAX uses this rule

    assert float(jax.grad(f)(0.3)) == 2.0
    with hostnp.host_backend():
        y = f(hostnp.asarray(0.3))
    assert isinstance(y, hostnp.HostArray) and calls[-1] is hostnp.HostArray
    np.testing.assert_allclose(y, np.sin(0.3))


def test_cho_solve_and_one_hot_match_jax():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 6))
    spd = a @ a.T + 6 * np.eye(6)
    L = np.linalg.cholesky(spd)
    b = rng.standard_normal((6, 4))
    want = jax.scipy.linalg.cho_solve((jnp.asarray(L), True), jnp.asarray(b))
    idx = np.array([[0, 2], [1, 1]])
    with hostnp.host_backend():
        got = hostnp.jax.scipy.linalg.cho_solve((L, True), b)
        vec = hostnp.jax.scipy.linalg.cho_solve((L.T, False), b[:, 0])
        hot = hostnp.jax.nn.one_hot(idx, 3, dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(vec, want[:, 0], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(hot, jax.nn.one_hot(idx, 3, dtype=jnp.float32))


def test_wrap_matches_jax():
    """math.wrap (Newton loop, one_hot, stop_gradient) on random sphere/cylinder cases."""
    rng = np.random.default_rng(3)
    n = 64
    args = (
        rng.standard_normal((n, 3)), rng.standard_normal((n, 3)), 0.1 * rng.standard_normal((n, 3)),
        np.stack([np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(n)]),
        0.3 + rng.random(n), rng.random(n) < 0.5, 0.5 * rng.standard_normal((n, 3)),
        rng.random(n) < 0.5,
    )
    want = jax.jit(math.wrap)(*args)
    with hostnp.host_backend():
        got = math.wrap(*[hostnp.asarray(a) for a in args])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------ set_const


_set_const_jit = jax.jit(constants.set_const)


@pytest.mark.parametrize("path", MODELS, ids=os.path.basename)
def test_set_const_host_equals_jax(path):
    m = model_from_mujoco(mujoco.MjModel.from_xml_path(path), jnp.float64)
    want = _set_const_jit(m)
    with hostnp.host_backend():
        got = constants.set_const(hostnp.to_host(m))
    got_leaves, tree_got = jax.tree_util.tree_flatten_with_path(got)
    want_leaves, tree_want = jax.tree_util.tree_flatten_with_path(want)
    assert tree_got == tree_want
    for (key, g), (_, w) in zip(got_leaves, want_leaves, strict=True):
        name = jax.tree_util.keystr(key)
        assert isinstance(g, np.ndarray), name
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, name
        # same operations; only the summation order of dot products / einsums and the
        # triangular solves differ, so agreement is at rounding level
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-12 * scale, err_msg=name)
