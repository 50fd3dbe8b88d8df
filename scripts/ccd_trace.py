"""MuJoCo's native CCD and jaxsim's replay of it, support call by support call, on one
height-field prism and one geom: where the two paths part.

    python scripts/ccd_trace.py MODEL.xml --hfield G1 --geom G2 --cell R C T
        [--state random2 | --qpos FILE.npy] [--seed 0]

MuJoCo 4.0 exports `mjc_initCCDObj` and `mjc_ccd`. This script initialises MuJoCo's own CCD
objects for the two geoms (from an mjData at the chosen state), puts the prism of cell (R,
C), triangle T (jaxsim's numbering, `hfield._prisms`) into the height field's object, wraps
both objects' support functions to record every call (direction and point), and runs
`mjc_ccd` as `mjc_ConvexHField` does (zero margin, one contact, no distance cutoff). It then
runs jaxsim's `convex.penetration` on the same prism and geom under `jax.disable_jit()`,
recording its support calls the same way, and prints both: the distance and normal of each,
and the first calls whose directions or points differ. jaxsim's record also holds the calls
of branches that are computed and then not selected (the polytope constructions for the
simplex sizes not reached), so it can be longer than MuJoCo's; `--skip N` aligns the two
by dropping N of jaxsim's calls after the GJK ones.

The offsets into MuJoCo's `mjCCDObj` (the prism at byte 320, the support function pointer
at 488) are those of the 4.0 release this project pins (`pip install "mujoco>=4.0,<4.1"`),
found by reading back what `mjc_initCCDObj` writes; they are checked before use. The height
field must be at the world origin with the identity orientation (MuJoCo works in its frame).

`--state` takes the referee's states (`../shared/referee/referee.py`: initial, random0..,
rollout20..), found from its `random_states` with the given seed.
"""

from __future__ import annotations

import argparse
import ctypes as C
import os
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

_PRISM, _SUPPORT, _CENTER, _NROW = 320, 488, 480, 472
_D = C.c_double
_SUP = C.CFUNCTYPE(None, C.POINTER(_D), C.c_void_p, C.POINTER(_D))


class _Cfg(C.Structure):
    _fields_ = [("max_iterations", C.c_int), ("tolerance", _D), ("max_contacts", C.c_int),
                ("dist_cutoff", _D), ("buffer", C.c_void_p), ("npolygonmax", C.c_int),
                ("nmeshdegmax", C.c_int)]


class _Status(C.Structure):
    # the leading fields of mjCCDStatus (distances and witness points), then room
    _fields_ = [("separated", C.c_int), ("dist", _D * 50), ("x1", _D * 150), ("x2", _D * 150),
                ("nx", C.c_int), ("rest", C.c_char * 8192)]


def _library(mujoco):
    path = os.path.join(os.path.dirname(mujoco.__file__), f"libmujoco.so.{mujoco.__version__}")
    lib = C.CDLL(path)
    lib.mjc_ccd.restype = _D
    lib.mjc_ccdSize.restype = C.c_size_t
    return lib


def prism_vertices(m, hfield_geom: int, r: int, c: int, t: int) -> np.ndarray:
    """(6, 3) vertices of the prism, bottom then top, in the height field's frame."""
    h = int(m.geom_dataid[hfield_geom])
    nrow, ncol = int(m.hfield_nrow[h]), int(m.hfield_ncol[h])
    elev = m.hfield_data[m.hfield_adr[h]:m.hfield_adr[h] + nrow * ncol].reshape(nrow, ncol)
    sx, sy, sz, sb = m.hfield_size[h]
    dx, dy = 2 * sx / (ncol - 1), 2 * sy / (nrow - 1)
    corners = ([(1, 0), (0, 0), (1, 1)], [(0, 0), (1, 1), (0, 1)])[t]
    tri = [(r + a, c + b) for a, b in corners]
    return np.array([[dx * cc - sx, dy * rr - sy, -sb] for rr, cc in tri]
                    + [[dx * cc - sx, dy * rr - sy, elev[rr, cc] * sz] for rr, cc in tri])


def mujoco_trace(mujoco, m, d, hfield_geom: int, geom: int, V: np.ndarray):
    """(dist, normal, calls) of MuJoCo's mjc_ccd on the prism V and the geom."""
    lib = _library(mujoco)
    objs = [(C.c_uint64 * 256)() for _ in range(2)]
    for buf, g in zip(objs, (hfield_geom, geom), strict=True):
        lib.mjc_initCCDObj(C.cast(buf, C.c_void_p), C.c_void_p(m._address),
                           C.c_void_p(d._address), C.c_int(g), _D(0.0))
    a1, a2 = (C.addressof(b) for b in objs)
    h = int(m.geom_dataid[hfield_geom])
    nrc = np.ctypeslib.as_array((C.c_int * 2).from_address(a1 + _NROW))
    if (list(nrc) != [int(m.hfield_nrow[h]), int(m.hfield_ncol[h])]
            or not C.c_void_p.from_address(a1 + _SUPPORT).value):
        raise SystemExit("mjCCDObj's layout is not the one this script knows (MuJoCo 4.0)")
    np.ctypeslib.as_array((_D * 18).from_address(a1 + _PRISM))[:] = V.ravel()
    calls = []
    keep = []
    for tag, a in ((1, a1), (2, a2)):
        slot = C.c_void_p.from_address(a + _SUPPORT)
        orig = _SUP(slot.value)

        def rec(res, obj, dr, orig=orig, tag=tag):
            orig(res, obj, dr)
            calls.append((tag, np.array(dr[:3]), np.array(res[:3])))

        w = _SUP(rec)
        keep.append((orig, w))
        slot.value = C.cast(w, C.c_void_p).value
    it, tol = int(m.opt.ccd_iterations), float(m.opt.ccd_tolerance)
    buf = C.create_string_buffer(2 * lib.mjc_ccdSize(0, 0, it))
    cfg = _Cfg(it, tol, 1, 0.0, C.cast(buf, C.c_void_p), 0, 0)
    st = _Status()
    dist = lib.mjc_ccd(C.byref(cfg), C.byref(st), C.cast(objs[0], C.c_void_p),
                       C.cast(objs[1], C.c_void_p))
    x1, x2 = np.array(st.x1[:3]), np.array(st.x2[:3])
    n = (x1 - x2) / max(np.linalg.norm(x1 - x2), 1e-300)
    return dist, n, calls


def jaxsim_trace(m, d, geom: int, V: np.ndarray):
    """(dist, normal, calls) of jaxsim's replay on the prism V and the geom (float64)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from jaxsim.collision import ccd, convex, hfield
    from jaxsim.collision.common import Geom

    t = int(m.geom_type[geom])
    if t not in (hfield.ELLIPSOID, hfield.CYLINDER):
        raise SystemExit("this script traces ellipsoids and cylinders (the CCD replay's "
                         "smooth geoms without a core)")
    Vj = jnp.asarray(V)
    g = Geom(jnp.asarray(d.geom_xpos[geom]), jnp.asarray(d.geom_xmat[geom].reshape(3, 3)),
             jnp.asarray(m.geom_size[geom]))
    calls = []

    def sup_prism(dd):
        vals = Vj @ dd
        low = dd[2] < 0
        p = Vj[jnp.where(low, 0, 3) + jnp.argmax(jnp.where(low, vals[:3], vals[3:]))]
        calls.append((1, np.asarray(dd), np.asarray(p)))
        return p, -1

    def sup_geom(dd):
        p = ccd.support(t, g, dd, jnp.int32(-1), False)[0]
        calls.append((2, np.asarray(dd), np.asarray(p)))
        return p, -1

    with jax.disable_jit():
        dist, x1, x2, _ = convex.penetration(
            sup_prism, sup_geom, jnp.sum(Vj, 0) * (1.0 / 6.0), g.pos, 0.0, 0.0,
            iterations=int(m.opt.ccd_iterations), tolerance=float(m.opt.ccd_tolerance),
            discrete1=True, discrete2=False)
    n = np.array(x1 - x2)
    return float(dist), n / max(np.linalg.norm(n), 1e-300), calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--hfield", type=int, required=True)
    p.add_argument("--geom", type=int, required=True)
    p.add_argument("--cell", type=int, nargs=3, required=True, metavar=("R", "C", "T"))
    p.add_argument("--state", default="initial")
    p.add_argument("--qpos", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", type=int, default=0)
    a = p.parse_args(argv)
    import mujoco

    m = mujoco.MjModel.from_xml_path(a.model)
    if np.any(m.geom_pos[a.hfield] != 0) or np.any(m.geom_quat[a.hfield] != [1, 0, 0, 0]):
        raise SystemExit("the height field must sit at the origin, unrotated")
    if a.qpos:
        d = mujoco.MjData(m)
        d.qpos[:] = np.load(a.qpos)
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "..", "shared", "referee"))
        import referee

        for label, d in referee.random_states(m, np.random.default_rng(a.seed), 3):  # noqa: B007
            if label == a.state:
                break
        else:
            raise SystemExit(f"no state {a.state!r}")
    mujoco.mj_forward(m, d)
    V = prism_vertices(m, a.hfield, *a.cell)
    md, mn, mc = mujoco_trace(mujoco, m, d, a.hfield, a.geom, V)
    jd, jn, jc = jaxsim_trace(m, d, a.geom, V)
    print(f"MuJoCo: dist {md!r} normal {mn} ({len(mc)} support calls)")
    print(f"jaxsim: dist {jd!r} normal {jn} ({len(jc)} support calls)")
    first = flip = None
    for i, mine in enumerate(mc):
        j = i if i < 8 else i + a.skip
        if j >= len(jc):
            break
        e_dir = float(np.abs(jc[j][1] - mine[1]).max())
        e_pt = float(np.abs(jc[j][2] - mine[2]).max())
        if first is None and e_dir > 0:
            first = (i, e_dir)
        if e_pt > 1e-9:
            flip = (i, mine[0], e_dir, e_pt, mine[1], jc[j][1], mine[2], jc[j][2])
            break
    if first:
        print(f"first direction apart: call {first[0]} ({first[1]:.3g})")
    if flip:
        i, obj, e_dir, e_pt, dm, dj, pm, pj = flip
        print(f"first support point apart: call {i} (object {obj}), directions {e_dir:.3g} "
              f"apart, points {e_pt:.3g} apart\n  MuJoCo {dm!r} -> {pm!r}\n"
              f"  jaxsim {dj!r} -> {pj!r}")
    else:
        print("no support point apart by more than 1e-9 over the aligned calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
