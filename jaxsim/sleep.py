"""Sleeping islands (`<flag sleep="enable">`). MuJoCo: engine_sleep.c, engine_island.c.

A kinematic tree whose velocity stays below `opt.sleep_tolerance` (each dof scaled by
dof_length, infinity norm) for MINAWAKE steps is ready to sleep; when every tree of its
constraint island is ready, the island sleeps: its velocities are zeroed, its positions
are no longer integrated, collisions within it and with the static world are skipped, and
its constraint rows vanish. A contact with a flex needs a dynamically awake side (an awake
flex, or a body of an awake tree; a mocap body or the world does not count), as MuJoCo's
broad phase keeps body-flex and flex-flex pairs. `State.tree_asleep` holds the state as
MuJoCo's `mjData.tree_asleep`: negative while awake (counting up to -1, "ready"), and for a
sleeping tree the id of the next tree of its island, so each sleeping island is a cycle.

Waking happens in the position stage, as MuJoCo: a sleeping island wakes when a tree of
it is touched by an awake tree or a mocap body, when the user changes its qpos, qvel,
qfrc_applied or xfrc_applied, through an active equality or a limited tendon at its limit
joining it to an awake tree, or when its policy forbids sleeping.

Everything is computed for every tree, awake or not (fixed shapes, no data-dependent
control flow); sleeping only selects. Quantities of a sleeping tree that MuJoCo stops
updating and that can differ from a fresh evaluation (qacc, qacc_smooth, qfrc_smooth,
qfrc_actuator, actuator forces and activation rates of sleeping actuators, values of
sleeping sensors, and the bias and passive forces) keep the values they had when the tree
fell asleep; sleeping tendons read zero length and Jacobian, as in MuJoCo. Positions and
velocity-dependent quantities of a sleeping tree are recomputed: with unchanged qpos and
zero qvel they equal the ones MuJoCo keeps. Two differences from MuJoCo: when an island
falls asleep MuJoCo recomputes the velocity and acceleration stages with its velocities
zeroed, so the values it keeps are those at rest; jaxsim keeps those of the last forward
pass (they differ by terms of the order of the sleep tolerance). And islands are named by
their smallest tree id rather than numbered as mj_island numbers them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim.collision.common import contact_bodies
from jaxsim.types import (
    ConstraintType,
    DisableBit,
    EnableBit,
    EqType,
    Model,
    ObjType,
    SensorType,
    SleepPolicy,
    SleepState,
    State,
    TrnType,
)

MINAWAKE = 10  # mjMINAWAKE: steps below the tolerance before a tree is ready to sleep
AWAKE = -(1 + MINAWAKE)  # tree_asleep of a fully awake tree


def enabled(m: Model) -> bool:
    """Whether the model sleeps at all (static)."""
    return bool(m.opt.enableflags & EnableBit.SLEEP) and m.ntree > 0


def _i(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _segmax(x, ids, n):
    return jax.ops.segment_max(x, jnp.asarray(ids), num_segments=n)


def _segmin(x, ids, n):
    return jax.ops.segment_min(x, jnp.asarray(ids), num_segments=n)


# ------------------------------------------------------------------------------- states


def body_state(m: Model, tree_asleep: jax.Array) -> jax.Array:
    """SleepState of every body: static for bodies welded to the world (mocap bodies count
    as awake), otherwise the state of the body's tree. MuJoCo: mj_updateSleep."""
    tree = _i(m.body_treeid)
    mocap = _i(m.body_mocapid)[_i(m.body_rootid)] >= 0
    awake = tree_asleep[np.maximum(tree, 0)] < 0 if m.ntree else jnp.zeros(m.nbody, bool)
    dyn = jnp.where(awake, SleepState.AWAKE, SleepState.ASLEEP)
    fixed = np.where(mocap, SleepState.AWAKE, SleepState.STATIC)
    return jnp.where(jnp.asarray(tree >= 0), dyn, jnp.asarray(fixed)).astype(jnp.int32)


def _tendon_state(m: Model, tree_asleep: jax.Array) -> jax.Array:
    """SleepState of every tendon: static without trees, asleep when all its (first two)
    trees sleep."""
    if not m.ntendon:
        return jnp.zeros(0, jnp.int32)
    num, ids = _i(m.tendon_treenum), _i(m.tendon_treeid).reshape(-1, 2)
    awake_tree = tree_asleep < 0
    a1 = awake_tree[np.maximum(ids[:, 0], 0)]
    a2 = jnp.where(jnp.asarray(num >= 2), awake_tree[np.maximum(ids[:, 1], 0)], False)
    st = jnp.where(a1 | a2 | jnp.asarray(num > 2), SleepState.AWAKE, SleepState.ASLEEP)
    return jnp.where(jnp.asarray(num == 0), SleepState.STATIC, st).astype(jnp.int32)


def object_state(m: Model, bstate: jax.Array, tstate: jax.Array, objtype: int,
                 objid: int) -> jax.Array:
    """SleepState of one object referenced by type and id (mj_sleepState) for the simple
    types; actuators and sensors are handled by their own functions."""
    body = {ObjType.BODY: lambda i: i, ObjType.XBODY: lambda i: i,
            ObjType.JOINT: lambda i: _i(m.jnt_bodyid)[i],
            ObjType.SITE: lambda i: _i(m.site_bodyid)[i],
            ObjType.DOF: lambda i: _i(m.dof_bodyid)[i],
            ObjType.GEOM: lambda i: _i(m.geom_bodyid)[i],
            ObjType.CAMERA: lambda i: _i(m.cam_bodyid)[i],
            ObjType.LIGHT: lambda i: _i(m.light_bodyid)[i]}
    if objtype in body and objid >= 0:
        return bstate[int(body[objtype](objid))]
    if objtype == ObjType.TENDON and objid >= 0:
        return tstate[objid]
    return jnp.asarray(SleepState.AWAKE, jnp.int32)


def _either_awake(s1, s2):
    return jnp.where((s1 == SleepState.AWAKE) | (s2 == SleepState.AWAKE),
                     SleepState.AWAKE, SleepState.ASLEEP)


def actuator_asleep(m: Model, tree_asleep: jax.Array) -> jax.Array:
    """(nactuator,) bool: actuators whose transmission target sleeps (mj_sleepState,
    ACTUATOR)."""
    if not m.nactuator:
        return jnp.zeros(0, bool)
    bs, ts = body_state(m, tree_asleep), _tendon_state(m, tree_asleep)
    out = []
    trn = _i(m.actuator_trnid).reshape(-1, 2)
    for a, t in enumerate(_i(m.actuator_trntype)):
        i, j = int(trn[a, 0]), int(trn[a, 1])
        if t in (TrnType.JOINT, TrnType.JOINTINPARENT):
            s = object_state(m, bs, ts, ObjType.JOINT, i)
        elif t == TrnType.SLIDERCRANK:
            s = _either_awake(object_state(m, bs, ts, ObjType.SITE, i),
                              object_state(m, bs, ts, ObjType.SITE, j))
        elif t == TrnType.TENDON:
            s = ts[i]
        elif t == TrnType.SITE:
            s = object_state(m, bs, ts, ObjType.SITE, i)
        elif t == TrnType.BODY:
            s = bs[i]
        elif t == TrnType.SO3 and j < 0:  # a ball joint
            s = object_state(m, bs, ts, ObjType.JOINT, i)
        elif t == TrnType.SO3:  # a site and its reference site
            s = _either_awake(object_state(m, bs, ts, ObjType.SITE, i),
                              object_state(m, bs, ts, ObjType.SITE, j))
        else:
            s = jnp.asarray(SleepState.AWAKE, jnp.int32)
        out.append(s == SleepState.ASLEEP)
    return jnp.stack(out)


def sensor_asleep(m: Model, tree_asleep: jax.Array) -> jax.Array:
    """(nsensor,) bool: sensors MuJoCo leaves at their last value (mj_sleepState, SENSOR)."""
    if not m.nsensor:
        return jnp.zeros(0, bool)
    bs, ts = body_state(m, tree_asleep), _tendon_state(m, tree_asleep)
    act = actuator_asleep(m, tree_asleep)
    awake = jnp.asarray(SleepState.AWAKE, jnp.int32)
    out = []
    for s in range(m.nsensor):
        typ = int(m.sensor_type[s])
        ot, oi = int(m.sensor_objtype[s]), int(m.sensor_objid[s])
        rt, ri = int(m.sensor_reftype[s]), int(m.sensor_refid[s])
        if typ in (SensorType.USER, SensorType.PLUGIN, SensorType.RANGEFINDER) or (
                typ == SensorType.CONTACT and ObjType.SITE in (ot, rt)):
            out.append(jnp.zeros((), bool))
            continue

        def st(t, i):
            if t == ObjType.ACTUATOR and i >= 0:
                return jnp.where(act[i], SleepState.ASLEEP, SleepState.AWAKE)
            return object_state(m, bs, ts, t, i)

        so, sr = st(ot, oi), st(rt, ri)
        if ot == ObjType.UNKNOWN and rt == ObjType.UNKNOWN:
            res = awake == SleepState.ASLEEP
        elif ot == ObjType.UNKNOWN:
            res = sr == SleepState.ASLEEP
        elif rt == ObjType.UNKNOWN:
            res = so == SleepState.ASLEEP
        else:
            res = (so != SleepState.AWAKE) & (sr != SleepState.AWAKE)
        out.append(jnp.asarray(res))
    return jnp.stack(out)


# --------------------------------------------------------------------------- islands


def cycle_id(tree_asleep: jax.Array) -> jax.Array:
    """The smallest tree id of each sleeping tree's cycle (a tree's own id if awake), by
    pointer doubling: log2(ntree) gathers."""
    n = tree_asleep.shape[0]
    ids = jnp.arange(n, dtype=jnp.int32)
    nxt = jnp.where(tree_asleep >= 0, jnp.clip(tree_asleep, 0, n - 1), ids).astype(jnp.int32)
    rep = jnp.minimum(ids, nxt)
    for _ in range(max(1, int(np.ceil(np.log2(max(n, 2))))) + 1):
        rep = jnp.minimum(rep, rep[nxt])
        nxt = nxt[nxt]
    return rep


def wake(tree_asleep: jax.Array, hit: jax.Array, value: jax.Array) -> jax.Array:
    """Wakes every sleeping cycle with a tree in `hit`; its trees take the smallest
    `value` among the hits of the cycle (mj_wakeIsland). Awake trees in `hit` keep the
    smaller of their value and `value`."""
    n = tree_asleep.shape[0]
    if n == 0:
        return tree_asleep
    rep = cycle_id(tree_asleep)
    asleep = tree_asleep >= 0
    big = jnp.asarray(np.iinfo(np.int32).max, tree_asleep.dtype)
    any_hit = _segmax(hit.astype(jnp.int32), rep, n) > 0
    val = _segmin(jnp.where(hit, value, big), rep, n)
    woken = asleep & any_hit[rep]
    out = jnp.where(woken, val[rep], tree_asleep)
    return jnp.where(~asleep & hit, jnp.minimum(out, value), out).astype(tree_asleep.dtype)


def _tree_of_body(m: Model, body) -> jax.Array:
    return jnp.asarray(_i(m.body_treeid))[body]


def _nonzero(x: jax.Array) -> jax.Array:
    """Bytewise non-zero, as MuJoCo tests it: -0.0 counts."""
    return (x != 0) | jnp.signbit(x)


def wake_perturbed(m: Model, d_in: State, d: State) -> State:
    """Wakes sleeping islands whose qpos (seen through the body poses), qvel,
    qfrc_applied or xfrc_applied the user changed, or whose policy forbids sleeping.
    MuJoCo: mj_kinematics1's pose check and mj_wake. `d` holds the new kinematics,
    `d_in` the poses the state came with."""
    ta = d.tree_asleep
    n = m.ntree
    asleep = ta >= 0
    bt = _i(m.body_treeid)
    # poses: a sleeping body with joints whose recomputed pose moved
    eps = 64 * jnp.finfo(d.xpos.dtype).eps
    moved = (jnp.any(jnp.abs(d.xpos - d_in.xpos) > eps * (1 + jnp.abs(d_in.xpos)), -1)
             | jnp.any(jnp.abs(d.xquat - d_in.xquat) > eps, -1))
    sel = (bt >= 0) & (_i(m.body_jntnum) > 0)
    hit = jnp.zeros(n, bool)
    if sel.any():
        hit = hit | (_segmax(moved[sel].astype(jnp.int32), bt[sel], n) > 0)
    hit = hit | ~_can_sleep(m, d, 0.0)
    return d.replace(tree_asleep=wake(ta, asleep & hit, jnp.full(n, AWAKE, ta.dtype)))


def _can_sleep(m: Model, d: State, tol: float | jax.Array) -> jax.Array:
    """(ntree,) bool: policy allows sleep, no applied force, velocity under `tol` (exactly
    zero if tol is 0). MuJoCo: treeCanSleep."""
    n = m.ntree
    pol = _i(m.tree_sleep_policy)
    ok = jnp.asarray(~np.isin(pol, [SleepPolicy.NEVER, SleepPolicy.AUTO_NEVER]))
    bt = _i(m.body_treeid)
    sel = bt >= 0
    if sel.any():
        xf = jnp.any(_nonzero(d.xfrc_applied[sel]), -1).astype(jnp.int32)
        ok = ok & (_segmax(xf, bt[sel], n) <= 0)
    dt = _i(m.dof_treeid)
    if m.nv:
        ok = ok & (_segmax(_nonzero(d.qfrc_applied).astype(jnp.int32), dt, n) <= 0)
        if isinstance(tol, float) and tol == 0.0:
            ok = ok & (_segmax(_nonzero(d.qvel).astype(jnp.int32), dt, n) <= 0)
        else:
            v = jnp.abs(d.qvel) * m.dof_length
            ok = ok & (_segmax(v, dt, n) < tol)
    return ok


def clear_sleeping_tendons(m: Model, d: State) -> State:
    """MuJoCo's mj_tendon clears every tendon's length and Jacobian and skips sleeping
    tendons: theirs read zero."""
    if not m.ntendon:
        return d
    off = _tendon_state(m, d.tree_asleep) == SleepState.ASLEEP
    return d.replace(ten_length=jnp.where(off, 0.0, d.ten_length),
                     ten_J=jnp.where(off[:, None], 0.0, d.ten_J))


def wake_tendon(m: Model, d: State) -> State:
    """Wakes a sleeping tree joined to an awake one by a limited tendon at its limit.
    MuJoCo: mj_wakeTendon (MuJoCo 4.0 skips it when limits or all constraints are disabled:
    there are no limit rows to join the trees)."""
    num = _i(m.tendon_treenum)
    k = np.nonzero((num == 2) & np.asarray(m.tendon_limited, bool))[0]
    if not len(k) or m.opt.disableflags & (DisableBit.CONSTRAINT | DisableBit.LIMIT):
        return d
    ta = d.tree_asleep
    t1, t2 = _i(m.tendon_treeid).reshape(-1, 2)[k].T
    val = d.ten_length[k]
    rng = m.tendon_range[k]
    mar = m.tendon_margin[k]
    at_limit = ((val - rng[:, 0]) < mar) | ((rng[:, 1] - val) < mar)
    a1, a2 = ta[t1] < 0, ta[t2] < 0
    go = at_limit & (a1 != a2)
    sleeping = jnp.where(a1, t2, t1)
    value = jnp.where(a1, ta[t1], ta[t2])
    return d.replace(tree_asleep=_wake_at(ta, sleeping, go, value))


def _wake_at(ta, trees, go, value):
    """wake() for a list of (tree, condition, value) triples."""
    n = ta.shape[0]
    big = jnp.asarray(np.iinfo(np.int32).max, ta.dtype)
    hit = _segmax(go.astype(jnp.int32), trees, n) > 0
    val = _segmin(jnp.where(go, value, big).astype(ta.dtype), trees, n)
    return wake(ta, hit, val)


def _flex_first_tree(m: Model) -> np.ndarray:
    """(nflex,) tree of each flex's first vertex body with degrees of freedom (-1: none):
    the sleep state of the whole flex (MuJoCo: mj_sleepState for mjOBJ_FLEX)."""
    trees = _i(m.body_treeid)[_i(m.flex_vertbodyid)]
    out = np.full(m.nflex, -1, np.int32)
    for f, (adr, num) in enumerate(zip(_i(m.flex_vertadr), _i(m.flex_vertnum), strict=True)):
        dyn = trees[adr:adr + num][trees[adr:adr + num] >= 0]
        out[f] = dyn[0] if dyn.size else -1
    return out


def _awake(trees: jax.Array, ta: jax.Array) -> jax.Array:
    """Whether each tree id (-1: none, never awake) is awake."""
    return (trees >= 0) & (ta[jnp.maximum(trees, 0)] < 0)


def _flex_pair_awake(m: Model, c, t: jax.Array, ta: jax.Array) -> jax.Array:
    """(ncon,) bool: False for a contact with a flex side where neither side is dynamically
    awake, i.e. neither an awake flex nor a body of an awake tree (a mocap body, the world
    or a sleeping tree does not count). MuJoCo's broad phase skips such body-flex and
    flex-flex pairs, so they neither exist nor wake anything."""
    if not m.nflex:
        return jnp.ones(c.active.shape, bool)
    is_flex = (c.geom < 0) & (c.flex >= 0)
    ft = jnp.asarray(_flex_first_tree(m))[jnp.clip(c.flex, 0, m.nflex - 1)]
    side = jnp.where(is_flex, _awake(ft, ta), _awake(t, ta))
    return ~jnp.any(is_flex, axis=1) | jnp.any(side, axis=1)


def wake_collision(m: Model, d: State) -> State:
    """Wakes sleeping trees touched by an awake tree or a mocap body, then drops the
    contacts MuJoCo does not generate: within sleeping trees and between a sleeping tree
    and the static world. MuJoCo: mj_wakeCollision and the sleep test of filterBodyPair
    (its second collision pass, after waking, is this filter with the new states)."""
    c = d.contact
    if c.dist.shape[0] == 0:
        return d
    ta = d.tree_asleep
    b = contact_bodies(m, c)
    t = _tree_of_body(m, b)
    bs = body_state(m, ta)
    st = bs[b]
    # a pair with a flex is generated only when one side is dynamically awake (mj_broadphase;
    # the second pass after waking applies the test again with the new states, below)
    on = c.active & _flex_pair_awake(m, c, t, ta)
    tree_awake = _awake(t, ta)
    # contact with a dof-less body: wake if that body is awake (mocap)
    one_static = (t[:, 0] < 0) ^ (t[:, 1] < 0)
    dyn = jnp.where(t[:, 0] >= 0, 0, 1)
    other = 1 - dyn
    tdyn = jnp.take_along_axis(t, dyn[:, None], 1)[:, 0]
    adyn = jnp.take_along_axis(tree_awake, dyn[:, None], 1)[:, 0]
    sother = jnp.take_along_axis(st, other[:, None], 1)[:, 0]
    go_mocap = on & one_static & ~adyn & (sother == SleepState.AWAKE)
    both = (t[:, 0] >= 0) & (t[:, 1] >= 0)
    go_pair = on & both & (tree_awake[:, 0] != tree_awake[:, 1])
    sleeping = jnp.where(go_mocap, tdyn, jnp.where(tree_awake[:, 0], t[:, 1], t[:, 0]))
    awake_t = jnp.where(tree_awake[:, 0], t[:, 0], t[:, 1])
    value = jnp.where(go_mocap, AWAKE, ta[jnp.maximum(awake_t, 0)])
    ta = _wake_at(ta, jnp.maximum(sleeping, 0), go_mocap | go_pair, value)
    # filter with the new states
    bs = body_state(m, ta)
    asleep = bs[b] == SleepState.ASLEEP
    world = jnp.asarray(_i(m.body_weldid))[b] == 0
    drop = (asleep[:, 0] & asleep[:, 1]) | (asleep[:, 0] & world[:, 1]) | (
        asleep[:, 1] & world[:, 0])
    keep = c.active & ~drop & _flex_pair_awake(m, c, t, ta)
    con = c.replace(active=keep, exclude=c.exclude & keep)
    return d.replace(tree_asleep=ta, contact=con, ncon=jnp.sum(keep).astype(jnp.int32))


def _eq_bodies(m: Model, i: int) -> tuple[int, int]:
    """Bodies of equality i's two objects (-1 for none)."""
    t = int(m.eq_type[i])
    o1, o2 = int(m.eq_obj1id[i]), int(m.eq_obj2id[i])
    if t in (EqType.CONNECT, EqType.WELD):
        if int(m.eq_objtype[i]) == ObjType.SITE:
            return int(m.site_bodyid[o1]), int(m.site_bodyid[o2])
        return o1, o2
    if t == EqType.JOINT:
        return (int(m.jnt_bodyid[o1]) if o1 >= 0 else -1,
                int(m.jnt_bodyid[o2]) if o2 >= 0 else -1)
    return -1, -1


def wake_equality(m: Model, d: State) -> State:
    """Wakes sleeping trees joined by an active equality to an awake tree (or a mocap
    body), and two sleeping islands joined by one. MuJoCo: mj_wakeEquality."""
    ids = [i for i in range(m.neq)
           if int(m.eq_type[i]) in (EqType.CONNECT, EqType.WELD, EqType.JOINT)]
    if not ids:
        return d
    ta = d.tree_asleep
    bs = body_state(m, ta)
    pairs = np.array([_eq_bodies(m, i) for i in ids])
    bt = _i(m.body_treeid)
    tr = np.where(pairs >= 0, bt[np.maximum(pairs, 0)], -1)
    s = jnp.where(jnp.asarray(pairs >= 0), bs[np.maximum(pairs, 0)], SleepState.STATIC)
    on = jnp.asarray(d.eq_active)[np.asarray(ids)] != 0
    asleep = s == SleepState.ASLEEP
    static = s == SleepState.STATIC
    same = jnp.asarray(tr[:, 0] == tr[:, 1])
    rel = on & jnp.any(asleep, -1) & ~jnp.any(static, -1) & ~same
    rep = cycle_id(ta)
    trc = np.maximum(tr, 0)
    diff = rep[trc[:, 0]] != rep[trc[:, 1]]
    both = rel & asleep[:, 0] & asleep[:, 1] & diff
    one = rel & (asleep[:, 0] != asleep[:, 1])
    sleeping = jnp.where(asleep[:, 0], trc[:, 0], trc[:, 1])
    trees = jnp.concatenate([jnp.asarray(trc[:, 0]), jnp.asarray(trc[:, 1]), sleeping])
    go = jnp.concatenate([both, both, one])
    ta = _wake_at(ta, trees, go, jnp.full(go.shape, AWAKE, ta.dtype))
    return d.replace(tree_asleep=ta)


# ----------------------------------------------------------------- constraint rows


def _edge_bodies(m: Model, e: int) -> tuple[int, int]:
    """Bodies of flex edge e's two vertices."""
    from jaxsim import flex

    b1, b2 = _i(m.flex_vertbodyid)[flex.edge_vertices(m, np.array([e]))[0]]
    return int(b1), int(b2)


def row_trees(m: Model, types: np.ndarray, ids: np.ndarray,
              flex_edges: np.ndarray | None = None) -> np.ndarray:
    """(n, 2) trees each non-contact constraint row touches (-1: none); `flex_edges`: the
    flex edge of each row that is a flex edge equality row (-1 otherwise)."""
    bt = _i(m.body_treeid)
    out = np.full((len(types), 2), -1, np.int64)
    for r, (t, i) in enumerate(zip(types, ids, strict=True)):
        if flex_edges is not None and flex_edges[r] >= 0:
            out[r] = [bt[b] for b in _edge_bodies(m, int(flex_edges[r]))]
        elif t == ConstraintType.EQUALITY:
            b1, b2 = _eq_bodies(m, int(i))
            out[r] = [bt[b1] if b1 >= 0 else -1, bt[b2] if b2 >= 0 else -1]
        elif t == ConstraintType.FRICTION_DOF:
            out[r, 0] = _i(m.dof_treeid)[i]
        elif t == ConstraintType.LIMIT_JOINT:
            out[r, 0] = bt[_i(m.jnt_bodyid)[i]]
        elif t in (ConstraintType.FRICTION_TENDON, ConstraintType.LIMIT_TENDON):
            out[r] = _i(m.tendon_treeid).reshape(-1, 2)[i]
    return out


def rows_awake(m: Model, d: State, types: np.ndarray, ids: np.ndarray,
               flex_edges: np.ndarray | None = None) -> jax.Array:
    """(n,) bool: non-contact rows MuJoCo builds for the current sleep state (equalities
    with an awake side, friction-loss dofs and limited joints of awake trees; tendon rows
    always)."""
    bs = body_state(m, d.tree_asleep)
    out = []
    for r, (t, i) in enumerate(zip(types, ids, strict=True)):
        if t == ConstraintType.EQUALITY:
            b1, b2 = (_edge_bodies(m, int(flex_edges[r]))
                      if flex_edges is not None and flex_edges[r] >= 0
                      else _eq_bodies(m, int(i)))
            s1 = bs[b1] if b1 >= 0 else SleepState.STATIC
            s2 = bs[b2] if b2 >= 0 else SleepState.STATIC
            out.append((s1 == SleepState.AWAKE) | (s2 == SleepState.AWAKE))
        elif t == ConstraintType.FRICTION_DOF:
            out.append(bs[_i(m.dof_bodyid)[i]] != SleepState.ASLEEP)
        elif t == ConstraintType.LIMIT_JOINT:
            out.append(bs[_i(m.jnt_bodyid)[i]] != SleepState.ASLEEP)
        else:
            out.append(jnp.ones((), bool))
    return jnp.stack([jnp.asarray(x) for x in out]) if out else jnp.zeros(0, bool)


def islands(m: Model, d: State, fixed_trees: np.ndarray | None, fixed_on: jax.Array | None,
            contact_on: jax.Array | None) -> jax.Array:
    """(ntree,) island of each tree: the smallest tree id among the trees joined to it by
    constraint rows present now, -1 for trees no row touches. MuJoCo: mj_island (which
    numbers the islands instead)."""
    n = m.ntree
    t1, t2, on = [], [], []
    if fixed_trees is not None and len(fixed_trees):
        t1.append(jnp.asarray(fixed_trees[:, 0]))
        t2.append(jnp.asarray(fixed_trees[:, 1]))
        on.append(fixed_on)
    if contact_on is not None and contact_on.shape[0]:
        t = _tree_of_body(m, contact_bodies(m, d.contact))
        t1.append(t[:, 0])
        t2.append(t[:, 1])
        on.append(contact_on)
        from jaxsim.collision import driver, flexcol

        if driver.plan(m).elem:  # flex element sides join every vertex's tree
            bb, ww = flexcol.contact_sides(m, d, d.contact)
            te = _tree_of_body(m, bb.reshape(-1, 8))
            ww = ww.reshape(-1, 8)
            hub = jnp.where(t[:, 0] >= 0, t[:, 0], t[:, 1])
            for k in range(8):  # the vertices the contact's Jacobian involves (weight != 0)
                t1.append(hub)
                t2.append(te[:, k])
                on.append(contact_on & (ww[:, k] != 0))
    ids = jnp.arange(n, dtype=jnp.int32)
    if not on:
        return jnp.full(n, -1, jnp.int32)
    a, b, on = jnp.concatenate(t1), jnp.concatenate(t2), jnp.concatenate(on)
    a, b = jnp.where(a < 0, b, a), jnp.where(b < 0, a, b)
    on = on & (a >= 0)
    a, b = jnp.maximum(a, 0).astype(jnp.int32), jnp.maximum(b, 0).astype(jnp.int32)
    touched = _segmax(on.astype(jnp.int32), a, n) > 0
    touched = touched | (_segmax(on.astype(jnp.int32), b, n) > 0)
    big = jnp.int32(n)

    def body(carry):
        lab, _ = carry
        lo = jnp.where(on, jnp.minimum(lab[a], lab[b]), big)
        new = lab.at[a].min(lo).at[b].min(lo)
        new = new[new]
        return new, jnp.any(new != lab)

    lab, _ = jax.lax.while_loop(lambda c: c[1], body, (ids, jnp.ones((), bool)))
    return jnp.where(touched, lab, -1).astype(jnp.int32)


# --------------------------------------------------------------- holding and sleeping


def dof_asleep(m: Model, tree_asleep: jax.Array) -> jax.Array:
    if not m.nv:
        return jnp.zeros(0, bool)
    return tree_asleep[_i(m.dof_treeid)] >= 0


def hold(m: Model, d_in: State, d: State, sensors: bool) -> State:
    """Keeps, for sleeping trees, the values MuJoCo does not recompute and that a fresh
    evaluation could change (see the module docstring)."""
    ta = d.tree_asleep
    ds = dof_asleep(m, ta)
    rep = {}
    for f in ("qacc", "qacc_smooth", "qfrc_smooth", "qfrc_actuator", "qfrc_bias",
              "qfrc_passive", "qfrc_spring", "qfrc_damper", "qfrc_gravcomp", "qfrc_fluid"):
        rep[f] = jnp.where(ds, getattr(d_in, f), getattr(d, f))
    if m.nactuator:
        aa = actuator_asleep(m, ta)
        rep["actuator_force"] = jnp.where(aa[m.out2act()], d_in.actuator_force,
                                          d.actuator_force)
        if m.na:
            act_of = np.repeat(np.arange(m.nactuator), np.maximum(_i(m.actuator_actnum), 0))
            rep["act_dot"] = jnp.where(aa[act_of], d_in.act_dot, d.act_dot)
    if sensors and m.nsensor:
        sa = sensor_asleep(m, ta)
        per = np.repeat(np.arange(m.nsensor), _i(m.sensor_dim))
        rep["sensordata"] = jnp.where(sa[per], d_in.sensordata, d.sensordata)
    return d.replace(**rep)


def fall_asleep(m: Model, d: State) -> tuple[jax.Array, jax.Array]:
    """Counts each awake tree towards sleep, and puts to sleep the islands whose trees are
    all ready. Returns the new tree_asleep and a (ntree,) mask of the trees that fell
    asleep now. MuJoCo: mj_sleep."""
    n = m.ntree
    ta0 = d.tree_asleep
    awake = ta0 < 0
    can = _can_sleep(m, d, m.opt.sleep_tolerance)
    ta = jnp.where(awake, jnp.where(can, ta0 + (ta0 < -1), AWAKE), ta0).astype(ta0.dtype)
    ids = jnp.arange(n, dtype=jnp.int32)
    lab = jnp.where(d.tree_island >= 0, d.tree_island, ids)
    ready = awake & (ta == -1)
    # an island sleeps when none of its (awake) trees is not ready
    blocked = _segmax((awake & ~ready).astype(jnp.int32), lab, n) > 0
    go = ready & ~blocked[lab]
    if m.opt.disableflags & DisableBit.ISLAND:
        # no island structure: while there are constraint rows nothing counts or sleeps
        frozen = jnp.any(d.efc_active)
        ta = jnp.where(frozen, ta0, ta)
        go = go & ~frozen
    # each sleeping island becomes a cycle, in increasing tree order
    key = jnp.where(go, lab * n + ids, n * n + ids)
    order = jnp.argsort(key)
    lab_s = lab[order]
    nxt_s = jnp.roll(order, -1)
    same_next = (jnp.roll(lab_s, -1) == lab_s) & jnp.roll(go[order], -1)
    first = _segmin(jnp.where(go, ids, n), lab, n)
    nxt = jnp.zeros(n, jnp.int32).at[order].set(
        jnp.where(same_next & (jnp.arange(n) < n - 1), nxt_s, first[lab_s]).astype(jnp.int32))
    ta = jnp.where(go, nxt, ta).astype(ta.dtype)
    return ta, go
