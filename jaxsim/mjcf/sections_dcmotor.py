"""The <dcmotor> actuator shortcut: electrical/thermal/friction parameters -> prm arrays.

Follows MuJoCo's reader (values inherited from the record when it is already a DC motor)
and `mjs_setToDCMotor` (derivations of the motor constant and resistance from nominal data,
the activation count, and the parameter layout).
"""

from __future__ import annotations

import math

import numpy as np

from jaxsim.mjcf.sections_common import LIMITED
from jaxsim.types import BiasType, DynType, GainType


def set_dcmotor(rec: dict, s, ctrlspec_given) -> str:
    """Applies one <dcmotor> element (`s`: its attribute reader) to the record.

    Returns:
      An error message, '' if none.
    """
    gp, bp, dp = rec["gainprm"], rec["biasprm"], rec["dynprm"]
    inh = rec["gaintype"] == GainType.DCMOTOR
    g = (lambda v: v) if inh else (lambda v: 0.0)
    motorconst = [g(gp[1]), 0.0]
    resistance = g(gp[0])
    nominal = [0.0, 0.0, 0.0]
    saturation = [0.0, 0.0, g(dp[1])]
    controller = [g(gp[4]), g(gp[5]), g(gp[6]), g(dp[7]), g(dp[8]), g(gp[7])]
    inductance = [0.0, g(dp[0])]
    cogging = [g(bp[0]), g(bp[1]), g(bp[2])]
    thermal = [g(dp[2]), g(dp[3]), 0.0, g(gp[2]), g(gp[3]), g(dp[4])]
    lugre = [g(dp[5]), g(dp[6]), g(bp[3]), g(bp[4]), g(bp[5])]
    ctrlspec = rec["ctrlspec"] if inh else 0
    authored = set()
    for name, arr, n in (("motorconst", motorconst, 2), ("nominal", nominal, 3),
                         ("saturation", saturation, 3), ("inductance", inductance, 2),
                         ("cogging", cogging, 3), ("controller", controller, 6),
                         ("thermal", thermal, 6), ("lugre", lugre, 5)):
        v = s.get(name, n, exact=False)
        if v is not None:
            authored.add(name)
            if name == "inductance" and not any(v):
                arr[:] = [0.0] * len(arr)  # a zero inductance clears the inherited one
            else:
                arr[: len(v)] = v
    if "saturation" in authored:  # MuJoCo 4.0: the limits come from this saturation only
        rec["forcerange"] = np.zeros(2)
        rec["forcelimited"] = LIMITED["false"]
    r = s.get("resistance")
    if r is not None:
        resistance = r
    if ctrlspec_given is not None:
        ctrlspec = ctrlspec_given

    # the shortcut rewrites whole prm vectors from the values gathered above
    gp, bp, dp = np.zeros(10), np.zeros(10), np.zeros(10)
    rec["gainprm"], rec["biasprm"], rec["dynprm"] = gp, bp, dp

    R, Kt, Ke = resistance, motorconst[0], motorconst[1]
    vn, tau0, omega0 = nominal
    if vn > 0 and Ke <= 0 and omega0 > 0:
        B = rec["damping"][0]
        if B > 0 and R > 0:
            disc = vn * vn - 4 * R * B * omega0 * omega0
            Ke = (vn + math.sqrt(disc)) / (2 * omega0) if disc > 0 else vn / omega0
        elif B > 0 and tau0 > 0:
            ke = vn / omega0 - vn * B / tau0
            Ke = ke if ke > 0 else vn / omega0
        else:
            Ke = vn / omega0
    if Kt < 0 or Ke < 0:
        return "DC motor: motor constants must be non-negative"
    K = math.sqrt(Kt * Ke) if (Kt > 0 and Ke > 0) else (Kt if Kt > 0 else Ke)
    if R == 0 and vn > 0 and tau0 > 0 and K > 0:
        R = K * vn / tau0
    if R <= 0:
        return "DC motor: resistance R must be positive"
    rec.update(dyntype=int(DynType.DCMOTOR), gaintype=int(GainType.DCMOTOR),
               biastype=int(BiasType.DCMOTOR))
    gp[0], gp[1] = R, K
    gp[4], gp[5], gp[6] = controller[0], controller[1], controller[2]
    dp[7], dp[8] = controller[3], controller[4]
    if controller[5] > 0:
        gp[7] = controller[5]
    if saturation[0] > 0 or saturation[1] > 0:
        tau_max = saturation[0]
        if tau_max == 0 and saturation[1] > 0:
            tau_max = K * saturation[1]
        rec["forcerange"] = rec["forcerange"].copy()
        rec["forcerange"][:] = (-tau_max, tau_max)
        rec["forcelimited"] = LIMITED["true"]
    if saturation[2] > 0:
        dp[1] = saturation[2]
    bp[0], bp[1], bp[2] = cogging
    actdim = 0
    if inductance[0] < 0:
        return "DC motor: inductance must be non-negative"
    if inductance[1] < 0:
        return "DC motor: electrical time constant must be non-negative"
    te = inductance[0] / R if inductance[0] > 0 else inductance[1]
    dp[0] = te
    actdim += te > 0
    actdim += controller[3] > 0
    actdim += controller[1] > 0
    if thermal[0] > 0 or thermal[1] > 0 or thermal[2] > 0:
        RT, C, tth, alpha, T0, Ta = thermal
        if tth > 0 and RT > 0:  # MuJoCo 4.0: the time constant decides C
            C = tth / RT
        elif tth > 0 and C > 0 and RT == 0:
            RT = tth / C
        if RT <= 0:
            return "DC motor: thermal resistance must be positive"
        if C <= 0:
            return "DC motor: thermal capacitance must be positive"
        dp[2], dp[3], dp[4] = RT, C, Ta
        gp[2], gp[3] = alpha, T0
        actdim += 1
    if lugre[0] > 0:
        dp[5], dp[6] = lugre[0], lugre[1]
        bp[3], bp[4], bp[5] = lugre[2], lugre[3], lugre[4]
        actdim += 1
    gp[8] = 0.0
    rec["ctrlspec"] = ctrlspec
    rec["actdim"] = int(actdim)
    rec["actlimited"] = LIMITED["false"]
    rec["actearly"] = True
    return ""
