"""The compiler driver: MJCF text -> `Model`.

Order follows MuJoCo's compiler: settings, defaults, assets, the kinematic tree, the other
sections, then the derived constants (`jaxsim.constants.set_const`, run in float64).
"""

from __future__ import annotations

import copy
import os
import re
import warnings
from collections.abc import Mapping

import numpy as np

from jaxsim.mjcf import assets as assets_pass
from jaxsim.mjcf import discard, expand, flexcomp, tree
from jaxsim.mjcf.context import Compiler, Ctx
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.parse import SRC, Defaults, Source, read_tree, validate
from jaxsim.mjcf.sections import tendon_path_trees
from jaxsim.struct import shape_of
from jaxsim.types import (
    DisableBit,
    EnableBit,
    EqType,
    Model,
    ObjType,
    Option,
    SleepPolicy,
    TrnType,
)

# option flags whose effect jaxsim does not implement
_UNSUPPORTED_ENABLE = {"speculative": "speculative contacts",
                       "ipc": "the discrete integrator's IPC contact mode"}
_UNSUPPORTED_DISABLE = {"nativeccd": "libccd convex collisions"}


# top-level elements that would change the physics and that jaxsim cannot honour yet
_UNSUPPORTED_TOP = {
    "extension": "<extension> (engine plugins) is not supported by jaxsim yet",
}
_INTEGRATORS = {"Euler": 0, "RK4": 1, "implicit": 2, "implicitfast": 3}
_CONES = {"pyramidal": 0, "elliptic": 1}
_JACOBIANS = {"dense": 0, "sparse": 1, "auto": 2}
_SOLVERS = {"PGS": 0, "CG": 1, "Newton": 2}


def load(path: str, dtype=None, assets: Mapping[str, bytes] | None = None) -> Model:
    """Compiles an MJCF file into a `Model` (real arrays in `dtype`, float32 by default)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise MJCFError(f"cannot read model file ({e.strerror})", file=path) from None
    source = Source(os.path.dirname(os.path.abspath(path)), assets)
    return compile_bytes(data, path, source, dtype)


def load_string(xml: str | bytes, assets: Mapping[str, bytes] | None = None, dtype=None,
                model_dir: str | None = None) -> Model:
    """Compiles MJCF text; files it names come from `assets` (or `model_dir`)."""
    data = xml.encode() if isinstance(xml, str) else bytes(xml)
    # lxml refuses str input with an encoding declaration; bytes are fine
    return compile_bytes(data, "<string>", Source(model_dir, assets), dtype)


def compile_bytes(data: bytes, filename: str, source: Source, dtype=None) -> Model:
    root = read_tree(data, filename, source)
    if root.tag != "mujoco":
        raise MJCFError(f"unrecognized model type <{root.tag}> (expected <mujoco>)", root)
    validate(root, "mujoco")
    for tag, msg in _UNSUPPORTED_TOP.items():
        for el in root.iterchildren(tag):
            raise MJCFError(msg, el)
    compiler = read_compiler(root)
    expand.expand_all(root, compiler, source)
    flexcomp.expand_flexcomps(root, compiler, source)
    if compiler.discardvisual:
        full = copy.copy(compiler)
        full.discardvisual = False
        if discard.discard_visual(root, lambda r: _build(r, full, source)):
            if compiler.inertiafromgeom == "true":  # the inertials it wrote must stand
                compiler.inertiafromgeom = "auto"
    ctx = _build(root, compiler, source)
    return _finish(ctx, dtype)


def _build(root, compiler: Compiler, source: Source) -> Ctx:
    """Compiles an expanded tree into ctx.out (everything but the derived constants)."""
    defaults = Defaults(root)
    ctx = Ctx(root, source, defaults, compiler)
    ctx.model_name = root.get("model", "MuJoCo Model")
    read_option(ctx)
    read_size(ctx)
    read_visual(ctx)
    assets_pass.compile_assets(ctx)
    tree.compile_tree(ctx)
    _sections(ctx)
    assets_pass.finish_meshes(ctx)
    tree.finalize_simple(ctx)
    if compiler.settotalmass > 0:
        _set_total_mass(ctx, compiler.settotalmass)
    return ctx


# ------------------------------------------------------------------------------ settings


def read_compiler(root) -> Compiler:
    comp = Compiler()
    for el in root.iterchildren("compiler"):
        from jaxsim.mjcf.parse import Attrs

        a = Attrs(el, "compiler", {k: v for k, v in el.items() if k != SRC})
        if "coordinate" in a and a["coordinate"] == "global":
            raise a.error("global coordinates are no longer supported by MuJoCo", "coordinate")
        if "angle" in a:
            comp.degree = a["angle"] == "degree"
        if "eulerseq" in a:
            comp.eulerseq = a["eulerseq"]
            if not re.fullmatch(r"[xyzXYZ]{3}", comp.eulerseq):
                raise a.error("euler sequence must be 3 characters from xyzXYZ", "eulerseq")
        for key in ("autolimits", "balanceinertia", "discardvisual", "fusestatic", "alignfree",
                    "fitaabb", "saveinertial"):
            if key in a:
                setattr(comp, key, bool(a[key]))
        for key in ("boundmass", "boundinertia", "settotalmass"):
            if key in a:
                setattr(comp, key, float(a[key]))
        if "inertiafromgeom" in a:
            comp.inertiafromgeom = a["inertiafromgeom"]
        if "inertiagrouprange" in a:
            comp.inertiagrouprange = tuple(int(x) for x in a["inertiagrouprange"])
        for key in ("meshdir", "texturedir"):
            if key in a:
                setattr(comp, key, a[key])
        if "assetdir" in a:
            comp.meshdir = comp.meshdir or a["assetdir"]
            comp.texturedir = comp.texturedir or a["assetdir"]
            comp.assetdir = a["assetdir"]
        for lr in el.iterchildren("lengthrange"):
            la = Attrs(lr, "lengthrange", {k: v for k, v in lr.items() if k != SRC})
            for key in comp.lengthrange:
                if key in la:
                    comp.lengthrange[key] = la[key]
    if comp.fusestatic:
        # fusing changes body numbering; not implemented, and silently ignoring it would
        # change ids and masses the user relies on
        el = next(root.iterchildren("compiler"))
        raise MJCFError("compiler fusestatic=\"true\" is not supported by jaxsim yet", el,
                        "fusestatic")
    return comp


def read_option(ctx: Ctx) -> None:
    from jaxsim.mjcf.parse import Attrs

    vals: dict = {}
    disable, enable, actdisable = 0, 0, 0
    for el in ctx.root.iterchildren("option"):
        a = Attrs(el, "option", {k: v for k, v in el.items() if k != SRC})
        for k in a.given:
            if k == "actuatorgroupdisable":
                for g in str(a.raw(k)).split():
                    g = int(g)
                    if not 0 <= g <= 30:
                        raise a.error("actuator group must be in [0, 30]", k)
                    actdisable |= 1 << g
            else:
                vals[k] = a[k]
        for fl in el.iterchildren("flag"):
            fa = Attrs(fl, "flag", {k: v for k, v in fl.items() if k != SRC})
            for k in fa.given:
                on = fa[k] == "enable"
                if k.upper() in DisableBit.__members__:
                    bit = int(DisableBit[k.upper()])
                    disable = (disable & ~bit) if on else (disable | bit)
                else:
                    bit = int(EnableBit[k.upper()])
                    enable = (enable | bit) if on else (enable & ~bit)
                if on and k == "sleep":
                    ctx.sleep_flag = fl
                if on and k in _UNSUPPORTED_ENABLE:
                    # changes the physics (frozen trees, skipped collisions): refuse
                    raise MJCFError(f'<flag {k}="enable"> ({_UNSUPPORTED_ENABLE[k]}) is not '
                                    "supported by jaxsim yet", fl, k)
                if not on and k in _UNSUPPORTED_DISABLE:
                    raise MJCFError(f'<flag {k}="disable"> ({_UNSUPPORTED_DISABLE[k]}) is not '
                                    "supported by jaxsim yet", fl, k)
    o = {}
    spec = Attrs(None, "option", {})
    for k in ("timestep", "impratio", "tolerance", "ls_tolerance", "noslip_tolerance",
              "ccd_tolerance", "sleep_tolerance", "density", "viscosity", "o_margin"):
        o[k] = np.float64(vals.get(k, spec[k]))
    for k, n in (("gravity", 3), ("wind", 3), ("magnetic", 3), ("o_solref", 2), ("o_solimp", 5),
                 ("o_friction", 5)):
        v = vals.get(k, spec[k])
        o[k] = np.asarray(v, dtype=np.float64).reshape(n)
    o["integrator"] = _INTEGRATORS[vals.get("integrator", "Euler")]
    o["cone"] = _CONES[vals.get("cone", "pyramidal")]
    o["jacobian"] = _JACOBIANS[vals.get("jacobian", "auto")]
    o["solver"] = _SOLVERS[vals.get("solver", "Newton")]
    for k in ("iterations", "ls_iterations", "noslip_iterations", "ccd_iterations",
              "sdf_iterations", "sdf_initpoints"):
        o[k] = int(vals.get(k, spec[k]))
    o["disableflags"], o["enableflags"], o["disableactuator"] = disable, enable, actdisable
    ctx.option = o


def read_size(ctx: Ctx) -> None:
    from jaxsim.mjcf.parse import Attrs

    out = ctx.out
    out.update(nconmax=-1, njmax=-1, nuser_body=-1, nuser_jnt=-1, nuser_geom=-1, nuser_site=-1,
               nuser_cam=-1, nuser_tendon=-1, nuser_actuator=-1, nuser_sensor=-1)
    ctx.size_nkey = 0
    for el in ctx.root.iterchildren("size"):
        a = Attrs(el, "size", {k: v for k, v in el.items() if k != SRC})
        for k in ("nconmax", "njmax") + tuple(k for k in out if k.startswith("nuser_")):
            if k in a:
                out[k] = int(a[k])
        if "nkey" in a:
            ctx.size_nkey = int(a["nkey"])
        if "nuserdata" in a:
            out["nuserdata"] = int(a["nuserdata"])
    stat = {}
    for el in ctx.root.iterchildren("statistic"):
        a = Attrs(el, "statistic", {k: v for k, v in el.items() if k != SRC})
        for k in a.given:
            stat[k] = a[k]
    ctx.statistic = stat


def read_visual(ctx: Ctx) -> None:
    znear = 0.01
    for vis in ctx.root.iterchildren("visual"):
        for m in vis.iterchildren("map"):
            if m.get("znear") is not None:
                znear = float(m.get("znear"))
    ctx.visual_znear = znear


# -------------------------------------------------------------------------- other passes


_SECTIONS = (("tendon", "compile_tendons"), ("actuator", "compile_actuators"),
             ("sensor", "compile_sensors"), ("deformable", "compile_flex"),
             ("equality", "compile_equality"),
             ("contact", "compile_contact"), ("custom", "compile_custom"),
             ("keyframe", "compile_keyframes"))


def _sections(ctx: Ctx) -> None:
    try:
        from jaxsim.mjcf import sections
    except ImportError:  # pass not available: only models without these sections load
        sections = None
    for tag, fname in _SECTIONS:
        fn = getattr(sections, fname, None)
        if fn is None:
            for el in ctx.root.iterchildren(tag):
                if len(el):
                    raise MJCFError(f"<{tag}> is not supported by jaxsim yet", el[0])
            continue
        fn(ctx)


def _set_total_mass(ctx: Ctx, total: float) -> None:
    out = ctx.out
    mass = out["body_mass"]
    s = float(np.sum(mass))
    if s < 1e-15:
        return
    scale = total / s
    out["body_mass"] = mass * scale
    out["body_inertia"] = out["body_inertia"] * scale


def _sleep_policy(ctx: Ctx) -> None:
    """Resolves the AUTO sleep policy of each tree as MuJoCo's compiler does: trees with an
    actuator, or joined to another tree by a tendon with stiffness, damping or an actuator
    (or by a tendon spanning more than two trees), never sleep; the rest may."""
    out = ctx.out
    policy = np.asarray(out.get("tree_sleep_policy", np.zeros(0, np.int64))).copy()
    if not len(policy):
        return
    btree = np.asarray(out["body_treeid"])
    trn = np.asarray(out.get("actuator_trnid", np.zeros((0, 2), np.int64))).reshape(-1, 2)
    ttype = np.asarray(out.get("actuator_trntype", np.zeros(0, np.int64)))
    tree_of = {TrnType.JOINT: lambda i: btree[out["jnt_bodyid"][i]],
               TrnType.JOINTINPARENT: lambda i: btree[out["jnt_bodyid"][i]],
               TrnType.SITE: lambda i: btree[out["site_bodyid"][i]],
               TrnType.SLIDERCRANK: lambda i: btree[out["site_bodyid"][i]],
               TrnType.BODY: lambda i: btree[i]}

    def never(t):
        if t >= 0 and policy[t] == SleepPolicy.AUTO:
            policy[t] = SleepPolicy.AUTO_NEVER

    for a in range(len(ttype)):
        if ttype[a] == TrnType.TENDON:
            for t in tendon_path_trees(out, trn[a, 0]):
                never(t)
        elif ttype[a] == TrnType.SO3:  # a ball joint, or a site with a reference site
            kind = TrnType.JOINT if trn[a, 1] < 0 else TrnType.SITE
            never(int(tree_of[kind](trn[a, 0])))
        elif ttype[a] in tree_of:
            never(int(tree_of[ttype[a]](trn[a, 0])))
    tact = np.zeros(out.get("ntendon", 0), bool)
    for a in range(len(ttype)):
        if ttype[a] == TrnType.TENDON:
            tact[trn[a, 0]] = True
    for k in range(out.get("ntendon", 0)):
        n = int(out["tendon_treenum"][k])
        passive = (out["tendon_stiffness"][k] != 0 or np.any(out["tendon_stiffnesspoly"][k] != 0)
                   or out["tendon_damping"][k] != 0 or np.any(out["tendon_dampingpoly"][k] != 0)
                   or tact[k])
        if n < 2 or (n == 2 and not passive):
            continue
        for t in tendon_path_trees(out, k):
            if policy[t] in (SleepPolicy.ALLOWED, SleepPolicy.INIT):
                why = ("spans more than 2 trees" if n > 2
                       else "has non-zero stiffness or damping")
                raise MJCFError(f"tree {t} is connected to tendon {k}, which {why}: "
                                "sleeping not allowed")
            never(t)
    # trees carrying vertices of a flex without edge equality never sleep
    for f in range(out.get("nflex", 0)):
        if out["flex_edgeequality"][f]:
            continue
        adr, num = int(out["flex_vertadr"][f]), int(out["flex_vertnum"][f])
        for b in out["flex_vertbodyid"][adr:adr + num]:
            never(int(btree[b]))
    policy[policy == SleepPolicy.AUTO] = SleepPolicy.AUTO_ALLOWED
    out["tree_sleep_policy"] = policy
    if ctx.option.get("enableflags", 0) & EnableBit.SLEEP and np.any(
            np.asarray(out.get("eq_type", [])) == EqType.TENDON):
        raise MJCFError("tendon equality constraints do not support sleeping (MuJoCo stops "
                        "with an error when it checks them)", getattr(ctx, "sleep_flag", None),
                        "sleep")


def _finish(ctx: Ctx, dtype) -> Model:
    import jax
    import jax.numpy as jnp

    from jaxsim import constants, hostnp
    from jaxsim.collision import hfield

    out = ctx.out
    _sleep_policy(ctx)
    # counts of sections not filled by a pass
    for k in Model.size_names():
        out.setdefault(k, 0)
        if k.startswith("nuser_") and out[k] < 0:
            out[k] = 0
    out["nkey"] = out.get("nkey", 0)
    sizes = {k: out[k] for k in Model.size_names()}
    sizes["ncon"] = 0
    info = Model.field_info()
    fields: dict = {}
    for name, meta in info.items():
        if name in ("opt", "names", "model_name", "text_data", "flex_where", "ncompact",
                    "hfield_nslot") or (
                name in sizes):
            continue
        shape = shape_of(meta["shape"], sizes)
        val = out.get(name)
        if val is None:
            val = np.zeros(shape, dtype=np.int64 if meta["static"] else np.float64)
        val = np.asarray(val)
        if val.shape != shape:
            if val.size == int(np.prod(shape)):
                val = val.reshape(shape)
            else:
                raise MJCFError(f"internal: field {name} has shape {val.shape}, expected {shape}")
        fields[name] = val
    for k in Model.size_names():
        fields[k] = int(out[k])
    fields["names"] = tuple(tuple(ctx.names[int(t)]) for t in ObjType)
    fields["model_name"] = ctx.model_name
    fields["ncompact"] = -1  # the compact constraint problem: automatic (forward.fwd_constraint)
    fields["hfield_nslot"] = (hfield.MAXCONPAIR,) * int(out["ngeom"])  # set below, by size
    fields["text_data"] = tuple(out.get("text_data", ()))
    fields["flex_where"] = tuple(out.get("flex_where", ()))
    # derived constants in float64, whatever the user's dtype. set_const is JAX code; run
    # eagerly on JAX it would compile every distinct primitive on first use (tens of
    # seconds for a new model shape), so it runs on the numpy backend with host leaves
    f64 = {}
    for name, val in fields.items():
        meta = info.get(name)
        if meta is None or meta["static"]:
            f64[name] = _static(val)
        else:
            f64[name] = hostnp.asarray(val, dtype=np.float64)
    opt = ctx.option
    f64["opt"] = _option(opt, np.float64, hostnp.asarray)
    model = Model(**f64)
    with hostnp.host_backend():
        model = constants.set_const(model)
        model = _key_plastic(model)
        model = _spring_damper(ctx, model)
        for hook in ctx.post_const:
            model = hook(model)
        model = _apply_statistic(ctx, model)
        model = model.replace(hfield_nslot=hfield.slots(model))
    if ctx.lengthrange_sim:
        model = _simulated_lengthrange(ctx, model)
    dt = jnp.dtype(dtype) if dtype is not None else jnp.float32
    if jax.dtypes.canonicalize_dtype(dt) != dt:
        # device_put truncates silently; say so, as jnp.asarray(x, float64) would
        warnings.warn(
            f"dtype {dt} is not available without jax_enable_x64; the model's arrays will "
            f"be {jax.dtypes.canonicalize_dtype(dt)}", stacklevel=4,
        )
    conv = {}
    for name in info:
        if name == "opt":
            continue
        val = getattr(model, name)
        if info[name]["static"]:
            conv[name] = val
        else:
            conv[name] = _to_device(val, dt)
    conv["opt"] = _option(opt, dt, _to_device)
    return Model(**conv)


def _key_plastic(model: Model) -> Model:
    """Keyframe plastic values not given: the reset ones (the spring references, tendon dead
    bands as set_const resolved them)."""
    if not (model.nkey and model.nplastic):
        return model
    from jaxsim import hostnp
    from jaxsim.passive import _plastic_index

    q, pj, tid, pt = _plastic_index(model)
    p0 = np.zeros(model.nplastic)
    p0[pj] = np.asarray(model.qpos_spring, np.float64)[q]
    p0[pt] = np.asarray(model.tendon_lengthspring, np.float64)[tid]
    kp = np.asarray(model.key_plastic, np.float64)
    kp = np.where(np.isnan(kp), p0[None], kp)
    return model.replace(key_plastic=hostnp.asarray(kp, dtype=np.float64))


def _simulated_lengthrange(ctx: Ctx, model: Model) -> Model:
    """actuator_lengthrange for the actuators MuJoCo's compiler finds by simulation."""
    import jax

    from jaxsim.mjcf import lengthrange

    info = Model.field_info()
    with jax.enable_x64(True):
        conv = {name: (getattr(model, name) if info[name]["static"] or name == "opt"
                       else _to_device(getattr(model, name), np.float64)) for name in info}
        conv["opt"] = _option(ctx.option, np.float64, _to_device)
        dev = Model(**conv)
    lr = lengthrange.resolve(dev, ctx.lengthrange_sim, ctx.compiler.lengthrange,
                             ctx.lengthrange_error)
    return model.replace(actuator_lengthrange=lr)


def _to_device(val, dtype):
    """A host value as a JAX array of `dtype`, cast on the host.

    jax.device_put only copies; jnp.asarray would compile a small program per shape and
    dtype (about 20 ms each, a second or more per model).
    """
    import jax

    return jax.device_put(np.asarray(val, dtype=dtype))


def _spring_damper(ctx: Ctx, model: Model) -> Model:
    """Joint stiffness and damping from `springdamper` (time constant, damping ratio), using
    the joint's mean inverse inertia at qpos0 (MuJoCo: AutoSpringDamper, after setConst)."""
    from jaxsim.types import JointType

    sd = ctx.joint_springdamper
    if not any(s[0] > 0 and s[1] > 0 for s in sd):
        return model
    stiff = np.asarray(model.jnt_stiffness).copy()
    damp = np.asarray(model.dof_damping).copy()
    invw = np.asarray(model.dof_invweight0)
    for j, (tc, dr) in enumerate(sd):
        if tc <= 0 or dr <= 0:
            continue
        adr = int(model.jnt_dofadr[j])
        n = JointType(int(model.jnt_type[j])).dof_width()
        inertia = n / max(1e-15, float(np.sum(invw[adr:adr + n])))
        stiff[j] = inertia / max(1e-15, tc * tc * dr * dr)
        damp[adr:adr + n] = 2 * inertia / max(1e-15, tc)
    return model.replace(jnt_stiffness=stiff, dof_damping=damp)


def _static(val):
    if isinstance(val, np.ndarray):
        if val.dtype == bool:
            return val
        if np.issubdtype(val.dtype, np.integer):
            return val.astype(np.int32)
        return val
    return val


def _option(o: dict, dt, asarray) -> Option:
    """Option from the parsed settings; `asarray(value, dtype=dt)` makes the leaves."""
    kw = {}
    for name, meta in Option.field_info().items():
        v = o[name]
        kw[name] = int(v) if meta["static"] else asarray(v, dtype=dt)
    return Option(**kw)


def _apply_statistic(ctx: Ctx, model: Model) -> Model:
    s = ctx.statistic
    kw = {}
    for k in ("meaninertia", "meanmass", "meansize", "extent"):
        if k in s:
            kw[f"stat_{k}"] = np.asarray(s[k], dtype=np.float64)
    if "center" in s:
        kw["stat_center"] = np.asarray(s["center"], dtype=np.float64)
    return model.replace(**kw) if kw else model
