"""Where a vmapped `forward` spends its run time, by switching parts of it off.

    python scripts/ablate_forward.py MODEL.xml [--batch 1024] [--warm 60] [--rounds 6]
        [--variants base,noconstraint,nocontact,it0,it1] [--dtype float32]

Each variant is the model with one change, compiled on its own and timed on the same batch
of states (taken `--warm` steps from the initial one with zero control, so that contacts
exist); the variants are timed in alternation, `--rounds` times, and the median is shown
with its difference from the first variant. Differences between variants price a part of
the pipeline as a whole, which a profiler's per-kernel times do not do reliably on the CPU
(concurrent kernels and the profiler's own cost blur them). Variants:

  base           the model as loaded
  noconstraint   the constraint disable flag (no collision, no rows, no solver)
  nocontact      the contact disable flag (rows without contacts)
  nolimit        the limit disable flag (no joint or tendon limit rows)
  itN            N solver iterations (tolerance as the model's)
  itN/0          N iterations with tolerance 0 (every world runs them all)
  kcN            the compact constraint problem with N contact slots (0: off)
  A+B            both changes (e.g. kc6+it0)

Measured on this 2-core machine, batch 1024, float32 (2026-11-30), in ms per forward call:
the gymnasium humanoid (PGS) base 85.7, it1 55.1, nocontact 26.8, noconstraint 13.1; the
gymnasium ant (Newton) base 45.0, it2 41.1, it1 33.7, it0 27.5, nocontact 14.2,
noconstraint 8.8. The constraint stage is most of a forward on both. The ant with the
compact problem (6 slots, its default since bd451ff): kc6 24.0, kc6+it2 22.0, kc6+it1 17.2,
kc6+it0 15.0, kc6+nocontact 13.3, noconstraint 8.3. The humanoid with its compact problem
(11 slots, its default): base 69.3, it1 64.2, it0 54.1, nocontact 40.1, noconstraint 13.1;
the MJX humanoid (Newton, one iteration): base 40.6, it0 39.1, nocontact 26.8,
noconstraint 15.7. docs/performance.md puts these together.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxsim  # noqa: E402
from jaxsim.types import DisableBit  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_step import warm_states  # noqa: E402


def variant(m, name: str):
    if "+" in name:  # several changes at once, e.g. kc6+it0
        for part in name.split("+"):
            m = variant(m, part)
        return m
    o = m.opt
    if name == "base":
        return m
    if name == "noconstraint":
        return m.replace(opt=o.replace(disableflags=o.disableflags | DisableBit.CONSTRAINT))
    if name == "nocontact":
        return m.replace(opt=o.replace(disableflags=o.disableflags | DisableBit.CONTACT))
    if name == "nolimit":
        return m.replace(opt=o.replace(disableflags=o.disableflags | DisableBit.LIMIT))
    if name.startswith("it"):
        n, _, tol = name[2:].partition("/")
        opt = o.replace(iterations=int(n))
        if tol:
            opt = opt.replace(tolerance=jnp.asarray(float(tol), o.tolerance.dtype))
        return m.replace(opt=opt)
    if name.startswith("kc"):
        return m.replace(ncompact=int(name[2:]))
    raise SystemExit(f"unknown variant {name!r}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--warm", type=int, default=60)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--variants", default="base,noconstraint,nocontact,it0,it1")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    a = p.parse_args(argv)
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    m = jaxsim.load(a.model, dtype=jnp.float32 if a.dtype == "float32" else jnp.float64)
    states = warm_states(m, a.batch, a.warm)
    names = a.variants.split(",")
    compiled = {}
    for name in names:
        mv = variant(m, name)
        t = time.perf_counter()
        compiled[name] = jax.jit(jax.vmap(lambda d, mv=mv: jaxsim.forward(mv, d))).lower(
            states).compile()
        print(f"{name:14s} compiled in {time.perf_counter() - t:5.1f} s", flush=True)
        jax.block_until_ready(compiled[name](states))
    times = {name: [] for name in names}
    for _ in range(a.rounds):
        for name, c in compiled.items():
            t = time.perf_counter()
            jax.block_until_ready(c(states))
            times[name].append(1e3 * (time.perf_counter() - t))
    ref = float(np.median(times[names[0]]))
    print(f"{os.path.basename(a.model)}: batch {a.batch}, {a.dtype}, {a.warm} steps in; "
          f"ms per forward call (median of {a.rounds}), and the difference from {names[0]}")
    for name in names:
        med = float(np.median(times[name]))
        print(f"  {name:14s} {med:8.2f}  {med - ref:+8.2f}   min {min(times[name]):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
