"""Sanity check for the project's MJCF models in models/.

Loads each model with MuJoCo, then steps it 2000 times twice: once with zero
control and once with random controls (uniform in ctrlrange, redrawn every 50
steps; [-1, 1] for actuators without a ctrlrange).  A run passes if qpos, qvel
and act stay finite and max |qvel| stays below a loose explosion bound.

Usage: python scripts/check_models.py [model.xml ...]   (default: models/*.xml)
Exit status is nonzero if any model fails.
"""

import argparse
import pathlib
import sys

import mujoco
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
NSTEP = 2000
RESAMPLE = 50
QVEL_BOUND = 1e3  # rad/s or m/s; anything above this counts as an explosion


def run(m: mujoco.MjModel, random_ctrl: bool, seed: int = 0) -> tuple[bool, float]:
    d = mujoco.MjData(m)
    if m.nkey > 0:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    rng = np.random.default_rng(seed)
    lo = np.where(m.actuator_ctrllimited, m.actuator_ctrlrange[:, 0], -1.0)
    hi = np.where(m.actuator_ctrllimited, m.actuator_ctrlrange[:, 1], 1.0)
    maxvel = 0.0
    for i in range(NSTEP):
        if m.nu:
            if random_ctrl and i % RESAMPLE == 0:
                d.ctrl[:] = rng.uniform(lo, hi)
            elif not random_ctrl:
                d.ctrl[:] = 0.0
        mujoco.mj_step(m, d)
        if not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()
                and np.isfinite(d.act).all()):
            return False, float("nan")
        maxvel = max(maxvel, float(np.abs(d.qvel).max(initial=0.0)))
    return maxvel < QVEL_BOUND, maxvel


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", type=pathlib.Path)
    args = ap.parse_args()
    paths = args.models or sorted(MODELS_DIR.glob("*.xml"))

    hdr = (f"{'model':<16}{'nq':>4}{'nv':>4}{'nu':>4}{'na':>4}{'nbody':>6}{'ngeom':>6}"
           f"{'njnt':>5}{'nten':>5}{'nsens':>6}  {'zero ctrl':<18}{'random ctrl':<18}")
    print(hdr)
    print("-" * len(hdr))
    ok_all = True
    for p in paths:
        try:
            m = mujoco.MjModel.from_xml_path(str(p))
        except Exception as e:  # noqa: BLE001
            print(f"{p.stem:<16} LOAD FAILED: {e}")
            ok_all = False
            continue
        res = []
        for rnd in (False, True):
            ok, vmax = run(m, rnd)
            ok_all &= ok
            res.append(f"{'ok' if ok else 'FAIL'} (|v|<={vmax:.3g})")
        print(f"{p.stem:<16}{m.nq:>4}{m.nv:>4}{m.nu:>4}{m.na:>4}{m.nbody:>6}{m.ngeom:>6}"
              f"{m.njnt:>5}{m.ntendon:>5}{m.nsensor:>6}  {res[0]:<18}{res[1]:<18}")
    print("ALL PASS" if ok_all else "SOME FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
