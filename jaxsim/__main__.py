"""Command line.

  python -m jaxsim simulate [MODEL.xml] --batch N --steps T --out DIR   (the main job)
  python -m jaxsim check [MODEL.xml]                                    (compile, summarise)

With no MODEL both use models/quadruped.xml. The `jaxsim` console script is the same.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

_BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")


def _check(path: str) -> int:
    import numpy as np

    import jaxsim
    from jaxsim.types import (
        BiasType,
        GainType,
        GeomType,
        Integrator,
        JointType,
        ObjType,
        Solver,
        TrnType,
    )

    t0 = time.perf_counter()
    try:
        m = jaxsim.load(path)
    except jaxsim.MJCFError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    print(f"model '{m.model_name}' from {path} compiled in {dt:.2f} s")
    sizes = m.sizes()
    keys = ("nq", "nv", "nu", "nactuator", "nout", "na", "nbody", "njnt", "ngeom", "nsite", "nmesh", "nhfield",
            "ntendon", "neq", "nsensor", "nkey", "nmocap")
    print("sizes: " + ", ".join(f"{k}={sizes[k]}" for k in keys))
    print(f"total mass {float(np.sum(np.asarray(m.body_mass))):.4g}, timestep "
          f"{float(m.opt.timestep):g}, integrator {Integrator(m.opt.integrator).name}, "
          f"solver {Solver(m.opt.solver).name}")
    print("bodies:")
    for i in range(1, m.nbody):
        joints = [f"{JointType(int(m.jnt_type[j])).name.lower()} '{m.id2name(ObjType.JOINT, j)}'"
                  for j in range(m.body_jntadr[i], m.body_jntadr[i] + m.body_jntnum[i])]
        geoms = [GeomType(int(m.geom_type[g])).name.lower()
                 for g in range(m.body_geomadr[i], m.body_geomadr[i] + m.body_geomnum[i])]
        print(f"  {i:3d} {m.id2name(ObjType.BODY, i) or '(unnamed)':20s} parent "
              f"{int(m.body_parentid[i]):3d} mass {float(m.body_mass[i]):9.4g}  joints "
              f"[{', '.join(joints)}]  geoms [{', '.join(geoms)}]")
    if m.nactuator:
        print("actuators:")
        for i in range(m.nactuator):
            c = int(m.actuator_ctrladr[i])
            lo, hi = ((float(x) for x in m.actuator_ctrlrange[c]) if m.actuator_ctrlnum[i]
                      else (0.0, 0.0))
            print(f"  {i:3d} {m.id2name(ObjType.ACTUATOR, i) or '(unnamed)':20s} "
                  f"{TrnType(int(m.actuator_trntype[i])).name.lower()} -> "
                  f"{m.id2name(ObjType.JOINT, int(m.actuator_trnid[i, 0])) if m.actuator_trntype[i] < 2 else int(m.actuator_trnid[i, 0])}"
                  f"  gain {GainType(int(m.actuator_gaintype[i])).name.lower()}"
                  f"  bias {BiasType(int(m.actuator_biastype[i])).name.lower()}"
                  f"  ctrlrange [{lo:.4g}, {hi:.4g}]")
    print("unsupported features: none (the compiler rejects any it cannot honour)")
    return 0


def main(argv=None) -> int:
    from jaxsim import simulate as _simulate

    p = argparse.ArgumentParser(prog="jaxsim", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("simulate", help="simulate a batch of worlds, report speed, plot",
                       description=_simulate.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("model", nargs="?", default=os.path.join(_BUNDLED, "quadruped.xml"))
    _simulate.add_arguments(s)
    c = sub.add_parser("check", help="compile a model and print a summary")
    c.add_argument("model", nargs="?", default=os.path.join(_BUNDLED, "quadruped.xml"))
    a = p.parse_args(argv)
    if a.cmd == "check":
        return _check(a.model)
    if a.cmd == "simulate":
        return _simulate.run(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())
