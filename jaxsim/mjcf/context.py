"""Compiler state shared by the compilation passes (tree, sections, assets)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from jaxsim.mjcf import spatial
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.parse import Attrs, Defaults, Source, element_attrs
from jaxsim.types import ObjType


class Compiler:
    """Settings of <compiler> (merged over all <compiler> elements, in document order)."""

    def __init__(self):
        self.degree = True
        self.eulerseq = "xyz"
        self.autolimits = True
        self.inertiafromgeom = "auto"
        self.inertiagrouprange = (0, 5)
        self.boundmass = 0.0
        self.boundinertia = 0.0
        self.balanceinertia = False
        self.settotalmass = -1.0
        self.meshdir = ""
        self.texturedir = ""
        self.assetdir = ""
        self.discardvisual = False
        self.fusestatic = False
        self.alignfree = False
        self.fitaabb = False
        self.saveinertial = False
        self.lengthrange: dict = {"mode": "muscle", "useexisting": True, "uselimit": False,
                                  "accel": 20.0, "maxforce": 0.0, "timeconst": 1.0,
                                  "timestep": 0.01, "inttotal": 10.0, "interval": 2.0,
                                  "tolrange": 0.05}


class Ctx:
    """What every compilation pass reads and writes.

    Attributes:
      root: the expanded <mujoco> element.
      source: file access (model directory and in-memory assets).
      defaults: the default classes.
      compiler: the <compiler> settings.
      out: Model field name -> value (numpy float64/int arrays, Python ints); the driver
        converts it to a `Model` at the end.
      names: ObjType -> list of names in id order ('' for unnamed objects).
      ids: ObjType -> {name: id}.
      elements: ObjType -> list of the XML elements in id order (for error messages).
    """

    def __init__(self, root, source: Source, defaults: Defaults, compiler: Compiler):
        self.root = root
        self.source = source
        self.defaults = defaults
        self.compiler = compiler
        self.out: dict[str, object] = {}
        self.names: dict[int, list[str]] = {int(t): [] for t in ObjType}
        self.ids: dict[int, dict[str, int]] = {int(t): {} for t in ObjType}
        self.elements: dict[int, list] = {int(t): [] for t in ObjType}
        self.lengthrange_sim: list[int] = []  # actuators whose lengthrange needs simulating
        self.lengthrange_error: Callable | None = None
        self.post_const: list[Callable] = []  # hooks run after set_const (e.g. dampratio)

    # -- naming -----------------------------------------------------------------------------

    def add_name(self, objtype: ObjType, name: str | None, el) -> int:
        """Registers the next object of a type; returns its id. Repeated names raise."""
        t = int(objtype)
        i = len(self.names[t])
        name = name or ""
        if name:
            if name in self.ids[t]:
                raise MJCFError(f"repeated name '{name}' in {objtype.name.lower()}", el, "name")
            self.ids[t][name] = i
        self.names[t].append(name)
        self.elements[t].append(el)
        return i

    def lookup(self, objtype: ObjType, name: str, el, attribute: str) -> int:
        """Id of a named object; raises an MJCFError naming the attribute if it is unknown."""
        i = self.ids[int(objtype)].get(name)
        if i is None:
            raise MJCFError(f"unknown {objtype.name.lower()} '{name}'", el, attribute)
        return i

    def count(self, objtype: ObjType) -> int:
        return len(self.names[int(objtype)])

    # -- attributes -------------------------------------------------------------------------

    def attrs(self, el, decl: str, cls: str = "main", kind: str | None = None) -> Attrs:
        """Typed attributes of `el` (schema declaration `decl`) with class defaults applied."""
        return element_attrs(el, decl, self.defaults, cls, kind)

    def angle(self, value: float) -> float:
        """Converts an angle given in the compiler's unit to radians."""
        return value * math.pi / 180.0 if self.compiler.degree else value

    def orientation(self, a: Attrs, default=(1.0, 0.0, 0.0, 0.0)) -> np.ndarray:
        """Quaternion from whichever of quat/axisangle/euler/xyaxes/zaxis `a` gives."""
        keys = ("quat", "axisangle", "euler", "xyaxes", "zaxis")
        own = [k for k in keys if a.el.get(k) is not None]
        if len(own) > 1:
            raise a.error(f"multiple orientation specifiers: {', '.join(own)}", own[1])
        # the element's own specifier wins over one inherited from its default class
        given = own or [k for k in keys[1:] if k in a.given] or [k for k in keys if k in a.given]
        try:
            if "axisangle" in given:
                v = a["axisangle"]
                return spatial.axisangle2quat(v[:3], self.angle(v[3]))
            if "euler" in given:
                e = [self.angle(x) for x in a["euler"]]
                return spatial.euler2quat(e, self.compiler.eulerseq)
            if "xyaxes" in given:
                return spatial.xyaxes2quat(a["xyaxes"])
            if "zaxis" in given:
                z, n = spatial.normvec(a["zaxis"])
                if n < spatial.EPS:
                    raise ValueError("zaxis too small")
                return spatial.z2quat(z)
        except ValueError as e:
            raise a.error(f"orientation error: {e}", given[0]) from None
        if "quat" in given:
            return np.asarray(a["quat"], dtype=np.float64)
        return np.array(default, dtype=np.float64)
