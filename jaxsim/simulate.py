"""`python -m jaxsim simulate`: many worlds of one model, one jitted vmapped rollout.

Compiles the model, starts N worlds from keyframe 0 (or qpos0) with small qpos/qvel noise,
and simulates them for T steps with `rollout_batch`, run in chunks of steps so progress
shows (one compiled program serves every chunk). Prints the compile time and the
throughput (N*T steps / wall time of the run, compilation excluded), then writes to --out:

  simulate.png   root height (qpos[2] of a free-joint root, else qpos[0]) and kinetic
                 energy (0.5 qvel' M qvel) over time, every world and the mean
  final_state.npz  the final state of every world (time, qpos, qvel, act, ctrl, qacc,
                 sensordata, mocap, warning, overflow)
  trajectory.npz   time, root height and kinetic energy per world and step
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

_SAVED = ("time", "qpos", "qvel", "act", "ctrl", "qacc", "sensordata", "mocap_pos",
          "mocap_quat", "warning", "overflow")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The simulate command's options."""
    p.add_argument("--batch", type=int, default=64, help="number of worlds N (default 64)")
    p.add_argument("--steps", type=int, default=200, help="steps per world T (default 200)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--ctrl", choices=("zero", "random", "sine"), default="sine",
                   help="controls: zero, uniform random in ctrlrange (new every step), or "
                        "1 Hz sines with random phase per world and actuator (default)")
    p.add_argument("--out", default=None, help="directory for the plot and npz files")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.01,
                   help="std of the initial qpos (hinge/slide/free position) and qvel noise")
    p.add_argument("--chunks", type=int, default=10, help="progress updates (default 10)")
    p.add_argument("--cache", default=os.environ.get(
        "JAXSIM_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "jaxsim", "xla")),
        help="persistent XLA compilation cache (a rerun skips compilation)")
    p.add_argument("--no-cache", action="store_true", help="do not use the compilation cache")


def _chunking(steps: int, chunks: int) -> tuple[int, int]:
    """(chunk length, remainder): a divisor of `steps` near steps/chunks when one exists."""
    chunks = max(1, min(chunks, steps))
    c0 = math.ceil(steps / chunks)
    for c in range(c0, min(steps, 2 * c0) + 1):
        if steps % c == 0:
            return c, 0
    return c0, steps % c0


class _Recorder:
    """Per-step quantities for the plot: root height, kinetic energy and time."""

    def __init__(self, model):
        from jaxsim.types import JointType

        self.root = None
        if model.njnt:
            adr = int(model.jnt_qposadr[0])
            self.root = adr + 2 if int(model.jnt_type[0]) == JointType.FREE else adr
        self.free = model.njnt > 0 and int(model.jnt_type[0]) == JointType.FREE

    def __call__(self, d):
        import jax.numpy as jnp

        h = d.qpos[self.root] if self.root is not None else jnp.zeros((), d.qpos.dtype)
        # qM is the inertia at the step's start configuration, as MuJoCo's mj_energyVel
        ke = 0.5 * jnp.dot(d.qvel, d.qM @ d.qvel)
        return {"time": d.time, "root_height": h, "kinetic_energy": ke}


def _initial_states(model, n: int, noise: float, rng: np.random.Generator):
    import jax
    import jax.numpy as jnp

    import jaxsim
    from jaxsim.types import JointType

    s0 = jaxsim.make_state(model, keyframe=0 if model.nkey else None)
    mask = np.zeros(model.nq, bool)
    for j in range(model.njnt):
        adr, kind = int(model.jnt_qposadr[j]), int(model.jnt_type[j])
        if kind in (JointType.HINGE, JointType.SLIDE):
            mask[adr] = True
        elif kind == JointType.FREE:
            mask[adr:adr + 3] = True  # position only: quaternions stay unit
    dt = s0.qpos.dtype
    dq = noise * rng.standard_normal((n, model.nq)) * mask
    dv = noise * rng.standard_normal((n, model.nv))
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), s0)
    return states.replace(qpos=states.qpos + jnp.asarray(dq, dt),
                          qvel=states.qvel + jnp.asarray(dv, dt))


class _Controls:
    """Control sequences per chunk, (N, steps, nu), from the model's ctrlrange."""

    def __init__(self, model, kind: str, n: int, rng: np.random.Generator):
        nu = model.nu
        rng_ = np.asarray(model.actuator_ctrlrange, np.float64).reshape(nu, 2)
        limited = np.asarray(model.actuator_ctrllimited, bool).reshape(nu)
        self.lo = np.where(limited, rng_[:, 0], -1.0)
        self.hi = np.where(limited, rng_[:, 1], 1.0)
        self.kind, self.n, self.nu, self.rng = kind, n, nu, rng
        self.dt = float(model.opt.timestep)
        self.phase = rng.uniform(0, 2 * np.pi, (n, 1, nu))
        self.dtype = np.dtype(np.asarray(model.actuator_ctrlrange).dtype)

    def chunk(self, t0: int, length: int) -> np.ndarray:
        shape = (self.n, length, self.nu)
        if self.kind == "zero" or not self.nu:
            u = np.zeros(shape)
        elif self.kind == "random":
            u = self.rng.uniform(self.lo, self.hi, shape)
        else:
            t = (t0 + np.arange(length))[None, :, None] * self.dt
            mid, half = 0.5 * (self.hi + self.lo), 0.5 * (self.hi - self.lo)
            u = mid + 0.5 * half * np.sin(2 * np.pi * t + self.phase)
        return u.astype(self.dtype)


def _progress(done: int, total: int, steps: int, nworld: int, elapsed: float) -> None:
    width = 30
    fill = round(width * done / total)
    rate = nworld * steps / elapsed if elapsed > 0 else 0.0
    line = (f"[{'#' * fill}{'.' * (width - fill)}] chunk {done}/{total}  step {steps}  "
            f"{elapsed:6.1f} s  {rate:,.0f} steps/s")
    if sys.stderr.isatty():
        print("\r" + line, end="\n" if done == total else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def _plot(path: str, name: str, traj: dict, free: bool) -> None:
    from jaxsim.pngplot import PALETTE, Panel, Series, save_figure

    t = traj["time"]
    panels = []
    for key, title, unit in (("root_height", "root height " + ("qpos[2]" if free else "qpos[0]"),
                              "m" if free else "qpos[0]"),
                             ("kinetic_energy", "kinetic energy 0.5 qvel^T M qvel", "J")):
        y = traj[key]
        show = np.linspace(0, y.shape[0] - 1, min(y.shape[0], 64)).astype(int)
        series = [Series(t[i], y[i], PALETTE[k % len(PALETTE)]) for k, i in enumerate(show)]
        series.append(Series(t[0], np.mean(y, axis=0), (0, 0, 0), "mean", 2))
        panels.append(Panel(f"{title} ({y.shape[0]} worlds)", "time (s)", unit, series=series))
    save_figure(path, panels, title=f"jaxsim simulate: {name}")


def run(a: argparse.Namespace) -> int:
    """Runs the simulate command for parsed arguments; returns the exit code."""
    import jax

    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    if not a.no_cache and a.cache:
        os.makedirs(a.cache, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", a.cache)
    import jax.numpy as jnp

    import jaxsim
    from jaxsim.rollout import rollout_batch_fn

    if a.batch < 1 or a.steps < 1:
        print("error: --batch and --steps must be positive", file=sys.stderr)
        return 2
    dtype = jnp.float64 if a.dtype == "float64" else jnp.float32
    t0 = time.perf_counter()
    try:
        model = jaxsim.load(a.model, dtype=dtype)
    except (jaxsim.MJCFError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    name = model.model_name or os.path.basename(a.model)
    print(f"model '{name}' from {a.model}: nq={model.nq} nv={model.nv} nu={model.nu} "
          f"nbody={model.nbody} ngeom={model.ngeom}, loaded in {time.perf_counter() - t0:.2f} s")
    devices = jax.devices()
    print(f"{a.batch} worlds x {a.steps} steps, {a.dtype}, ctrl={a.ctrl}, seed {a.seed}, "
          f"timestep {float(model.opt.timestep):g} s, {len(devices)} device(s) "
          f"({devices[0].platform})")

    rng = np.random.default_rng(a.seed)
    states = _initial_states(model, a.batch, a.noise, rng)
    controls = _Controls(model, a.ctrl, a.batch, rng)
    record = _Recorder(model)
    clen, rem = _chunking(a.steps, a.chunks)
    lengths = [clen] * (a.steps // clen) + ([rem] if rem else [])

    t0 = time.perf_counter()
    programs = {}
    try:
        for n in sorted(set(lengths)):
            u = controls.chunk(0, n)
            programs[n] = rollout_batch_fn(model, states, u, fields=record, devices=devices)
            programs[n].compile(model, states, u)
    except NotImplementedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tc = time.perf_counter() - t0
    nthread = programs[lengths[0]].nthread
    print(f"compiled in {tc:.1f} s (trace + XLA, {len(programs)} program(s) of "
          f"{'/'.join(str(n) for n in sorted(programs))} steps"
          f"{f', run from {nthread} host threads' if nthread > 1 else ''})", flush=True)

    # Padding worlds (when the batch is not a multiple of the device count) stay in the
    # states between chunks and are dropped on the host at the end.
    npad = programs[lengths[0]].npad
    _, states, _ = programs[lengths[0]].place(model, states, None)
    jax.block_until_ready(states)
    pieces, done, elapsed = [], 0, 0.0
    for k, n in enumerate(lengths):
        u = controls.chunk(done, n)  # host-side input generation is not timed
        u = np.concatenate([u, np.repeat(u[-1:], npad - a.batch, axis=0)])
        t = time.perf_counter()
        states, traj = programs[n](model, states, u, unpad=False)
        traj = jax.device_get(traj)  # waits for the chunk
        elapsed += time.perf_counter() - t
        done += n
        pieces.append(traj)
        _progress(k + 1, len(lengths), done, a.batch, elapsed)
    final = jax.tree.map(lambda x: x[: a.batch], jax.device_get(states))
    traj = {key: np.concatenate([p[key][: a.batch] for p in pieces], axis=1) for key in pieces[0]}
    sps = a.batch * a.steps / elapsed
    print(f"simulated {a.batch * a.steps:,} steps in {elapsed:.2f} s: {sps:,.0f} steps/s "
          f"({sps * float(model.opt.timestep):,.1f}x real time summed over worlds)")
    bad = int(np.sum(~np.all(np.isfinite(final.qpos), axis=-1)))
    over = int(np.sum(np.asarray(final.overflow)))
    print(f"final: time {float(np.max(final.time)):.4g} s, mean root height "
          f"{float(np.mean(traj['root_height'][:, -1])):.4g}, mean kinetic energy "
          f"{float(np.mean(traj['kinetic_energy'][:, -1])):.4g}, non-finite worlds {bad}, "
          f"buffer overflow {over}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        png = os.path.join(a.out, "simulate.png")
        _plot(png, name, traj, record.free)
        np.savez(os.path.join(a.out, "final_state.npz"),
                 **{f: np.asarray(getattr(final, f)) for f in _SAVED})
        np.savez(os.path.join(a.out, "trajectory.npz"), **traj)
        print(f"wrote {png}, final_state.npz, trajectory.npz to {a.out}")
    if bad:
        print(f"warning: {bad} world(s) have non-finite qpos", file=sys.stderr)
    return 0
