"""The actuator pass: shortcut elements over default-class records, transmissions, ranges.

Every actuator starts from MuJoCo's built-in record (`mjs_defaultActuator`), which each
actuator element of its default-class chain modifies in turn (whatever its tag: one default
actuator record is shared by all shortcut tags), then the element itself. A shortcut tag
(position, muscle, ...) first reads the general attributes, then rewrites the
dynamics/gain/bias parameters from its own attributes, seeded from the current record, as
MuJoCo's `mjs_setTo*` functions do.
"""

from __future__ import annotations

import math

import numpy as np

from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.sections_common import (
    LIMITED,
    chain,
    check_limited,
    fresh,
    is_limited,
    nuser,
    own_attrs,
    read_into,
    sections,
)
from jaxsim.types import BiasType, DynType, GainType, JointType, ObjType, TrnType

# attributes every actuator tag reads into the record (MuJoCo's kGeneralAttrs)
_GENERAL = ("group", "nsample", "interp", "delay", "ctrlrange", "user", "ctrllimited",
            "forcelimited", "actlimited", "forcerange", "actrange", "lengthrange", "gear",
            "damping", "armature", "actdim", "velrange", "ffrange", "dyntype", "gaintype",
            "biastype", "dynprm", "gainprm", "biasprm", "actearly")
_DYN = {"none": DynType.NONE, "integrator": DynType.INTEGRATOR, "filter": DynType.FILTER,
        "filterexact": DynType.FILTEREXACT, "muscle": DynType.MUSCLE,
        "dcmotor": DynType.DCMOTOR, "pid": DynType.PID, "user": DynType.USER}
_GAIN = {"fixed": GainType.FIXED, "affine": GainType.AFFINE, "muscle": GainType.MUSCLE,
         "dcmotor": GainType.DCMOTOR, "so3": GainType.SO3, "pid": GainType.PID,
         "user": GainType.USER}
_BIAS = {"none": BiasType.NONE, "affine": BiasType.AFFINE, "muscle": BiasType.MUSCLE,
         "dcmotor": BiasType.DCMOTOR, "so3": BiasType.SO3, "user": BiasType.USER}
_INTERP = {"zoh": 0, "linear": 1, "cubic": 2}
# mjtCtrlChart / mjtCtrlInput (actuator input signatures)
CHART = {"expmap": 1, "quat": 2}
INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE, INPUT_NONE, INPUT_PRESSURE = 1, 2, 4, 8, 16, 32
_INPUT_BITS = {"pos": INPUT_POS, "vel": INPUT_VEL, "ff": INPUT_FF, "voltage": INPUT_VOLTAGE}
_TRN_ATTRS = (("joint", TrnType.JOINT), ("jointinparent", TrnType.JOINTINPARENT),
              ("tendon", TrnType.TENDON), ("cranksite", TrnType.SLIDERCRANK),
              ("site", TrnType.SITE), ("body", TrnType.BODY))

# mjs_defaultActuator (enums as MuJoCo's integers, vectors full length)
_ACTUATOR = {
    "group": 0, "nsample": 0, "interp": 0, "delay": 0.0, "ctrlrange": np.zeros(2),
    "user": np.zeros(0), "ctrllimited": LIMITED["auto"], "forcelimited": LIMITED["auto"],
    "actlimited": LIMITED["auto"], "forcerange": np.zeros(2), "actrange": np.zeros(2),
    "lengthrange": np.zeros(2), "gear": np.array([1.0, 0, 0, 0, 0, 0]), "damping": np.zeros(3),
    "armature": 0.0, "actdim": -1, "velrange": np.zeros(2), "ffrange": np.zeros(2),
    "dyntype": int(DynType.NONE), "gaintype": int(GainType.FIXED), "biastype": int(BiasType.NONE),
    "dynprm": np.array([1.0] + [0.0] * 9), "gainprm": np.array([1.0] + [0.0] * 9),
    "biasprm": np.zeros(10), "actearly": False, "cranklength": 0.0, "inheritrange": 0.0,
    "ctrlspec": 0, "decl": 0, "trntype": int(TrnType.UNDEFINED), "target": None, "slidersite": None,
    "refsite": None, "plugin": False,
    "kind": "none",  # the last shortcut tag applied to the record ('none': only <general>)
}


def _num(el, attr: str, n: int = 1, exact: bool = True):
    """MuJoCo's ReadAttr: None if absent; floats otherwise (too many values is an error)."""
    text = el.get(attr)
    if text is None:
        return None
    try:
        vals = [float(t) for t in text.split()]
    except ValueError:
        raise MJCFError(f"bad number in '{text}'", el, attr) from None
    if exact and len(vals) < n:
        raise MJCFError(f"attribute '{attr}' does not have enough data", el, attr)
    if len(vals) > n:
        raise MJCFError(f"attribute '{attr}' has too much data", el, attr)
    return vals if n > 1 or not exact else vals[0]


def _read_input(el, attrs: dict, rec_or_none):
    """ReadInputSpec: the 'input' attribute as a ctrlspec integer, or None if absent."""
    text = attrs.get("input")
    if text is None:
        return None
    text = text.strip()
    if text in CHART:
        return CHART[text]
    if text == "none":
        return INPUT_NONE
    spec, prev = 0, 0
    for tok in text.split():
        bit = _INPUT_BITS.get(tok)
        if bit is None:
            raise MJCFError(f"invalid input keyword '{tok}'", el, "input")
        if bit <= prev:
            raise MJCFError("inputs must be listed in canonical order [pos, vel, ff, voltage]",
                            el, "input")
        spec |= bit
        prev = bit
    return spec


class _Step:
    """Attribute access for one element (or default record) of the chain."""

    def __init__(self, el, attrs: dict):
        self.el, self.attrs = el, attrs

    def get(self, attr: str, n: int = 1, exact: bool = True):
        if attr not in self.attrs:
            return None
        proxy = {attr: self.attrs[attr]}
        return _num(_Proxy(self.el, proxy), attr, n, exact)


class _Proxy:
    """An element-like view of an attribute dict (for error messages on the real element)."""

    def __init__(self, el, attrs):
        self.el, self.attrs = el, attrs
        self.tag = getattr(el, "tag", None)

    def get(self, k, d=None):
        if k in self.attrs:
            return self.attrs[k]
        return self.el.get(k, d) if (self.el is not None and k in ("_src", "name")) else d

    def items(self):
        return list(self.attrs.items())


def _apply(rec: dict, tag: str, attrs: dict, el, is_element: bool) -> None:
    """One OneActuator step: general attributes, transmission, then the shortcut."""
    general = {k: v for k, v in attrs.items() if k in _GENERAL}
    read_into(rec, general, "general", el=el)
    for key, table in (("dyntype", _DYN), ("gaintype", _GAIN), ("biastype", _BIAS)):
        if key in general:
            rec[key] = int(table[rec[key]])
    for key in ("ctrllimited", "forcelimited", "actlimited"):
        if key in general:
            rec[key] = LIMITED[rec[key]]
    if "interp" in general:
        rec["interp"] = _INTERP[rec["interp"]]
    s = _Step(el, attrs)

    # transmission target and type (element only: these attributes have no defaults)
    for attr, trn in _TRN_ATTRS:
        if attr in attrs:
            rec["target"], rec["trntype"] = attrs[attr], int(trn)
            rec["target_attr"] = attr
    cl = s.get("cranklength")
    if cl is not None:
        rec["cranklength"] = cl
    if "slidersite" in attrs:
        rec["slidersite"] = attrs["slidersite"]
    if (cl is not None or "slidersite" in attrs) and rec["trntype"] not in (
            TrnType.SLIDERCRANK, TrnType.UNDEFINED):
        raise MJCFError("cranklength and slidersite can only be used in slidercrank "
                        "transmission", el)
    if "refsite" in attrs:
        rec["refsite"] = attrs["refsite"]
        if rec["trntype"] not in (TrnType.SITE, TrnType.UNDEFINED):
            raise MJCFError("refsite can only be used with site transmission", el, "refsite")

    err = ""
    if tag == "general":
        spec = _read_input(el, attrs, rec)
        if spec is not None:
            rec["ctrlspec"] = spec
        return
    if tag == "plugin":
        raise MJCFError("plugin actuators are not supported by jaxsim", el)
    # A shortcut inherits its parameters only from a record of its own kind; otherwise it
    # starts from the built-in parameters. Either way it rewrites whole prm vectors.
    # (a cylinder keeps the filter time constant of a record without dynamics)
    keep_tc = rec["dynprm"][0] if (rec["dyntype"] == DynType.NONE
                                   and rec["gaintype"] == GainType.FIXED) else None
    if not _compatible(tag, rec):
        rec["gainprm"], rec["biasprm"], rec["dynprm"] = _builtin_prm()
        rec["inheritrange"] = 0.0
        fresh_pid = True
        if tag == "cylinder" and keep_tc is not None:
            rec["dynprm"][0] = keep_tc
    else:
        fresh_pid = False
    rec["kind"] = tag
    # activation layout, timing and inputs are the shortcut's own (pid and dcmotor set
    # their inputs below, inheriting them only from a record of their kind)
    rec["actdim"], rec["actearly"], rec["actlimited"] = -1, False, LIMITED["auto"]
    if tag not in ("pid", "dcmotor") or fresh_pid:
        rec["ctrlspec"] = 0
    # the input declared by fixed/affine shortcuts (stored, no effect on the simulation)
    rec["decl"] = {"position": INPUT_POS, "velocity": INPUT_VEL, "intvelocity": INPUT_VEL,
                   "cylinder": INPUT_PRESSURE}.get(tag, 0)
    gp, bp, dp = rec["gainprm"], rec["biasprm"], rec["dynprm"]
    if tag == "orientation":
        kp = s.get("kp")
        kp = gp[0] if kp is None else kp
        kv, dampratio = s.get("kv"), s.get("dampratio")
        spec = _read_input(el, attrs, rec)
        if spec is not None:
            rec["ctrlspec"] = spec
        gp[0] = kp
        err = _servo_bias(bp, kp, kv, dampratio)
        rec.update(gaintype=int(GainType.SO3), biastype=int(BiasType.SO3),
                   dyntype=int(DynType.NONE))
    elif tag == "motor":
        _reset(rec)
        rec.update(dyntype=int(DynType.NONE), gaintype=int(GainType.FIXED),
                   biastype=int(BiasType.NONE))
    elif tag in ("position", "intvelocity"):
        kp = s.get("kp")
        kp = gp[0] if kp is None else kp
        kv, dampratio, timeconst = s.get("kv"), s.get("dampratio"), s.get("timeconst")
        ir = s.get("inheritrange")
        ir = rec["inheritrange"] if ir is None else ir
        b2 = bp[2]
        tc0 = dp[0] if rec["dyntype"] == DynType.FILTEREXACT else None
        gp, bp, dp = _reset(rec)
        bp[2] = b2
        rec["dyntype"] = int(DynType.NONE)
        if tc0 is not None:
            dp[0], rec["dyntype"] = tc0, int(DynType.FILTEREXACT)
        err = _set_position(rec, kp, kv, dampratio, timeconst, ir)
        if tag == "intvelocity":
            rec["dyntype"] = int(DynType.INTEGRATOR)
        rkey = "actrange" if tag == "intvelocity" else "ctrlrange"
        err = err or _inherit_conflict(rec, attrs, rkey, (rkey,))
    elif tag == "pid":
        kp = s.get("kp")
        kp = (1.0 if fresh_pid else -bp[1]) if kp is None else kp
        kv, dampratio = s.get("kv"), s.get("dampratio")
        is_pid = rec["dyntype"] == DynType.PID
        ki = s.get("ki")
        ki = gp[0] * is_pid if ki is None else ki
        imax = s.get("imax")
        imax = dp[0] * is_pid if imax is None else imax
        slew = s.get("slewmax")
        slew = dp[1] * is_pid if slew is None else slew
        b2 = bp[2]
        gp, bp, dp = _reset(rec, dyn0=0.0)
        bp[2] = b2
        spec = _read_input(el, attrs, rec)
        if spec is not None:
            rec["ctrlspec"] = spec
        pr = s.get("posrange", 2)
        if pr is not None:
            rec["ctrlrange"] = np.array(pr, dtype=np.float64)
        ir = s.get("inheritrange")
        ir = rec["inheritrange"] if ir is None else ir
        err = _servo_bias(bp, kp, kv, dampratio)
        if not err:
            if slew < 0:
                err = "slewmax cannot be negative"
            gp[0] = ki
            dp[1] = slew
            rec["dyntype"] = int(DynType.PID if (ki or slew) else DynType.NONE)
            if ki:
                dp[0] = imax
            rec["inheritrange"] = ir
            err = err or _inherit_conflict(rec, attrs, "ctrlrange", ("ctrlrange", "posrange"))
            rec.update(gaintype=int(GainType.PID), biastype=int(BiasType.AFFINE))
    elif tag == "velocity":
        kv = s.get("kv")
        kv = gp[0] if kv is None else kv
        gp, bp, dp = _reset(rec)
        gp[0] = kv
        bp[2] = -kv
        rec.update(dyntype=int(DynType.NONE), gaintype=int(GainType.FIXED),
                   biastype=int(BiasType.AFFINE))
    elif tag == "damper":
        kv = s.get("kv")
        if kv is None:
            kv = -gp[2] if rec["gaintype"] == GainType.AFFINE else 0.0
        gp, bp, dp = _reset(rec)
        gp[0] = 0.0
        gp[2] = -kv
        rec.update(ctrllimited=LIMITED["true"], dyntype=int(DynType.NONE),
                   gaintype=int(GainType.AFFINE), biastype=int(BiasType.NONE))
        if kv < 0:
            err = "damping coefficient cannot be negative"
        elif rec["ctrlrange"][0] < 0 or rec["ctrlrange"][1] < 0:
            err = "damper control range cannot be negative"
    elif tag == "cylinder":
        timeconst = s.get("timeconst")
        timeconst = dp[0] if timeconst is None else timeconst
        bias = s.get("bias", 3)
        bias = list(bp[:3]) if bias is None else bias
        area = s.get("area")
        area = gp[0] if area is None else area
        diameter = s.get("diameter")
        gp, bp, dp = _reset(rec)
        dp[0] = timeconst
        gp[0] = area
        if diameter is not None and diameter >= 0:
            gp[0] = math.pi / 4 * diameter * diameter
        rec.update(dyntype=int(DynType.FILTER), gaintype=int(GainType.FIXED),
                   biastype=int(BiasType.AFFINE))
        bp[0], bp[1], bp[2] = bias[0], bias[1], bias[2]
    elif tag == "muscle":
        err = _set_muscle(rec, s)
    elif tag == "adhesion":
        gain = s.get("gain")
        gain = gp[0] if gain is None else gain
        cr = s.get("ctrlrange", 2)
        if cr is not None:
            rec["ctrlrange"] = np.array(cr, dtype=np.float64)
        gp, bp, dp = _reset(rec)
        gp[0] = gain
        rec.update(ctrllimited=LIMITED["true"], dyntype=int(DynType.NONE),
                   gaintype=int(GainType.FIXED),
                   biastype=int(BiasType.NONE))
        if gain < 0:
            err = "adhesion gain cannot be negative"
        elif rec["ctrlrange"][0] < 0 or rec["ctrlrange"][1] < 0:
            err = "adhesion control range cannot be negative"
    elif tag == "dcmotor":
        from jaxsim.mjcf.sections_dcmotor import set_dcmotor

        err = set_dcmotor(rec, s, _read_input(el, attrs, rec))
    if err:
        raise MJCFError(err, el)


def _builtin_prm():
    """The built-in (mjs_defaultActuator) gain, bias and dynamics parameters."""
    return (np.array([1.0] + [0.0] * 9), np.zeros(10), np.array([1.0] + [0.0] * 9))


def _reset(rec: dict, dyn0: float = 1.0):
    """Replaces the prm vectors with fresh built-in ones; returns (gain, bias, dyn)."""
    gp, bp, dp = _builtin_prm()
    dp[0] = dyn0
    rec["gainprm"], rec["biasprm"], rec["dynprm"] = gp, bp, dp
    return gp, bp, dp


def _compatible(tag: str, rec: dict) -> bool:
    """Whether a shortcut inherits parameters from the record (MuJoCo 4.0's behaviour).

    A shortcut inherits from a record last shaped by the same shortcut, or from a record
    only <general> elements have shaped whose types and parameters already describe an
    actuator of that kind (position-like servos, velocity servos and cylinders also
    accept a plain record: fixed gain, no bias, no dynamics).
    """
    if rec["kind"] == tag:
        return True
    if rec["kind"] != "none":  # the record was made by another shortcut
        return False
    gt, bt, dt = rec["gaintype"], rec["biastype"], rec["dyntype"]
    gp, bp = rec["gainprm"], rec["biasprm"]
    plain = gt == GainType.FIXED and bt == BiasType.NONE and dt == DynType.NONE
    servo = gt == GainType.FIXED and bt == BiasType.AFFINE and gp[0] == -bp[1]
    if tag == "position":
        return (gt == GainType.FIXED and dt in (DynType.NONE, DynType.FILTEREXACT)
                and (bt == BiasType.NONE or servo))
    if tag == "intvelocity":
        return plain or (servo and dt == DynType.INTEGRATOR)
    if tag == "velocity":
        return gt == GainType.FIXED and dt == DynType.NONE and (
            bt == BiasType.NONE or (bt == BiasType.AFFINE and bp[1] == 0 and bp[2] == -gp[0]))
    if tag == "cylinder":
        return plain or (gt == GainType.FIXED and bt == BiasType.AFFINE and dt == DynType.FILTER)
    if tag == "adhesion":
        return gt == GainType.FIXED and bt == BiasType.NONE
    if tag == "damper":
        return gt == GainType.AFFINE
    if tag == "muscle":
        return gt == GainType.MUSCLE
    if tag == "orientation":
        return gt == GainType.SO3
    if tag == "pid":
        return gt == GainType.PID
    if tag == "dcmotor":
        return gt == GainType.DCMOTOR
    return False  # motor: nothing to inherit


def _servo_bias(bp, kp, kv, dampratio) -> str:
    """A servo's bias: -kp on the position, -kv (or a dampratio, converted by set_const) on
    the velocity (mjs_setToPosition, mjs_setToPID, mjs_setToOrientation). Returns an error."""
    if kv is not None and dampratio is not None:
        return "kv and dampratio cannot both be defined"
    bp[1] = -kp
    if kv is not None:
        if kv < 0:
            return "kv cannot be negative"
        bp[2] = -kv
    if dampratio is not None:
        if dampratio < 0:
            return "dampratio cannot be negative"
        bp[2] = dampratio
    return ""


def _set_position(rec, kp, kv, dampratio, timeconst, inheritrange) -> str:
    """mjs_setToPosition."""
    gp, bp, dp = rec["gainprm"], rec["biasprm"], rec["dynprm"]
    gp[0] = kp
    err = _servo_bias(bp, kp, kv, dampratio)
    if err:
        return err
    if timeconst is not None:
        if timeconst < 0:
            return "timeconst cannot be negative"
        dp[0] = timeconst
        rec["dyntype"] = int(DynType.NONE if timeconst == 0 else DynType.FILTEREXACT)
    rec["inheritrange"] = inheritrange
    rec["gaintype"], rec["biastype"] = int(GainType.FIXED), int(BiasType.AFFINE)
    return ""


def _inherit_conflict(rec, attrs: dict, key: str, range_attrs: tuple) -> str:
    """inheritrange against an explicit range (`key`: the range the servo's input uses).

    As MuJoCo 4.0 resolves it: within one element, giving both is an error; otherwise the
    later of the two wins (an explicit range cancels an inherited inheritrange, an explicit
    inheritrange overrides an inherited range); a record that still holds both is an error.
    """
    has_ir = "inheritrange" in attrs and rec["inheritrange"] > 0
    has_range = any(a in attrs for a in range_attrs)
    name = "posrange" if "posrange" in range_attrs else key
    if has_ir and has_range:
        return f"{name} and inheritrange cannot both be defined"
    if has_ir:
        return ""
    if has_range:
        rec["inheritrange"] = 0.0
        return ""
    if rec["inheritrange"] > 0 and (rec[key][0] or rec[key][1]):
        return f"{name} and inheritrange cannot both be defined"
    return ""


def _set_muscle(rec, s) -> str:
    """The muscle shortcut (mjs_setToMuscle): global defaults replaced by muscle defaults."""
    gp, bp, dp = rec["gainprm"], rec["biasprm"], rec["dynprm"]
    tausmooth = s.get("tausmooth")
    tausmooth = dp[2] if tausmooth is None else tausmooth
    timeconst = s.get("timeconst", 2) or [-1.0, -1.0]
    rng = s.get("range", 2) or [-1.0, -1.0]
    vals = {k: s.get(k) for k in ("force", "scale", "lmin", "lmax", "vmax", "fpmax", "fvmax")}
    if dp[0] == 1:
        dp[0] = 0.01
    if dp[1] == 0:
        dp[1] = 0.04
    for i, (glob, mus) in enumerate(((1, 0.75), (0, 1.05), (0, -1), (0, 200), (0, 0.5),
                                     (0, 1.6), (0, 1.5), (0, 1.3), (0, 1.2))):
        if gp[i] == glob:
            gp[i] = mus
    if tausmooth < 0:
        return "muscle tausmooth cannot be negative"
    dp[2] = tausmooth
    for i in range(2):
        if timeconst[i] >= 0:
            dp[i] = timeconst[i]
        if rng[i] >= 0:
            gp[i] = rng[i]
    for i, k in enumerate(("force", "scale", "lmin", "lmax", "vmax", "fpmax", "fvmax")):
        v = vals[k]
        if v is not None and v >= 0:
            gp[2 + i] = v
    bp[:9] = gp[:9]
    rec.update(dyntype=int(DynType.MUSCLE), gaintype=int(GainType.MUSCLE),
               biastype=int(BiasType.MUSCLE))
    return ""


def _err(el, aid: int, msg: str, attr=None) -> MJCFError:
    name = el.get("name")
    who = f"actuator '{name}' (id = {aid})" if name else f"actuator {aid}"
    return MJCFError(f"{msg} in {who}", el, attr)


def _compile_one(ctx, rec: dict, el, aid: int) -> None:
    """mjCActuator::Compile: references, validity checks and derived per-input ranges."""
    out = ctx.out
    trn, target = rec["trntype"], rec["target"]
    if not target:
        raise _err(el, aid, "missing transmission target")
    tattr = rec.get("target_attr")
    trnid = [-1, -1]
    if trn in (TrnType.JOINT, TrnType.JOINTINPARENT):
        trnid[0] = ctx.lookup(ObjType.JOINT, target, el, tattr)
    elif trn == TrnType.SLIDERCRANK:
        if not rec["slidersite"]:
            raise _err(el, aid, "missing base site for slider-crank", "slidersite")
        trnid[1] = ctx.lookup(ObjType.SITE, rec["slidersite"], el, "slidersite")
        if rec["cranklength"] <= 0:
            raise _err(el, aid, "crank length must be positive", "cranklength")
        trnid[0] = ctx.lookup(ObjType.SITE, target, el, tattr)
    elif trn == TrnType.TENDON:
        trnid[0] = ctx.lookup(ObjType.TENDON, target, el, tattr)
    elif trn == TrnType.SITE:
        if rec["refsite"]:
            trnid[1] = ctx.lookup(ObjType.SITE, rec["refsite"], el, "refsite")
        trnid[0] = ctx.lookup(ObjType.SITE, target, el, tattr)
    elif trn == TrnType.BODY:
        trnid[0] = ctx.lookup(ObjType.BODY, target, el, tattr)
    rec["trnid"] = trnid

    gt, bt, dt = rec["gaintype"], rec["biastype"], rec["dyntype"]
    gp, dp = rec["gainprm"], rec["dynprm"]
    spec = rec["ctrlspec"]
    ctrlnum, ctrlspec = 1, 0
    outnum, so3 = 1, False
    if gt == GainType.SO3 or bt == BiasType.SO3:
        if gt != GainType.SO3 or bt != BiasType.SO3:
            raise _err(el, aid, "gaintype and biastype must both be 'so3'")
        if dt not in (DynType.NONE, DynType.INTEGRATOR):
            raise _err(el, aid, "so3 requires dyntype 'none' or 'integrator'")
        if gp[0] != -rec["biasprm"][1]:
            raise _err(el, aid, "so3 requires gainprm[0] == -biasprm[1]")
        if trn == TrnType.SITE:
            if not rec["refsite"]:
                raise _err(el, aid, "so3 site transmission requires refsite", "refsite")
        elif trn == TrnType.JOINT:
            if out["jnt_type"][trnid[0]] != JointType.BALL:
                raise _err(el, aid, "so3 joint transmission requires a ball joint", tattr)
        else:
            raise _err(el, aid, "so3 requires site or ball joint transmission", tattr)
        if dt == DynType.INTEGRATOR:
            if rec["actdim"] > 0 and rec["actdim"] != 3:
                raise _err(el, aid, "so3 integrator requires actdim 3", "actdim")
            rec["actdim"] = 3
            if rec["actlimited"] == LIMITED["true"] and not np.any(rec["actrange"]):
                rec["actlimited"] = LIMITED["false"]
        ctrlspec = spec or CHART["expmap"]
        if ctrlspec == CHART["quat"]:
            if dt != DynType.NONE:
                raise _err(el, aid, "so3 quat input requires dyntype 'none'", "input")
        elif ctrlspec != CHART["expmap"]:
            raise _err(el, aid, "so3 input must be expmap or quat", "input")
        if _lim(rec, "force") and rec["forcerange"][0] != 0:
            raise _err(el, aid, "so3 forcerange bounds the force norm, lower bound must be 0",
                       "forcerange")
        ctrlnum = 4 if ctrlspec == CHART["quat"] else 3
        outnum, so3 = 3, True
    if gt == GainType.PID:
        if bt != BiasType.AFFINE:
            raise _err(el, aid, "pid requires biastype 'affine'")
        if dt not in (DynType.NONE, DynType.PID):
            raise _err(el, aid, "pid requires dyntype 'none' or 'pid'")
        if dt == DynType.NONE and gp[0]:
            raise _err(el, aid, "ki (gainprm[0]) requires dyntype 'pid'")
        if trn == TrnType.BODY:
            raise _err(el, aid, "pid cannot use body transmission")
        if dt == DynType.PID:
            if dp[0] < 0:
                raise _err(el, aid, "imax (dynprm[0]) must be non-negative")
            if dp[1] < 0:
                raise _err(el, aid, "slewmax (dynprm[1]) must be non-negative")
            nslot = int(dp[1] > 0) + int(gp[0] > 0)
            if rec["actdim"] > 0 and rec["actdim"] != nslot:
                raise _err(el, aid, "pid controller states require matching actdim")
            rec["actdim"] = nslot
        ctrlspec = spec or (INPUT_POS | INPUT_VEL)
        if ctrlspec & ~(INPUT_POS | INPUT_VEL | INPUT_FF):
            raise _err(el, aid, "pid inputs are a subset of [pos, vel, ff]", "input")
        if dt == DynType.PID and not ctrlspec & INPUT_POS:
            raise _err(el, aid, "pid controller states require the pos input", "input")
        ctrlnum = sum(bool(ctrlspec & b) for b in (INPUT_POS, INPUT_VEL, INPUT_FF))
    if gt == GainType.DCMOTOR:
        ctrlspec = spec or INPUT_VOLTAGE
        if ctrlspec != INPUT_NONE and ctrlspec & ~(INPUT_POS | INPUT_VEL | INPUT_FF |
                                                   INPUT_VOLTAGE):
            raise _err(el, aid, "dcmotor inputs are 'none' or a subset of [pos, vel, ff, "
                       "voltage]", "input")
        controller = 0 if ctrlspec == INPUT_NONE else ctrlspec & (INPUT_POS | INPUT_VEL |
                                                                  INPUT_FF)
        if controller and gp[1] <= 0:
            raise _err(el, aid, "dcmotor controller inputs require a positive motor constant")
        if not controller and (gp[4] or gp[5] or gp[6]):
            raise _err(el, aid, "dcmotor controller gains require a controller input "
                       "[pos, vel, ff]")
        if gp[5] > 0 and not ctrlspec & INPUT_POS:
            raise _err(el, aid, "dcmotor integral gain requires the pos input")
        ctrlnum = sum(bool(ctrlspec & b) for b in (INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE))
        if not controller and dp[7] > 0:
            raise _err(el, aid, "dcmotor slew rate limiting requires a controller input "
                       "[pos, vel, ff]")
    if dt == DynType.PID and gt != GainType.PID:
        raise _err(el, aid, "dyntype 'pid' requires gaintype 'pid'")
    if spec and gt not in (GainType.SO3, GainType.PID, GainType.DCMOTOR):
        raise _err(el, aid, "input is only available for so3, pid and dcmotor actuators",
                   "input")
    scalar_trn = trn in (TrnType.JOINT, TrnType.JOINTINPARENT, TrnType.TENDON)
    if np.any(rec["damping"] != 0) and not scalar_trn:
        raise _err(el, aid, "damping requires joint or tendon transmission", "damping")
    if rec["armature"] != 0 and not scalar_trn:
        raise _err(el, aid, "armature requires joint or tendon transmission", "armature")

    # inheritrange: copy the target's range, scaled about its middle
    bp = rec["biasprm"]
    if (((gt == GainType.FIXED and gp[0] == -bp[1]) or gt == GainType.PID)
            and bt == BiasType.AFFINE and rec["inheritrange"] > 0):
        if dt in (DynType.NONE, DynType.FILTEREXACT, DynType.PID):
            key = "ctrlrange"
        elif dt == DynType.INTEGRATOR:
            key = "actrange"
        else:
            raise _err(el, aid, "inheritrange only available for position and intvelocity "
                       "actuators", "inheritrange")
        if trn == TrnType.JOINT:
            jt = out["jnt_type"][trnid[0]]
            if jt not in (JointType.HINGE, JointType.SLIDE):
                raise _err(el, aid, "inheritrange can only be used with hinge and slide joints",
                           "inheritrange")
            trange = np.asarray(out["jnt_range"])[trnid[0]]
        elif trn == TrnType.TENDON:
            trange = np.asarray(out["tendon_range"])[trnid[0]]
        else:
            raise _err(el, aid, "inheritrange can only be used with joint and tendon "
                       "transmission", "inheritrange")
        if trange[0] == trange[1]:
            raise _err(el, aid, f"inheritrange used but target '{target}' has no range defined",
                       "inheritrange")
        mean = 0.5 * (trange[1] + trange[0])
        radius = 0.5 * (trange[1] - trange[0]) * rec["inheritrange"]
        rec[key] = np.array([mean - radius, mean + radius])

    auto = ctx.compiler.autolimits
    for kind in ("force", "ctrl", "act"):
        check_limited(el, auto, "actuator", kind, rec[f"{kind}limited"], rec[f"{kind}range"])
    if rec["forcerange"][0] >= rec["forcerange"][1] and _lim(rec, "force"):
        raise _err(el, aid, "invalid force range", "forcerange")
    if rec["ctrlrange"][0] >= rec["ctrlrange"][1] and _lim(rec, "ctrl"):
        raise _err(el, aid, "invalid control range", "ctrlrange")
    if rec["actrange"][0] >= rec["actrange"][1] and _lim(rec, "act"):
        raise _err(el, aid, "invalid actrange", "actrange")
    if _lim(rec, "act") and dt == DynType.NONE:
        raise _err(el, aid, "actrange specified but dyntype is 'none'", "actrange")
    ad = rec["actdim"]
    if ad > 1 and dt not in (DynType.USER, DynType.DCMOTOR, DynType.PID) and not so3:
        raise _err(el, aid, "actdim > 1 is only allowed for dyntype 'user' and 'dcmotor'",
                   "actdim")
    if ad == 1 and dt == DynType.NONE:
        raise _err(el, aid, "invalid actdim 1 in stateless actuator", "actdim")
    if ad == 0 and dt not in (DynType.NONE, DynType.DCMOTOR):
        raise _err(el, aid, "invalid actdim 0 in stateful actuator", "actdim")
    if ad < 0:
        rec["actdim"] = int(dt not in (DynType.NONE, DynType.DCMOTOR))
    if dt == DynType.DCMOTOR and not rec["actearly"]:
        raise _err(el, aid, "actearly cannot be false for DC motor actuator", "actearly")
    for prm in (gp if gt == GainType.MUSCLE else None,
                bp if bt == BiasType.MUSCLE else None):
        if prm is None:
            continue
        if prm[0] >= prm[1]:
            raise _err(el, aid, "range[0]<range[1] required in muscle")
        if prm[4] >= 1 or prm[5] <= 1:
            raise _err(el, aid, "lmin<1<lmax required in muscle")
        if prm[3] <= 0 or prm[6] <= 0 or prm[7] <= 0 or prm[8] <= 0:
            raise _err(el, aid, "positive scale, vmax, fpmax, fvmax required in muscle")
    if rec["delay"] > 0 and rec["nsample"] <= 0:
        raise _err(el, aid, "setting delay > 0 without a history buffer", "delay")
    if (rec["delay"] > 0 or rec["nsample"] > 0) and ctrlnum == 0:
        raise _err(el, aid, "history and delay require an input")
    if rec["nsample"] > 16777216:
        raise _err(el, aid, "at most 2^24 samples in history buffer", "nsample")

    # per-input control ranges: ctrlrange broadcast; pid vel and ff inputs use their own
    lim = int(_lim(rec, "ctrl"))
    ranges = [(lim, rec["ctrlrange"].copy()) for _ in range(ctrlnum)]
    if gt == GainType.PID:
        j = 1 if ctrlspec & INPUT_POS else 0
        for bit, key in ((INPUT_VEL, "velrange"), (INPUT_FF, "ffrange")):
            if ctrlspec & bit:
                r = rec[key]
                ranges[j] = (int(r[0] < r[1]), r.copy())
                j += 1
    if not ctrlspec and gt in (GainType.FIXED, GainType.AFFINE):
        ctrlspec = rec["decl"]
    rec["ctrlnum"], rec["ctrlspec_"], rec["ranges"] = ctrlnum, ctrlspec, ranges
    rec["outnum"] = outnum
    if so3:
        rec["trntype"] = int(TrnType.SO3)


def _lim(rec, kind: str) -> bool:
    return is_limited(rec[f"{kind}limited"], rec[f"{kind}range"])


def compile_actuators(ctx) -> None:
    """Fills actuator_* (nu, na, nhistory) and resolves lengthrange where MuJoCo copies it."""
    out = ctx.out
    recs, els = [], []
    for el in sections(ctx, "actuator"):
        aid = ctx.add_name(ObjType.ACTUATOR, el.get("name"), el)
        rec = fresh(_ACTUATOR)
        for tag, attrs in chain(ctx, el, "actuator"):
            _apply(rec, tag, attrs, el, False)
        own = {k: v for k, v in own_attrs(el).items() if k not in ("class", "name")}
        _apply(rec, el.tag, own, el, True)
        recs.append(rec)
        els.append(el)
        del aid
    for aid, (rec, el) in enumerate(zip(recs, els, strict=True)):
        _compile_one(ctx, rec, el, aid)

    nu = len(recs)  # the actuator count here; out["nu"] is the control count
    f = lambda key, w: np.array([r[key] for r in recs], dtype=np.float64).reshape(nu, w)  # noqa
    i = lambda key: np.array([int(r[key]) for r in recs], dtype=np.int64)  # noqa: E731
    outnum = i("outnum")
    out["nactuator"] = nu
    out["nu"] = int(i("ctrlnum").sum())
    out["nout"] = int(outnum.sum())
    out["actuator_outnum"] = outnum
    out["actuator_outadr"] = np.concatenate([[0], np.cumsum(outnum)[:-1]]).astype(np.int64)[:nu]
    out["actuator_ctrlspec"] = i("ctrlspec_")
    out["actuator_trntype"] = i("trntype")
    out["actuator_dyntype"] = i("dyntype")
    out["actuator_gaintype"] = i("gaintype")
    out["actuator_biastype"] = i("biastype")
    out["actuator_trnid"] = np.array([r["trnid"] for r in recs], dtype=np.int64).reshape(nu, 2)
    actnum = i("actdim")
    out["actuator_actnum"] = actnum
    starts = np.concatenate([[0], np.cumsum(actnum)[:-1]]).astype(np.int64) if nu else actnum
    out["actuator_actadr"] = np.where(actnum > 0, starts, -1).astype(np.int64)
    out["na"] = int(actnum.sum())
    ctrlnum = i("ctrlnum")
    out["actuator_ctrlnum"] = ctrlnum
    out["actuator_ctrladr"] = (np.concatenate([[0], np.cumsum(ctrlnum)[:-1]]).astype(np.int64)
                               if nu else ctrlnum)
    out["actuator_group"] = i("group")
    hist, hadr, adr = [], [], 0
    for r in recs:
        hist.append((r["nsample"], r["interp"]))
        if r["nsample"] > 0:
            hadr.append(adr)
            adr += 2 + r["nsample"] * (1 + r["ctrlnum"])
        else:
            hadr.append(-1)
    out["actuator_history"] = np.array(hist, dtype=np.int64).reshape(nu, 2)
    out["actuator_historyadr"] = np.array(hadr, dtype=np.int64)
    out["nhistory"] = adr
    out["actuator_delay"] = f("delay", 1).reshape(nu)
    ranges = [rg for r in recs for rg in r["ranges"]]  # per control
    out["actuator_ctrllimited"] = np.array([rg[0] for rg in ranges], dtype=np.int64)
    out["actuator_ctrlrange"] = np.array([rg[1] for rg in ranges],
                                         dtype=np.float64).reshape(len(ranges), 2)
    out["actuator_forcelimited"] = np.array([_lim(r, "force") for r in recs], dtype=np.int64)
    out["actuator_actlimited"] = np.array([_lim(r, "act") for r in recs], dtype=np.int64)
    out["actuator_actearly"] = np.array([bool(r["actearly"]) for r in recs], dtype=np.int64)
    out["actuator_dynprm"] = f("dynprm", 10)
    out["actuator_gainprm"] = f("gainprm", 10)
    out["actuator_biasprm"] = f("biasprm", 10)
    damp = f("damping", 3)
    out["actuator_damping"], out["actuator_dampingpoly"] = damp[:, 0], damp[:, 1:]
    out["actuator_armature"] = f("armature", 1).reshape(nu)
    out["actuator_forcerange"] = f("forcerange", 2)
    out["actuator_actrange"] = f("actrange", 2)
    out["actuator_gear"] = np.repeat(f("gear", 6), outnum, axis=0)
    out["actuator_cranklength"] = f("cranklength", 1).reshape(nu)
    out["actuator_acc0"] = np.zeros(out["nout"])
    out["actuator_length0"] = np.zeros(out["nout"])
    out["actuator_user"] = nuser(ctx, "nuser_actuator", [r["user"] for r in recs], els)
    lr = _lengthrange(ctx, recs, els, f("lengthrange", 2))
    out["actuator_lengthrange"] = np.repeat(lr, outnum, axis=0)


def _lengthrange(ctx, recs, els, lr: np.ndarray) -> np.ndarray:
    """MuJoCo's lengthrange step, for the cases it resolves without simulating.

    Actuators selected by the compiler's <lengthrange mode> keep an explicit range
    (useexisting) or copy their joint/tendon limits (uselimit); the others are listed in
    ctx.lengthrange_sim for the simulation-based search (jaxsim.mjcf.lengthrange).
    """
    opt = ctx.compiler.lengthrange
    mode = opt.get("mode", "muscle")
    out = ctx.out
    for aid, r in enumerate(recs):
        muscle = r["gaintype"] == GainType.MUSCLE or r["biastype"] == BiasType.MUSCLE
        user = r["gaintype"] == GainType.USER or r["biastype"] == BiasType.USER
        if (mode == "none" or (mode == "muscle" and not muscle)
                or (mode == "muscleuser" and not muscle and not user)):
            continue
        if opt.get("useexisting", True) and lr[aid, 0] < lr[aid, 1]:
            continue
        tid = r["trnid"][0]
        if opt.get("uselimit", False):
            if r["trntype"] in (TrnType.JOINT, TrnType.JOINTINPARENT) and \
                    out["jnt_limited"][tid]:
                lr[aid] = np.asarray(out["jnt_range"])[tid]
                continue
            if r["trntype"] == TrnType.TENDON and out["tendon_limited"][tid]:
                lr[aid] = np.asarray(out["tendon_range"])[tid]
                continue
        ctx.lengthrange_sim.append(aid)  # found by simulation once the model is built
    if ctx.lengthrange_sim:
        ctx.lengthrange_error = lambda aid, msg: _err(els[aid], aid, msg, "lengthrange")
    return lr
