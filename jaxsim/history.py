"""History buffers: delayed controls and sensors, sensor sampling intervals.

MuJoCo keeps, per actuator or sensor with `nsample` > 0, a ring buffer of timed samples in
`mjData.history` laid out as [user, cursor, times(n), values(n * dim)]: `cursor` is the
physical slot of the newest sample, `user` holds a sensor's last sampling tick. Samples are
inserted at the end of each step (mj_advance) and read at `time - delay` by the actuation
and sensor stages, with zero-order hold, linear or cubic (Catmull-Rom) interpolation.

Here the buffers keep MuJoCo's exact layout (so `get_state(..., HISTORY)` equals
mjData.history) and every operation is vectorised over the buffers that share (n, dim):
insertion keeps MuJoCo's ring arithmetic (the cursor moves only when a sample newer than
all others arrives), reads are branch-free selections. Sample values are differentiable;
times, cursors and the choice of samples are not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import hostnp
from jaxsim.math import MINVAL
from jaxsim.types import Model, State


def _np(x) -> np.ndarray:
    return np.asarray(x)


def _tol(dtype, t):
    """Time equality tolerance: MuJoCo's mjMINVAL in float64. In single precision the
    accumulated time carries rounding far above it, so samples within a few ulps of a query
    time count as that time (zero-order hold would otherwise pick the previous sample)."""
    if jnp.dtype(dtype) == jnp.float64:
        return MINVAL
    return 8 * jnp.finfo(dtype).eps * jnp.maximum(1.0, jnp.abs(t))


def _maybe_positive(x) -> bool:
    """False only when x is concrete and has no positive entry."""
    v = hostnp.concrete(x)
    return v is None or bool((v > 0).any())


# ------------------------------------------------------------------------- buffer groups


def actuator_buffers(m: Model) -> list[tuple[int, int, np.ndarray]]:
    """[(n, dim, actuator ids)] of the actuators with a history buffer, grouped by n and
    dim (the actuator's control count: a sample holds all its controls)."""
    if not m.nactuator:
        return []
    n = _np(m.actuator_history).reshape(-1, 2)[:, 0]
    dim = _np(m.actuator_ctrlnum)
    keys = sorted({(int(a), int(b)) for a, b in zip(n, dim, strict=True) if a > 0})
    return [(a, b, np.nonzero((n == a) & (dim == b))[0]) for a, b in keys]


def sensor_buffers(m: Model) -> list[tuple[int, int, np.ndarray]]:
    """[(n, dim, sensor ids)] of the sensors with a history buffer, grouped by (n, dim)."""
    if not m.nsensor:
        return []
    n = _np(m.sensor_history).reshape(-1, 2)[:, 0]
    dim = _np(m.sensor_dim)
    keys = sorted({(int(a), int(b)) for a, b in zip(n, dim, strict=True) if a > 0})
    return [(a, b, np.nonzero((n == a) & (dim == b))[0]) for a, b in keys]


def _slots(adr: np.ndarray, n: int, dim: int) -> np.ndarray:
    """(G, 2 + n + n*dim) indices of the buffers starting at `adr`."""
    return adr[:, None] + np.arange(2 + n + n * dim)


# -------------------------------------------------------------------------------- init


def init(m: Model) -> jax.Array:
    """The history of a reset state (mj_resetData): control samples at times -n*dt .. -dt;
    sensor samples likewise, or on the sampling grid of a sensor with an interval (the
    last tick at -period, or at the phase), rounded up to whole steps; values zero."""
    dtype = m.body_pos.dtype
    h = jnp.zeros(m.nhistory, dtype)
    if not m.nhistory:
        return h
    dt = jnp.asarray(m.opt.timestep, dtype)
    for n, _dim, ids in actuator_buffers(m):
        adr = _np(m.actuator_historyadr)[ids]
        times = -(n - jnp.arange(n, dtype=dtype)) * dt
        head = jnp.concatenate([jnp.zeros(1, dtype), jnp.full(1, n - 1, dtype), times])
        h = h.at[adr[:, None] + np.arange(2 + n)].set(jnp.broadcast_to(head, (len(ids), 2 + n)))
    for n, _dim, ids in sensor_buffers(m):
        adr = _np(m.sensor_historyadr)[ids]
        period = jnp.asarray(m.sensor_interval, dtype)[ids, 0][:, None]
        phase = jnp.asarray(m.sensor_interval, dtype)[ids, 1][:, None]
        j = jnp.arange(n, dtype=dtype)[None]
        t0 = jnp.where(phase == 0, -period, phase)
        grid = jnp.ceil((t0 - (n - 1 - j) * period) / dt) * dt
        plain = jnp.broadcast_to(-(n - j) * dt, grid.shape)
        times = jnp.where(period > 0, grid, plain)
        user = jnp.where(period[:, 0] > 0, t0[:, 0], -dt)
        head = jnp.concatenate([user[:, None], jnp.full((len(ids), 1), n - 1, dtype), times], 1)
        h = h.at[adr[:, None] + np.arange(2 + n)].set(head)
    return h


# ----------------------------------------------------------------------- ring arithmetic


def _logical(buf: jax.Array, n: int, dim: int):
    """Cursor (G,), times (G, n) and values (G, n, dim) in logical order (oldest first)."""
    g = buf.shape[0]
    cursor = buf[:, 1].astype(jnp.int32)
    phys = (cursor[:, None] + 1 + jnp.arange(n)) % n
    times = jnp.take_along_axis(buf[:, 2:2 + n], phys, axis=1)
    values = buf[:, 2 + n:].reshape(g, n, dim)
    values = jnp.take_along_axis(values, phys[:, :, None], axis=1)
    return cursor, times, values


def _take(x: jax.Array, i: jax.Array) -> jax.Array:
    """x[g, i[g]] for x (G, n) or (G, n, dim)."""
    idx = i[:, None] if x.ndim == 2 else i[:, None, None]
    return jnp.take_along_axis(x, idx, axis=1)[:, 0]


def insert(buf: jax.Array, n: int, dim: int, t, value: jax.Array, on=None) -> jax.Array:
    """Buffers (G, L) with `value` (G, dim) inserted at time t (mju_historyInsert), where
    `on` (G,) holds (all by default). A sample at an existing time overwrites it; one older
    than all replaces the oldest; one newer than all becomes the newest (the cursor moves);
    otherwise the older samples shift down to make room and the oldest is dropped."""
    g = buf.shape[0]
    cursor, times, values = _logical(buf, n, dim)
    t = jnp.asarray(t, buf.dtype)
    i = jnp.sum(times < t, axis=1)  # times[i-1] < t <= times[i]
    exact = (i < n) & (jnp.abs(t - _take(times, jnp.minimum(i, n - 1))) < _tol(buf.dtype, t))
    k = jnp.where(exact | (i == 0), jnp.minimum(i, n - 1), i - 1)
    shift = ~exact & (i > 0)
    newcursor = jnp.where(~exact & (i == n), (cursor + 1) % n, cursor)
    j = jnp.arange(n)[None]
    src = jnp.where(shift[:, None] & (j < k[:, None]), j + 1, j)
    here = j == k[:, None]
    new_t = jnp.where(here, jnp.where(exact, _take(times, k), t)[:, None],
                      jnp.take_along_axis(times, src, axis=1))
    new_v = jnp.where(here[:, :, None], value.astype(buf.dtype)[:, None, :],
                      jnp.take_along_axis(values, src[:, :, None], axis=1))
    # back to physical order around the (possibly moved) cursor
    p = jnp.arange(n)[None]
    logical = (p - newcursor[:, None] - 1) % n
    phys_t = jnp.take_along_axis(new_t, logical, axis=1)
    phys_v = jnp.take_along_axis(new_v, logical[:, :, None], axis=1).reshape(g, n * dim)
    out = jnp.concatenate([buf[:, :1], newcursor[:, None].astype(buf.dtype), phys_t, phys_v], 1)
    if on is None:
        return out
    return jnp.where(jnp.asarray(on)[:, None], out, buf)


def read(buf: jax.Array, n: int, dim: int, t: jax.Array, interp: np.ndarray) -> jax.Array:
    """Values (G, dim) at times t (G,) (mju_historyRead): the oldest or newest sample
    outside the buffer's span, the sample at t itself, else by `interp` (G,) 0 zero-order
    hold, 1 linear, 2 cubic Hermite with Catmull-Rom slopes (zero at the ends)."""
    _, times, values = _logical(buf, n, dim)
    if n == 1:
        return values[:, 0]
    t = jnp.asarray(t, buf.dtype)
    tol = _tol(buf.dtype, t)
    before = t <= times[:, 0] + tol
    after = t >= times[:, -1] - tol
    i = jnp.clip(jnp.sum(times < t[:, None], axis=1), 1, n - 1)
    t_hi, t_lo = _take(times, i), _take(times, i - 1)
    v_hi, v_lo = _take(values, i), _take(values, i - 1)
    exact = jnp.abs(t - t_hi) < tol
    span = t_hi - t_lo
    span = jnp.where(span > 0, span, 1.0)
    alpha = ((t - t_lo) / span)[:, None]
    linear = v_lo + alpha * (v_hi - v_lo)
    res = jnp.where(jnp.asarray(interp == 1)[:, None], linear, v_lo)
    if (interp == 2).any():
        # Catmull-Rom slopes from the neighbours, zero at the ends of the buffer
        im2, ip1 = jnp.maximum(i - 2, 0), jnp.minimum(i + 1, n - 1)
        d_lo = t_hi - _take(times, im2)
        d_hi = _take(times, ip1) - t_lo
        m_lo = jnp.where((i > 1)[:, None], (v_hi - _take(values, im2))
                         / jnp.where(d_lo > 0, d_lo, 1.0)[:, None], 0.0)
        m_hi = jnp.where((i < n - 1)[:, None], (_take(values, ip1) - v_lo)
                         / jnp.where(d_hi > 0, d_hi, 1.0)[:, None], 0.0)
        a, dt = alpha, span[:, None]
        a2 = a * a
        a3 = a2 * a
        h00, h10 = 2 * a3 - 3 * a2 + 1, a3 - 2 * a2 + a
        h01, h11 = -2 * a3 + 3 * a2, a3 - a2
        cubic = h00 * v_lo + h10 * dt * m_lo + h01 * v_hi + h11 * dt * m_hi
        res = jnp.where(jnp.asarray(interp == 2)[:, None], cubic, res)
    res = jnp.where(exact[:, None], v_hi, res)
    res = jnp.where(after[:, None], values[:, -1], res)
    return jnp.where(before[:, None], values[:, 0], res)


# ------------------------------------------------------------------------------ stages


def delayed_ctrl(m: Model, d: State, ctrl: jax.Array) -> jax.Array:
    """`ctrl` with each delayed actuator's input read at time - delay (mj_readCtrl)."""
    for n, dim, ids in actuator_buffers(m):
        adr = _np(m.actuator_historyadr)[ids]
        delay = m.actuator_delay[ids]
        val = read(d.history[_slots(adr, n, dim)], n, dim, d.time - delay,
                   _np(m.actuator_history)[ids, 1])
        cadr = _np(m.actuator_ctrladr)[ids][:, None] + np.arange(dim)
        ctrl = ctrl.at[cadr].set(jnp.where((delay != 0)[:, None], val, ctrl[cadr]))
    return ctrl


def sensor_values(m: Model, d: State, raw: jax.Array, only: np.ndarray) -> jax.Array:
    """sensordata `raw` (freshly computed) with the value of each buffered sensor in `only`
    as MuJoCo's compute_or_read_sensor gives it: the sample at time - delay for a delayed
    sensor; for one sampled at an interval, the fresh value on a tick, else the held one."""
    adr_s = _np(m.sensor_adr)
    for n, dim, ids in sensor_buffers(m):
        ids = ids[np.isin(ids, only)]
        if not len(ids):
            continue
        buf = d.history[_slots(_np(m.sensor_historyadr)[ids], n, dim)]
        delay = m.sensor_delay[ids]
        period = m.sensor_interval[ids, 0]
        slots = adr_s[ids][:, None] + np.arange(dim)
        fresh = raw[slots]
        tick = buf[:, 0] + period <= d.time
        held = read(buf, n, dim, d.time - jnp.where(delay > 0, delay, 0.0),
                    _np(m.sensor_history)[ids, 1])
        use_held = (delay > 0) | ((period > 0) & ~tick)
        raw = raw.at[slots].set(jnp.where(use_held[:, None], held, fresh))
    return raw


def advance(m: Model, d: State, computed=None) -> jax.Array:
    """The history after mj_advance's insertions at the current time: each buffered
    actuator's ctrl; each buffered sensor's value (recomputed from `d` by `computed(ids)`
    (G, dim) when delayed, else copied from sensordata), for interval sensors only on a
    tick, which also moves the sensor's tick time on by one period."""
    h = d.history
    if not m.nhistory:
        return h
    for n, dim, ids in actuator_buffers(m):
        sl = _slots(_np(m.actuator_historyadr)[ids], n, dim)
        cadr = _np(m.actuator_ctrladr)[ids][:, None] + np.arange(dim)
        h = h.at[sl].set(insert(h[sl], n, dim, d.time, d.ctrl[cadr]))
    adr_s = _np(m.sensor_adr)
    for n, dim, ids in sensor_buffers(m):
        sl = _slots(_np(m.sensor_historyadr)[ids], n, dim)
        buf = h[sl]
        delay = m.sensor_delay[ids]
        period = m.sensor_interval[ids, 0]
        value = d.sensordata[adr_s[ids][:, None] + np.arange(dim)]
        with jax.ensure_compile_time_eval():  # concrete when the model is
            delay_known = m.sensor_delay[ids]
        if computed is not None and _maybe_positive(delay_known):
            value = jnp.where((delay > 0)[:, None], computed(ids).astype(h.dtype), value)
        tick = buf[:, 0] + period <= d.time
        on = (period <= 0) | tick
        buf = buf.at[:, 0].set(jnp.where((period > 0) & tick, buf[:, 0] + period, buf[:, 0]))
        h = h.at[sl].set(insert(buf, n, dim, d.time, value, on))
    return h


# --------------------------------------------------------------------- user functions


def _interp(default: int, interp: int) -> np.ndarray:
    return np.array([default if interp < 0 else int(interp)])


def read_ctrl(m: Model, d: State, actuator: int, time, interp: int = -1) -> jax.Array:
    """The control of `actuator` at `time` - its delay, from its history buffer, or its
    current ctrl when it has none (mj_readCtrl): a scalar, or (ctrlnum,) for an actuator
    with several controls. interp: -1 the actuator's own, 0 zero-order hold, 1 linear,
    2 cubic."""
    i = int(actuator)
    n, own = (int(x) for x in _np(m.actuator_history)[i])
    dim, cadr = int(_np(m.actuator_ctrlnum)[i]), int(_np(m.actuator_ctrladr)[i])
    if n == 0:
        val = d.ctrl[cadr:cadr + dim]
    else:
        buf = d.history[_slots(_np(m.actuator_historyadr)[[i]], n, dim)]
        t = jnp.asarray(time, buf.dtype) - m.actuator_delay[i]
        val = read(buf, n, dim, t[None], _interp(own, interp))[0]
    return val[0] if dim == 1 else val


def read_sensor(m: Model, d: State, sensor: int, time, interp: int = -1) -> jax.Array:
    """The values (dim,) of `sensor` at `time` - its delay, from its history buffer, or its
    current sensordata when it has none (mj_readSensor)."""
    i = int(sensor)
    n, own = (int(x) for x in _np(m.sensor_history)[i])
    adr, dim = int(_np(m.sensor_adr)[i]), int(_np(m.sensor_dim)[i])
    if n == 0:
        return d.sensordata[adr:adr + dim]
    buf = d.history[_slots(_np(m.sensor_historyadr)[[i]], n, dim)]
    t = jnp.asarray(time, buf.dtype) - m.sensor_delay[i]
    return read(buf, n, dim, t[None], _interp(own, interp))[0]


def _set_buffer(d: State, adr: int, n: int, dim: int, times, values, user) -> State:
    buf = d.history[adr:adr + 2 + n + n * dim]
    times = buf[2:2 + n] if times is None else jnp.asarray(times, buf.dtype).reshape(n)
    values = jnp.asarray(values, buf.dtype).reshape(n * dim)
    head = jnp.stack([jnp.asarray(user, buf.dtype), jnp.asarray(n - 1, buf.dtype)])
    new = jnp.concatenate([head, times, values])
    return d.replace(history=d.history.at[adr:adr + new.shape[0]].set(new))


def init_ctrl_history(m: Model, d: State, actuator: int, times, values) -> State:
    """`d` with the history of `actuator` set to the samples `values` (n,), or (n, ctrlnum)
    for an actuator with several controls, at the increasing `times` (n,) (None keeps the
    current times) (mj_initCtrlHistory)."""
    i = int(actuator)
    n = int(_np(m.actuator_history)[i, 0])
    if n == 0:
        raise ValueError(f"actuator {i} has no history buffer")
    adr = int(_np(m.actuator_historyadr)[i])
    dim = int(_np(m.actuator_ctrlnum)[i])
    return _set_buffer(d, adr, n, dim, times, values, d.history[adr])


def init_sensor_history(m: Model, d: State, sensor: int, times, values, phase) -> State:
    """`d` with the history of `sensor` set to `values` (n, dim) at `times` (n,) (None
    keeps them) and its last sampling tick to `phase` (mj_initSensorHistory)."""
    i = int(sensor)
    n = int(_np(m.sensor_history)[i, 0])
    if n == 0:
        raise ValueError(f"sensor {i} has no history buffer")
    adr = int(_np(m.sensor_historyadr)[i])
    return _set_buffer(d, adr, n, int(_np(m.sensor_dim)[i]), times, values, phase)


__all__ = ["actuator_buffers", "advance", "delayed_ctrl", "init", "init_ctrl_history",
           "init_sensor_history", "insert", "read", "read_ctrl", "read_sensor",
           "sensor_buffers", "sensor_values"]
