"""Assets: meshes, height fields, textures and materials (textures and materials: names and
colours only; they carry no physics)."""

from __future__ import annotations

import os

import numpy as np

from jaxsim.mjcf import mesh as meshlib
from jaxsim.mjcf import mesh_io
from jaxsim.mjcf.context import Ctx
from jaxsim.mjcf.errors import MJCFError
from jaxsim.types import GeomType, ObjType

_FIT_TYPES = {GeomType.SPHERE: "sphere", GeomType.CAPSULE: "capsule",
              GeomType.CYLINDER: "cylinder", GeomType.ELLIPSOID: "ellipsoid", GeomType.BOX: "box"}


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path.replace("\\", "/")))[0]


class MeshAsset:
    """A compiled mesh plus what the tree pass needs (pos, quat, volume, boxsz, aamm)."""

    def __init__(self, processed, material: str | None, args: dict, raw, el):
        self.processed = processed
        self.material = material
        self.args = args
        self.raw = raw
        self.el = el

    def __getattr__(self, name):
        return getattr(self.processed, name)

    def fit_geom(self, gtype: int, size, fitscale: float, fitaabb: bool):
        try:
            return meshlib.fit_geom(self.processed, _FIT_TYPES[GeomType(gtype)],
                                    fitaabb=fitaabb, fitscale=float(fitscale))
        except (mesh_io.MeshError, KeyError) as e:
            raise MJCFError(f"cannot fit geom to mesh: {e}", self.el) from None


def _mesh_path(ctx: Ctx, fname: str) -> str:
    d = ctx.compiler.meshdir
    return fname if os.path.isabs(fname) or not d else os.path.join(d, fname)


def _compile_mesh(ctx: Ctx, el, cls: str):
    a = ctx.attrs(el, "mesh", cls)
    name = el.get("name")
    if not name and "file" in a:
        name = _stem(a["file"])
    if not name:
        raise MJCFError("empty name in mesh", el, "name")
    for bad in ("plugin",):
        for _ in el.iterchildren(bad):
            raise MJCFError("mesh plugins are not supported by jaxsim", el)
    try:
        if "builtin" in a:
            raw = meshlib.builtin_mesh(a["builtin"], a.raw("params", ""))
        elif "file" in a:
            data = ctx.source.read(_mesh_path(ctx, a["file"]), el, "file")
            raw = mesh_io.read_mesh_file(data, a["file"], a.raw("content_type"))
        elif "vertex" in a:
            raw = mesh_io.raw_from_user(*(a[k] if k in a else None for k in
                                          ("vertex", "face", "normal", "texcoord")))
        else:
            raise MJCFError("mesh needs a file, vertex data or a builtin", el)
        args = dict(scale=np.asarray(a["scale"], float), refpos=np.asarray(a["refpos"], float),
                    refquat=np.asarray(a["refquat"], float),
                    # MuJoCo always gives builtin plates shell inertia
                    inertia_mode="shell" if a.raw("builtin") == "plate" else a["inertia"],
                    maxhullvert=int(a["maxhullvert"]), name=name)
        processed = meshlib.process_mesh(raw, need_hull=False, **args)
    except mesh_io.MeshError as e:
        raise MJCFError(f"mesh '{name}': {e}", el) from None
    except NotImplementedError as e:
        raise MJCFError(f"mesh '{name}': {e}", el) from None
    mat = a.raw("material")
    return name, MeshAsset(processed, mat, args, raw, el)


def _compile_hfield(ctx: Ctx, el):
    a = ctx.attrs(el, "hfield", kind="")
    name = el.get("name") or (_stem(a["file"]) if "file" in a else "")
    if not name:
        raise MJCFError("empty name in height field", el, "name")
    size = np.asarray(a["size"], float)
    if np.any(size <= 0):
        raise a.error("size parameter is not positive in hfield", "size")
    nrow, ncol = int(a["nrow"]), int(a["ncol"])
    if "file" in a:
        if nrow or ncol or "elevation" in a:
            raise a.error("hfield specified from file and manually", "file")
        from jaxsim.mjcf import image

        fname = a["file"]
        path = fname if os.path.isabs(fname) or not ctx.compiler.meshdir else \
            os.path.join(ctx.compiler.meshdir, fname)
        data = ctx.source.read(path, el, "file")
        # an explicit content type overrides the file extension, as in MuJoCo
        ctype = a.raw("content_type") or ("image/png" if fname.lower().endswith(".png")
                                          else "image/vnd.mujoco.hfield")
        if ctype not in ("image/png", "image/vnd.mujoco.hfield"):
            raise a.error(f"unsupported content type: '{ctype}'", "content_type")
        try:
            if ctype == "image/png":
                elev = image.hfield_from_png(data)
            else:
                elev = image.hfield_from_custom(data)
        except ValueError as e:
            raise MJCFError(f"hfield '{name}': {e}", el, "file") from None
        nrow, ncol = elev.shape
        elev = elev.reshape(-1).astype(np.float32)
    else:
        if nrow < 1 or ncol < 1:
            raise a.error("hfield not specified", "nrow")
        if nrow < 2 or ncol < 2:
            raise a.error("hfield dimensions must be at least 2", "nrow")
        if "elevation" in a:
            vals = np.asarray([float(x) for x in a.raw("elevation").split()], dtype=np.float32)
            if vals.size != nrow * ncol:
                raise a.error("elevation data length must match nrow*ncol", "elevation")
            # the XML lists rows top to bottom; MuJoCo stores them bottom to top
            elev = vals.reshape(nrow, ncol)[::-1].reshape(-1)
        else:
            elev = np.zeros(nrow * ncol, dtype=np.float32)
    emin, emax = np.float32(np.min(elev)), np.float32(np.max(elev))
    elev = (elev - emin).astype(np.float32)
    if float(emax - emin) > 1e-14:
        elev = (elev / np.float32(emax - emin)).astype(np.float32)
    return name, size, nrow, ncol, elev


def compile_assets(ctx: Ctx) -> None:
    """Registers and compiles <asset> children (meshes need no geom information here)."""
    ctx.meshes = []
    hf_size, hf_nrow, hf_ncol, hf_data = [], [], [], []
    mat_rgba = []
    for section in ctx.root.iterchildren("asset"):
        for el in section:
            tag = el.tag
            if tag == "mesh":
                name, m = _compile_mesh(ctx, el, el.get("class", "main"))
                ctx.add_name(ObjType.MESH, name, el)
                ctx.meshes.append(m)
            elif tag == "hfield":
                name, size, nrow, ncol, elev = _compile_hfield(ctx, el)
                ctx.add_name(ObjType.HFIELD, name, el)
                hf_size.append(size), hf_nrow.append(nrow), hf_ncol.append(ncol)
                hf_data.append(elev)
            elif tag == "texture":
                name = el.get("name") or (_stem(el.get("file")) if el.get("file") else "")
                if not name and el.get("type") != "skybox":
                    raise MJCFError("empty name in texture", el, "name")
                ctx.add_name(ObjType.TEXTURE, name, el)
            elif tag == "material":
                a = ctx.attrs(el, "material", el.get("class", "main"))
                if not el.get("name"):
                    raise MJCFError("empty name in material", el, "name")
                ctx.add_name(ObjType.MATERIAL, el.get("name"), el)
                mat_rgba.append(np.asarray(a["rgba"], float))
            elif tag == "skin":
                # skins are rendering-only (no physics); record the name so ids line up
                ctx.add_name(ObjType.SKIN, el.get("name") or "", el)
            else:  # <model> is handled by expand; anything else is a schema error
                raise MJCFError(f"<{tag}> assets are not supported by jaxsim yet", el)
    for el in ctx.elements[int(ObjType.MATERIAL)]:
        for tex in (el.get("texture"),):
            if tex and tex not in ctx.ids[int(ObjType.TEXTURE)]:
                raise MJCFError(f"unknown texture '{tex}'", el, "texture")
    for m in ctx.meshes:
        if m.material and m.material not in ctx.ids[int(ObjType.MATERIAL)]:
            raise MJCFError(f"unknown material '{m.material}'", m.el, "material")
    nh = len(hf_size)
    ctx.out_hfield_size = hf_size
    ctx.out.update(
        nhfield=nh, nmat=len(mat_rgba),
        hfield_size=np.array(hf_size).reshape(nh, 4),
        hfield_nrow=np.array(hf_nrow, dtype=np.int64), hfield_ncol=np.array(hf_ncol, dtype=np.int64),
        hfield_adr=np.cumsum([0] + [r * c for r, c in zip(hf_nrow, hf_ncol, strict=True)])[:nh].astype(np.int64),
        hfield_data=np.concatenate(hf_data) if hf_data else np.zeros(0),
        nhfielddata=int(sum(r * c for r, c in zip(hf_nrow, hf_ncol, strict=True))),
        mat_rgba=np.array(mat_rgba).reshape(len(mat_rgba), 4),
    )


def finish_meshes(ctx: Ctx) -> None:
    """Builds convex hulls for meshes used by collidable geoms (or pairs), then writes the
    mesh arrays. Needs the geoms (tree pass) and pairs (sections pass)."""
    out = ctx.out
    nmesh = len(ctx.meshes)
    need = np.zeros(nmesh, dtype=bool)
    gtype, dataid = out["geom_type"], out["geom_dataid"]
    collide = (out["geom_contype"] != 0) | (out["geom_conaffinity"] != 0)
    in_pair = np.zeros(len(gtype), dtype=bool)
    for k in ("pair_geom1", "pair_geom2"):
        if k in out and len(out[k]):
            in_pair[np.asarray(out[k])] = True
    for g in range(len(gtype)):
        if gtype[g] == GeomType.MESH and (collide[g] or in_pair[g]):
            need[dataid[g]] = True
    verts, faces, graphs = [], [], []
    vadr, vnum, fadr, fnum, gadr = [], [], [], [], []
    polyadr, polynum, polyvertadr, polyvertnum, polyvert = [], [], [], [], []
    polynormal = []
    pos, quat, scale = [], [], []
    nv = nf = ng = 0
    for i, m in enumerate(ctx.meshes):
        p = m.processed
        if need[i] and p.graph is None:
            try:
                p = meshlib.process_mesh(m.raw, need_hull=True, **m.args)
            except mesh_io.MeshError as e:
                raise MJCFError(f"mesh '{m.args['name']}': {e}", m.el) from None
            m.processed = p
        vadr.append(nv), vnum.append(len(p.vert)), fadr.append(nf), fnum.append(len(p.face))
        verts.append(np.asarray(p.vert, np.float64)), faces.append(np.asarray(p.face))
        if p.graph is not None and len(p.graph):
            gadr.append(ng)
            graphs.append(np.asarray(p.graph))
            ng += len(p.graph)
            polys = p.polygons or []
        else:
            gadr.append(-1)
            polys = []
        polyadr.append(len(polyvertnum)), polynum.append(len(polys))
        for q in polys:
            polyvertadr.append(len(polyvert)), polyvertnum.append(len(q))
            polyvert.extend(q)
        if polys:
            polynormal.append(np.asarray(p.polynormal, np.float64).reshape(len(polys), 3))
        pos.append(p.pos), quat.append(p.quat), scale.append(m.args["scale"])
        nv += len(p.vert)
        nf += len(p.face)
    out.update(
        nmesh=nmesh, nmeshvert=nv, nmeshface=nf, nmeshgraph=ng,
        mesh_vertadr=np.array(vadr, dtype=np.int64), mesh_vertnum=np.array(vnum, dtype=np.int64),
        mesh_faceadr=np.array(fadr, dtype=np.int64), mesh_facenum=np.array(fnum, dtype=np.int64),
        mesh_graphadr=np.array(gadr, dtype=np.int64),
        mesh_vert=np.concatenate(verts).reshape(nv, 3) if verts else np.zeros((0, 3)),
        mesh_face=np.concatenate(faces).reshape(nf, 3) if faces else np.zeros((0, 3), np.int64),
        mesh_graph=np.concatenate(graphs) if graphs else np.zeros(0, dtype=np.int64),
        npoly=len(polyvertnum), npolyvert=len(polyvert),
        mesh_polyadr=np.array(polyadr, dtype=np.int64),
        mesh_polynum=np.array(polynum, dtype=np.int64),
        mesh_polyvertadr=np.array(polyvertadr, dtype=np.int64),
        mesh_polyvertnum=np.array(polyvertnum, dtype=np.int64),
        mesh_polyvert=np.array(polyvert, dtype=np.int64),
        mesh_polynormal=(np.concatenate(polynormal) if polynormal else np.zeros((0, 3))),
        mesh_pos=np.array(pos).reshape(nmesh, 3), mesh_quat=np.array(quat).reshape(nmesh, 4),
        mesh_scale=np.array(scale).reshape(nmesh, 3),
    )
