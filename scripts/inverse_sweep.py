"""The referee's inverse-dynamics and sensordata checks over many models, quickly.

For each model: load with jaxsim (float64); in the referee's own random states
(referee.random_states, set by referee.set_state) compare `forward`'s sensordata with
mj_forward's and `inverse`'s qfrc_inverse (and sensordata) with mj_inverse's, at the
referee's solver tolerance. Unlike the referee no step is compiled, so a model costs two
compilations. Each model runs in a subprocess under a time limit. One line per model, then
the pass rate per source directory (over all models, and over the models that load).

    python scripts/inverse_sweep.py [--states 3] [--timeout 600] [--json out.json] MODEL_OR_DIR ...

With --json, a file left by an earlier run is read first and the models it holds are not
run again (a long sweep resumes where it stopped).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import subprocess
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFEREE = ROOT.parent / "shared" / "referee"


def check(path: str, nstates: int) -> dict:
    sys.path.insert(0, str(REFEREE))
    import jax
    import jax.numpy as jnp
    import mujoco
    import numpy as np
    import referee

    import jaxsim

    jax.config.update("jax_enable_x64", True)
    rep = {"model": path}
    m = mujoco.MjModel.from_xml_path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = jaxsim.load(path, dtype=jnp.float64)
    except Exception as e:  # noqa: BLE001 -- a failure to load is a finding
        rep["load"] = f"{type(e).__name__}: {str(e)[:200]}"
        return rep
    rep["load"] = "ok"
    fwd, inv = jax.jit(jaxsim.forward), jax.jit(jaxsim.inverse)
    base = jaxsim.make_state(model)
    rng = np.random.default_rng(0)
    worst = {"sensordata": 0.0, "qfrc_inverse": 0.0, "inv_sensordata": 0.0}
    try:
        for _label, d in referee.random_states(m, rng, nstates):
            st = referee.set_state(jaxsim, model, base, m, d)
            mujoco.mj_forward(m, d)
            out = fwd(model, st)
            if m.nsensordata:
                worst["sensordata"] = max(worst["sensordata"],
                                          referee.err(out.sensordata, d.sensordata))
            d2 = mujoco.MjData(m)
            mujoco.mj_copyData(d2, m, d)
            mujoco.mj_inverse(m, d2)
            io = inv(model, out.replace(qacc=jnp.asarray(d.qacc)))
            worst["qfrc_inverse"] = max(worst["qfrc_inverse"],
                                        referee.err(io.qfrc_inverse, d2.qfrc_inverse))
            if m.nsensordata:
                worst["inv_sensordata"] = max(worst["inv_sensordata"],
                                              referee.err(io.sensordata, d2.sensordata))
    except Exception as e:  # noqa: BLE001
        rep["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return rep
    rep.update(worst)
    tol = referee.TOL_SOLVER
    rep["inverse_ok"] = bool(worst["qfrc_inverse"] <= tol)
    rep["sensor_ok"] = bool(worst["sensordata"] <= tol)
    return rep


def _models(args) -> list[str]:
    out = []
    for a in args:
        if os.path.isdir(a):
            out += sorted(glob.glob(os.path.join(a, "**", "*.xml"), recursive=True))
        else:
            out.append(a)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="*")
    p.add_argument("--states", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(check(a.one, a.states)))
        return 0
    reports = []
    if a.json and os.path.exists(a.json):
        with open(a.json) as f:
            reports = json.load(f)
    done = {r["model"] for r in reports}
    env = dict(os.environ, JAX_ENABLE_X64="1")
    for path in _models(a.models):
        if path in done:
            continue
        try:
            import mujoco

            mujoco.MjModel.from_xml_path(path)
        except Exception:  # noqa: BLE001 -- MuJoCo rejects it: not a conformance case
            continue
        t0 = time.time()
        try:
            res = subprocess.run([sys.executable, __file__, "--one", path, "--states",
                                  str(a.states)], capture_output=True, text=True,
                                 timeout=a.timeout, env=env, check=False)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
            rep = json.loads(lines[-1]) if lines else {
                "model": path, "load": "ok", "error": res.stderr.strip()[-300:]}
        except subprocess.TimeoutExpired:
            rep = {"model": path, "load": "ok", "error": f"timeout {a.timeout:.0f} s"}
        rep["seconds"] = round(time.time() - t0, 1)
        reports.append(rep)
        verdict = ("LOAD-FAIL" if rep["load"] != "ok" else
                   "ERROR" if "error" in rep else
                   "PASS" if rep["inverse_ok"] and rep["sensor_ok"] else "FAIL")
        detail = rep.get("error", rep["load"] if rep["load"] != "ok" else
                         f"inverse={rep.get('qfrc_inverse', 0):.1e} "
                         f"sensordata={rep.get('sensordata', 0):.1e} "
                         f"inv_sensordata={rep.get('inv_sensordata', 0):.1e}")
        print(f"{verdict:9s} {path}  {detail}  ({rep['seconds']} s)", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(reports, f, indent=1)
    by_dir: dict[str, list] = {}
    for r in reports:
        by_dir.setdefault(os.path.dirname(r["model"]), []).append(r)
    print("\nper source directory: pass / loaded / all")
    for k, rs in sorted(by_dir.items()):
        ok = sum(1 for r in rs if r.get("inverse_ok") and r.get("sensor_ok"))
        loaded = sum(1 for r in rs if r["load"] == "ok")
        print(f"  {ok:3d} / {loaded:3d} / {len(rs):3d}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
