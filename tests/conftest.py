"""Shared test setup: float64 JAX, paths to the model corpora."""

import os

os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pathlib  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus" / "mujoco"
MODELS = ROOT / "models"


def gym_assets() -> pathlib.Path | None:
    try:
        import gymnasium
    except ImportError:
        return None
    p = pathlib.Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"
    return p if p.exists() else None


def mjx_test_data() -> pathlib.Path | None:
    try:
        import mujoco
    except ImportError:
        return None
    p = pathlib.Path(mujoco.__file__).parent / "mjx" / "test_data"
    return p if p.exists() else None
