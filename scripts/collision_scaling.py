"""How the collision stage grows with the number of bodies (models/pile{1,10,100,1000}.xml).

For each scene: all geom pairs, the pairs the compiler enumerates, the run-time sweep
groups and their capacities, the contact buffer, jit compile time, run time per call
(median of several, float32 and float64 on this machine's CPU), and XLA's memory figures
for the compiled collision stage (temporaries + outputs).

    python scripts/collision_scaling.py [--dtype float32] [--repeat 20]
"""

from __future__ import annotations

import argparse
import pathlib
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("sizes", nargs="*", type=int, default=[1, 10, 100, 1000])
    a = ap.parse_args()
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jaxsim
    from jaxsim import smooth
    from jaxsim.collision import driver

    warnings.simplefilter("ignore")
    dtype = jnp.float64 if a.dtype == "float64" else jnp.float32
    print("| bodies | all pairs | enumerated | run-time groups (cap pairs) | buffer | "
          "active | compile s | run ms | temp MB | out MB |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in a.sizes:
        model = jaxsim.load(str(ROOT / "models" / f"pile{n}.xml"), dtype=dtype)
        p = driver.plan(model)
        st = jax.jit(smooth.kinematics)(model, jaxsim.make_state(model))
        fn = jax.jit(lambda m, s: driver.collision(m, s).contact)  # contacts only
        t0 = time.perf_counter()
        compiled = fn.lower(model, st).compile()
        tc = time.perf_counter() - t0
        out = compiled(model, st)
        jax.block_until_ready(out)
        times = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(model, st))
            times.append(time.perf_counter() - t0)
        mem = compiled.memory_analysis()
        temp = getattr(mem, "temp_size_in_bytes", 0) / 2**20
        outb = getattr(mem, "output_size_in_bytes", 0) / 2**20
        sweeps = ", ".join(f"{sw.types}:{sw.cap2}" for sw in p.sweeps) or "-"
        ngeom = model.ngeom
        full = jax.jit(driver.collision)(model, st)
        print(f"| {n} | {ngeom * (ngeom - 1) // 2} | {len(p.geom1)} | {sweeps} | {p.ncon} | "
              f"{int(full.ncon)}{' overflow' if bool(full.overflow) else ''} | {tc:.1f} | "
              f"{1e3 * float(np.median(times)):.2f} | {temp:.1f} | {outb:.1f} |")


if __name__ == "__main__":
    main()
