"""Rollouts: many steps under one `lax.scan`, for one world or a batch sharded over devices.

`rollout(model, state, ctrl_seq)` applies `ctrl_seq[t]` and steps, T times, and returns the
final state and the trajectory of the chosen fields. `rollout_batch` is the same program
vmapped over worlds (and optionally over per-world models) and sharded over a 1-D device
mesh whose axis is "worlds". MuJoCo counterpart: `mujoco.rollout.rollout`.

`jaxsim.rollout` is the function; the rest of this module (`rollout_batch_fn`,
`BatchRollout`) is imported with `from jaxsim.rollout import ...`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxsim.forward import step
from jaxsim.types import Model, State

Fields = Sequence[str] | Callable[[State], Any] | None
"""What a rollout records after each step: State field names (the trajectory is a dict
name -> (T, ...) array), a function of the state (its pytree, stacked over T), or None."""

DEFAULT_FIELDS = ("qpos", "qvel")
MESH_AXIS = "worlds"


def _recorder(fields: Fields) -> Callable[[State], Any]:
    if fields is None:
        return lambda d: None
    if callable(fields):
        return fields
    if isinstance(fields, str):
        raise TypeError(f"fields must be a sequence of names, not the string {fields!r}")
    names = tuple(fields)
    known = set(State.field_info())
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown State fields {bad}")
    return lambda d: {n: getattr(d, n) for n in names}


def _hashable(fields: Fields) -> Any:
    return tuple(fields) if fields is not None and not callable(fields) else fields


def rollout(model: Model, state: State, ctrl_seq: jax.Array | None = None, *,
            fields: Fields = DEFAULT_FIELDS, length: int | None = None) -> tuple[State, Any]:
    """Steps `state` once per row of `ctrl_seq` (T, nu) under `lax.scan`.

    Each step sets `state.ctrl = ctrl_seq[t]`, then calls `step`; the recorded trajectory
    holds the fields after each step (row t is the state at time t + 1 steps). Traceable:
    works under jit, vmap and grad. Equal, bit for bit, to the same steps in a Python loop
    under jit.

    Args:
      model: the model (a batch of one model under vmap for per-world parameters).
      state: the initial state.
      ctrl_seq: controls (T, nu); None keeps `state.ctrl` and needs `length`.
      fields: what to record, see `Fields` (default qpos and qvel; add "time" etc.).
      length: number of steps when `ctrl_seq` is None.

    Returns:
      (final state, trajectory).
    """
    record = _recorder(fields)
    if ctrl_seq is None:
        if length is None:
            raise ValueError("rollout needs ctrl_seq or length")

        def body(d, _):
            d = step(model, d)
            return d, record(d)

        return jax.lax.scan(body, state, None, length=length)

    ctrl_seq = jnp.asarray(ctrl_seq, state.ctrl.dtype)
    if ctrl_seq.ndim != 2 or ctrl_seq.shape[1] != model.nu:
        raise ValueError(f"ctrl_seq must have shape (T, nu={model.nu}), got {ctrl_seq.shape}")
    if length is not None and length != ctrl_seq.shape[0]:
        raise ValueError(f"length {length} != len(ctrl_seq) {ctrl_seq.shape[0]}")

    def body(d, u):
        d = step(model, d.replace(ctrl=u))
        return d, record(d)

    return jax.lax.scan(body, state, ctrl_seq)


# ----------------------------------------------------------------------------- batches


def _model_axes(model: Model, model_axis: Any) -> list:
    """The vmap axis (None or 0) of every model leaf, from None, 0 or a per-leaf prefix."""
    leaves, treedef = jax.tree.flatten(model)
    if model_axis is None or isinstance(model_axis, int):
        axes = [model_axis] * len(leaves)
    else:
        axes = treedef.flatten_up_to(model_axis)
    for a in axes:
        if a not in (None, 0):
            raise ValueError(f"model_axis entries must be None or 0, got {a!r}")
    return axes


def _pad(x: jax.Array, n: int) -> jax.Array:
    """Pads the leading (world) axis to n by repeating the last world (finite, harmless)."""
    if x.shape[0] == n:
        return x
    return jnp.concatenate([x, jnp.repeat(x[-1:], n - x.shape[0], axis=0)], axis=0)


# one small program per structure, rather than one eager dispatch per leaf
_pad_tree = jax.jit(lambda tree, n: jax.tree.map(lambda x: _pad(x, n), tree),
                    static_argnums=1)
_unpad_tree = jax.jit(lambda tree, n: jax.tree.map(lambda x: x[:n], tree), static_argnums=1)


# chunks of a batch for the host threads (one program, no per-leaf eager dispatch)
@functools.partial(jax.jit, static_argnums=1)
def _split_tree(tree: Any, n: int) -> list:
    leaves, treedef = jax.tree.flatten(tree)
    parts = [jnp.split(x, n) for x in leaves]
    return [treedef.unflatten([p[i] for p in parts]) for i in range(n)]


_concat_tree = jax.jit(lambda trees: jax.tree.map(lambda *xs: jnp.concatenate(xs), *trees))

MIN_THREAD_WORLDS = 32
"""Fewest worlds per host thread: below it a batch runs on fewer threads."""


def host_threads(devices: Sequence[jax.Device]) -> int:
    """Host threads `rollout_batch` runs a batch on by default: one per core the process
    may use when the batch runs on a single CPU device, otherwise one (the devices are the
    parallelism).

    XLA:CPU runs one program's kernels one after another, splitting only its largest
    kernels over the cores, so a vmapped step uses little of a second core; programs called
    from different threads do run side by side. A batch on one CPU device is therefore cut
    into one chunk of worlds per core, each chunk's rollout called from its own thread."""
    if len(devices) != 1 or devices[0].platform != "cpu":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# A model with a large state runs faster from more, smaller chunks than one per core (on
# this project's 2-core machine, rollout_batch at 1024 worlds x 100 steps, float32, one
# process, chunks 2 -> 4: the gymnasium humanoid (48 KB of state per world) 6,837 -> 8,013
# steps/s (8 chunks: 8,107), the MJX humanoid (21 KB) 42,733 / 43,599 -> 46,564 / 47,655;
# the ant (14 KB) 16,105 / 15,882 -> 15,959 / 15,986 (8 chunks: 14,332) and the hopper
# (6 KB) 42,191 / 41,477 -> 39,566 / 40,458 do not gain). By default a batch on one CPU
# device is cut into chunks of at most CHUNK_STATE_BYTES of state (the cores times a power
# of two, at most MAX_CHUNKS_PER_CORE per core), each called from its own thread.
CHUNK_STATE_BYTES = 8 << 20
MAX_CHUNKS_PER_CORE = 4


def _default_chunks(states: State, cores: int) -> int:
    """Chunks (and threads) of a batch on `cores` host cores (see CHUNK_STATE_BYTES)."""
    if cores <= 1:
        return cores
    total = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(states))
    want, k = -(-total // CHUNK_STATE_BYTES), cores
    while k < want and k < cores * MAX_CHUNKS_PER_CORE:
        k *= 2
    return k


def _needs_pad(tree: Any, n: int) -> bool:
    return any(x.shape[0] != n for x in jax.tree.leaves(tree))


def compiler_options(devices: Sequence[jax.Device] | None = None) -> dict:
    """XLA options jaxsim compiles its own programs with (`rollout_batch`, the simulate
    command), for `jax.jit(..., compiler_options=...)` around a simulation of your own.

    On CPU: XLA:CPU's classic fusion emitters. A simulation step is about a thousand small
    fusions, which the newer MLIR emitters take longer to compile (gymnasium ant, vmapped
    100-step rollout: 24.8 -> 19.5 s; humanoid 37 -> 28 s), with the same results. The run
    time is not always the same: the gymnasium humanoid at batch 1024 (PGS) runs 16% slower
    with them (4210 -> 3635 steps/s, compile 24.9 -> 21.0 s; 2026-11-30). Nothing elsewhere.
    """
    devices = jax.devices() if devices is None else devices
    if devices and all(dev.platform == "cpu" for dev in devices):
        return {"xla_cpu_use_fusion_emitters": False}
    return {}


@functools.lru_cache(maxsize=64)
def _batched(treedef, axes: tuple, fields: Any, length: int | None, devices: tuple):
    """One jitted, vmapped, sharded rollout per (model structure, axes, fields, devices)."""
    mesh = Mesh(np.array(devices), (MESH_AXIS,))
    worlds = NamedSharding(mesh, PartitionSpec(MESH_AXIS))
    replicated = NamedSharding(mesh, PartitionSpec())
    model_in_axes = treedef.unflatten(list(axes))
    model_sharding = treedef.unflatten([replicated if a is None else worlds for a in axes])
    has_ctrl = length is None

    def one(m, d, u):
        return rollout(m, d, u if has_ctrl else None, fields=fields, length=length)

    fn = jax.vmap(one, in_axes=(model_in_axes, 0, 0 if has_ctrl else None))
    jitted = jax.jit(fn, in_shardings=(model_sharding, worlds, worlds if has_ctrl else None),
                     out_shardings=worlds, compiler_options=compiler_options(devices))
    return jitted, model_sharding, worlds


class BatchRollout:
    """A batched rollout prepared for given shapes: `compile()` then call like rollout_batch.

    Made by `rollout_batch_fn`; `rollout_batch` builds and calls one. Splitting the two lets a
    caller time compilation apart from the run (the simulate command does).
    """

    def __init__(self, model: Model, states: State, ctrl_seqs: jax.Array | None, *,
                 fields: Fields = DEFAULT_FIELDS, model_axis: Any = None,
                 devices: Sequence[jax.Device] | None = None, length: int | None = None,
                 threads: int | None = None):
        devices = tuple(jax.devices() if devices is None else devices)
        if not devices:
            raise ValueError("rollout_batch needs at least one device")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.nworld = int(jax.tree.leaves(states)[0].shape[0])
        self.ndevice = len(devices)
        nthread = (_default_chunks(states, host_threads(devices))
                   if threads is None else threads)
        self.nthread = max(1, min(nthread, self.nworld // MIN_THREAD_WORLDS))
        group = self.ndevice * self.nthread
        self.npad = -(-self.nworld // group) * group
        self.axes = _model_axes(model, model_axis)
        if ctrl_seqs is None and length is None:
            raise ValueError("rollout_batch needs ctrl_seqs or length")
        if ctrl_seqs is not None:
            length = None
        treedef = jax.tree.structure(model)
        self._fn, self._model_sharding, self._worlds = _batched(
            treedef, tuple(self.axes), _hashable(fields), length, devices)
        self._compiled = None
        self._placed_model = None

    def place(self, model: Model, states: State, ctrl_seqs: jax.Array | None):
        """Pads the world axis to a multiple of the device count and shards the inputs.

        Inputs already padded (e.g. the states a previous call returned with `unpad=False`)
        pass through unchanged.
        """
        if self._placed_model is not None and self._placed_model[0] is model:
            model = self._placed_model[1]  # the same model again (chunked runs): no copy
        else:
            leaves, treedef = jax.tree.flatten(model)
            batched = [x for x, a in zip(leaves, self.axes, strict=True) if a is not None]
            if _needs_pad(batched, self.npad):
                batched = iter(_pad_tree(batched, self.npad))
                leaves = [x if a is None else next(batched)
                          for x, a in zip(leaves, self.axes, strict=True)]
            placed = jax.device_put(treedef.unflatten(leaves), self._model_sharding)
            self._placed_model, model = (model, placed), placed
        if _needs_pad(states, self.npad):
            states = _pad_tree(states, self.npad)
        states = jax.device_put(states, self._worlds)
        if ctrl_seqs is not None:
            ctrl_seqs = jnp.asarray(ctrl_seqs)
            if ctrl_seqs.shape[0] != self.npad:
                ctrl_seqs = _pad_tree(ctrl_seqs, self.npad)
            ctrl_seqs = jax.device_put(ctrl_seqs, self._worlds)
        return model, states, ctrl_seqs

    def _chunks(self, args: tuple) -> list[tuple]:
        """The placed (model, states, ctrl_seqs), cut into one chunk of worlds per thread."""
        if self.nthread == 1:
            return [args]
        model, states, ctrl_seqs = args
        leaves, treedef = jax.tree.flatten(model)
        batched = [x for x, a in zip(leaves, self.axes, strict=True) if a is not None]
        out = []
        for b, d, u in _split_tree((batched, states, ctrl_seqs), self.nthread):
            b = iter(b)
            m = treedef.unflatten([x if a is None else next(b)
                                   for x, a in zip(leaves, self.axes, strict=True)])
            out.append((m, d, u))
        return out

    def compile(self, model: Model, states: State, ctrl_seqs: jax.Array | None) -> BatchRollout:
        """Compiles ahead of time for these shapes (the call then runs without tracing)."""
        first = self._chunks(self.place(model, states, ctrl_seqs))[0]
        self._compiled = self._fn.lower(*first).compile()
        return self

    def memory_analysis(self):
        """The compiled program's memory statistics (None before `compile`)."""
        return None if self._compiled is None else self._compiled.memory_analysis()

    def __call__(self, model: Model, states: State, ctrl_seqs: jax.Array | None = None,
                 unpad: bool = True) -> tuple[State, Any]:
        """Runs the rollout; with `unpad=False` the padding worlds stay in the results (a
        chunked run feeds the final states back in without re-padding)."""
        args = self.place(model, states, ctrl_seqs)
        if self.nthread == 1:
            final, traj = (self._compiled or self._fn)(*args)
        else:
            chunks = self._chunks(args)
            if self._compiled is None:  # one compilation, not one per thread
                self._compiled = self._fn.lower(*chunks[0]).compile()
            fn = self._compiled
            pool = _thread_pool(self.nthread)
            parts = list(pool.map(lambda a: jax.block_until_ready(fn(*a)), chunks))
            final, traj = _concat_tree(parts)
        if unpad and self.npad != self.nworld:
            final, traj = _unpad_tree((final, traj), self.nworld)
        return final, traj


@functools.lru_cache(maxsize=8)
def _thread_pool(n: int):
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(n, thread_name_prefix="jaxsim-rollout")


def rollout_batch_fn(model: Model, states: State, ctrl_seqs: jax.Array | None = None, *,
                     fields: Fields = DEFAULT_FIELDS, model_axis: Any = None,
                     devices: Sequence[jax.Device] | None = None,
                     length: int | None = None, threads: int | None = None) -> BatchRollout:
    """The batched rollout for these arguments' shapes, not yet run (see `BatchRollout`)."""
    return BatchRollout(model, states, ctrl_seqs, fields=fields, model_axis=model_axis,
                        devices=devices, length=length, threads=threads)


def rollout_batch(model: Model, states: State, ctrl_seqs: jax.Array | None = None, *,
                  fields: Fields = DEFAULT_FIELDS, model_axis: Any = None,
                  devices: Sequence[jax.Device] | None = None,
                  length: int | None = None, threads: int | None = None) -> tuple[State, Any]:
    """`rollout` for a batch of worlds, vmapped and sharded over devices.

    The world axis (leading axis of every leaf of `states`, `ctrl_seqs` and, with
    `model_axis=0`, `model`) is split over a 1-D mesh ("worlds") of `devices` (default: all
    of jax.devices()); a batch that is not a multiple of the device count is padded by
    repeating the last world, and the padding is dropped from the results. Compiled once per
    model structure, shapes, fields and devices.

    Args:
      model: one model for every world (`model_axis=None`), or a batch of models
        (`model_axis=0`, e.g. from `jax.vmap` of `model.replace(...)`, for randomised
        parameters); `model_axis` may also be a Model whose leaves are None or 0, as vmap's
        in_axes.
      states: initial states, batched (B, ...) leaf by leaf.
      ctrl_seqs: controls (B, T, nu); None keeps each state's ctrl and needs `length`.
      fields: what to record each step, as in `rollout`.
      devices: the devices to shard over.
      length: number of steps when `ctrl_seqs` is None.
      threads: host threads for a batch on a single CPU device (default: one per core,
        see `host_threads`, or a multiple of that for a large state, see
        `CHUNK_STATE_BYTES`; at least `MIN_THREAD_WORLDS` worlds each): the batch is cut
        into that many chunks, each rolled out by the same compiled program from its own
        thread, and the results are joined. Not traceable (a host-side call), as before.

    Returns:
      (final states (B, ...), trajectories (B, T, ...)).
    """
    return rollout_batch_fn(model, states, ctrl_seqs, fields=fields, model_axis=model_axis,
                            devices=devices, length=length,
                            threads=threads)(model, states, ctrl_seqs)
