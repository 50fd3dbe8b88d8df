"""Helpers for testing narrow-phase functions against MuJoCo's mj_collision.

A test writes a small model with two geoms (usually each in a body with a free joint),
sets a pose, and compares what one of our collision functions returns for the pair with
the contacts MuJoCo reports for the same pair.
"""

from __future__ import annotations

import mujoco
import numpy as np

from jaxsim.collision.common import Contacts, Geom, make_frame


def mujoco_contacts(xml: str, qpos=None, assets=None):
    """Runs mj_forward; returns (m, d, contacts) with contacts a list of dicts."""
    m = mujoco.MjModel.from_xml_string(xml, assets or {})
    d = mujoco.MjData(m)
    if qpos is not None:
        d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    cons = []
    for i in range(d.ncon):
        c = d.contact[i]
        cons.append(dict(dist=float(c.dist), pos=np.array(c.pos), frame=np.array(c.frame).reshape(3, 3),
                         geom=(int(c.geom[0]), int(c.geom[1]))))
    return m, d, cons


def geom_of(m, d, gid: int, data=None) -> Geom:
    """Our Geom for MuJoCo geom `gid` in state `d` (numpy float64)."""
    return Geom(pos=np.array(d.geom_xpos[gid]), mat=np.array(d.geom_xmat[gid]).reshape(3, 3),
                size=np.array(m.geom_size[gid]), data=data)


def pair_margin(m, g1: int, g2: int) -> float:
    """margin + gap of a geom pair without <pair> (what mj_collision passes)."""
    return float(m.geom_margin[g1] + m.geom_margin[g2] + m.geom_gap[g1] + m.geom_gap[g2])


def ours_list(c: Contacts):
    """Our valid contacts as dicts (frames completed as the driver does)."""
    out = []
    valid = np.asarray(c.valid)
    for k in np.nonzero(valid)[0]:
        frame = np.asarray(make_frame(np.asarray(c.normal[k]), np.asarray(c.tangent[k])))
        out.append(dict(dist=float(c.dist[k]), pos=np.asarray(c.pos[k]), frame=frame))
    return out


def assert_same_contacts(ours: Contacts, ref: list, tol: float = 1e-6, frame_tol: float = 1e-6,
                         check_count: bool = True):
    """Matches each MuJoCo contact to one of ours (dist, pos, normal within tol)."""
    mine = ours_list(ours)
    if check_count:
        assert len(mine) == len(ref), f"{len(mine)} contacts, MuJoCo {len(ref)}:\n{mine}\n{ref}"
    for r in ref:
        errs = [max(abs(o["dist"] - r["dist"]), np.abs(o["pos"] - r["pos"]).max())
                for o in mine]
        assert errs, f"no contact, MuJoCo has {r}"
        k = int(np.argmin(errs))
        assert errs[k] <= tol, f"contact mismatch {errs[k]:.3g}: ours {mine[k]}, MuJoCo {r}"
        ne = np.abs(mine[k]["frame"][0] - r["frame"][0]).max()
        assert ne <= frame_tol, f"normal mismatch {ne:.3g}: ours {mine[k]}, MuJoCo {r}"
