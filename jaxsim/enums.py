"""MuJoCo's enumerations (mjt*), with MuJoCo's values.

Integer structure fields of `jaxsim.types.Model` hold these values; `jaxsim.types`
re-exports every name here.
"""

from __future__ import annotations

import enum


class DisableBit(enum.IntFlag):
    """Disable flags of `<option><flag>` (mjtDisableBit)."""

    CONSTRAINT = 1 << 0
    EQUALITY = 1 << 1
    FRICTIONLOSS = 1 << 2
    LIMIT = 1 << 3
    CONTACT = 1 << 4
    SPRING = 1 << 5
    DAMPER = 1 << 6
    GRAVITY = 1 << 7
    CLAMPCTRL = 1 << 8
    WARMSTART = 1 << 9
    FILTERPARENT = 1 << 10
    ACTUATION = 1 << 11
    REFSAFE = 1 << 12
    SENSOR = 1 << 13
    MIDPHASE = 1 << 14
    EULERDAMP = 1 << 15
    AUTORESET = 1 << 16
    NATIVECCD = 1 << 17
    ISLAND = 1 << 18
    MULTICCD = 1 << 19


class EnableBit(enum.IntFlag):
    """Enable flags of `<option><flag>` (mjtEnableBit)."""

    OVERRIDE = 1 << 0
    ENERGY = 1 << 1
    FWDINV = 1 << 2
    INVDISCRETE = 1 << 3
    SLEEP = 1 << 4
    DIAGEXACT = 1 << 5
    IPC = 1 << 6
    SPECULATIVE = 1 << 7


class SleepPolicy(enum.IntEnum):
    """Sleep policy of a kinematic tree (mjtSleepPolicy); the compiler resolves AUTO."""

    AUTO = 0
    AUTO_NEVER = 1
    AUTO_ALLOWED = 2
    NEVER = 3
    ALLOWED = 4
    INIT = 5


class SleepState(enum.IntEnum):
    """Sleep state of an object (mjtSleepState)."""

    STATIC = -1
    ASLEEP = 0
    AWAKE = 1


class JointType(enum.IntEnum):
    FREE = 0
    BALL = 1
    SLIDE = 2
    HINGE = 3

    def qpos_width(self) -> int:
        return (7, 4, 1, 1)[self]

    def dof_width(self) -> int:
        return (6, 3, 1, 1)[self]


class GeomType(enum.IntEnum):
    PLANE = 0
    HFIELD = 1
    SPHERE = 2
    CAPSULE = 3
    ELLIPSOID = 4
    CYLINDER = 5
    BOX = 6
    MESH = 7
    SDF = 8


class CamLight(enum.IntEnum):
    FIXED = 0
    TRACK = 1
    TRACKCOM = 2
    TARGETBODY = 3
    TARGETBODYCOM = 4


class Integrator(enum.IntEnum):
    EULER = 0
    RK4 = 1
    IMPLICIT = 2
    IMPLICITFAST = 3
    DISCRETE = 4


class Cone(enum.IntEnum):
    PYRAMIDAL = 0
    ELLIPTIC = 1


class Jacobian(enum.IntEnum):
    DENSE = 0
    SPARSE = 1
    AUTO = 2


class Solver(enum.IntEnum):
    PGS = 0
    CG = 1
    NEWTON = 2


class EqType(enum.IntEnum):
    CONNECT = 0
    WELD = 1
    JOINT = 2
    TENDON = 3
    FLEX = 4
    FLEXVERT = 5
    FLEXSTRAIN = 6
    DISTANCE = 7


class TendonType(enum.IntEnum):
    FIXED = 0
    SPATIAL = 1


class WrapType(enum.IntEnum):
    NONE = 0
    JOINT = 1
    PULLEY = 2
    SITE = 3
    SPHERE = 4
    CYLINDER = 5


class TrnType(enum.IntEnum):
    JOINT = 0
    JOINTINPARENT = 1
    SLIDERCRANK = 2
    TENDON = 3
    SITE = 4
    BODY = 5
    SO3 = 6
    UNDEFINED = 1000


class DynType(enum.IntEnum):
    NONE = 0
    INTEGRATOR = 1
    FILTER = 2
    FILTEREXACT = 3
    MUSCLE = 4
    DCMOTOR = 5
    PID = 6
    USER = 7


class GainType(enum.IntEnum):
    FIXED = 0
    AFFINE = 1
    MUSCLE = 2
    DCMOTOR = 3
    SO3 = 4
    PID = 5
    USER = 6


class CtrlChart(enum.IntEnum):
    """Input chart of an SO3 actuator (actuator_ctrlspec; mjtCtrlChart)."""

    EXPMAP = 1
    QUAT = 2


class CtrlInput(enum.IntFlag):
    """Input bits of pid and dcmotor actuators (actuator_ctrlspec; mjtCtrlInput)."""

    POS = 1
    VEL = 2
    FF = 4
    VOLTAGE = 8
    NONE = 16
    PRESSURE = 32


class BiasType(enum.IntEnum):
    NONE = 0
    AFFINE = 1
    MUSCLE = 2
    DCMOTOR = 3
    SO3 = 4
    USER = 5


class ObjType(enum.IntEnum):
    UNKNOWN = 0
    BODY = 1
    XBODY = 2
    JOINT = 3
    DOF = 4
    GEOM = 5
    SITE = 6
    CAMERA = 7
    LIGHT = 8
    FLEX = 9
    MESH = 10
    SKIN = 11
    HFIELD = 12
    TEXTURE = 13
    MATERIAL = 14
    PAIR = 15
    EXCLUDE = 16
    EQUALITY = 17
    TENDON = 18
    ACTUATOR = 19
    SENSOR = 20
    NUMERIC = 21
    TEXT = 22
    TUPLE = 23
    KEY = 24
    PLUGIN = 25


class SensorType(enum.IntEnum):
    TOUCH = 0
    ACCELEROMETER = 1
    VELOCIMETER = 2
    GYRO = 3
    FORCE = 4
    TORQUE = 5
    MAGNETOMETER = 6
    RANGEFINDER = 7
    CAMPROJECTION = 8
    JOINTPOS = 9
    JOINTVEL = 10
    TENDONPOS = 11
    TENDONVEL = 12
    ACTUATORPOS = 13
    ACTUATORVEL = 14
    ACTUATORFRC = 15
    JOINTACTFRC = 16
    TENDONACTFRC = 17
    BALLQUAT = 18
    BALLANGVEL = 19
    JOINTLIMITPOS = 20
    JOINTLIMITVEL = 21
    JOINTLIMITFRC = 22
    TENDONLIMITPOS = 23
    TENDONLIMITVEL = 24
    TENDONLIMITFRC = 25
    FRAMEPOS = 26
    FRAMEQUAT = 27
    FRAMEXAXIS = 28
    FRAMEYAXIS = 29
    FRAMEZAXIS = 30
    FRAMELINVEL = 31
    FRAMEANGVEL = 32
    FRAMELINACC = 33
    FRAMEANGACC = 34
    SUBTREECOM = 35
    SUBTREELINVEL = 36
    SUBTREEANGMOM = 37
    INSIDESITE = 38
    GEOMDIST = 39
    GEOMNORMAL = 40
    GEOMFROMTO = 41
    CONTACT = 42
    E_POTENTIAL = 43
    E_KINETIC = 44
    CLOCK = 45
    TACTILE = 46
    PLUGIN = 47
    USER = 48


class Stage(enum.IntEnum):
    NONE = 0
    POS = 1
    VEL = 2
    ACC = 3


class DataType(enum.IntEnum):
    REAL = 0
    POSITIVE = 1
    AXIS = 2
    QUATERNION = 3


class SameFrame(enum.IntEnum):
    NONE = 0
    BODY = 1
    INERTIA = 2
    BODYROT = 3
    INERTIAROT = 4


class ConstraintType(enum.IntEnum):
    EQUALITY = 0
    FRICTION_DOF = 1
    FRICTION_TENDON = 2
    LIMIT_JOINT = 3
    LIMIT_TENDON = 4
    CONTACT_FRICTIONLESS = 5
    CONTACT_PYRAMIDAL = 6
    CONTACT_ELLIPTIC = 7


class ConstraintState(enum.IntEnum):
    SATISFIED = 0
    QUADRATIC = 1
    LINEARNEG = 2
    LINEARPOS = 3
    CONE = 4


class StateBit(enum.IntFlag):
    """State components for get_state/set_state (mjtState)."""

    TIME = 1 << 0
    QPOS = 1 << 1
    QVEL = 1 << 2
    ACT = 1 << 3
    HISTORY = 1 << 4
    WARMSTART = 1 << 5
    CTRL = 1 << 6
    QFRC_APPLIED = 1 << 7
    XFRC_APPLIED = 1 << 8
    EQ_ACTIVE = 1 << 9
    MOCAP_POS = 1 << 10
    MOCAP_QUAT = 1 << 11
    USERDATA = 1 << 12
    PLUGIN = 1 << 13
    PLASTIC = 1 << 14
    PHYSICS = QPOS | QVEL | ACT | HISTORY | PLASTIC
    FULLPHYSICS = TIME | PHYSICS | PLUGIN
    USER = CTRL | QFRC_APPLIED | XFRC_APPLIED | EQ_ACTIVE | MOCAP_POS | MOCAP_QUAT | USERDATA
    INTEGRATION = FULLPHYSICS | USER | WARMSTART


class Warning(enum.IntEnum):  # noqa: A001 -- MuJoCo's name (mjtWarning)
    INERTIA = 0
    CONTACTFULL = 1
    CNSTRFULL = 2
    BADQPOS = 3
    BADQVEL = 4
    BADQACC = 5
    BADCTRL = 6
