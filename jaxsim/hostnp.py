"""One physics implementation, two array backends: JAX (traced) and numpy (host).

`constants.set_const` and the smooth stages it calls must stay traceable JAX for users
(jit, vmap, grad). The MJCF compiler evaluates the same code once per model in float64;
run eagerly on JAX, every distinct small primitive is compiled on first use, which costs
tens of seconds for the first model of a process and again for every new shape. Under
`host_backend()` the same functions run on plain numpy instead, in milliseconds.

How: the physics modules import `jnp` and `jax` from here instead of from JAX. Both are
switches that resolve each attribute on the real module, or, inside `host_backend()`, on a
numpy stand-in:

- `jnp.<fn>` becomes the numpy function of the same name (results viewed as `HostArray`),
  with a few overrides where the signatures or semantics differ;
- arrays are `HostArray`, an ndarray subclass with JAX's functional `.at[idx]` updates
  (they return copies; `add`/`min`/`max`/`multiply` accumulate over repeated indices);
- `jax.lax.fori_loop`, `jax.lax.stop_gradient`, `jax.nn.one_hot`,
  `jax.scipy.linalg.cho_solve` and `jax.tree_util` have host versions;
- functions decorated with `jax.custom_jvp` (from this module's `jax`) call the undecorated
  function on the host.

The switch is a context variable, not a rebinding of module globals, so a model compiled
in one thread never changes what a trace in another thread sees; outside `host_backend()`
every attribute is the real JAX one, so traced programs are unchanged. Host arrays must be
treated as immutable (the code only updates through `.at`, as JAX requires anyway).
Attributes without a host version raise AttributeError on the host rather than silently
running JAX eagerly.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable
from typing import Any

import jax as _jax
import jax.numpy as _jnp
import numpy as np

_HOST: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxsim_host_backend", default=False)


def on_host() -> bool:
    """Whether the calling context runs the physics on the numpy backend."""
    return _HOST.get()


@contextlib.contextmanager
def host_backend():
    """Runs `jaxsim` physics called inside the block on numpy (see the module docstring).

    Inputs should be host arrays (`to_host`); numpy floating-point warnings are silenced
    because, as in JAX, branches that `where` discards may divide by zero or leave a
    function's domain.
    """
    token = _HOST.set(True)
    try:
        with np.errstate(all="ignore"):
            yield
    finally:
        _HOST.reset(token)


# ------------------------------------------------------------------------------ arrays


class HostArray(np.ndarray):
    """numpy array with JAX's `.at[idx].set/add/...` functional updates."""

    @property
    def at(self) -> _At:
        return _At(self)


def concrete(x: Any) -> np.ndarray | None:
    """The numpy value of x, or None when x is traced (a model leaf passed as an argument
    of a jitted or vmapped function; closed-over models are concrete). Lets run-time tests
    MuJoCo makes on model values be decided at trace time when the values are known."""
    try:
        return np.asarray(x)
    except (_jax.errors.TracerArrayConversionError, _jax.errors.ConcretizationTypeError):
        return None


def asarray(x: Any, dtype=None) -> HostArray:
    """`x` as a HostArray (no copy when it already is one of `dtype`)."""
    return np.asarray(x, dtype=dtype).view(HostArray)


def to_host(tree: Any) -> Any:
    """A pytree (Model, State, ...) with every array leaf converted to a HostArray."""
    return _jax.tree_util.tree_map(asarray, tree)


def _wrap(x: Any) -> Any:
    """Results of numpy functions as HostArrays (0-d for scalars, as JAX returns)."""
    if isinstance(x, HostArray):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x).view(HostArray)
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


def _plain(x: Any) -> Any:
    """Index components as plain numpy (0-d HostArrays would index as arrays)."""
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    if isinstance(x, np.ndarray):
        x = np.asarray(x)
        return x[()] if x.ndim == 0 else x
    return x


class _At:
    __slots__ = ("_a",)

    def __init__(self, a: HostArray):
        self._a = a

    def __getitem__(self, idx) -> _AtIndex:
        return _AtIndex(self._a, _plain(idx))


def _drop_oob(shape: tuple, idx, values):
    """Keeps the in-bounds updates of an integer-array index (JAX's mode="drop").

    Negative indices count from the end, as in JAX; indices outside [-n, n) are dropped.
    Supported: integer arrays (or ints) on the leading axes, then slices.
    """
    idx = idx if isinstance(idx, tuple) else (idx,)
    k = 0
    while k < len(idx) and not isinstance(idx[k], slice) and idx[k] is not Ellipsis:
        k += 1
    if any(not isinstance(i, slice) for i in idx[k:]):
        raise NotImplementedError("host .at[...] with mode='drop': arrays must lead the index")
    arrs = [np.asarray(i) for i in idx[:k]]
    if any(a.dtype == bool for a in arrs):
        raise NotImplementedError("host .at[...] with mode='drop': boolean index")
    arrs = np.broadcast_arrays(*arrs)
    ok = np.ones(arrs[0].shape if arrs else (), bool)
    fixed = []
    for a, n in zip(arrs, shape[:len(arrs)], strict=True):
        a = np.where(a < 0, a + n, a)
        ok &= (a >= 0) & (a < n)
        fixed.append(a)
    full = ok.shape + np.empty(shape, bool)[(0,) * k + idx[k:]].shape
    vals = np.broadcast_to(values, full)[ok]
    return tuple(a[ok] for a in fixed) + tuple(idx[k:]), vals


class _AtIndex:
    """`x.at[idx]`: the update methods return a new array, `x` is left unchanged."""

    __slots__ = ("_a", "_idx")

    def __init__(self, a: HostArray, idx):
        self._a, self._idx = a, idx

    def get(self, mode: str | None = None, fill_value=None, **_) -> HostArray:
        if mode in (None, "promise_in_bounds"):
            return _wrap(self._a[self._idx])
        idx = self._idx if isinstance(self._idx, tuple) else (self._idx,)
        if not all(isinstance(i, (int, np.integer, np.ndarray)) for i in idx):
            raise NotImplementedError("host .at[...].get(mode=...) takes integer indices")
        sizes = self._a.shape[: len(idx)]
        ok, clipped = np.True_, []
        for i, n in zip(idx, sizes, strict=True):
            i = np.asarray(i)
            i = np.where(i < 0, i + n, i)
            ok = ok & (i >= 0) & (i < n)
            clipped.append(np.clip(i, 0, n - 1))
        out = self._a[tuple(clipped)]
        if mode == "clip":
            return _wrap(out)
        if mode == "fill":
            if fill_value is None:
                fill_value = np.nan if np.issubdtype(self._a.dtype, np.inexact) else 0
            ok = ok.reshape(ok.shape + (1,) * (out.ndim - ok.ndim))
            return _wrap(np.where(ok, out, np.asarray(fill_value, self._a.dtype)))
        raise ValueError(f"unknown mode {mode!r}")

    def _update(self, values, ufunc: np.ufunc | None, mode: str | None) -> HostArray:
        a = self._a
        vals = np.asarray(values).astype(a.dtype, copy=False)  # JAX casts to x's dtype
        idx = self._idx
        if mode in ("drop", "fill"):
            idx, vals = _drop_oob(a.shape, idx, vals)
        elif mode not in (None, "promise_in_bounds"):
            raise NotImplementedError(f"host .at[...] update with mode={mode!r}")
        out = np.array(a, copy=True).view(HostArray)
        if ufunc is None:
            out[idx] = vals
        else:
            # ufunc.at accumulates over repeated indices, as JAX's scatter-add does
            ufunc.at(out, idx, vals)
        return out

    def set(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, None, mode)

    def add(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, np.add, mode)

    def subtract(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, np.subtract, mode)

    def multiply(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, np.multiply, mode)

    mul = multiply

    def divide(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, np.true_divide, mode)

    def min(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, np.minimum, mode)

    def max(self, values, mode: str | None = None, **_) -> HostArray:
        return self._update(values, np.maximum, mode)


# -------------------------------------------------------------------------- namespaces


class _Namespace:
    """Attributes from `overrides`, else from `base` (callables return HostArrays).

    With `base=None` a missing attribute raises AttributeError, so a JAX call without a
    host version fails loudly instead of running JAX eagerly in the middle of host code.
    """

    def __init__(self, name: str, base: Any, overrides: dict):
        self._name, self._base, self._over = name, base, dict(overrides)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._over:
            val = self._over[name]
        elif self._base is not None and hasattr(self._base, name):
            val = getattr(self._base, name)
            if callable(val) and not isinstance(val, type):
                val = _wrapped(val)
        else:
            raise AttributeError(
                f"{self._name}.{name} has no host (numpy) version; add one in jaxsim/hostnp.py"
            )
        # cache: later lookups of this name skip __getattr__
        setattr(self, name, val)
        return val


def _wrapped(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return _wrap(fn(*args, **kwargs))

    return call


def _einsum(subscripts, *operands, **kwargs):
    # numpy's default evaluates several operands in one nested loop (cost: the product of
    # every index range); the optimised order contracts pairwise, like jnp.einsum does
    kwargs.setdefault("optimize", len(operands) > 2)
    return _wrap(np.einsum(subscripts, *operands, **kwargs))


def _cholesky(a, **kwargs) -> HostArray:
    """Lower Cholesky factor; like JAX, NaNs (not an exception) where `a` is not PD."""
    a = np.asarray(a)
    try:
        return _wrap(np.linalg.cholesky(a, **kwargs))
    except np.linalg.LinAlgError:
        pass
    flat = a.reshape((-1,) + a.shape[-2:])
    out = np.empty(flat.shape, np.result_type(a, np.float32))
    for k, mat in enumerate(flat):
        try:
            out[k] = np.linalg.cholesky(mat, **kwargs)
        except np.linalg.LinAlgError:
            out[k] = np.where(np.tri(len(mat), dtype=bool), np.nan, 0.0)
    return _wrap(out.reshape(a.shape))


def _fori_loop(lower, upper, body_fun, init_val):
    val = init_val
    for i in range(int(lower), int(upper)):
        val = body_fun(i, val)
    return val


def _while_loop(cond_fun, body_fun, init_val):
    val = init_val
    while bool(cond_fun(val)):
        val = body_fun(val)
    return val


def _cond(pred, true_fun, false_fun, *operands):
    return true_fun(*operands) if bool(pred) else false_fun(*operands)


def _one_hot(x, num_classes: int, *, dtype=np.float64, axis: int = -1):
    x = np.asarray(x)
    out = (x[..., None] == np.arange(num_classes)).astype(dtype)
    return _wrap(np.moveaxis(out, -1, axis))


def _solve_triangular(a: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """Solves a x = b for triangular `a` (n, n) and `b` (n, k).

    Small systems by substitution, one vectorised row update per unknown (importing
    scipy costs about half a second, more than the whole host pass of a small model);
    large ones by LAPACK through scipy.
    """
    n = a.shape[0]
    if n > 64:
        from scipy.linalg import solve_triangular

        return solve_triangular(a, b, lower=lower, check_finite=False)
    x = np.zeros(np.broadcast_shapes(b.shape, (n, 1)), np.result_type(a, b))
    rows = range(n) if lower else range(n - 1, -1, -1)
    for i in rows:
        done = slice(0, i) if lower else slice(i + 1, n)
        x[i] = (b[i] - a[i, done] @ x[done]) / a[i, i]
    return x


def _cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
    """jax.scipy.linalg.cho_solve: solves (c c') x = b, or (c' c) x = b for upper c."""
    c, lower = c_and_lower
    c, b = np.asarray(c), np.asarray(b)
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    L = c if lower else c.T
    y = _solve_triangular(L, b2, lower=True)
    x = _solve_triangular(L.T, y, lower=False)
    return _wrap(x[:, 0] if vec else x)


def _solve_triangular_api(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False,
                          **_):
    """jax.scipy.linalg.solve_triangular on the host (trans 0/'N' or 1/'T')."""
    a, b = np.asarray(a), np.asarray(b)
    if unit_diagonal:
        a = a.copy()
        np.fill_diagonal(a, 1.0)
    if trans in (1, "T", "C"):
        a, lower = a.T, not lower
    vec = b.ndim == 1
    x = _solve_triangular(a, b[:, None] if vec else b, lower=lower)
    return _wrap(x[:, 0] if vec else x)


host_numpy = _Namespace(
    "jax.numpy",
    np,
    {
        "asarray": asarray,
        "array": lambda x, dtype=None, copy=True, **_: np.array(x, dtype=dtype, copy=copy).view(
            HostArray
        ),
        "einsum": _einsum,
        "ndarray": np.ndarray,
        "linalg": _Namespace("jax.numpy.linalg", np.linalg, {"cholesky": _cholesky}),
    },
)


class custom_jvp:
    """`jax.custom_jvp` whose undecorated function runs on the host backend.

    Used through this module's `jax` (`@jax.custom_jvp`, also with
    `functools.partial(jax.custom_jvp, nondiff_argnums=...)`). Outside `host_backend()` a
    call goes to the real `jax.custom_jvp` object, so traces and derivatives are JAX's.
    """

    def __init__(self, fun: Callable, nondiff_argnums: tuple[int, ...] = ()):
        self.fun = fun
        self.jax_fn = _jax.custom_jvp(fun, nondiff_argnums=nondiff_argnums)
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp: Callable, **kwargs) -> Callable:
        return self.jax_fn.defjvp(jvp, **kwargs)

    def defjvps(self, *jvps: Callable | None) -> None:
        self.jax_fn.defjvps(*jvps)

    def __call__(self, *args, **kwargs):
        if _HOST.get():
            return self.fun(*args, **kwargs)
        return self.jax_fn(*args, **kwargs)


host_jax = _Namespace(
    "jax",
    None,
    {
        "numpy": host_numpy,
        "Array": np.ndarray,
        "custom_jvp": custom_jvp,
        "lax": _Namespace(
            "jax.lax",
            None,
            {
                "fori_loop": _fori_loop,
                "while_loop": _while_loop,
                "cond": _cond,
                "stop_gradient": lambda x: x,
            },
        ),
        "nn": _Namespace("jax.nn", None, {"one_hot": _one_hot}),
        "scipy": _Namespace(
            "jax.scipy",
            None,
            {
                "linalg": _Namespace(
                    "jax.scipy.linalg", None,
                    {"cho_solve": _cho_solve, "solve_triangular": _solve_triangular_api},
                )
            },
        ),
        # pure Python over pytrees: numpy leaves need no device work
        "tree_util": _jax.tree_util,
    },
)


class _Switch:
    """Module stand-in: each attribute comes from `device` (after `device_overrides`), or
    from `host` on the host backend."""

    __slots__ = ("_device", "_over", "_host")

    def __init__(self, device: Any, host: Any, device_overrides: dict | None = None):
        self._device, self._host, self._over = device, host, device_overrides or {}

    def __getattr__(self, name: str) -> Any:
        if _HOST.get():
            return getattr(self._host, name)
        val = self._over.get(name)
        return getattr(self._device, name) if val is None else val

    def __repr__(self) -> str:
        return f"<jaxsim.hostnp switch for {self._device.__name__}>"


jnp: Any = _Switch(_jnp, host_numpy)
jax: Any = _Switch(_jax, host_jax, {"custom_jvp": custom_jvp})
