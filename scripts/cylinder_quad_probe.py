"""Which four contacts a cylinder cap on a flat face gets, in MuJoCo 4.0 and in jaxsim.

    JAX_ENABLE_X64=1 python scripts/cylinder_quad_probe.py [--all]

Runs the cylinder-on-face poses of tests/test_collision_convex.py (a cylinder's cap on a box,
a cylinder and a cube mesh, untilted and tilted, with and without margin) through MuJoCo's
mj_collision and jaxsim's convex collider, and prints, for each pose where MuJoCo returns four
contacts, both sets of points in the cylinder's frame: the angle of each point about the
axis (the cap is clipped as a 16-gon, so the points of an unclipped cap sit at multiples of
22.5 degrees) and the area of the quadrilateral (a square inscribed in the cap has 2 r^2).
With --all, the poses where the two agree are printed too.

Known gap this is for (see the README): on a box or mesh face MuJoCo 4.0 often keeps another
quadrilateral of a clipped cap than jaxsim's polygonQuad: usually a square (area 2 r^2)
where jaxsim's hill climb stops at a smaller local maximum, though not always (the cube
mesh). Cap on cap (equal areas taken as ties) agrees but for one pose of ten.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

jax.config.update("jax_enable_x64", True)

import tests.test_collision_convex as tc  # noqa: E402


def _quad_area(p: np.ndarray) -> float:
    """Area of the convex quadrilateral of four points, taken in angular order."""
    c = p.mean(0)
    n = np.cross(p[1] - p[0], p[2] - p[0])
    n = n / (np.linalg.norm(n) or 1.0)
    u = p[0] - c
    u = u / (np.linalg.norm(u) or 1.0)
    v = np.cross(n, u)
    ang = np.arctan2((p - c) @ v, (p - c) @ u)
    q = p[np.argsort(ang)]
    return 0.5 * np.linalg.norm(np.cross(q[2] - q[0], q[3] - q[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args(argv)
    cases, out = tc.build_results(tc.build_mesh_rows())
    np.set_printoptions(precision=2, suppress=True)
    same = diff = 0
    for i, c in enumerate(cases):
        if c["tag"] != "cylinder" or len(c["ref"]) != 4:
            continue
        ours = tc.ours_list(jax.tree.map(lambda x, i=i: x[i], out))
        ref = np.array([r["pos"] for r in c["ref"]])
        mine = np.array([o["pos"] for o in ours])
        agree = len(mine) == 4 and all(np.abs(mine - r).max(1).min() < 1e-6 for r in ref)
        same += agree
        diff += not agree
        if agree and not a.all:
            continue
        g = c["g1"]
        mat = np.asarray(g.mat).reshape(3, 3)
        r = float(np.asarray(g.size)[0])
        print(f"pose {i} {c['pair']} margin {c['margin']}: {'same' if agree else 'DIFFERENT'}")
        for name, pts in (("MuJoCo", ref), ("jaxsim", mine)):
            loc = (pts - np.asarray(g.pos)) @ mat
            ang = np.sort(np.degrees(np.arctan2(loc[:, 1], loc[:, 0])))
            print(f"  {name:6s} angles {ang}  area/(2r^2) {_quad_area(pts) / (2 * r * r):.6f}")
    print(f"four-contact cap poses: {same} the same, {diff} different")
    return 0


if __name__ == "__main__":
    sys.exit(main())
