"""Geom geometry as MuJoCo's compiler computes it: volumes, inertias, bounds, fromto, fluid."""

from __future__ import annotations

import math

import numpy as np

from jaxsim.mjcf import spatial
from jaxsim.types import GeomType

MAXVAL = 1e10
GEOM_NSIZE = {GeomType.PLANE: 3, GeomType.HFIELD: 0, GeomType.SPHERE: 1, GeomType.CAPSULE: 2,
              GeomType.ELLIPSOID: 3, GeomType.CYLINDER: 2, GeomType.BOX: 3, GeomType.MESH: 0,
              GeomType.SDF: 0}


def geom_volume(gtype: int, size, shell: bool, mesh=None) -> float:
    if gtype in (GeomType.MESH, GeomType.SDF):
        return mesh.volume
    r = size[0]
    if gtype == GeomType.SPHERE:
        return 4 * math.pi * r**2 if shell else 4 * math.pi * r**3 / 3
    if gtype == GeomType.CAPSULE:
        h = 2 * size[1]
        return (4 * math.pi * r * r + 2 * math.pi * r * h) if shell else \
            math.pi * (r * r * h + 4 * r**3 / 3)
    if gtype == GeomType.CYLINDER:
        h = 2 * size[1]
        return (2 * math.pi * r * r + 2 * math.pi * r * h) if shell else math.pi * r * r * h
    if gtype == GeomType.ELLIPSOID:
        if shell:
            p = 1.6075
            t = (size[0] * size[1]) ** p + (size[1] * size[2]) ** p + (size[2] * size[0]) ** p
            return 4 * math.pi * (t / 3) ** (1 / p)
        return 4 * math.pi * size[0] * size[1] * size[2] / 3
    if gtype in (GeomType.BOX, GeomType.HFIELD):
        if shell:
            return 8 * (size[0] * size[1] + size[1] * size[2] + size[2] * size[0])
        return 8 * size[0] * size[1] * size[2]
    return 0.0


def geom_inertia(gtype: int, size, mass: float, shell: bool, mesh=None) -> np.ndarray:
    """Principal inertia of a geom of the given mass (MuJoCo's formulas, incl. shells)."""
    if gtype in (GeomType.MESH, GeomType.SDF):
        b = mesh.boxsz
        return mass * np.array([b[1]**2 + b[2]**2, b[0]**2 + b[2]**2, b[0]**2 + b[1]**2]) / 3
    r = size[0]
    if gtype == GeomType.SPHERE:
        v = 2 * mass * r * r / (3 if shell else 5)
        return np.array([v, v, v])
    if gtype == GeomType.CAPSULE:
        hh, h = size[1], 2 * size[1]
        if not shell:
            ms = mass * 4 * r / (4 * r + 3 * h)
            mc = mass - ms
            ixy = mc * (3 * r * r + h * h) / 12
            iz = mc * r * r / 2
            si = 2 * ms * r * r / 5
            ixy += si + ms * h * (3 * r + 2 * h) / 8
            return np.array([ixy, ixy, iz + si])
        a_s, a_c = 4 * math.pi * r * r, 2 * math.pi * r * h
        ms = mass * a_s / (a_s + a_c)
        mc = mass - ms
        ixy = mc * (6 * r * r + h * h) / 12
        iz = mc * r * r
        si = 2 * ms * r * r / 3
        com, pos = r / 2, hh + r / 2
        ixy += si + ms * (pos * pos - com * com)
        return np.array([ixy, ixy, iz + si])
    if gtype == GeomType.CYLINDER:
        hh, h = size[1], 2 * size[1]
        if not shell:
            ixy = mass * (3 * r * r + h * h) / 12
            return np.array([ixy, ixy, mass * r * r / 2])
        a_d, a_c = math.pi * r * r, 2 * math.pi * r * h
        md = mass * a_d / (2 * a_d + a_c)
        mc = mass - 2 * md
        ixy = mc * (6 * r * r + h * h) / 12
        iz = mc * r * r
        idx = md * r * r / 4 + md * hh * hh
        idz = md * r * r / 2
        return np.array([ixy + 2 * idx, ixy + 2 * idx, iz + 2 * idz])
    if gtype == GeomType.ELLIPSOID:
        s0, s1, s2 = size[0] ** 2, size[1] ** 2, size[2] ** 2
        if not shell:
            return mass * np.array([s1 + s2, s0 + s2, s0 + s1]) / 5
        eps = 1e-6
        va = 4 * math.pi * size[0] * size[1] * size[2] / 3
        ae, be, ce = size[0] + eps, size[1] + eps, size[2] + eps
        vb = 4 * math.pi * ae * be * ce / 3
        dens = mass / (vb - va)
        ia = va * dens * np.array([s1 + s2, s0 + s2, s0 + s1]) / 5
        ib = vb * dens * np.array([be * be + ce * ce, ae * ae + ce * ce, ae * ae + be * be]) / 5
        return ib - ia
    if gtype in (GeomType.BOX, GeomType.HFIELD):
        s0, s1, s2 = size[0] ** 2, size[1] ** 2, size[2] ** 2
        if not shell:
            return mass * np.array([s1 + s2, s0 + s2, s0 + s1]) / 3
        lx, ly, lz = 2 * size[0], 2 * size[1], 2 * size[2]
        a0, a1, a2 = lx * ly, ly * lz, lz * lx
        at = 2 * (a0 + a1 + a2)
        m0, m1, m2 = mass * a0 / at, mass * a1 / at, mass * a2 / at
        ix = m0 * ly * ly / 12 + m1 * (ly * ly + lz * lz) / 12 + m2 * lz * lz / 12
        iy = m0 * lx * lx / 12 + m1 * lz * lz / 12 + m2 * (lx * lx + lz * lz) / 12
        iz = m0 * (lx * lx + ly * ly) / 12 + m1 * ly * ly / 12 + m2 * lx * lx / 12
        return 2 * np.array([m0 * s2 + m2 * s1 + ix, m0 * s2 + m1 * s0 + iy,
                             m1 * s0 + m2 * s1 + iz])
    return np.zeros(3)


def geom_rbound(gtype: int, size, hfield=None, mesh=None) -> float:
    if gtype == GeomType.HFIELD:
        hs = hfield
        return math.sqrt(hs[0] ** 2 + hs[1] ** 2 + max(hs[2] ** 2, hs[3] ** 2))
    if gtype == GeomType.SPHERE:
        return size[0]
    if gtype == GeomType.CAPSULE:
        return size[0] + size[1]
    if gtype == GeomType.CYLINDER:
        return math.sqrt(size[0] ** 2 + size[1] ** 2)
    if gtype == GeomType.ELLIPSOID:
        return max(size[0], size[1], size[2])
    if gtype == GeomType.BOX:
        return math.sqrt(size[0] ** 2 + size[1] ** 2 + size[2] ** 2)
    if gtype in (GeomType.MESH, GeomType.SDF):
        aamm = mesh.aamm
        h = np.maximum(np.abs(aamm[:3]), np.abs(aamm[3:]))
        return float(math.sqrt(h[0] ** 2 + h[1] ** 2 + h[2] ** 2))
    return 0.0


def geom_aabb(gtype: int, size, hfield=None, mesh=None) -> np.ndarray:
    if gtype == GeomType.HFIELD:
        aamm = [-hfield[0], -hfield[1], -hfield[3], hfield[0], hfield[1], hfield[2]]
    elif gtype == GeomType.SPHERE:
        aamm = [-size[0]] * 3 + [size[0]] * 3
    elif gtype == GeomType.CAPSULE:
        aamm = [-size[0], -size[0], -size[0] - size[1], size[0], size[0], size[0] + size[1]]
    elif gtype == GeomType.CYLINDER:
        aamm = [-size[0], -size[0], -size[1], size[0], size[0], size[1]]
    elif gtype in (GeomType.MESH, GeomType.SDF):
        aamm = list(mesh.aamm)
    elif gtype == GeomType.PLANE:
        aamm = [-MAXVAL, -MAXVAL, -MAXVAL, MAXVAL, MAXVAL, 0.0]
    else:
        aamm = [-size[0], -size[1], -size[2], size[0], size[1], size[2]]
    aamm = np.asarray(aamm, dtype=np.float64)
    return np.concatenate([(aamm[3:] + aamm[:3]) / 2, (aamm[3:] - aamm[:3]) / 2])


def fromto(a, gtype: int, size: np.ndarray, pos):
    """pos, quat, size from a `fromto` attribute (capsule, cylinder, ellipsoid, box)."""
    if gtype not in (GeomType.CAPSULE, GeomType.CYLINDER, GeomType.ELLIPSOID, GeomType.BOX):
        raise a.error("fromto requires capsule, cylinder, box or ellipsoid", "fromto")
    if np.any(pos != 0):
        raise a.error("both pos and fromto defined", "fromto")
    ft = a["fromto"]
    vec, n = spatial.normvec(ft[:3] - ft[3:])
    size = size.copy()
    size[1] = n / 2
    if size[1] < spatial.EPS:
        raise a.error("fromto points too close", "fromto")
    if gtype in (GeomType.ELLIPSOID, GeomType.BOX):
        size[2] = size[1]
        size[1] = size[0]
    return (ft[:3] + ft[3:]) / 2, spatial.z2quat(vec), size


def check_size(a, gtype: int, size) -> None:
    if gtype == GeomType.PLANE:
        if size[2] <= 0:
            raise a.error("plane size(3) must be positive", "size")
        return
    for i in range(GEOM_NSIZE[gtype]):
        if size[i] <= 0:
            raise a.error(f"size {i} must be positive", "size")


def _kronrod_table():
    """15-point Gauss-Kronrod nodes on [0, 1], mapped by l = x^3/(1-x)^2 (with dl/dx), and
    weights rounded to 8 decimals as in MuJoCo's compiler, so kappa matches it to rounding."""
    xk = np.array([0.991455371120812639, 0.949107912342758525, 0.864864423359769073,
                   0.741531185599394440, 0.586087235467691130, 0.405845151377397167,
                   0.207784955007898468, 0.0])
    wk = np.array([0.022935322010529225, 0.063092092629978553, 0.104790010322250184,
                   0.140653259715525919, 0.169004726639267903, 0.190350578064785410,
                   0.204432940075298892, 0.209482141084727828])
    x = np.round(0.5 * (np.concatenate([-xk[:-1], xk[::-1]]) + 1.0), 8)
    w = np.round(0.5 * np.concatenate([wk[:-1], wk[::-1]]), 8)
    lam = x**3 / (1 - x) ** 2
    dlam = x**2 * (3 - x) / (1 - x) ** 3
    return lam, dlam, w


_KRONROD = _kronrod_table()


def _added_mass_kappa(dx: float, dy: float, dz: float) -> float:
    """Added-mass kappa integral of the ellipsoid fluid model (non-dimensionalised)."""
    lam_t, dlam, w = _KRONROD
    ix, iy, iz = 1 / (dx * dx), 1 / (dy * dy), 1 / (dz * dz)
    scale = (dx**3 * dy * dz) ** 0.4
    lam = scale * lam_t
    denom = (1 + lam * ix) * np.sqrt((1 + lam * ix) * (1 + lam * iy) * (1 + lam * iz))
    return float(np.sum(scale * dlam / denom * w) * ix)


def fluid_coefs(gtype: int, size, coefs) -> np.ndarray:
    if gtype == GeomType.SPHERE:
        dx = dy = dz = size[0]
    elif gtype == GeomType.CAPSULE:
        dx = dy = size[0]
        dz = size[1] + size[0]
    elif gtype == GeomType.CYLINDER:
        dx = dy = size[0]
        dz = size[1]
    else:
        dx, dy, dz = size
    vol = 4.0 / 3.0 * math.pi * dx * dy * dz
    kx = _added_mass_kappa(dx, dy, dz)
    ky = _added_mass_kappa(dy, dz, dx)
    kz = _added_mass_kappa(dz, dx, dy)
    eps = spatial.EPS
    ixf = (dy * dy - dz * dz) ** 2 * abs(kz - ky) / max(
        eps, abs(2 * (dy * dy - dz * dz) + (dy * dy + dz * dz) * (ky - kz)))
    iyf = (dz * dz - dx * dx) ** 2 * abs(kx - kz) / max(
        eps, abs(2 * (dz * dz - dx * dx) + (dz * dz + dx * dx) * (kz - kx)))
    izf = (dx * dx - dy * dy) ** 2 * abs(ky - kx) / max(
        eps, abs(2 * (dx * dx - dy * dy) + (dx * dx + dy * dy) * (kx - ky)))
    vm = [vol * k / max(eps, 2 - k) for k in (kx, ky, kz)]
    vi = [vol * f / 5 for f in (ixf, iyf, izf)]
    c = np.asarray(coefs, dtype=np.float64)
    return np.array([1.0, c[0], c[1], c[2], c[3], c[4], *vm, *vi])


