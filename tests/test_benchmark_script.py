"""scripts/benchmark.py: the table's ratio columns, and the rollout_batch engine's worker."""

import argparse
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "benchmark_script", os.path.join(ROOT, "scripts", "benchmark.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_markdown_ratios_of_both_jaxsim_engines(bench):
    ok = lambda sps: {"status": "ok", "sps": sps, "compile_s": 1.0, "peak_mb": 1.0}  # noqa: E731
    rows = [{"model": "m", "nbody": 2, "nv": 1, "batch": 8,
             "results": {"jaxsim": ok(300.0), "jaxsim_batch": ok(600.0), "mjx": ok(100.0),
                         "mujoco": {"status": "timeout", "error": "slow"}}}]
    md = bench.markdown(rows, list(bench.ENGINES), "t", "meta")
    head, _, row = md.splitlines()[4:7]
    cols = [c.strip() for c in head.strip("|").split("|")]
    cells = dict(zip(cols, [c.strip() for c in row.strip("|").split("|")], strict=True))
    assert cells["jaxsim/mjx"] == "3.00"
    assert cells["jaxsim_batch/mjx"] == "6.00"
    assert cells["jaxsim/mujoco"] == "-" and cells["jaxsim_batch/mujoco"] == "-"
    assert "jaxsim/jaxsim_batch" not in cols
    assert "mujoco: timeout" in md


def test_batch_engine_worker(bench):
    a = argparse.Namespace(engine="jaxsim_batch", model=os.path.join(ROOT, "models",
                                                                     "pendulum.xml"),
                           batch=70, steps=3, repeat=1, dtype="float64", threads=1,
                           xla_options="default")
    res = bench.worker(a)
    assert res["status"] == "ok", res
    assert res["sps"] > 0 and res["compile_s"] > 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    assert res["threads"] == max(1, min(cores, 70 // 32))
