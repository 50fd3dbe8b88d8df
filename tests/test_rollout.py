"""rollout and rollout_batch: a scan of step equals a loop of step; sharding changes nothing."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import MODELS, ROOT

import jaxsim


@pytest.fixture(scope="module")
def cartpole():
    model = jaxsim.load(MODELS / "cartpole.xml", dtype=jnp.float64)
    return model, jaxsim.make_state(model, keyframe=1)


def test_rollout_equals_python_loop(cartpole):
    model, state = cartpole
    ctrl = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (25, model.nu)))
    final, traj = jax.jit(jaxsim.rollout, static_argnames="fields")(
        model, state, ctrl, fields=("qpos", "qvel", "time"))
    step = jax.jit(jaxsim.step)
    d, rows = state, []
    for u in ctrl:
        d = step(model, d.replace(ctrl=u))
        rows.append((d.qpos, d.qvel, d.time))
    for k, name in enumerate(("qpos", "qvel", "time")):
        want = np.stack([np.asarray(r[k]) for r in rows])
        assert traj[name].shape == want.shape
        np.testing.assert_allclose(traj[name], want, rtol=0, atol=1e-12, err_msg=name)
    for name in ("qpos", "qvel", "qacc", "time", "ctrl"):
        np.testing.assert_allclose(getattr(final, name), getattr(d, name), rtol=0, atol=1e-12)


def test_rollout_fields_and_length(cartpole):
    model, state = cartpole
    roll = jax.jit(jaxsim.rollout, static_argnames=("fields", "length"))
    final, traj = roll(model, state, None, fields=None, length=3)
    assert traj is None and float(final.time) == pytest.approx(3 * float(model.opt.timestep))
    with pytest.raises(ValueError, match="unknown State fields"):
        jaxsim.rollout(model, state, jnp.zeros((2, model.nu)), fields=("qpoz",))
    with pytest.raises(ValueError, match=r"\(T, nu=1\)"):
        jaxsim.rollout(model, state, jnp.zeros((2, 3)))


_SHARDED = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    import jaxsim
    assert jax.device_count() == 4, jax.devices()
    model = jaxsim.load(r"{model}", dtype=jnp.float64)
    s0 = jaxsim.make_state(model, keyframe=0)
    T = 12
    for B, axis in ((4, None), (6, 0)):   # 6 worlds on 4 devices: padded to 8
        k = jnp.arange(B, dtype=jnp.float64)
        states = jax.vmap(lambda x: s0.replace(qpos=s0.qpos + 0.1 * x, qvel=s0.qvel - 0.05 * x))(k)
        ctrl = jnp.asarray(np.random.default_rng(B).uniform(-1, 1, (B, T, model.nu)))
        m = model if axis is None else jax.vmap(
            lambda x: model.replace(body_mass=model.body_mass * (1 + 0.2 * x)))(k)
        final, traj = jaxsim.rollout_batch(m, states, ctrl, model_axis=axis,
                                           fields=("qpos", "qvel", "time"))
        assert len(final.qpos.sharding.device_set) == 4, final.qpos.sharding
        assert final.qpos.shape == (B, model.nq) and traj["qpos"].shape == (B, T, model.nq)
        one = jax.device_put((m, states, ctrl), jax.devices()[0])  # unsharded reference
        ref_final, ref_traj = jax.jit(jax.vmap(
            lambda m, d, u: jaxsim.rollout(m, d, u, fields=("qpos", "qvel", "time")),
            in_axes=(axis, 0, 0)))(*one)
        assert len(ref_final.qpos.sharding.device_set) == 1
        for name in ("qpos", "qvel", "time"):
            np.testing.assert_allclose(traj[name], ref_traj[name], rtol=0, atol=1e-12)
        np.testing.assert_allclose(final.qvel, ref_final.qvel, rtol=0, atol=1e-12)
        if axis == 0:  # the worlds really differ in mass
            assert np.ptp(np.asarray(traj["qpos"])[:, -1, 0]) > 0
    print("SHARDED-OK")
""")


def test_rollout_batch_sharded_equals_vmap():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    code = _SHARDED.format(model=MODELS / "pendulum.xml")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=500)
    assert r.returncode == 0 and "SHARDED-OK" in r.stdout, r.stdout + r.stderr[-3000:]


def test_rollout_batch_threads_equal_one_thread(cartpole):
    """A batch cut into chunks for host threads gives each world the result one program
    over the whole batch gives it (per-world models, padding to a multiple of the
    threads, and the chunked simulate-style call that keeps the padding)."""
    from jaxsim.rollout import rollout_batch_fn

    model, s0 = cartpole
    B, T = 71, 8  # 71 worlds on 2 threads: padded to 72
    k = jnp.arange(B, dtype=jnp.float64) / B
    states = jax.vmap(lambda x: s0.replace(qpos=s0.qpos + 0.3 * x, qvel=s0.qvel - 0.2 * x))(k)
    ctrl = jnp.asarray(np.random.default_rng(3).uniform(-1, 1, (B, T, model.nu)))
    m = jax.vmap(lambda x: model.replace(body_mass=model.body_mass * (1 + x)))(k)
    one = rollout_batch_fn(m, states, ctrl, model_axis=0, fields=("qpos", "time"), threads=1)
    two = rollout_batch_fn(m, states, ctrl, model_axis=0, fields=("qpos", "time"), threads=2)
    assert (one.nthread, two.nthread, two.npad) == (1, 2, 72)
    ref_final, ref_traj = one(m, states, ctrl)
    final, traj = two(m, states, ctrl)
    assert final.qpos.shape == (B, model.nq) and traj["qpos"].shape == (B, T, model.nq)
    np.testing.assert_allclose(traj["qpos"], ref_traj["qpos"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(final.qvel, ref_final.qvel, rtol=0, atol=1e-12)
    assert np.ptp(np.asarray(traj["qpos"])[:, -1, 0]) > 0  # the worlds differ
    # the padded states fed back, as the simulate command's chunks do
    padded, _ = two(m, states, ctrl, unpad=False)
    assert padded.qpos.shape == (72, model.nq)
    again, _ = two(m, padded, ctrl)
    ref_again, _ = one(m, ref_final, ctrl)
    np.testing.assert_allclose(again.qpos, ref_again.qpos, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="threads"):
        rollout_batch_fn(model, states, ctrl, threads=0)
    # small batches stay on fewer threads
    assert rollout_batch_fn(model, jax.tree.map(lambda x: x[:40], states),
                            ctrl[:40], threads=2).nthread == 1


def test_default_chunks_follow_the_state_size():
    """One chunk per core for a small state; more (cores times a power of two, capped)
    once a chunk's state would pass CHUNK_STATE_BYTES; one on a single core."""
    from jaxsim.rollout import CHUNK_STATE_BYTES, MAX_CHUNKS_PER_CORE, _default_chunks

    def states(nworld, per_world):
        return {"x": jax.ShapeDtypeStruct((nworld, per_world // 4), jnp.float32)}

    small = CHUNK_STATE_BYTES // 4096
    assert _default_chunks(states(1024, small), 2) == 2
    assert _default_chunks(states(1024, small), 1) == 1
    # 3 chunks' worth of state on 2 cores: 4 chunks; 3 cores: 3
    per = 3 * CHUNK_STATE_BYTES // 1024
    assert _default_chunks(states(1024, per), 2) == 4
    assert _default_chunks(states(1024, per), 3) == 3
    huge = 100 * CHUNK_STATE_BYTES // 1024
    assert _default_chunks(states(1024, huge), 2) == 2 * MAX_CHUNKS_PER_CORE
