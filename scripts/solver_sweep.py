"""The referee over models with contacts, once per solver (Newton, CG, PGS) and cone.

For each model MuJoCo reports contacts for (in the referee's own states), writes a copy
beside it with an extra `<option solver=.. cone=..>` (for PGS also more iterations and a
lower tolerance, on both sides, as PGS converges slowly) and runs the referee's
`check_model` on it with the stages compile,forward,contact,step. One line per model and
variant, then the pass rate per variant and per source directory.

    python scripts/solver_sweep.py [--states 3] [--json out.json] [--log done.jsonl]
        [--variants newton-pyramidal,pgs-elliptic,...] [--by-size] [--shard I/N]
        MODEL_OR_DIR ...

With --log, each result is appended to that file as it comes, and the model-variant pairs
already in it are not run again (a long sweep can stop and go on later). With --shard I/N
the process takes every N-th model from the I-th on (I counts from 0), so N processes with
the same log share a sweep (each uses about one core: most of a model's time is compilation).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import signal
import sys
import time
import types
import warnings

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent / "shared" / "referee"))

VARIANTS = [f"{s}-{c}" for s in ("newton", "cg", "pgs") for c in ("pyramidal", "elliptic")]
PGS_ITERATIONS, PGS_TOLERANCE = 2000, 1e-14


def _variant_file(path: str, variant: str) -> str:
    """A copy of the model beside it with the solver and cone of `variant`."""
    from lxml import etree

    solver, cone = variant.split("-")
    tree = etree.parse(path)
    root = tree.getroot()
    opt = etree.SubElement(root, "option")  # the last <option> wins
    opt.set("solver", {"newton": "Newton", "cg": "CG", "pgs": "PGS"}[solver])
    opt.set("cone", cone)
    if solver == "pgs":
        opt.set("iterations", str(PGS_ITERATIONS))
        opt.set("tolerance", repr(PGS_TOLERANCE))
    out = os.path.join(os.path.dirname(path), f".jaxsim-{variant}-" + os.path.basename(path))
    tree.write(out)
    return out


def _shared_forward_step():
    """jit(forward), and a step that is its composition with the parts of `jaxsim.step`
    around forward (the value checks before, the integrator after), each compiled apart, so
    that forward compiles once per model (RK4 models, whose step is not forward then an
    integrator, get jit(step))."""
    import importlib

    fw = importlib.import_module("jaxsim.forward")  # the module (jaxsim.forward is a function)

    fwd = jax.jit(fw.forward)
    check = jax.jit(fw.check_pos_vel)
    post = jax.jit(lambda m, d: fw._integrate_unless_reset(m, d, lambda dd: fw.integrate(m, dd)))
    whole = jax.jit(fw.step)

    def step(m, d):
        if fw._rk4_in_one_pass(m):
            return whole(m, d)
        return post(m, fwd(m, check(m, d)))

    return fwd, step


def _has_contacts(mujoco, referee, path: str, nstates: int) -> bool:
    m = mujoco.MjModel.from_xml_path(path)
    rng = np.random.default_rng(0)
    for _, d in referee.random_states(m, rng, nstates):
        mujoco.mj_forward(m, d)
        if d.ncon:
            return True
    return False


def main() -> int:
    jax.config.update("jax_enable_x64", True)
    import mujoco
    import referee

    import jaxsim

    # the referee checks inverse dynamics whenever the module has it; this sweep's stages
    # leave it out (it does not depend on the solver), so it gets a module without it
    api = types.SimpleNamespace(**{k: getattr(jaxsim, k) for k in dir(jaxsim)
                                   if not k.startswith("_") and k != "inverse"})
    # compile time is most of a model's time: the referee is told not to jit (it then
    # calls these as they are), and its step stage reuses the compiled forward
    os.environ["REFEREE_NOJIT"] = "1"
    # a stopped sweep (kill, Ctrl-C) must not leave its variant copies in the corpus:
    # SIGTERM becomes SystemExit, which runs the `finally` that removes the current one
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    api.forward, api.step = _shared_forward_step()
    warnings.simplefilter("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--states", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--log")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--by-size", action="store_true",
                    help="run the models in order of MuJoCo's nv (small ones first)")
    ap.add_argument("--shard", default="0/1", help="I/N: every N-th model from the I-th")
    a = ap.parse_args()
    variants = a.variants.split(",")
    paths = []
    for p in a.paths:
        if os.path.isdir(p):
            paths += sorted(glob.glob(os.path.join(p, "**", "*.xml"), recursive=True))
        else:
            paths.append(p)
    paths = [p for p in paths if not os.path.basename(p).startswith(".")]
    if a.by_size:
        def nv(p):
            try:
                return mujoco.MjModel.from_xml_path(p).nv
            except Exception:  # noqa: BLE001 -- MuJoCo rejects it: skipped below anyway
                return -1
        paths.sort(key=nv)
    shard, nshard = (int(x) for x in a.shard.split("/"))
    mine = set(paths[shard::nshard])
    stages = ("compile", "forward", "contact", "step")
    reps = []
    if a.log and os.path.exists(a.log):
        with open(a.log) as fh:
            reps = [json.loads(line) for line in fh if line.strip()]
    done = {(r["model"], r["variant"]) for r in reps}
    for path in paths:
        if path not in mine or all((path, v) in done for v in variants):
            continue
        if not referee.is_standalone_model(path):
            continue
        try:
            jaxsim.load(path)
        except Exception:  # noqa: BLE001 -- not loadable: not in this sweep's population
            continue
        if not _has_contacts(mujoco, referee, path, a.states):
            continue
        for v in variants:
            if (path, v) in done:
                continue
            tmp = _variant_file(path, v)
            t0 = time.perf_counter()
            try:
                r = referee.check_model(api, tmp, a.states, stages=stages)
            except Exception as e:  # noqa: BLE001 -- MuJoCo rejects the variant, etc.
                r = {"pass": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
            finally:
                os.remove(tmp)
            jax.clear_caches()
            r.update(model=path, variant=v, seconds=round(time.perf_counter() - t0, 1))
            reps.append(r)
            if a.log:
                with open(a.log, "a") as fh:
                    fh.write(json.dumps(r, default=str) + "\n")
            st = r.get("stages", {})
            why = "" if r["pass"] else " " + "; ".join(
                f"{k}:{','.join(s.get('bad', [])) or 'x'}" for k, s in st.items()
                if not s.get("ok", True)) + (f" error={r['error']}" if "error" in r else "")
            solver = st.get("forward", {}).get("worst_solver", float("nan"))
            print(f"{'PASS' if r['pass'] else 'FAIL':5s} {v:16s} {path} "
                  f"solver_err={solver:.1e} {r['seconds']}s{why}", flush=True)
    print("\nper variant and source:")
    by = {}
    for r in reps:
        if r["variant"] not in variants or r["model"] not in set(paths):
            continue
        src = "gymnasium" if "gymnasium" in r["model"] else (
            "mjx" if "mjx" in r["model"] else ("corpus" if "corpus" in r["model"] else "other"))
        by.setdefault((r["variant"], src), []).append(r["pass"])
    for (v, src), ok in sorted(by.items()):
        print(f"  {v:16s} {src:10s} {sum(ok)}/{len(ok)} ({100.0 * sum(ok) / len(ok):.0f}%)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(reps, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
