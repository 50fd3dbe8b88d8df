"""Builds jaxsim Models and States from MuJoCo's, for testing stages without our compiler.

Every Model field is read from the MjModel attribute of the same name; the few that are
laid out differently (statistics, options, names) are converted here.
"""

from __future__ import annotations

import jax.numpy as jnp
import mujoco
import numpy as np

from jaxsim.collision import hfield
from jaxsim.struct import Struct
from jaxsim.types import Model, ObjType, Option, State

# count attribute of each object type, for name lookup (ObjType order)
_NAME_COUNTS = {
    ObjType.BODY: "nbody", ObjType.XBODY: "nbody", ObjType.JOINT: "njnt", ObjType.DOF: "nv",
    ObjType.GEOM: "ngeom", ObjType.SITE: "nsite", ObjType.CAMERA: "ncam",
    ObjType.LIGHT: "nlight", ObjType.FLEX: "nflex", ObjType.MESH: "nmesh",
    ObjType.SKIN: "nskin", ObjType.HFIELD: "nhfield", ObjType.TEXTURE: "ntex",
    ObjType.MATERIAL: "nmat", ObjType.PAIR: "npair", ObjType.EXCLUDE: "nexclude",
    ObjType.EQUALITY: "neq", ObjType.TENDON: "ntendon", ObjType.ACTUATOR: "nu",
    ObjType.SENSOR: "nsensor", ObjType.NUMERIC: "nnumeric", ObjType.TEXT: "ntext",
    ObjType.TUPLE: "ntuple", ObjType.KEY: "nkey", ObjType.PLUGIN: "nplugin",
}


def _shape(shape: str, sizes: dict) -> tuple[int, ...]:
    shape = shape.strip("()").strip()
    if not shape or shape == "-":
        return ()
    return tuple(int(eval(s, {}, sizes)) for s in shape.split(",") if s.strip())  # noqa: S307


def _fill(cls: type[Struct], src, sizes: dict, dtype, extra: dict) -> dict:
    out = {}
    for name, info in cls.field_info().items():
        if name in extra:
            out[name] = extra[name]
            continue
        v = getattr(src, name)
        if info["static"]:
            if isinstance(v, np.ndarray):
                shp = _shape(info["shape"], sizes)
                out[name] = np.asarray(v).reshape(shp) if shp else np.asarray(v)
            else:
                out[name] = int(v)
        else:
            shp = _shape(info["shape"], sizes)
            arr = np.asarray(v, dtype=np.float64)
            out[name] = jnp.asarray(arr.reshape(shp), dtype)
    return out


def model_from_mujoco(m: mujoco.MjModel, dtype=jnp.float64) -> Model:
    """A jaxsim Model holding the MjModel's values (derived fields included)."""
    derived = {"npoly": len(m.mesh_polyvertadr), "npolyvert": len(m.mesh_polyvert)}
    sizes = {n: derived[n] if n in derived else int(getattr(m, n)) for n in Model.size_names()}
    opt = Option(**_fill(Option, m.opt, sizes, dtype, {}))
    names = []
    for t in ObjType:
        cnt = _NAME_COUNTS.get(t)
        n = int(getattr(m, cnt, 0)) if cnt else 0
        names.append(tuple(mujoco.mj_id2name(m, int(t), i) or "" for i in range(n)))
    text = tuple(
        bytes(m.text_data[m.text_adr[i] : m.text_adr[i] + m.text_size[i]]).decode().rstrip("\0")
        if hasattr(m.text_data, "__len__") and not isinstance(m.text_data, str)
        else ""
        for i in range(m.ntext)
    )
    extra = {
        "opt": opt,
        "names": tuple(names),
        "model_name": mujoco.mj_id2name(m, int(ObjType.UNKNOWN), 0) or "",
        "text_data": text,
        "flex_where": tuple("" for _ in range(m.nflex)),
        "ncompact": -1,  # a jaxsim option (automatic by default)
        "hfield_nslot": (hfield.MAXCONPAIR,) * m.ngeom,  # as the compiler sets it, below
        "flex_haspassive": ((m.flex_edgestiffness != 0) | (m.flex_edgedamping != 0)).astype(int),
        "stat_meaninertia": jnp.asarray(m.stat.meaninertia, dtype),
        "stat_meanmass": jnp.asarray(m.stat.meanmass, dtype),
        "stat_meansize": jnp.asarray(m.stat.meansize, dtype),
        "stat_extent": jnp.asarray(m.stat.extent, dtype),
        "stat_center": jnp.asarray(m.stat.center, dtype),
        **sizes,
        "dof_hasfrictionloss": np.asarray(m.dof_frictionloss) != 0,
        "tendon_hasfrictionloss": np.asarray(m.tendon_frictionloss) > 0,
    }
    extra.update(_flex_elasticity(m, dtype))
    model = Model(**_fill(Model, m, sizes, dtype, extra))
    return model.replace(hfield_nslot=hfield.slots(model))


def _flex_elasticity(m: mujoco.MjModel, dtype) -> dict:
    """jaxsim's per-element and per-edge layout of MuJoCo's flex elasticity arrays (which
    it packs per flex, with -1 addresses for absent parts)."""
    ne = {1: 1, 2: 3, 3: 6}
    stiff = np.zeros((m.nflexelem, 21))
    bend = np.zeros((m.nflexedge, 17))
    elemedge = np.full((m.nflexelem, 6), -1, np.int64)
    stretch = np.zeros(m.nflex, np.int64)
    bends = np.zeros(m.nflex, np.int64)
    for f in range(m.nflex):
        dim, n, adr = int(m.flex_dim[f]), int(m.flex_elemnum[f]), int(m.flex_elemadr[f])
        k = ne[dim]
        elemedge[adr:adr + n, :k] = m.flex_elemedge[m.flex_elemedgeadr[f]:][:n * k].reshape(n, k)
        if m.flex_stiffnessadr[f] >= 0 and dim > 1 and n:
            stride = 24 if dim == 3 else 21
            ks = m.flex_stiffness[m.flex_stiffnessadr[f]:][:n * stride].reshape(n, stride)
            stiff[adr:adr + n] = ks[:, :21]
            stretch[f] = int(ks[0, 0] != 0 and not m.flex_rigid[f])
        if m.flex_bendingadr[f] >= 0 and dim == 2:
            e, ea = int(m.flex_edgenum[f]), int(m.flex_edgeadr[f])
            bend[ea:ea + e] = m.flex_bending[m.flex_bendingadr[f]:][:e * 17].reshape(e, 17)
            bends[f] = int(not m.flex_rigid[f])
    return {"flex_stiffness": jnp.asarray(stiff, dtype), "flex_bending": jnp.asarray(bend, dtype),
            "flex_elemedge": elemedge, "flex_edgeflap": np.asarray(m.flex_edgeflap).reshape(-1, 2),
            "flex_stretch": stretch, "flex_bend": bends}


def state_from_mujoco(model: Model, d: mujoco.MjData) -> State:
    """A blank jaxsim State carrying MjData's inputs (qpos, qvel, mocap, ...)."""
    from jaxsim.constants import blank_state

    dt = model.body_pos.dtype
    s = blank_state(model)
    return s.replace(
        qpos=jnp.asarray(d.qpos, dt),
        qvel=jnp.asarray(d.qvel, dt),
        act=jnp.asarray(d.act, dt),
        ctrl=jnp.asarray(d.ctrl, dt),
        mocap_pos=jnp.asarray(d.mocap_pos, dt).reshape(s.mocap_pos.shape),
        mocap_quat=jnp.asarray(d.mocap_quat, dt).reshape(s.mocap_quat.shape),
    )
