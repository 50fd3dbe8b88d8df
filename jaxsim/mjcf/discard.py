"""`<compiler discardvisual="true">`: drop what only rendering uses, as MuJoCo's compiler does.

A geom is visual when it can collide with nothing (contype = conaffinity = 0) and nothing
refers to it: no `<pair>`, tendon wrap, sensor (object or reference) or `<tuple>`. A mesh is
visual when no remaining geom uses it and no sensor or tuple names it. Visual geoms and
meshes are removed, and every material and texture. A body keeps the inertia its geoms gave
it before the removal (MuJoCo turns it into an explicit inertial), so the physics is that of
the full model.

We do what MuJoCo does, on the expanded XML tree: compile a copy once to learn the geom
properties, references and body inertias, then edit the tree (remove the elements, add the
`<inertial>` elements) and let the caller compile the result.
"""

from __future__ import annotations

import copy

import numpy as np
from lxml import etree

from jaxsim.mjcf.parse import SRC
from jaxsim.types import GeomType, ObjType, WrapType


def _visual(out: dict, ngeom: int, nmesh: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of the visual geoms and meshes of a compiled (undiscarded) model."""
    ref = np.zeros(ngeom, bool)
    ref_mesh = np.zeros(nmesh, bool)
    for k in ("pair_geom1", "pair_geom2"):
        ref[np.asarray(out.get(k, []), int)] = True
    wt = np.asarray(out.get("wrap_type", []), int)
    wid = np.asarray(out.get("wrap_objid", []), int)
    geomwrap = (wt == WrapType.SPHERE) | (wt == WrapType.CYLINDER)
    ref[wid[geomwrap]] = True
    for typ_k, id_k in (("sensor_objtype", "sensor_objid"), ("sensor_reftype", "sensor_refid"),
                        ("tuple_objtype", "tuple_objid")):
        typ = np.asarray(out.get(typ_k, []), int)
        oid = np.asarray(out.get(id_k, []), int)
        ref[oid[typ == ObjType.GEOM]] = True
        ref_mesh[oid[typ == ObjType.MESH]] = True
    contype = np.asarray(out["geom_contype"], int)
    conaff = np.asarray(out["geom_conaffinity"], int)
    geom_visual = (contype == 0) & (conaff == 0) & ~ref
    stays = ~geom_visual & (np.asarray(out["geom_type"], int) == GeomType.MESH)
    used = np.asarray(out["geom_dataid"], int)[stays]
    mesh_visual = ~ref_mesh
    mesh_visual[used] = False
    return geom_visual, mesh_visual


def _fmt(v) -> str:
    return " ".join(repr(float(x)) for x in np.ravel(v))


def discard_visual(root, compile_copy) -> bool:
    """Edits the expanded tree `root` in place; returns True when a body got an explicit
    inertial (MuJoCo then treats inertiafromgeom="true" as "auto").

    `compile_copy(root_copy)` compiles a tree (without discarding) and returns its Ctx.
    """
    root1 = copy.deepcopy(root)
    ctx = compile_copy(root1)
    out = ctx.out
    ngeom, nmesh = int(out["ngeom"]), int(out.get("nmesh", 0))
    geom_visual, mesh_visual = _visual(out, ngeom, nmesh)
    # the elements of the copy correspond one to one, in document order, to the original's
    index = {id(e): i for i, e in enumerate(root1.iter())}
    orig = list(root.iter())

    def original(el):
        return orig[index[id(el)]]

    geoms = ctx.elements[int(ObjType.GEOM)]
    bodies = ctx.elements[int(ObjType.BODY)]
    body_of = np.asarray(out["geom_bodyid"], int)
    explicit_added = False
    for b in sorted(set(body_of[geom_visual].tolist())):
        if b == 0:
            continue
        bel = original(bodies[b])
        if any(c.tag == "inertial" for c in bel.iterchildren()):
            continue
        inert = etree.Element("inertial")
        inert.set("pos", _fmt(out["body_ipos"][b]))
        inert.set("quat", _fmt(out["body_iquat"][b]))
        inert.set("mass", repr(float(out["body_mass"][b])))
        inert.set("diaginertia", _fmt(out["body_inertia"][b]))
        if bodies[b].get(SRC):  # the body's source location, for messages
            inert.set(SRC, bodies[b].get(SRC))
        bel.insert(0, inert)
        explicit_added = True
    for g in np.nonzero(geom_visual)[0]:
        el = original(geoms[g])
        el.getparent().remove(el)
    meshes = ctx.elements[int(ObjType.MESH)]
    for mi in np.nonzero(mesh_visual)[0]:
        el = original(meshes[mi])
        if el.getparent() is not None:
            el.getparent().remove(el)
    for el in list(root.iter("material", "texture")):
        if el.getparent() is not None and el.getparent().tag == "asset":
            el.getparent().remove(el)
    for el in root.iter():
        if isinstance(el.tag, str) and el.tag != "material" and "material" in el.attrib:
            del el.attrib["material"]
    return explicit_added
