"""Flex elasticity constants: the per-element stretch metric and the per-edge bending matrix.

MuJoCo computes both when it compiles a flex with `<elasticity young=...>`, from the
vertex positions at qpos0, and keeps them constant (mjModel.flex_stiffness, flex_bending):

- stretch (tetrahedra, and triangles with elastic2d="stretch" or "both"): linear finite
  elements written on edge lengths. Each edge e of an element has a strain basis B_e, the
  symmetrised outer product of the normals of the two faces (3D) or the in-plane normals of
  the two edges (2D) not touching it, scaled by the element's volume; the element's metric
  is K[e, f] = mu tr(B_e B_f) + lambda tr(B_e) tr(B_f), with the Lame parameters from
  Young's modulus and Poisson's ratio, times the volume (times the thickness in 2D). At run
  time the force is -sum_f (l_e^2 - l0_e^2) K[e, f] d(l_f^2)/dx (jaxsim.flex.elasticity).
- bending (triangles with elastic2d="bend" or "both"): per interior edge, the cotangent
  operator of Wardetzky et al. ("Discrete quadratic curvature energies") over the edge's
  two triangles (4 x 4, scaled by the reference dihedral angle's cosine), plus a
  curved-reference term along the gradient of the volume the edge's stencil spans.

Layouts follow MuJoCo's: 21 entries per element (the upper triangle of the 6 x 6 or 3 x 3
edge metric, row by row, zero padded) and 17 per edge (the 4 x 4 matrix over the edge's
vertices and flaps, row by row, then the curved-reference coefficient).
"""

from __future__ import annotations

import numpy as np

# per element edge: the local vertices of the two faces (3D) or edges (2D) opposite to it
_FACE3 = np.array([(2, 1, 0), (0, 1, 3), (1, 2, 3), (2, 0, 3)])
_EDGE2FACE3 = np.array([(2, 3), (1, 3), (2, 1), (1, 0), (0, 2), (0, 3)])
_FACE2 = np.array([(1, 2), (2, 0), (0, 1)])
_EDGE2FACE2 = np.array([(1, 2), (2, 0), (0, 1)])


def _dot(a, b):
    return np.sum(a * b, axis=-1)


def _metric(basis: np.ndarray, mu: np.ndarray, la: np.ndarray) -> np.ndarray:
    """(nelem, 21) upper triangles of mu tr(B_e B_f) + la tr(B_e) tr(B_f)."""
    ne = basis.shape[1]
    tr = np.trace(basis, axis1=-2, axis2=-1)  # (nelem, ne)
    tree = np.einsum("teij,tfji->tef", basis, basis)
    k = mu[:, None, None] * tree + la[:, None, None] * tr[:, None, :] * tr[:, :, None]
    iu = np.triu_indices(ne)
    out = np.zeros((len(basis), 21))
    out[:, :len(iu[0])] = k[:, iu[0], iu[1]]
    return out


def stretch(xpos: np.ndarray, elem: np.ndarray, dim: int, young: float, poisson: float,
            thickness: float) -> np.ndarray:
    """(nelem, 21) stretch metrics of a flex's triangles (dim 2) or tetrahedra (dim 3).

    xpos: (nvert, 3) vertex positions at qpos0; elem: (nelem, dim + 1) local vertex ids."""
    x = xpos[elem]  # (nelem, nv, 3)
    if dim == 3:
        vol = _dot(np.cross(x[:, 1] - x[:, 0], x[:, 2] - x[:, 0]), x[:, 3] - x[:, 0]) / 6
        face = x[:, _FACE3]  # (nelem, 4, 3, 3)
        normal = np.cross(face[:, :, 1] - face[:, :, 0], face[:, :, 2] - face[:, :, 0])
        nl = normal[:, _EDGE2FACE3[:, 0]]  # (nelem, 6, 3)
        nr = normal[:, _EDGE2FACE3[:, 1]]
        scale = 36 * 2 * vol * vol
        thickness = 1.0
    else:
        vol = np.linalg.norm(np.cross(x[:, 1] - x[:, 0], x[:, 2] - x[:, 0]), axis=-1) / 2
        side = x[:, _FACE2]  # (nelem, 3, 2, 3)
        el = side[:, _EDGE2FACE2[:, 0]]  # (nelem, 3, 2, 3)
        er = side[:, _EDGE2FACE2[:, 1]]
        edge_l = el[:, :, 0] - el[:, :, 1]
        edge_r = er[:, :, 1] - er[:, :, 0]
        n = np.cross(edge_r, edge_l)
        n = n / np.linalg.norm(n, axis=-1, keepdims=True)
        nl = np.cross(n, edge_l)
        nr = np.cross(edge_r, n)
        scale = 8 * vol * vol
    basis = (nl[..., :, None] * nr[..., None, :] + nr[..., :, None] * nl[..., None, :])
    basis = basis / scale[:, None, None, None]
    # MuJoCo 4.0 (its compiled constants): the element's volume (area times thickness in
    # 2D) times the Lame parameters, the second one halved; plane stress in 2D
    size = np.abs(vol) * thickness
    mu = young / (2 * (1 + poisson)) * size
    if dim == 3:
        la = young * poisson / ((1 + poisson) * (1 - 2 * poisson)) * size / 2
    else:
        la = young * poisson / (1 - poisson * poisson) * size / 2
    return _metric(basis, mu, la)


def flaps(elem: np.ndarray) -> np.ndarray:
    """(nedge, 4) per edge of a triangle flex, in edge order: its two vertices (in
    increasing order, as the flex's edge list holds them), then the third vertex of the
    first triangle holding it and of the other one (-1 on the boundary)."""
    out, index = [], {}
    for v in elem:
        for a, b in ((1, 2), (2, 0), (0, 1)):
            key = (min(v[a], v[b]), max(v[a], v[b]))
            third = int(v[(b + 1) % 3])
            if key not in index:
                index[key] = len(out)
                out.append([key[0], key[1], third, -1])
            else:
                out[index[key]][3] = third
    return np.asarray(out, np.int64).reshape(-1, 4)


def _cot(x0, x1, x2):
    e1, e2 = x1 - x0, x2 - x0
    return _dot(e1, e2) / np.linalg.norm(np.cross(e1, e2), axis=-1)


def _area(x0, x1, x2):
    return np.linalg.norm(np.cross(x1 - x0, x2 - x0), axis=-1) / 2


def bending(xpos: np.ndarray, flap: np.ndarray, young: float, poisson: float,
            thickness: float) -> np.ndarray:
    """(nedge, 17) bending coefficients of a triangle flex's edges (zero on the boundary)."""
    out = np.zeros((len(flap), 17))
    inner = flap[:, 3] >= 0
    if not np.any(inner):
        return out
    v = flap[inner]
    x0, x1, x2, x3 = (xpos[v[:, i]] for i in range(4))
    a01, a02 = _cot(x0, x1, x2), _cot(x0, x3, x1)
    a03, a04 = _cot(x1, x2, x0), _cot(x1, x0, x3)
    c = np.stack([a03 + a04, a01 + a02, -(a01 + a03), -(a02 + a04)], -1)
    # MuJoCo 4.0 (its compiled constants): the plate's bending rigidity over the two
    # triangles' area
    rigidity = young * thickness ** 3 / (12 * (1 - poisson * poisson))
    area1, area2 = _area(x0, x1, x2), _area(x1, x0, x3)
    k = rigidity / (area1 + area2)
    e0, e1, e2 = x1 - x0, x2 - x0, x3 - x0
    e3, e4 = x2 - x1, x3 - x1
    t0 = -(a03[:, None] * e1 + a01[:, None] * e3)
    t1 = -(a04[:, None] * e2 + a02[:, None] * e4)
    sqr = _dot(e0, e0)
    cos_theta = -_dot(t0, t1) / sqr
    out[inner, :16] = (c[:, :, None] * c[:, None, :] * cos_theta[:, None, None]
                       * k[:, None, None]).reshape(-1, 16)
    # the curved-reference coefficient (MuJoCo 4.0's, measured from its compiled models):
    # -rigidity sin(theta0) / (h1 h2 (h1 + h2) / 2), with theta0 the reference dihedral
    # angle and h1, h2 the triangles' heights over the edge; sin(theta0) = 6V / (l h1 h2)
    # with 6V the signed volume spanned by the edge and the two flaps
    length = np.sqrt(sqr)
    h1, h2 = 2 * area1 / length, 2 * area2 / length
    out[inner, 16] = (-2 * rigidity * _dot(np.cross(e0, e1), e2)
                      / (length * h1 * h1 * h2 * h2 * (h1 + h2)))
    return out
