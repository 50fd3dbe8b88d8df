"""Traversal of the kinematic tree by depth level.

The levels, and the dense ancestor masks used for Jacobians and the inertia matrix, are
computed once per tree structure from static integer arrays (numpy) and cached; traced
code then does one vectorised gather/scatter per depth level, never one op per body.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxsim.hostnp import jax  # numpy inside hostnp.host_backend(), see there


@functools.lru_cache(maxsize=256)
def _levels(parentid: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    parent = np.asarray(parentid, dtype=np.int64)
    depth = np.zeros(len(parent), dtype=np.int64)
    # MuJoCo orders bodies so that every parent precedes its children
    for i in range(1, len(parent)):
        depth[i] = depth[parent[i]] + 1
    levels = tuple(np.nonzero(depth == k)[0] for k in range(int(depth.max(initial=0)) + 1))
    for lv in levels:
        lv.flags.writeable = False
    return levels


def body_levels(body_parentid: np.ndarray) -> tuple[np.ndarray, ...]:
    """Body ids grouped by depth: level 0 is the world, level k its descendants at depth k."""
    return _levels(tuple(int(p) for p in np.asarray(body_parentid)))


def body_forward(body_parentid: np.ndarray, fn: Callable[[Any, np.ndarray], Any], init: Any) -> Any:
    """Root-to-leaf pass: rows of `init` (pytree, leading axis nbody) are filled level by level.

    `fn(parent_rows, ids)` returns the rows of bodies `ids` given their parents' rows; the
    world's row (index 0) is taken from `init` unchanged.
    """
    parent = np.asarray(body_parentid)
    carry = init
    for ids in body_levels(parent)[1:]:
        pids = parent[ids]
        prow = jax.tree_util.tree_map(lambda x, p=pids: x[p], carry)
        new = fn(prow, ids)
        carry = jax.tree_util.tree_map(lambda x, n, i=ids: x.at[i].set(n), carry, new)
    return carry


def subtree_sum(body_parentid: np.ndarray, x: jax.Array, into_world: bool = True) -> jax.Array:
    """Leaf-to-root pass: each body's row becomes the sum over its subtree.

    With `into_world=False` the children of the world do not add into row 0 (as mj_crb).
    """
    parent = np.asarray(body_parentid)
    for ids in reversed(body_levels(parent)[1:]):
        pids = parent[ids]
        if not into_world:
            keep = pids > 0
            ids, pids = ids[keep], pids[keep]
            if not len(ids):
                continue
        x = x.at[pids].add(x[ids])
    return x


@functools.lru_cache(maxsize=256)
def _body_ancestors(parentid: tuple[int, ...]) -> np.ndarray:
    n = len(parentid)
    anc = np.zeros((n, n), dtype=bool)
    for b in range(n):
        a = b
        while True:
            anc[b, a] = True
            if a == 0:
                break
            a = parentid[a]
    anc.flags.writeable = False
    return anc


def body_ancestors(body_parentid: np.ndarray) -> np.ndarray:
    """(nbody, nbody) bool: [b, a] is true when a is b or an ancestor of b (world included)."""
    return _body_ancestors(tuple(int(p) for p in np.asarray(body_parentid)))


def body_dof_mask(body_parentid: np.ndarray, dof_bodyid: np.ndarray) -> np.ndarray:
    """(nbody, nv) bool: dof v moves body b (its body is b or an ancestor of b)."""
    anc = body_ancestors(body_parentid)
    return anc[:, np.asarray(dof_bodyid, dtype=np.int64)]


@functools.lru_cache(maxsize=256)
def _dof_ancestors(dof_parentid: tuple[int, ...]) -> np.ndarray:
    n = len(dof_parentid)
    anc = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j >= 0:
            anc[i, j] = True
            j = dof_parentid[j]
    anc.flags.writeable = False
    return anc


def dof_ancestors(dof_parentid: np.ndarray) -> np.ndarray:
    """(nv, nv) bool: [i, j] is true when dof j is i or an ancestor of i (M's sparsity)."""
    return _dof_ancestors(tuple(int(p) for p in np.asarray(dof_parentid)))
