"""The sensor pass: every sensor type of the schema except plugins.

Sensors have no default classes. Each tag sets the sensor type and the kind of the
sensorized object (and of the reference object, for relative frame sensors); the compiler
then checks the objects, sets the data type, the stage the sensor needs and its dimension,
and lays out sensordata and the history buffer after the actuators' histories.
"""

from __future__ import annotations

import warnings

import numpy as np

from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.sections_common import nuser, sections
from jaxsim.types import DataType, GeomType, JointType, ObjType, SensorType, Stage

S = SensorType
_SITE = (ObjType.SITE, "site")
_JOINT = (ObjType.JOINT, "joint")
_TENDON = (ObjType.TENDON, "tendon")
_ACT = (ObjType.ACTUATOR, "actuator")
_BODY = (ObjType.BODY, "body")
_FRAME = ("frame", "objname")  # objtype from the objtype attribute
# tag -> (type, (objtype, name attribute) or None, (reftype, name attribute) or None)
_TABLE = {
    "touch": (S.TOUCH, _SITE, None), "accelerometer": (S.ACCELEROMETER, _SITE, None),
    "velocimeter": (S.VELOCIMETER, _SITE, None), "gyro": (S.GYRO, _SITE, None),
    "force": (S.FORCE, _SITE, None), "torque": (S.TORQUE, _SITE, None),
    "magnetometer": (S.MAGNETOMETER, _SITE, None),
    "camprojection": (S.CAMPROJECTION, _SITE, (ObjType.CAMERA, "camera")),
    "jointpos": (S.JOINTPOS, _JOINT, None), "jointvel": (S.JOINTVEL, _JOINT, None),
    "tendonpos": (S.TENDONPOS, _TENDON, None), "tendonvel": (S.TENDONVEL, _TENDON, None),
    "actuatorpos": (S.ACTUATORPOS, _ACT, None), "actuatorvel": (S.ACTUATORVEL, _ACT, None),
    "actuatorfrc": (S.ACTUATORFRC, _ACT, None),
    "jointactuatorfrc": (S.JOINTACTFRC, _JOINT, None),
    "tendonactuatorfrc": (S.TENDONACTFRC, _TENDON, None),
    "ballquat": (S.BALLQUAT, _JOINT, None), "ballangvel": (S.BALLANGVEL, _JOINT, None),
    "jointlimitpos": (S.JOINTLIMITPOS, _JOINT, None),
    "jointlimitvel": (S.JOINTLIMITVEL, _JOINT, None),
    "jointlimitfrc": (S.JOINTLIMITFRC, _JOINT, None),
    "tendonlimitpos": (S.TENDONLIMITPOS, _TENDON, None),
    "tendonlimitvel": (S.TENDONLIMITVEL, _TENDON, None),
    "tendonlimitfrc": (S.TENDONLIMITFRC, _TENDON, None),
    "framepos": (S.FRAMEPOS, _FRAME, _FRAME), "framequat": (S.FRAMEQUAT, _FRAME, _FRAME),
    "framexaxis": (S.FRAMEXAXIS, _FRAME, _FRAME), "frameyaxis": (S.FRAMEYAXIS, _FRAME, _FRAME),
    "framezaxis": (S.FRAMEZAXIS, _FRAME, _FRAME),
    "framelinvel": (S.FRAMELINVEL, _FRAME, _FRAME),
    "frameangvel": (S.FRAMEANGVEL, _FRAME, _FRAME),
    "framelinacc": (S.FRAMELINACC, _FRAME, None), "frameangacc": (S.FRAMEANGACC, _FRAME, None),
    "subtreecom": (S.SUBTREECOM, _BODY, None), "subtreelinvel": (S.SUBTREELINVEL, _BODY, None),
    "subtreeangmom": (S.SUBTREEANGMOM, _BODY, None),
    "insidesite": (S.INSIDESITE, _FRAME, (ObjType.SITE, "site")),
    "e_potential": (S.E_POTENTIAL, None, None), "e_kinetic": (S.E_KINETIC, None, None),
    "clock": (S.CLOCK, None, None),
}
_FRAMEOBJ = {"body": ObjType.BODY, "xbody": ObjType.XBODY, "geom": ObjType.GEOM,
             "site": ObjType.SITE, "camera": ObjType.CAMERA}
_SPATIAL = tuple(_FRAMEOBJ.values())
_OBJ_NAMES = {t.name.lower(): t for t in ObjType}
_INTERP = {"zoh": 0, "linear": 1, "cubic": 2}
_CONDATA = ("found", "force", "torque", "dist", "pos", "normal", "tangent")
_CONDATA_SIZE = (1, 3, 3, 1, 3, 3, 3)
_RAYDATA = ("dist", "dir", "origin", "point", "normal", "depth")
_RAYDATA_SIZE = (1, 3, 3, 3, 3, 1)
_REDUCE = {"none": 0, "mindist": 1, "maxforce": 2, "netforce": 3}
_CONDATA_FORCES = (1 << 1) | (1 << 2)  # force, torque
_REDUCE_FORCES = (2, 3)  # maxforce, netforce
_STAGES = {"none": Stage.NONE, "pos": Stage.POS, "vel": Stage.VEL, "acc": Stage.ACC}
_DATATYPES = {"real": DataType.REAL, "positive": DataType.POSITIVE, "axis": DataType.AXIS,
              "quaternion": DataType.QUATERNION}

_POSITIVE = (S.TOUCH, S.INSIDESITE)
_AXIS = (S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS, S.GEOMNORMAL)
_QUAT = (S.BALLQUAT, S.FRAMEQUAT)
_ACC = (S.TOUCH, S.ACCELEROMETER, S.FORCE, S.TORQUE, S.ACTUATORFRC, S.JOINTACTFRC,
        S.TENDONACTFRC, S.JOINTLIMITFRC, S.TENDONLIMITFRC, S.FRAMELINACC, S.FRAMEANGACC,
        S.CONTACT, S.TACTILE)
_VEL = (S.VELOCIMETER, S.GYRO, S.JOINTVEL, S.TENDONVEL, S.ACTUATORVEL, S.BALLANGVEL,
        S.JOINTLIMITVEL, S.TENDONLIMITVEL, S.FRAMELINVEL, S.FRAMEANGVEL, S.SUBTREELINVEL,
        S.SUBTREEANGMOM)
_DIM3 = (S.ACCELEROMETER, S.VELOCIMETER, S.GYRO, S.FORCE, S.TORQUE, S.MAGNETOMETER,
         S.BALLANGVEL, S.FRAMEPOS, S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS, S.FRAMELINVEL,
         S.FRAMEANGVEL, S.FRAMELINACC, S.FRAMEANGACC, S.SUBTREECOM, S.SUBTREELINVEL,
         S.SUBTREEANGMOM, S.GEOMNORMAL)


def _bits(el, attr: str, keys: tuple, default: int) -> int:
    """A data-field list (in canonical order) as a bit field."""
    text = el.get(attr)
    if text is None:
        return default
    spec, prev = 0, -1
    for tok in text.split():
        if tok not in keys:
            raise MJCFError(f"invalid keyword '{tok}'", el, attr)
        i = keys.index(tok)
        if i <= prev:
            raise MJCFError(f"data attributes must be in order: {', '.join(keys)}", el, attr)
        spec |= 1 << i
        prev = i
    return spec


def _size(spec: int, sizes: tuple) -> int:
    return sum(s for i, s in enumerate(sizes) if spec & (1 << i))


def _float(el, attr: str, default: float) -> float:
    v = el.get(attr)
    return default if v is None else float(v)


def _read(el) -> dict:
    """The tag-specific part: type, object and reference kinds and names, intprm."""
    tag = el.tag
    s = {"type": None, "objtype": ObjType.UNKNOWN, "objname": None, "objattr": None,
         "reftype": ObjType.UNKNOWN, "refname": None, "refattr": None, "intprm": [0, 0, 0],
         "dim": 0, "datatype": DataType.REAL, "needstage": Stage.ACC}
    if tag in _TABLE:
        typ, obj, ref = _TABLE[tag]
        s["type"] = typ
        for key, spec in (("obj", obj), ("ref", ref)):
            if spec is None:
                continue
            if spec is _FRAME:
                kind = el.get(f"{key}type")
                if kind is not None:
                    s[f"{key}type"] = _FRAMEOBJ[kind]
                s[f"{key}name"], s[f"{key}attr"] = el.get(f"{key}name"), f"{key}name"
            else:
                s[f"{key}type"] = spec[0]
                s[f"{key}name"], s[f"{key}attr"] = el.get(spec[1]), spec[1]
    elif tag == "rangefinder":
        s["type"] = S.RANGEFINDER
        use_site = el.get("site") is not None
        s["objtype"] = ObjType.SITE if use_site else ObjType.CAMERA
        s["objattr"] = "site" if use_site else "camera"
        s["objname"] = el.get(s["objattr"])
        s["intprm"][0] = _bits(el, "data", _RAYDATA, 1)
    elif tag in ("distance", "normal", "fromto"):
        s["type"] = {"distance": S.GEOMDIST, "normal": S.GEOMNORMAL, "fromto": S.GEOMFROMTO}[tag]
        for i, key in ((1, "obj"), (2, "ref")):
            body = el.get(f"body{i}") is not None
            s[f"{key}type"] = ObjType.BODY if body else ObjType.GEOM
            s[f"{key}attr"] = f"body{i}" if body else f"geom{i}"
            s[f"{key}name"] = el.get(s[f"{key}attr"])
    elif tag == "contact":
        s["type"] = S.CONTACT
        for attr, kind in (("site", ObjType.SITE), ("body1", ObjType.BODY),
                           ("subtree1", ObjType.XBODY), ("geom1", ObjType.GEOM)):
            if el.get(attr) is not None:
                s["objtype"], s["objname"], s["objattr"] = kind, el.get(attr), attr
                break
        for attr, kind in (("body2", ObjType.BODY), ("subtree2", ObjType.XBODY),
                           ("geom2", ObjType.GEOM)):
            if el.get(attr) is not None:
                s["reftype"], s["refname"], s["refattr"] = kind, el.get(attr), attr
                break
        s["intprm"][0] = _bits(el, "data", _CONDATA, 1)
        s["intprm"][1] = _REDUCE[el.get("reduce", "none")]
        s["intprm"][2] = int(el.get("num", "1"))
        if s["intprm"][2] <= 0:
            raise MJCFError("'num' must be positive in sensor", el, "num")
    elif tag == "user":
        s["type"] = S.USER
        if el.get("objtype") is not None:
            s["objtype"] = _OBJ_NAMES.get(el.get("objtype"), ObjType.UNKNOWN)
        s["objname"], s["objattr"] = el.get("objname"), "objname"
        if el.get("dim") is None:
            raise MJCFError("required attribute missing: 'dim'", el, "dim")
        s["dim"] = int(el.get("dim"))
        s["needstage"] = _STAGES[el.get("needstage", "acc")]
        s["datatype"] = _DATATYPES[el.get("datatype", "real")]
    elif tag == "tactile":
        s["type"] = S.TACTILE
        s["reftype"], s["refname"], s["refattr"] = ObjType.GEOM, el.get("geom"), "geom"
        s["objtype"], s["objname"], s["objattr"] = ObjType.MESH, el.get("mesh"), "mesh"
    elif tag == "plugin":
        raise MJCFError("plugin sensors are not supported by jaxsim", el)
    else:
        raise MJCFError("unrecognized sensor type", el)
    return s


def _resolve(ctx, s: dict, el) -> tuple[int, int]:
    """Ids of the sensorized and reference objects (-1 if none), with MuJoCo's checks."""
    typ = s["type"]
    objid = refid = -1
    if s["objtype"] != ObjType.UNKNOWN:
        if not s["objname"]:
            raise MJCFError("missing name of sensorized object in sensor", el, s["objattr"])
        look = ObjType.BODY if s["objtype"] == ObjType.XBODY else s["objtype"]
        objid = ctx.ids[int(look)].get(s["objname"], -1)
        if objid < 0:
            raise MJCFError(f"unrecognized name '{s['objname']}' of sensorized object", el,
                            s["objattr"])
    elif typ not in (S.E_POTENTIAL, S.E_KINETIC, S.CLOCK, S.PLUGIN, S.CONTACT, S.USER):
        raise MJCFError("invalid type in sensor", el)
    if s["reftype"] != ObjType.UNKNOWN:
        if not s["refname"]:
            raise MJCFError("missing name of reference frame object in sensor", el, s["refattr"])
        look = ObjType.BODY if s["reftype"] == ObjType.XBODY else s["reftype"]
        refid = ctx.ids[int(look)].get(s["refname"], -1)
        if refid < 0:
            raise MJCFError(f"unrecognized name '{s['refname']}' of object", el, s["refattr"])
        if s["reftype"] not in _SPATIAL:
            raise MJCFError("reference frame object must be (x)body, geom, site or camera in "
                            "sensor", el)
    return objid, refid


def _check(ctx, s: dict, objid: int, refid: int, el) -> int:
    """Per-type checks (mjCSensor::Compile); returns the sensor dimension."""
    out = ctx.out
    typ, ot, rt = s["type"], s["objtype"], s["reftype"]

    def need(cond, msg):
        if not cond:
            raise MJCFError(msg, el)

    if typ in (S.TOUCH, S.ACCELEROMETER, S.VELOCIMETER, S.GYRO, S.FORCE, S.TORQUE,
               S.MAGNETOMETER, S.CAMPROJECTION):
        need(ot == ObjType.SITE, "sensor must be attached to site")
        if typ == S.CAMPROJECTION:
            res = np.asarray(out["cam_resolution"])[refid]
            need(res[0] and res[1], "camera projection sensor requires camera resolution")
    elif typ == S.RANGEFINDER:
        need(ot in (ObjType.SITE, ObjType.CAMERA), "sensor must be attached to site or camera")
    elif typ in (S.JOINTPOS, S.JOINTVEL, S.JOINTACTFRC):
        need(ot == ObjType.JOINT, "sensor must be attached to joint")
        need(out["jnt_type"][objid] in (JointType.SLIDE, JointType.HINGE),
             "joint must be slide or hinge in sensor")
    elif typ in (S.TENDONACTFRC, S.TENDONPOS, S.TENDONVEL):
        need(ot == ObjType.TENDON, "sensor must be attached to tendon")
    elif typ in (S.ACTUATORPOS, S.ACTUATORVEL, S.ACTUATORFRC):
        need(ot == ObjType.ACTUATOR, "sensor must be attached to actuator")
    elif typ in (S.BALLQUAT, S.BALLANGVEL):
        need(ot == ObjType.JOINT, "sensor must be attached to joint")
        need(out["jnt_type"][objid] == JointType.BALL, "joint must be ball in sensor")
    elif typ in (S.JOINTLIMITPOS, S.JOINTLIMITVEL, S.JOINTLIMITFRC):
        need(ot == ObjType.JOINT, "sensor must be attached to joint")
        need(bool(out["jnt_limited"][objid]), "joint must be limited in sensor")
    elif typ in (S.TENDONLIMITPOS, S.TENDONLIMITVEL, S.TENDONLIMITFRC):
        need(ot == ObjType.TENDON, "sensor must be attached to tendon")
        need(bool(out["tendon_limited"][objid]), "tendon must be limited in sensor")
    elif typ in (S.FRAMEPOS, S.FRAMEQUAT, S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS,
                 S.FRAMELINVEL, S.FRAMEANGVEL, S.FRAMELINACC, S.FRAMEANGACC):
        need(ot in _SPATIAL, "sensor must be attached to (x)body, geom, site or camera")
    elif typ in (S.SUBTREECOM, S.SUBTREELINVEL, S.SUBTREEANGMOM):
        need(ot == ObjType.BODY, "sensor must be attached to body")
    elif typ == S.INSIDESITE:
        need(ot in _SPATIAL, "sensor must be attached to (x)body, geom, site or camera")
        need(rt == ObjType.SITE, "sensor must be associated with a site")
    elif typ in (S.GEOMDIST, S.GEOMNORMAL, S.GEOMFROMTO):
        need(ot in (ObjType.BODY, ObjType.GEOM) and rt in (ObjType.BODY, ObjType.GEOM),
             "sensor must be attached to body or geom")
        need(not (ot == rt and objid == refid),
             "1st body/geom must be different from 2nd body/geom")
        gtype = np.asarray(out["geom_type"])
        need(not ((ot == ObjType.GEOM and gtype[objid] == GeomType.HFIELD)
                  or (rt == ObjType.GEOM and gtype[refid] == GeomType.HFIELD)),
             "height fields are not supported in geom distance sensors")
    elif typ == S.CONTACT:
        need(ot in (ObjType.SITE, ObjType.BODY, ObjType.XBODY, ObjType.GEOM, ObjType.UNKNOWN),
             "first matching criterion: if set, must be (x)body, geom or site")
        need(rt in (ObjType.BODY, ObjType.XBODY, ObjType.GEOM, ObjType.UNKNOWN),
             "second matching criterion: if set, must be (x)body or geom")
    elif typ == S.USER:
        need(s["dim"] >= 0, "sensor dim must be non-negative in sensor")
        need(s["datatype"] != DataType.AXIS or s["dim"] == 3,
             "datatype AXIS requires dim=3 in sensor")
        need(s["datatype"] != DataType.QUATERNION or s["dim"] == 4,
             "datatype QUATERNION requires dim=4 in sensor")
    elif typ == S.TACTILE:
        need(ot == ObjType.MESH, "sensor must be associated with a mesh")
        need(rt == ObjType.GEOM, "sensor must be associated with a geom")

    # dimension (mjs_sensorDim; actuator sensors: one value per actuator output)
    if typ in _DIM3:
        return 3
    if typ in _QUAT:
        return 4
    if typ == S.GEOMFROMTO:
        return 6
    if typ == S.CAMPROJECTION:
        return 2
    if typ == S.CONTACT:
        return s["intprm"][2] * _size(s["intprm"][0], _CONDATA_SIZE)
    if typ == S.RANGEFINDER:
        nray = 1
        if ot == ObjType.CAMERA:
            res = np.asarray(out["cam_resolution"])[objid]
            nray = int(res[0]) * int(res[1])
        return _size(s["intprm"][0], _RAYDATA_SIZE) * nray
    if typ == S.TACTILE:
        return 3 * len(ctx.meshes[objid].processed.vert)
    if typ == S.USER:
        return s["dim"]
    if typ in (S.ACTUATORPOS, S.ACTUATORVEL, S.ACTUATORFRC):
        return int(out["actuator_outnum"][objid])
    return 1


# sensor types jaxsim.sensor computes; the others are compiled (for comparisons of the
# compiled model) but a model using them is rejected by `load`
_SIMULATED = frozenset({
    S.TOUCH, S.ACCELEROMETER, S.VELOCIMETER, S.GYRO, S.FORCE, S.TORQUE, S.MAGNETOMETER,
    S.JOINTPOS, S.JOINTVEL, S.TENDONPOS, S.TENDONVEL, S.ACTUATORPOS, S.ACTUATORVEL,
    S.ACTUATORFRC, S.JOINTACTFRC, S.TENDONACTFRC, S.BALLQUAT, S.BALLANGVEL, S.JOINTLIMITPOS,
    S.JOINTLIMITVEL, S.JOINTLIMITFRC, S.TENDONLIMITPOS, S.TENDONLIMITVEL, S.TENDONLIMITFRC,
    S.FRAMEPOS, S.FRAMEQUAT, S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS, S.FRAMELINVEL,
    S.FRAMEANGVEL, S.FRAMELINACC, S.FRAMEANGACC, S.SUBTREECOM, S.SUBTREELINVEL,
    S.SUBTREEANGMOM, S.E_POTENTIAL, S.E_KINETIC, S.CLOCK, S.INSIDESITE,
    S.CAMPROJECTION, S.CONTACT, S.GEOMDIST, S.GEOMNORMAL, S.GEOMFROMTO, S.RANGEFINDER,
    S.TACTILE})


def _warn_uncomputed(ctx, s: dict, el) -> None:
    """Warns (naming the element, file and line) about a sensor jaxsim compiles but does not
    compute yet: its sensordata reads NaN. Sensors do not act on the physics, so the model
    still loads and simulates exactly; NaN makes the missing values impossible to mistake."""
    typ = s["type"]
    why = None
    if typ not in _SIMULATED:
        why = f"<{el.tag}> sensors ({S(typ).name.lower()}) are not computed by jaxsim yet"
    if why is not None:
        warnings.warn(f"{MJCFError(why, el)}; its sensordata reads NaN", UncomputedSensorWarning,
                      stacklevel=2)


class UncomputedSensorWarning(UserWarning):
    """A sensor that jaxsim compiles but does not compute (its sensordata reads NaN)."""


def compile_sensors(ctx, warn: bool = True) -> None:
    """Fills sensor_*, nsensor, nsensordata and extends nhistory.

    With `warn` (what `load` uses), each sensor jaxsim does not compute yet raises an
    UncomputedSensorWarning.
    """
    out = ctx.out
    els = list(sections(ctx, "sensor"))
    for el in els:
        if el.tag == "plugin":
            raise MJCFError("plugin sensors are not supported by jaxsim", el)
        ctx.add_name(ObjType.SENSOR, el.get("name"), el)
    rows, users = [], []
    hadr = int(out.get("nhistory", 0))
    for el in els:
        s = _read(el)
        nsample = int(el.get("nsample", "0"))
        interp = _INTERP[el.get("interp", "zoh")]
        delay, cutoff, noise = (_float(el, "delay", 0.0), _float(el, "cutoff", 0.0),
                                _float(el, "noise", 0.0))
        interval = np.zeros(2)
        if el.get("interval") is not None:
            vals = [float(t) for t in el.get("interval").split()]
            interval[: len(vals)] = vals
        if noise < 0:
            raise MJCFError("negative noise in sensor", el, "noise")
        if cutoff < 0:
            raise MJCFError("negative cutoff in sensor", el, "cutoff")
        if interval[0] < 0:
            raise MJCFError("negative interval in sensor", el, "interval")
        if interval[1] > 0:
            raise MJCFError("positive phase in sensor", el, "interval")
        if interval[0] > 0 and interval[1] <= -interval[0]:
            raise MJCFError("phase must be greater than -period in sensor", el, "interval")
        if delay > 0 and nsample <= 0:
            raise MJCFError("setting delay > 0 without a history buffer", el, "delay")
        if nsample > 16777216:
            raise MJCFError("at most 2^24 samples in sensor history buffer", el, "nsample")
        objid, refid = _resolve(ctx, s, el)
        typ = s["type"]
        if typ != S.USER:
            s["datatype"] = (DataType.POSITIVE if typ in _POSITIVE else DataType.AXIS
                             if typ in _AXIS else DataType.QUATERNION if typ in _QUAT
                             else DataType.REAL)
            s["needstage"] = Stage.ACC if typ in _ACC else Stage.VEL if typ in _VEL else Stage.POS
            if typ == S.CONTACT and not (s["intprm"][0] & _CONDATA_FORCES
                                         or s["intprm"][1] in _REDUCE_FORCES):
                # contact sensors that report no forces are computed at the position stage
                s["needstage"] = Stage.POS
        if typ == S.RANGEFINDER or typ == S.CONTACT:
            if s["intprm"][0] <= 0:
                raise MJCFError("data spec (intprm[0]) must be positive", el, "data")
        dim = _check(ctx, s, objid, refid, el)
        if typ == S.TACTILE:
            normal = ctx.meshes[objid].processed.normal
            if normal is not None and np.size(normal) == 9 * len(ctx.meshes[objid].processed.vert):
                raise MJCFError("tactile sensors on meshes with a normal frame per vertex "
                                "(slip channels) are not supported by jaxsim yet", el, "mesh")
        if warn:
            _warn_uncomputed(ctx, s, el)
        if cutoff > 0 and (s["datatype"] == DataType.QUATERNION or
                           (s["datatype"] == DataType.AXIS and typ != S.GEOMNORMAL)):
            raise MJCFError("cutoff applied to axis or quaternion datatype in sensor", el,
                            "cutoff")
        if nsample > 0:
            h = hadr
            hadr += 2 + nsample + nsample * dim
        else:
            h = -1
        rows.append((int(typ), int(s["datatype"]), int(s["needstage"]), int(s["objtype"]),
                     objid, int(s["reftype"]), refid, s["intprm"], dim, nsample, interp, h,
                     cutoff, noise, delay, interval))
        u = el.get("user")
        users.append(np.array([float(t) for t in u.split()]) if u else np.zeros(0))
    n = len(rows)
    col = lambda k: np.array([r[k] for r in rows], dtype=np.int64)  # noqa: E731
    colf = lambda k: np.array([r[k] for r in rows], dtype=np.float64)  # noqa: E731
    out["nsensor"] = n
    for k, name in enumerate(("type", "datatype", "needstage", "objtype", "objid", "reftype",
                              "refid")):
        out[f"sensor_{name}"] = col(k)
    out["sensor_intprm"] = np.array([r[7] for r in rows], dtype=np.int64).reshape(n, 3)
    dims = col(8)
    out["sensor_dim"] = dims
    out["sensor_adr"] = (np.concatenate([[0], np.cumsum(dims)[:-1]]).astype(np.int64)
                         if n else dims)
    out["nsensordata"] = int(dims.sum())
    out["sensor_history"] = np.array([(r[9], r[10]) for r in rows], dtype=np.int64).reshape(n, 2)
    out["sensor_historyadr"] = col(11)
    out["nhistory"] = hadr
    out["sensor_cutoff"], out["sensor_noise"], out["sensor_delay"] = colf(12), colf(13), colf(14)
    out["sensor_interval"] = np.array([r[15] for r in rows], dtype=np.float64).reshape(n, 2)
    out["sensor_user"] = nuser(ctx, "nuser_sensor", users, els)
