"""One comparison helper for compiled models: ours (jaxsim) against mujoco.MjModel."""

import numpy as np

import jaxsim

# fields whose layout differs from MuJoCo's on purpose, or that only matter for rendering
SKIP = {
    "opt", "names", "model_name", "text_data",
    # the order of neighbours within a hull vertex's list follows qhull's internal merge
    # history, which scipy does not expose; the sets are compared in tests/test_mesh.py
    "mesh_graph",
}


def model_errors(ours, ref, tol: float = 1e-6) -> list[str]:
    """Fields that differ: max |ours - ref| / (1 + max |ref|) > tol (as the referee)."""
    bad = []
    for name in jaxsim.Model.field_info():
        if name in SKIP or not hasattr(ref, name):
            continue
        a = np.asarray(getattr(ours, name))
        b = np.asarray(getattr(ref, name))
        if a.size != b.size:
            bad.append(f"{name}: size {a.size} != {b.size}")
            continue
        if a.size == 0:
            continue
        a = a.reshape(b.shape).astype(np.float64)
        b = b.astype(np.float64)
        err = np.max(np.abs(a - b)) / (1.0 + np.max(np.abs(b)))
        if not np.isfinite(err) or err > tol:
            bad.append(f"{name}: err {err:.2e}")
    for name in ("timestep", "gravity", "integrator", "solver", "cone", "iterations",
                 "tolerance", "impratio", "density", "viscosity", "wind", "disableflags",
                 "enableflags"):
        a = np.asarray(getattr(ours.opt, name), dtype=np.float64)
        b = np.asarray(getattr(ref.opt, name), dtype=np.float64)
        if np.max(np.abs(a - b)) > tol * (1 + np.max(np.abs(b))):
            bad.append(f"opt.{name}")
    return bad
