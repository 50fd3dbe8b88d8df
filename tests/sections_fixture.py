"""Test fixture: a compiler context whose kinematic-tree part comes from MuJoCo itself.

The section passes only need the tree's names and a few tree fields; taking them from
`mujoco.MjModel` tests the section passes independently of the tree pass.
"""

from __future__ import annotations

import os

import mujoco
import numpy as np

from jaxsim.mjcf import compile as mjcompile
from jaxsim.mjcf import expand
from jaxsim.mjcf.context import Ctx
from jaxsim.mjcf.parse import Defaults, Source, read_tree, validate
from jaxsim.types import ObjType

TREE_TYPES = (ObjType.BODY, ObjType.JOINT, ObjType.GEOM, ObjType.SITE, ObjType.CAMERA,
              ObjType.LIGHT, ObjType.MESH, ObjType.HFIELD, ObjType.MATERIAL, ObjType.TEXTURE)
TREE_FIELDS = ("jnt_type", "jnt_range", "jnt_limited", "jnt_bodyid", "jnt_qposadr",
               "geom_type", "geom_bodyid", "site_bodyid", "body_treeid", "body_mocapid",
               "body_pos", "body_quat", "qpos0", "cam_resolution", "mesh_vertnum")
TREE_SIZES = ("nq", "nv", "nmocap", "njnt", "nbody", "ngeom", "nsite")


def make_ctx(xml: bytes, filename: str, model: mujoco.MjModel, model_dir: str | None = None):
    """A Ctx for `xml` with names and tree fields filled from `model`."""
    source = Source(model_dir or (os.path.dirname(filename) if filename else None))
    root = read_tree(xml, filename or "<string>", source)
    validate(root, "mujoco")
    compiler = mjcompile.read_compiler(root)
    expand.expand_all(root, compiler, source)
    ctx = Ctx(root, source, Defaults(root), compiler)
    mjcompile.read_size(ctx)
    for t in TREE_TYPES:
        n = {ObjType.BODY: model.nbody, ObjType.JOINT: model.njnt, ObjType.GEOM: model.ngeom,
             ObjType.SITE: model.nsite, ObjType.CAMERA: model.ncam, ObjType.LIGHT: model.nlight,
             ObjType.MESH: model.nmesh, ObjType.HFIELD: model.nhfield,
             ObjType.MATERIAL: model.nmat, ObjType.TEXTURE: model.ntex}[t]
        for i in range(n):
            ctx.add_name(t, mujoco.mj_id2name(model, int(t), i), None)
    for f in TREE_FIELDS:
        ctx.out[f] = np.array(getattr(model, f))
    for f in TREE_SIZES:
        ctx.out[f] = int(getattr(model, f))
    return ctx


def compile_sections(ctx) -> None:
    from jaxsim.mjcf import sections

    def sensors(ctx):  # every sensor type compiles, including those jaxsim does not compute
        sections.compile_sensors(ctx, warn=False)

    for fn in (sections.compile_tendons, sections.compile_actuators, sensors,
               sections.compile_equality, sections.compile_contact, sections.compile_custom,
               sections.compile_keyframes):
        fn(ctx)


SECTION_TYPES = (ObjType.TENDON, ObjType.ACTUATOR, ObjType.SENSOR, ObjType.EQUALITY,
                 ObjType.PAIR, ObjType.EXCLUDE, ObjType.NUMERIC, ObjType.TEXT, ObjType.TUPLE,
                 ObjType.KEY)
SIZES = ("ntendon", "nwrap", "nu", "nactuator", "nout", "na", "nsensor", "nsensordata", "neq", "npair", "nexclude",
         "nnumeric", "nnumericdata", "ntext", "ntextdata", "ntuple", "ntupledata", "nkey",
         "nhistory", "nuser_tendon", "nuser_actuator", "nuser_sensor")
# fields MuJoCo computes after its compiler (mj_setConst and the lengthrange simulation)
DERIVED = {"tendon_length0", "tendon_invweight0", "actuator_acc0", "actuator_length0"}
# jaxsim fields with no MuJoCo counterpart, and how to compute them from MuJoCo's model
JAXSIM_ONLY = {"tendon_hasfrictionloss": lambda m: np.asarray(m.tendon_frictionloss) > 0}


def _masked(name: str, ours: np.ndarray, theirs: np.ndarray, ctx, model):
    """Drops the entries of a field that MuJoCo changes after compiling (mj_setConst)."""
    out = ctx.out
    if name == "actuator_lengthrange" and ctx.lengthrange_sim:
        # found by simulation once the whole model is built (tests/test_compile.py)
        keep = ~np.isin(np.arange(len(ours)), ctx.lengthrange_sim)
        return ours[keep], theirs[keep]
    if name == "tendon_lengthspring":
        keep = ~np.all(ours == -1, axis=1)
        return ours[keep], theirs[keep]
    if name == "eq_data":
        mask = np.ones_like(ours, dtype=bool)
        for i in range(len(ours)):
            t, ot = out["eq_type"][i], out["eq_objtype"][i]
            if t == 0 and ot == ObjType.BODY:  # connect: second anchor from qpos0
                mask[i, 3:6] = False
            elif t == 0:  # site connect: cleared
                mask[i, :] = False
            elif t == 1 and ot == ObjType.BODY:
                if np.all(ours[i, 6:10] == 0):  # relpose (and its flag) from qpos0
                    mask[i, 3:10] = False
                    mask[i, 11] = False
                else:  # quaternion normalized
                    q = ours[i, 6:10] / np.linalg.norm(ours[i, 6:10])
                    ours = ours.copy()
                    ours[i, 6:10] = q
        return ours[mask], theirs[mask]
    if name == "actuator_biasprm":
        # dampratio (positive biasprm[2] of position-like servos) becomes kv in mj_setConst
        mask = np.ones_like(ours, dtype=bool)
        for i in range(len(ours)):
            if out["actuator_biastype"][i] in (1, 4) and ours[i, 2] > 0:  # affine, so3
                mask[i, 2] = False
            if out["actuator_biastype"][i] == 2:  # muscle force scale
                mask[i, 2] = False
        return ours[mask], theirs[mask]
    if name == "actuator_gainprm":
        mask = np.ones_like(ours, dtype=bool)
        for i in range(len(ours)):
            if out["actuator_gaintype"][i] == 2:
                mask[i, 2] = False
        return ours[mask], theirs[mask]
    return ours, theirs


def compare(ctx, model) -> list[str]:
    """Mismatches between the section fields in ctx.out and MuJoCo's model."""
    from jaxsim.types import Model

    bad = []
    out = ctx.out
    for k in SIZES:
        theirs = getattr(model, k)
        if int(out.get(k, 0)) != int(theirs):
            bad.append(f"{k}: {out.get(k)} != {theirs}")
    if bad:
        return bad
    prefixes = ("tendon_", "wrap_", "actuator_", "sensor_", "eq_", "pair_", "exclude_",
                "numeric_", "tuple_", "key_")
    info = Model.field_info()
    for name in info:
        if not name.startswith(prefixes) or name in DERIVED:
            continue
        if name not in out:
            bad.append(f"{name}: missing")
            continue
        if name in JAXSIM_ONLY:  # no MuJoCo field: check against what it is derived from
            theirs = JAXSIM_ONLY[name](model)
        else:
            theirs = np.asarray(getattr(model, name))
        ours = np.asarray(out[name])
        if ours.size != theirs.size:
            bad.append(f"{name}: size {ours.shape} != {theirs.shape}")
            continue
        ours = ours.reshape(theirs.shape).astype(np.float64)
        theirs = theirs.astype(np.float64)
        ours, theirs = _masked(name, ours, theirs, ctx, model)
        if not np.allclose(ours, theirs, rtol=1e-12, atol=1e-12, equal_nan=True):
            bad.append(f"{name}: ours {ours.ravel()[:12]} != mujoco {theirs.ravel()[:12]}")
    if "pair_adhesion" in out and hasattr(model, "pair_adhesion"):
        if not np.allclose(out["pair_adhesion"], model.pair_adhesion):
            bad.append("pair_adhesion")
    texts = tuple(bytes(model.text_data[a: a + s - 1]).decode()
                  for a, s in zip(model.text_adr, model.text_size, strict=True))
    if tuple(out.get("text_data", ())) != texts:
        bad.append(f"text_data: {out.get('text_data')} != {texts}")
    for t in SECTION_TYPES:
        n = len(ctx.names[int(t)])
        theirs = [mujoco.mj_id2name(model, int(t), i) or "" for i in range(n)]
        if ctx.names[int(t)] != theirs:
            bad.append(f"names {t.name}: {ctx.names[int(t)][:5]} != {theirs[:5]}")
    return bad
