"""The referee over many models, each in its own process under a time limit.

`../shared/referee/referee.py` runs every model in one process, so one model that hangs
or takes an hour to compile stops the sweep. This runs it model by model (same
arguments), keeps each report, and prints the pass rate per source directory, over all
the models MuJoCo loads and over those jaxsim loads.

    python scripts/referee_sweep.py [--timeout 900] [--json out.json]
        [--no-constraints] [--stages forward,step] MODEL_OR_DIR ...
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFEREE = ROOT.parent / "shared" / "referee" / "referee.py"


def loads_in_mujoco(path: str) -> bool:
    import mujoco

    try:
        mujoco.MjModel.from_xml_path(path)
        return True
    except Exception:  # noqa: BLE001 -- include fragments and invalid models
        return False


def run_one(path: str, extra: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rep.json")
        cmd = [sys.executable, str(REFEREE), path, "--json", out, *extra]
        env = dict(os.environ, JAX_ENABLE_X64="1")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"model": path, "pass": False, "load": "timeout", "seconds": timeout}
        sec = round(time.perf_counter() - t0, 1)
        if not os.path.exists(out):
            tail = (proc.stderr or proc.stdout)[-300:]
            return {"model": path, "pass": False, "load": f"crash: {tail}", "seconds": sec}
        with open(out) as f:
            reps = json.load(f)
        rep = reps[0] if isinstance(reps, list) else reps.get("models", [reps])[0]
        rep["seconds"] = sec
        rep["line"] = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
        return rep


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--json")
    p.add_argument("--no-constraints", action="store_true")
    p.add_argument("--stages")
    p.add_argument("--states", type=int)
    a = p.parse_args()
    extra = ["--no-constraints"] if a.no_constraints else []
    if a.stages:
        extra += ["--stages", a.stages]
    if a.states is not None:
        extra += ["--states", str(a.states)]
    files = []
    for x in a.paths:
        if os.path.isdir(x):
            files += sorted(glob.glob(os.path.join(x, "**", "*.xml"), recursive=True))
        else:
            files.append(x)
    files = [f for f in files if loads_in_mujoco(f)]
    reps = []
    for f in files:
        rep = run_one(f, extra, a.timeout)
        reps.append(rep)
        print(rep.get("line") or f"FAIL       {f}  {rep.get('load')}", flush=True)
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(reps, fh, indent=1, default=str)
    groups: dict[str, list[dict]] = {}
    for r in reps:
        src = next((x for x in a.paths if r["model"].startswith(x.rstrip("/"))), "other")
        groups.setdefault(src, []).append(r)
    for src, rs in groups.items():
        n = len(rs)
        loaded = sum(r.get("load") == "ok" for r in rs)
        passed = sum(bool(r.get("pass")) for r in rs)
        print(f"{src}: {passed}/{n} pass ({100.0 * passed / max(n, 1):.1f}%), "
              f"{loaded} load, {passed}/{max(loaded, 1)} of loaded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
