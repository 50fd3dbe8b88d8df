"""The referee's contact check over many models, fast: collision after kinematics only.

Uses the referee's own state generator and contact comparison (../shared/referee), but
jit-compiles only kinematics + collision instead of the whole forward and step, so a
corpus sweep takes minutes. Run the referee itself (`--stages compile,contact`) on the
models that matter before calling anything resolved.

    python scripts/contact_sweep.py [--states 3] [--json out.json] MODEL_OR_DIR ...
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import sys
import time
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent / "shared" / "referee"))


def main() -> int:
    jax.config.update("jax_enable_x64", True)
    import mujoco
    import referee

    import jaxsim
    from jaxsim import smooth
    from jaxsim.collision import driver

    warnings.simplefilter("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--states", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--detail", action="store_true",
                    help="print the geom pairs that differ in each failing state")
    a = ap.parse_args()
    paths = []
    for p in a.paths:
        if os.path.isdir(p):
            paths += sorted(glob.glob(os.path.join(p, "**", "*.xml"), recursive=True))
        else:
            paths.append(p)

    @jax.jit
    def collide(model, state):
        return driver.collision(model, smooth.kinematics(model, state))

    reps = []
    for path in paths:
        if not referee.is_standalone_model(path):
            continue
        m = mujoco.MjModel.from_xml_path(path)
        if m.ngeom < 2:
            continue
        rep = {"model": path}
        t0 = time.perf_counter()
        try:
            model = jaxsim.load(path, dtype=jnp.float64)
        except Exception as e:  # noqa: BLE001 -- a rejected model is a finding
            rep["load"] = f"{type(e).__name__}: {str(e)[:200]}"
            reps.append(rep)
            print(f"LOAD-FAIL  {path}  {rep['load']}", flush=True)
            continue
        rng = np.random.default_rng(0)
        ok, agg = True, {"pairs_missing": 0, "pairs_extra": 0, "dist_err": 0.0, "states": 0}
        try:
            base = jaxsim.make_state(model)
            for _, d in referee.random_states(m, rng, a.states):
                st = referee.set_state(jaxsim, model, base, m, d)
                mujoco.mj_forward(m, d)
                out = collide(model, st)
                crep, cok = referee.contact_report(m, d, out)
                ok &= cok
                if a.detail and not cok:
                    _detail(m, d, out, _)
                agg["states"] += 1
                agg["pairs_missing"] += crep["pairs_missing"]
                agg["pairs_extra"] += crep["pairs_extra"]
                agg["dist_err"] = max(agg["dist_err"], crep["dist_err"])
                agg["ncon_ref"] = max(agg.get("ncon_ref", 0), crep["ncon_ref"])
        except Exception as e:  # noqa: BLE001
            ok = False
            rep["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rep["traceback"] = traceback.format_exc()[-1200:]
        rep.update(agg, ok=bool(ok), seconds=round(time.perf_counter() - t0, 1))
        jax.clear_caches()  # one compiled function per model: free them (LLVM maps run out)
        reps.append(rep)
        err = f" error={rep['error']}" if "error" in rep else ""
        print(f"{'PASS' if ok else 'FAIL':5s} {path} missing={agg['pairs_missing']} "
              f"extra={agg['pairs_extra']} dist_err={agg['dist_err']:.1e} "
              f"ncon={agg.get('ncon_ref', 0)} {rep['seconds']}s{err}", flush=True)
    n = len(reps)
    npass = sum(r.get("ok", False) for r in reps)
    print(f"models {n}  passed {npass}  ({100.0 * npass / max(n, 1):.0f}%)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(reps, fh, indent=1, default=str)
    return 0


def _detail(m, d, out, label):
    """Per geom pair: deepest distance, MuJoCo's and ours (pairs that differ only)."""
    ref, ours = {}, {}
    for i in range(d.ncon):
        c = d.contact[i]
        ref.setdefault(tuple(sorted(map(int, c.geom))), []).append(float(c.dist))
    act = np.asarray(out.contact.active).astype(bool)
    for g, dd in zip(np.asarray(out.contact.geom)[act], np.asarray(out.contact.dist)[act],
                     strict=True):
        ours.setdefault(tuple(sorted(map(int, g))), []).append(float(dd))
    for k in sorted(set(ref) | set(ours)):
        r, o = ref.get(k), ours.get(k)
        if r and o and abs(min(r) - min(o)) <= 1e-5:
            continue
        types = tuple(int(m.geom_type[g]) for g in k)
        print(f"   {label}: geoms {k} types {types}: mujoco {sorted(r) if r else None} "
              f"ours {sorted(o) if o else None}")


if __name__ == "__main__":
    sys.exit(main())
