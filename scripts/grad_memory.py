"""Reverse-mode memory through a rollout as a function of the constraint solver's iterations.

Measured on 2026-11-22 (2-core CPU shared with other jobs, so the times are rough), with
`python scripts/grad_memory.py --naive`; verbatim output:

    2026-11-22, jax 0.10.2, cpu, float64, 100 steps, Newton, tolerance 0, ls_tolerance 0
    | model | iterations | steps with rows | niter mean | niter max | fwd temp MB | grad temp MB | grad args MB | grad out MB | naive grad temp MB | grad compile s | grad run s |
    |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
    | box | 1 | 5/100 | 1.00 | 1 | 0.02 | 2.21 | 0.00 | 0.00 | 8.46 | 49.7 | 0.04 |
    | box | 5 | 53/100 | 4.64 | 5 | 0.02 | 2.21 | 0.00 | 0.00 | 32.22 | 24.5 | 0.06 |
    | box | 20 | 53/100 | 8.06 | 20 | 0.02 | 2.21 | 0.00 | 0.00 | 121.04 | 27.3 | 0.08 |
    | box | 100 | 53/100 | 9.89 | 71 | 0.02 | 2.21 | 0.00 | 0.00 | 594.78 | 25.7 | 0.08 |
    | hopper | 1 | 87/100 | 1.00 | 1 | 0.06 | 20.13 | 0.00 | 0.00 | - | 116.6 | 0.36 |
    | hopper | 5 | 78/100 | 4.18 | 5 | 0.06 | 20.13 | 0.00 | 0.00 | - | 119.5 | 0.52 |
    | hopper | 20 | 78/100 | 11.12 | 20 | 0.06 | 20.13 | 0.00 | 0.00 | - | 111.1 | 0.61 |
    | hopper | 100 | 78/100 | 38.49 | 100 | 0.06 | 20.13 | 0.00 | 0.00 | - | 114.5 | 1.37 |

The gradient's temporaries (2.21 MB for the box, 20.13 MB for the hopper, 100 steps) do
not change from 1 to 100 iterations, and are 100-300x the forward-only rollout's (they hold
each step's residuals, so they grow with the number of steps, not of iterations). The naive
variant grows linearly with the iteration cap (8.5 MB -> 595 MB). Tolerance 0 does not make
Newton run every allowed iteration: it stops when its exact line search finds no further
decrease (alpha = 0, the answer exact to rounding), so the box averages ~10 iterations
under a cap of 100; the hopper reaches the cap of 100 on some steps. With 1 iteration the
unconverged box hops differently, hence the fewer steps with constraint rows.

For each model and each solver iteration cap (Newton, tolerance 0 and ls_tolerance 0, so
that none of the tolerance tests can stop the solver early), the script compiles

- fwd:   the rollout alone (N steps of `jaxsim.step` in a `lax.scan`), returning a scalar;
- grad:  jax.grad of that scalar with respect to the initial velocity and a model parameter
         (the box's friction coefficients, or the hopper's control sequence);
- naive (box only, --naive): the same gradient with the solver's implicit derivative
         removed: `lax.custom_root` is bypassed and its `while_loop`s become bounded
         `scan`s (one trip per allowed iteration / line-search evaluation, finished trips
         masked), so reverse mode differentiates through every iteration, as an unrolled
         solver would. This is what jaxsim's implicit VJP avoids.

and reports XLA's memory figures of the compiled executables (`memory_analysis()`:
temporaries, arguments, outputs) and the solver iterations the rollout actually runs per
step (`state.solver_niter`: the number of steps that had constraint rows, the mean over
those steps and the max). With the implicit VJP the gradient's temporaries must not depend
on the iteration cap. The model is closed over (its arrays are compile-time constants), so
the argument and output figures are only the differentiated inputs and their gradients.

    python scripts/grad_memory.py [--steps 100] [--iterations 1 5 20 100] [--naive]
                                  [--models box hopper]
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import time
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np

BOX = """
<mujoco>
  <option timestep="0.005" solver="Newton"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" friction="0.1 0.005 0.0001"/>
    <body name="box" pos="0 0 0.1">
      <freejoint/>
      <geom name="box" type="box" size=".1 .1 .1" mass="1" condim="3"
            friction="0.3 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>
"""


def _gym(name: str) -> pathlib.Path:
    import gymnasium

    return pathlib.Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / name


def _with_opt(m, iterations: int):
    opt = m.opt.replace(solver=2, iterations=iterations,
                        tolerance=jnp.zeros((), m.opt.tolerance.dtype),
                        ls_tolerance=jnp.zeros((), m.opt.ls_tolerance.dtype))
    return m.replace(opt=opt)


def _problem(name: str, steps: int, dtype):
    """(model, rollout(model, x0, params) -> (final state, per-step niter), x0, params)."""
    import jaxsim

    if name == "box":
        m = jaxsim.load_string(BOX, dtype=dtype)
        d = jaxsim.make_state(m)
        # settled box, kicked along x
        settle = jax.jit(lambda d: jax.lax.fori_loop(0, 100, lambda i, d: jaxsim.step(m, d), d))
        d = settle(d)
        qpos, warm = d.qpos, d.qacc_warmstart
        qvel0 = d.qvel.at[0].set(1.5)

        def rollout(m, qvel, friction):
            m = m.replace(geom_friction=friction)
            s = jaxsim.make_state(m).replace(qpos=qpos, qvel=qvel, qacc_warmstart=warm)

            def body(s, _):
                s = jaxsim.step(m, s)
                return s, s.solver_niter

            return jax.lax.scan(body, s, None, length=steps)

        return m, rollout, qvel0, m.geom_friction

    if name == "hopper":
        m = jaxsim.load(str(_gym("hopper.xml")), dtype=dtype)
        rng = np.random.default_rng(0)
        qvel0 = jnp.asarray(0.1 * rng.standard_normal(m.nv), dtype)
        ctrl = jnp.asarray(0.5 * rng.uniform(-1, 1, (steps, m.nu)), dtype)

        def rollout(m, qvel, ctrl):
            s = jaxsim.make_state(m).replace(qvel=qvel)

            def body(s, u):
                s = jaxsim.step(m, s.replace(ctrl=u))
                return s, s.solver_niter

            return jax.lax.scan(body, s, ctrl)

        return m, rollout, qvel0, ctrl

    raise ValueError(name)


# ------------------------------------------------------------------ naive (unrolled) solver


def _bounded_while(trips):
    def while_loop(cond, body, init):
        n = trips(init)

        def step(c, _):
            return jax.tree.map(lambda a, b: jnp.where(cond(c), a, b), body(c), c), None

        return jax.lax.scan(step, init, None, length=n)[0]

    return while_loop


class _naive_solver:
    """Context: jaxsim.solver differentiates through its iterations (no custom_root)."""

    def __init__(self, iterations: int, ls_iterations: int):
        def trips(init):
            if isinstance(init, dict) and "phase" in init:  # line search: one eval per trip
                return ls_iterations + 3
            if isinstance(init, dict) and "search" in init:  # Newton / CG iterations
                return iterations
            raise NotImplementedError("naive mode covers the primal solvers only")

        def custom_root(f, x0, solve, tangent_solve, has_aux=False):
            return solve(f, x0)

        self.lax = types.SimpleNamespace(**{k: getattr(jax.lax, k) for k in dir(jax.lax)
                                            if not k.startswith("_")})
        self.lax.while_loop = _bounded_while(trips)
        self.lax.custom_root = custom_root

    def __enter__(self):
        from jaxsim import solver

        self._saved = solver.lax
        solver.lax = self.lax

    def __exit__(self, *exc):
        from jaxsim import solver

        solver.lax = self._saved


# ---------------------------------------------------------------------------------- main


def _mem(compiled):
    ma = compiled.memory_analysis()
    return ma.temp_size_in_bytes, ma.argument_size_in_bytes, ma.output_size_in_bytes


def _mb(b):
    return f"{b / 2**20:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--iterations", type=int, nargs="+", default=[1, 5, 20, 100])
    ap.add_argument("--models", nargs="+", default=["box", "hopper"])
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--naive", action="store_true",
                    help="also compile the differentiate-through-the-iterations variant (box)")
    a = ap.parse_args()
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.float64 if a.dtype == "float64" else jnp.float32
    warnings.simplefilter("ignore")

    print(f"{datetime.date.today()}, jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"{a.dtype}, {a.steps} steps, Newton, tolerance 0, ls_tolerance 0")
    print("| model | iterations | steps with rows | niter mean | niter max | fwd temp MB | grad temp MB | "
          "grad args MB | grad out MB | naive grad temp MB | grad compile s | grad run s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in a.models:
        m0, rollout, x0, p0 = _problem(name, a.steps, dtype)
        for it in a.iterations:
            m = _with_opt(m0, it)

            def fwd(x, p, m=m, rollout=rollout):
                s, niter = rollout(m, x, p)
                return s.qpos[0] + jnp.sum(s.qvel ** 2), niter

            fwd_c = jax.jit(fwd).lower(x0, p0).compile()
            _, niter = fwd_c(x0, p0)
            niter = np.asarray(niter)
            grad = jax.jit(jax.grad(lambda x, p, fwd=fwd: fwd(x, p)[0], argnums=(0, 1)))
            t0 = time.perf_counter()
            grad_c = grad.lower(x0, p0).compile()
            tc = time.perf_counter() - t0
            t0 = time.perf_counter()
            g = jax.block_until_ready(grad_c(x0, p0))
            tr = time.perf_counter() - t0
            assert all(bool(jnp.all(jnp.isfinite(x))) for x in g)
            gt, ga, go = _mem(grad_c)
            naive = "-"
            if a.naive and name == "box":
                with _naive_solver(it, m.opt.ls_iterations):
                    naive_c = jax.jit(jax.grad(lambda x, p, fwd=fwd: fwd(x, p)[0],
                                               argnums=(0, 1))).lower(x0, p0).compile()
                naive = _mb(_mem(naive_c)[0])
            busy = niter[niter > 0]  # steps with constraint rows (the box hops)
            print(f"| {name} | {it} | {busy.size}/{niter.size} | "
                  f"{busy.mean() if busy.size else 0:.2f} | {niter.max()} | "
                  f"{_mb(_mem(fwd_c)[0])} | {_mb(gt)} | {_mb(ga)} | {_mb(go)} | {naive} | "
                  f"{tc:.1f} | {tr:.2f} |", flush=True)


if __name__ == "__main__":
    main()
