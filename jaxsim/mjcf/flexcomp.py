"""<flexcomp> expanded at the XML level, as MuJoCo's flexcomp builder does it.

A flexcomp generates points and elements (a grid, a box surface or volume, a mesh or GMSH
file, or given directly), then, unless it is rigid, one body per free point (three slide
joints, or one radial slider, or two planar sliders) named `<name>_<i>`, with mass
`mass / npoint` and diagonal inertia from `inertiabox`. Pinned points stay on the parent
body. The result is written back into the tree as plain `<body>` elements where the
flexcomp was, a `<flex>` in a `<deformable>` section (the generated object, which the
compiler reads like a user-written flex) and, for `<edge equality="true">`, a `<flex>`
equality constraint. Both sections go at the end of the model: MuJoCo reads the body tree
after every other section, so what a flexcomp creates follows the flexes and equalities
written in the file, wherever those stand.
"""

from __future__ import annotations

import math
import types

import numpy as np
from lxml import etree

from jaxsim.mjcf import spatial
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.flex import _list
from jaxsim.mjcf.parse import SRC, Attrs

MINVAL = 1e-15
EPS = 1e-6  # mjEPS
_TYPES = ("grid", "box", "cylinder", "ellipsoid", "square", "disc", "circle", "mesh", "gmsh",
          "direct")
_DOFS = ("full", "radial", "trilinear", "quadratic", "2d")
_EQUALITY = {"false": 0, "true": 1, "vert": 2, "strain": 3}


def _fmt(x: float) -> str:
    return repr(float(x))


def _fmtv(v) -> str:
    return " ".join(_fmt(x) for x in np.asarray(v, float).reshape(-1))


def _ints(el, attr: str) -> list[int]:
    return _list(el, attr, int)


def _floats(el, attr: str) -> list[float]:
    return _list(el, attr)


def _file_path(compiler, fname: str) -> str:
    return fname if not compiler.meshdir or fname.startswith("/") else \
        f"{compiler.meshdir.rstrip('/')}/{fname}"


# ------------------------------------------------------------------------------ generators


def _grid(kind: str, dim: int, count, spacing):
    point, element = [], []
    if dim == 1:
        for ix in range(count[0]):
            if kind == "circle":
                if ix >= count[0] - 1:
                    continue
                theta = 2 * math.pi / (count[0] - 1)
                radius = spacing[0] / math.sin(theta / 2) / 2
                point.append((radius * math.cos(theta * ix), radius * math.sin(theta * ix), 0.0))
                element.append((ix, 0 if ix == count[0] - 2 else ix + 1))
            else:
                point.append((spacing[0] * (ix - 0.5 * (count[0] - 1)), 0.0, 0.0))
                if ix < count[0] - 1:
                    element.append((ix, ix + 1))
    elif dim == 2:
        for ix in range(count[0]):
            for iy in range(count[1]):
                q2t = [[0, 1, 2], [0, 2, 3]]
                p = (spacing[0] * (ix - 0.5 * (count[0] - 1)),
                     spacing[1] * (iy - 0.5 * (count[1] - 1)))
                point.append((p[0], p[1], 0.0))
                if kind == "disc" and ((p[0] < -EPS and p[1] > -EPS)
                                       or (p[0] > -EPS and p[1] < -EPS)):
                    q2t[0][2] = 3
                    q2t[1][0] = 1
                if ix < count[0] - 1 and iy < count[1] - 1:
                    c2, c1 = count[2], count[1]
                    vert = [c2 * c1 * ix + c2 * iy, c2 * c1 * (ix + 1) + c2 * iy,
                            c2 * c1 * (ix + 1) + c2 * (iy + 1), c2 * c1 * ix + c2 * (iy + 1)]
                    for s in range(2):
                        element.append(tuple(vert[v] for v in q2t[s]))
    else:
        tets = ((0, 3, 1, 7), (0, 1, 4, 7), (1, 3, 2, 7), (1, 2, 6, 7), (1, 5, 4, 7),
                (1, 6, 5, 7))
        c0, c1, c2 = count
        for ix in range(c0):
            for iy in range(c1):
                for iz in range(c2):
                    point.append((spacing[0] * (ix - 0.5 * (c0 - 1)),
                                  spacing[1] * (iy - 0.5 * (c1 - 1)),
                                  spacing[2] * (iz - 0.5 * (c2 - 1))))
                    if ix < c0 - 1 and iy < c1 - 1 and iz < c2 - 1:
                        corners = ((0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0),
                                   (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1))
                        vert = [c2 * c1 * (ix + a) + c2 * (iy + b) + iz + c
                                for a, b, c in corners]
                        for t in tets:
                            element.append(tuple(vert[v] for v in t))
    return point, element


def _box_id(count, ix, iy, iz) -> int:
    c0, c1, c2 = count
    if iz == 0:
        return ix * c1 + iy + 1
    if iz == c2 - 1:
        return c0 * c1 + ix * c1 + iy + 1
    if iy == 0:
        return 2 * c0 * c1 + ix * (c2 - 2) + iz
    if iy == c1 - 1:
        return 2 * c0 * c1 + c0 * (c2 - 2) + ix * (c2 - 2) + iz
    if ix == 0:
        return 2 * c0 * c1 + 2 * c0 * (c2 - 2) + (iy - 1) * (c2 - 2) + iz
    return (2 * c0 * c1 + 2 * c0 * (c2 - 2) + (c1 - 2) * (c2 - 2) + (iy - 1) * (c2 - 2) + iz)


def _box_project(kind: str, count, spacing, ix, iy, iz):
    pos = np.array([2.0 * ix / (count[0] - 1) - 1, 2.0 * iy / (count[1] - 1) - 1,
                    2.0 * iz / (count[2] - 1) - 1])
    size = 0.5 * np.asarray(spacing, float) * (np.asarray(count) - 1)
    if kind == "box":
        return pos * size
    if kind == "cylinder":
        L0 = max(abs(pos[0]), abs(pos[1]))
        n = math.hypot(pos[0], pos[1])
        xy = pos[:2] / n if n >= MINVAL else pos[:2]
        return np.array([xy[0] * size[0] * L0, xy[1] * size[1] * L0, pos[2] * size[2]])
    n = float(np.linalg.norm(pos))
    unit = pos / n if n >= MINVAL else pos
    return unit * size


def _box(kind: str, dim: int, count, spacing):
    c0, c1, c2 = count
    point, element = [], []
    if dim == 3:
        point.append((0.0, 0.0, 0.0))
    idx = {}

    def add(ix, iy, iz):
        idx[(ix, iy, iz)] = len(point) - (1 if dim == 3 else 0)
        point.append(tuple(_box_project(kind, count, spacing, ix, iy, iz)))

    # a surface (dim 2) is open at the top, as MuJoCo builds it
    open_ = dim == 2
    for iz in range(0, c2, max(c2 - 1, 1)):
        for ix in range(c0):
            for iy in range(c1):
                if not (open_ and iz != 0):
                    add(ix, iy, iz)
    for iy in range(0, c1, max(c1 - 1, 1)):
        for ix in range(c0):
            for iz in range(c2):
                if iz > 0 and (open_ or iz < c2 - 1):
                    add(ix, iy, iz)
    for ix in range(0, c0, max(c0 - 1, 1)):
        for iy in range(c1):
            for iz in range(c2):
                if iz > 0 and (open_ or iz < c2 - 1) and 0 < iy < c1 - 1:
                    add(ix, iy, iz)

    def bid(ix, iy, iz):
        return _box_id(count, ix, iy, iz)

    def lin(ix, iy, iz):
        return idx[(ix, iy, iz)]

    for iz in range(0, c2, max(c2 - 1, 1)):
        for ix in range(c0):
            for iy in range(c1):
                if open_ and iz != 0:
                    continue
                if ix < c0 - 1 and iy < c1 - 1:
                    if dim == 3:
                        element.append((0, bid(ix, iy, iz), bid(ix + 1, iy, iz),
                                        bid(ix + 1, iy + 1, iz)))
                        element.append((0, bid(ix, iy, iz), bid(ix, iy + 1, iz),
                                        bid(ix + 1, iy + 1, iz)))
                    else:
                        s1, s2 = (1, 0) if iz == 0 else (0, 1)
                        element.append((lin(ix, iy, iz), lin(ix + 1, iy + s1, iz),
                                        lin(ix + 1, iy + s2, iz)))
                        element.append((lin(ix, iy, iz), lin(ix + s2, iy + 1, iz),
                                        lin(ix + s1, iy + 1, iz)))
    for iy in range(0, c1, max(c1 - 1, 1)):
        for ix in range(c0):
            for iz in range(c2):
                if ix < c0 - 1 and iz < c2 - 1:
                    if dim == 3:
                        element.append((0, bid(ix, iy, iz), bid(ix + 1, iy, iz),
                                        bid(ix + 1, iy, iz + 1)))
                        element.append((0, bid(ix, iy, iz), bid(ix, iy, iz + 1),
                                        bid(ix + 1, iy, iz + 1)))
                    else:
                        ix0, dx = (ix, 1) if iy == 0 else (ix + 1, -1)
                        element.append((lin(ix0, iy, iz), lin(ix0 + dx, iy, iz),
                                        lin(ix0 + dx, iy, iz + 1)))
                        element.append((lin(ix0, iy, iz), lin(ix0 + dx, iy, iz + 1),
                                        lin(ix0, iy, iz + 1)))
    for ix in range(0, c0, max(c0 - 1, 1)):
        for iy in range(c1):
            for iz in range(c2):
                if iy < c1 - 1 and iz < c2 - 1:
                    if dim == 3:
                        element.append((0, bid(ix, iy, iz), bid(ix, iy + 1, iz),
                                        bid(ix, iy + 1, iz + 1)))
                        element.append((0, bid(ix, iy, iz), bid(ix, iy, iz + 1),
                                        bid(ix, iy + 1, iz + 1)))
                    else:
                        iy0, dy = (iy, 1) if ix != 0 else (iy + 1, -1)
                        element.append((lin(ix, iy0, iz), lin(ix, iy0 + dy, iz),
                                        lin(ix, iy0 + dy, iz + 1)))
                        element.append((lin(ix, iy0, iz), lin(ix, iy0 + dy, iz + 1),
                                        lin(ix, iy0, iz + 1)))
    return point, element


def _dedup(vert: np.ndarray, face: np.ndarray):
    """Repeated vertices merged (first occurrence keeps its place), faces renumbered."""
    key = {}
    remap = np.zeros(len(vert), int)
    for i, v in enumerate(map(tuple, vert)):
        remap[i] = key.setdefault(v, len(key))
    if len(key) == len(vert):
        return vert, face
    out = np.zeros((len(key), 3))
    for v, i in key.items():
        out[i] = v
    return out, remap[face]


def _mesh(el, a, dim, source, compiler):
    from jaxsim.mjcf import mesh_io

    fname = a["file"] if "file" in a else ""
    if not fname:
        raise MJCFError("File is required", el, "file")
    if fname.lower().endswith(".msh"):
        raise MJCFError("legacy MSH files are not supported in flexcomp", el, "file")
    data = source.read(_file_path(compiler, fname), el, "file")
    try:
        raw = mesh_io.read_mesh_file(data, fname)
    except mesh_io.MeshError as e:
        raise MJCFError(str(e), el, "file") from None
    vert = np.asarray(raw.vert, float).reshape(-1, 3)
    face = np.asarray(raw.face, int).reshape(-1, 3) if raw.face is not None else \
        np.zeros((0, 3), int)
    if raw.line is not None:  # the decoder turns polyline segments into (a, b, b) triangles
        seg = np.asarray(raw.line, int)
        face = np.vstack([face, np.stack([seg[:, 0], seg[:, 1], seg[:, 1]], 1)])
    if not len(face) or not len(vert):
        raise MJCFError("Vertex and face data required", el, "file")
    vert, face = _dedup(vert, face)
    point = [tuple(v) for v in vert]
    if dim == 2:
        return point, [tuple(f) for f in face]
    if dim == 1:
        return point, [(int(f[0]), int(f[1])) for f in face]
    origin = np.asarray(a["origin"], float)
    pts = np.vstack([origin[None], vert])
    element = []
    for f in face:
        t = f + 1
        e1, e2, e3 = pts[t[0]] - origin, pts[t[1]] - origin, pts[t[2]] - origin
        if np.dot(np.cross(e1, e2), e3) < MINVAL:
            continue
        element.append((0, int(t[0]), int(t[1]), int(t[2])))
    return [tuple(p) for p in pts], element


# ------------------------------------------------------------------------------ expansion


def expand_flexcomps(root, compiler, source) -> None:
    """Replaces every <flexcomp> by the bodies, flex and equality it generates."""
    comps = list(root.iter("flexcomp"))
    if not comps:
        return
    deform = etree.Element("deformable")
    equality = etree.Element("equality")
    for fc in comps:
        _expand_one(fc, compiler, source, deform, equality)
    for sec in (deform, equality):  # after every written section (see the docstring)
        if len(sec):
            root.append(sec)


def _expand_one(el, compiler, source, deform, equality) -> None:
    src = el.get(SRC)
    a = Attrs(el, "flexcomp", {k: v for k, v in el.items() if k != SRC})
    parent = el.getparent()
    if parent.tag == "frame":
        # MuJoCo places the generated bodies in the frame's body, without the frame's pose
        raise MJCFError("<flexcomp> inside a <frame> is not supported by jaxsim yet", el)
    pname = "world" if parent.tag == "worldbody" else parent.get("name")
    if not pname:
        raise MJCFError("Parent body must have name", el)
    name = el.get("name", "")
    kind = a["type"] if "type" in a else "grid"
    dof = a["dof"] if "dof" in a else "full"
    dim = int(a["dim"]) if "dim" in a else 2
    radius = float(a["radius"]) if "radius" in a else 0.005
    count = [int(x) for x in a["count"]] if "count" in a else [10, 10, 10]
    spacing = [float(x) for x in a["spacing"]] if "spacing" in a else [0.02] * 3
    scale = np.asarray(a["scale"], float) if "scale" in a else np.ones(3)
    mass = float(a["mass"]) if "mass" in a else 1.0
    inertiabox = float(a["inertiabox"]) if "inertiabox" in a else 0.005
    rigid = bool(a["rigid"]) if "rigid" in a else False
    if dof in ("trilinear", "quadratic"):
        raise MJCFError(f'flexcomp dof="{dof}" (interpolated flex) is not supported by jaxsim '
                        "yet", el, "dof")
    for child in el.iterchildren("plugin"):
        raise MJCFError("flexcomp plugins are not supported by jaxsim", child)
    edge = next(el.iterchildren("edge"), None)
    eqkind = _EQUALITY[edge.get("equality", "false")] if edge is not None else 0
    if eqkind in (2, 3):
        raise MJCFError(f'flex equality "{edge.get("equality")}" is not supported by jaxsim yet',
                        edge, "equality")
    contact = next(el.iterchildren("contact"), None)
    if contact is not None and contact.get("internal") is not None:
        # MuJoCo 4's schema no longer has it on a flexcomp's contact
        raise MJCFError("unrecognized attribute: 'internal'", contact, "internal")
    margin = float(contact.get("margin", 0)) if contact is not None else 0.0

    direct = kind in ("direct", "mesh", "gmsh")
    if dim < 1 or dim > 3:
        raise MJCFError("Invalid dim, must be between 1 and 3", el, "dim")
    for c in count:
        if c < 1 or (dof == "radial" and c < 2 and dim == 3):
            raise MJCFError("Count too small", el, "count")
    if not direct and min(spacing) < 2 * radius + margin:
        raise MJCFError("Spacing must be larger than geometry size", el, "spacing")
    if np.min(scale) < MINVAL:
        raise MJCFError("Scale must be larger than mjMINVAL", el, "scale")
    if mass < MINVAL or inertiabox < MINVAL:
        raise MJCFError("Mass and inertiabox must be larger than mjMINVAL", el, "mass")
    stub = types.SimpleNamespace(compiler=compiler)
    stub.angle = lambda v: v * math.pi / 180.0 if compiler.degree else v
    from jaxsim.mjcf.context import Ctx

    quat = spatial.normvec(Ctx.orientation(stub, a))[0]
    pos = np.asarray(a["pos"], float) if "pos" in a else np.zeros(3)

    if kind in ("grid", "circle"):
        point, element = _grid(kind, dim, count, spacing)
    elif kind in ("box", "cylinder", "ellipsoid"):
        point, element = _box(kind, dim, count, spacing)
    elif kind in ("square", "disc"):
        dim = 2
        point, element = _grid(kind, 2, count, spacing)
        if kind == "disc":
            size = 0.5 * np.asarray(spacing[:2]) * (np.asarray(count[:2]) - 1)
            out = []
            for p in point:
                L0 = max(abs(p[0]), abs(p[1]))
                n = math.hypot(p[0], p[1])
                xy = np.array(p[:2]) / n if n >= MINVAL else np.array(p[:2])
                out.append((xy[0] * size[0] * L0, xy[1] * size[1] * L0, p[2]))
            point = out
    elif kind == "mesh":
        if dim == 3 and "origin" not in a:
            raise MJCFError("origin must be specified for mesh flexcomps if dim=3", el, "origin")
        point, element = _mesh(el, a, dim, source, compiler)
    elif kind == "gmsh":
        from jaxsim.mjcf import gmsh

        fname = a["file"] if "file" in a else ""
        if not fname:
            raise MJCFError("File is required", el, "file")
        pts, elems, dim = gmsh.read_gmsh(source.read(_file_path(compiler, fname), el, "file"),
                                         dim if "dim" in a else None, where=el)
        point = [tuple(p) for p in np.asarray(pts, float)]
        element = [tuple(int(v) for v in e) for e in np.asarray(elems)]
    else:
        point = [tuple(p) for p in np.asarray(_floats(el, "point"), float).reshape(-1, 3)] \
            if len(_floats(el, "point")) % 3 == 0 else None
        if point is None:
            raise MJCFError("Point size must be a multiple of 3", el, "point")
        e = _ints(el, "element")
        if len(e) % (dim + 1):
            raise MJCFError("Element size must be a multiple of dim+1", el, "element")
        element = [tuple(e[i:i + dim + 1]) for i in range(0, len(e), dim + 1)]

    if not point or not element:
        raise MJCFError("Point and element required", el)
    pts = np.asarray(point, float).reshape(-1, 3)
    elem = np.asarray(element, int).reshape(-1, dim + 1)
    npnt = len(pts)
    if elem.min() < 0 or elem.max() >= npnt:
        raise MJCFError("element has a point id out of range", el, "element")
    if direct:
        pts = pts * scale
    R = spatial.quat2mat(quat)
    pts = pts @ R.T + pos

    # pins
    pinned = np.full(npnt, rigid)
    if not rigid:
        for pin in el.iterchildren("pin"):
            for i in _ints(pin, "id"):
                if not 0 <= i < npnt:
                    raise MJCFError("pinid out of range", pin, "id")
                pinned[i] = True
            r = _ints(pin, "range")
            if len(r) % 2:
                raise MJCFError("Pin range number must be multiple of 2", pin, "range")
            for i in range(0, len(r), 2):
                if not (0 <= r[i] < npnt and 0 <= r[i + 1] < npnt):
                    raise MJCFError("pinrange out of range", pin, "range")
                pinned[r[i]:r[i + 1] + 1] = True
            g = _ints(pin, "grid")
            gr = _ints(pin, "gridrange")
            if (g or gr) and kind != "grid":
                raise MJCFError("Pin grid(range) can only be used with grid or interpolated",
                                pin)
            if (g or gr) and dim == 1:
                raise MJCFError("Pin grid(range) cannot be used with dim=1", pin)
            if len(g) % dim:
                raise MJCFError("Pin grid number must be multiple of dim", pin, "grid")
            if len(gr) % (2 * dim):
                raise MJCFError("Pin grid range number of must be multiple of 2*dim", pin,
                                "gridrange")

            def gid(ix):
                return ix[0] * count[1] + ix[1] if dim == 2 else \
                    ix[0] * count[1] * count[2] + ix[1] * count[2] + ix[2]
            for i in range(0, len(g), dim):
                ix = g[i:i + dim]
                if any(not 0 <= ix[k] < count[k] for k in range(dim)):
                    raise MJCFError("pingrid out of range", pin, "grid")
                pinned[gid(ix)] = True
            for i in range(0, len(gr), 2 * dim):
                lo, hi = gr[i:i + dim], gr[i + dim:i + 2 * dim]
                if any(not 0 <= v < count[k % dim] for k, v in enumerate(gr[i:i + 2 * dim])):
                    raise MJCFError("pingridrange out of range", pin, "gridrange")
                for ix in np.ndindex(*[hi[k] - lo[k] + 1 for k in range(dim)]):
                    pinned[gid([lo[k] + ix[k] for k in range(dim)])] = True
        if dof == "radial":
            pinned[0] = True
        if pinned.all():
            rigid = True

    # points no element uses are dropped (direct, mesh and gmsh)
    if direct:
        used = np.zeros(npnt, bool)
        used[elem.reshape(-1)] = True
        if not used.all():
            newid = np.cumsum(used) - 1
            elem = newid[elem]
            pts, pinned = pts[used], pinned[used]
            npnt = len(pts)

    if not rigid and not pinned.any() and any(
            c.tag in ("joint", "freejoint") for c in parent.iter()
            if c.getparent() is parent or (c.getparent().tag == "frame"
                                           and c.getparent().getparent() is parent)):
        raise MJCFError(f"body '{pname}' has joints but no flex vertices/nodes are pinned to it",
                        el)

    # the flex object
    fx = etree.SubElement(deform, "flex")
    fx.set(SRC, src)
    if name:
        fx.set("name", name)
    fx.set("dim", str(dim))
    fx.set("radius", _fmt(radius))
    fx.set("element", " ".join(str(int(v)) for v in elem.reshape(-1)))
    for k in ("group", "material", "rgba", "flatskin"):
        if el.get(k) is not None:
            fx.set(k, el.get(k))
    for sub in ("contact", "elasticity"):
        c = next(el.iterchildren(sub), None)
        if c is not None:
            fx.append(_copy(c, "contact" if sub == "contact" else "elasticity"))
    if edge is not None and (edge.get("stiffness") is not None or edge.get("damping") is not None):
        e2 = etree.SubElement(fx, "edge")
        e2.set(SRC, edge.get(SRC, src))
        for k in ("stiffness", "damping"):
            if edge.get(k) is not None:
                e2.set(k, edge.get(k))

    if rigid:
        fx.set("body", pname)
        fx.set("vertex", _fmtv(pts))
    else:
        bodymass = mass / npnt
        bodyinertia = bodymass * (2.0 * inertiabox * inertiabox) / 3.0
        vbody, vert = [], np.zeros_like(pts)
        index = list(parent).index(el)
        new = []
        for i in range(npnt):
            if pinned[i]:
                vbody.append(pname)
                vert[i] = pts[i]
                continue
            b = etree.Element("body")
            b.set(SRC, src)
            bname = f"{name}_{i}"
            b.set("name", bname)
            b.set("pos", _fmtv(pts[i]))
            inertial = etree.SubElement(b, "inertial")
            inertial.set(SRC, src)
            inertial.set("pos", "0 0 0")
            inertial.set("mass", _fmt(bodymass))
            inertial.set("diaginertia", _fmtv([bodyinertia] * 3))
            axes = ()
            if dof == "radial":
                axes = (pts[i] / max(np.linalg.norm(pts[i]), MINVAL),)
            elif dof == "full":
                axes = np.eye(3)
            elif dof == "2d":
                axes = np.eye(3)[:2]
            for ax in axes:
                j = etree.SubElement(b, "joint")
                j.set(SRC, src)
                j.set("type", "slide")
                j.set("pos", "0 0 0")
                j.set("axis", _fmtv(ax))
            new.append(b)
            vbody.append(bname)
        fx.set("body", " ".join(vbody))
        if pinned.any():
            fx.set("vertex", _fmtv(vert))
        for k, b in enumerate(new):
            parent.insert(index + 1 + k, b)
    if eqkind == 1:
        eq = etree.SubElement(equality, "flex")
        eq.set(SRC, edge.get(SRC, src))
        eq.set("flex", name)
        for k in ("solref", "solimp"):
            if edge.get(k) is not None:
                eq.set(k, edge.get(k))
    el.getparent().remove(el)


def _copy(el, tag: str):
    out = etree.Element(tag)
    for k, v in el.items():
        out.set(k, v)
    return out
