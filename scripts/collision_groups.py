"""Run time and compile time of each narrow-phase group of a model's collision plan, each
jitted and vmapped on its own over a batch of states (the model's keyframe 0, or its
initial state, with 1e-3 qpos noise).

    python scripts/collision_groups.py MODEL.xml [--batch 1024] [--only "(1, 5)"]

One line per group: its geom types (-1: a merged group of several), contact slots per
pair, pairs, compile seconds, best of 5 calls in ms, and valid contacts per world. The
groups are the driver's (`jaxsim.collision.driver.plan`); the bounding filters run first,
as in the step.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxsim  # noqa: E402
from jaxsim.collision import driver  # noqa: E402


def _group_fn(m, p, grp, dt):
    table = driver._functions(m)
    margin, gap = driver._margin_gap(m, p.geom1, p.geom2, p.ipair)
    idx = grp.pair

    def run(d):
        keep = driver._sphere_filter(m, d, p.geom1, p.geom2, margin + gap + driver.TOUCH)
        out = driver.group_call(m, d, grp, (margin + gap)[idx], keep[idx], table, dt)
        return out[0], out[3] & jnp.repeat(keep[idx], grp.k)

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--only", default="", help="groups whose types contain this text")
    a = ap.parse_args(argv)
    m = jaxsim.load(a.model)
    s0 = jaxsim.make_state(m, keyframe=0) if m.nkey else jaxsim.make_state(m)
    noise = 1e-3 * jax.random.normal(jax.random.PRNGKey(0), (a.batch,) + s0.qpos.shape,
                                     s0.qpos.dtype)
    states = jax.vmap(lambda n: s0.replace(qpos=s0.qpos + n))(noise)
    states = jax.jit(jax.vmap(lambda s: jaxsim.forward(m, s)))(states)
    p = driver.plan(m)
    for grp in p.groups:
        if a.only not in str(grp.types):
            continue
        f = jax.jit(jax.vmap(_group_fn(m, p, grp, s0.qpos.dtype)))
        t = time.perf_counter()
        c = f.lower(states).compile()
        tc = time.perf_counter() - t
        jax.block_until_ready(c(states))
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            r = c(states)
            jax.block_until_ready(r)
            best = min(best, time.perf_counter() - t)
        print(f"{str(grp.types):10s} k={grp.k:2d} pairs={len(grp.pair):3d} "
              f"compile {tc:6.1f} s  run {1e3 * best:8.2f} ms  "
              f"valid/world {float(jnp.sum(r[1])) / a.batch:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
