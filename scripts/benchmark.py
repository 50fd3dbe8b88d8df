#!/usr/bin/env python3
"""Throughput of jaxsim vs MJX vs MuJoCo's multithreaded rollout, over models and batches.

    python scripts/benchmark.py                                  # the full table (long)
    python scripts/benchmark.py --models hopper --batch 1,64 --steps 20 --out bench_out
    python scripts/benchmark.py --scaling --out bench_out        # vs bodies and vs batch

Conventions follow ../shared/referee/bench.py: every engine simulates `batch` copies of the
model from keyframe 0 (or the initial state) with 1e-3 qpos noise (jax.random.PRNGKey(0)),
zero control, `steps` steps;
  jaxsim   jax.jit(jax.vmap(lax.scan of jaxsim.step))
  jaxsim_batch  jaxsim.rollout_batch (the simulate command's path): on one CPU device, the
           batch cut into one chunk of worlds per core, each chunk's compiled rollout
           called from its own host thread (docs/performance.md, "Two cores from host
           threads"); compile time is the chunk program's, peak memory one chunk's
  mjx      the same program around mujoco.mjx.step (put_model / put_data)
  mujoco   mujoco.rollout.Rollout with --threads MjData (default: all cores)
The JAX engines are compiled ahead of time (`lower().compile()`, timed; --xla-options jaxsim
compiles both with `jaxsim.compiler_options()`, as rollout_batch does), run once to warm up
and then timed; steps/s = batch * steps / wall time. Peak memory is the compiled program's
memory_analysis (arguments + outputs + temporaries) for the JAX engines and the growth of
the process's peak RSS over the rollout for MuJoCo.

Every (engine, model, batch) runs in its own subprocess with a time limit (--timeout): a
hang, a rejection (the engine does not support the model) or a crash is reported in the
table and the run goes on. Writes `benchmark.md`, `benchmark.json` and `benchmark.png` (and
`scaling.*` with --scaling) to --out. Numbers are comparable only within one run on one
quiet machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = ("jaxsim", "jaxsim_batch", "mjx", "mujoco")
JAXSIM = ("jaxsim", "jaxsim_batch")
GYM = ("ant", "hopper", "half_cheetah", "humanoid")
DEFAULT_MODELS = "ant,hopper,half_cheetah,humanoid,mjx_humanoid,bundled"


# ----------------------------------------------------------------------------- models


def _site_packages_path(module: str, *parts: str) -> str | None:
    try:
        mod = __import__(module, fromlist=["__file__"])
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(mod.__file__), *parts)
    return path if os.path.exists(path) else None


def resolve_models(spec: str) -> list[tuple[str, str]]:
    """(name, path) for a comma list of gym names, mjx_humanoid, mjx_barkour, bundled, model
    names or paths."""
    out = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item in GYM:
            p = _site_packages_path("gymnasium", "envs", "mujoco", "assets", f"{item}.xml")
            out.append((item, p))
        elif item == "mjx_humanoid":
            out.append((item, _site_packages_path("mujoco", "mjx", "test_data", "humanoid",
                                                  "humanoid.xml")))
        elif item == "mjx_barkour":  # a quadruped on a height field
            out.append((item, _site_packages_path("mujoco", "mjx", "test_data", "barkour_v0",
                                                  "assets", "barkour_v0_mjx.xml")))
        elif item == "bundled":
            for p in sorted(glob.glob(os.path.join(ROOT, "models", "*.xml"))):
                if not os.path.basename(p).startswith("pile"):
                    out.append((os.path.basename(p)[:-4], p))
        elif os.path.exists(item):
            out.append((os.path.basename(item).removesuffix(".xml"), os.path.abspath(item)))
        elif os.path.exists(os.path.join(ROOT, "models", f"{item}.xml")):
            out.append((item, os.path.join(ROOT, "models", f"{item}.xml")))
        else:
            out.append((item, None))
    return out


def model_info(path: str) -> dict:
    import mujoco

    try:
        m = mujoco.MjModel.from_xml_path(path)
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}
    return {"nbody": m.nbody, "nv": m.nv, "ngeom": m.ngeom, "nu": m.nu}


# ----------------------------------------------------------------------------- worker


def _rollout_fn(step, model, steps):
    import jax

    def roll(state):
        def body(s, _):
            return step(model, s), None

        return jax.lax.scan(body, state, None, length=steps)[0]

    return roll


def _timed(fn, *args):
    import jax

    jax.block_until_ready(fn(*args))  # warm-up
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def _bench_jax(step, model, state0, batch, steps, repeat, options=None):
    import jax

    states = _noisy_states(state0, batch)
    f = jax.jit(jax.vmap(_rollout_fn(step, model, steps)), compiler_options=options or None)
    t = time.perf_counter()
    compiled = f.lower(states).compile()
    tc = time.perf_counter() - t
    dt = min(_timed(compiled, states) for _ in range(repeat))
    res = {"status": "ok", "sps": batch * steps / dt, "compile_s": tc, "wall_s": dt,
           "process_peak_rss_mb": _maxrss_mb()}
    _put_peak(res, compiled.memory_analysis())
    return res


def _noisy_states(state0, batch):
    """`batch` copies of state0 with 1e-3 qpos noise (jax.random.PRNGKey(0))."""
    import jax

    noise = 1e-3 * jax.random.normal(jax.random.PRNGKey(0), (batch,) + state0.qpos.shape,
                                     state0.qpos.dtype)
    return jax.vmap(lambda n: state0.replace(qpos=state0.qpos + n))(noise)


def _put_peak(res: dict, mem) -> None:
    """A compiled program's peak memory (arguments + outputs + temporaries) into res."""
    if mem is not None:
        res["peak_mb"] = (mem.argument_size_in_bytes + mem.output_size_in_bytes
                          + mem.temp_size_in_bytes - mem.alias_size_in_bytes) / 1e6


def _bench_batch(model, state0, batch, steps, repeat):
    """jaxsim.rollout_batch over the same batch (host threads on one CPU device)."""
    from jaxsim.rollout import rollout_batch_fn

    states = _noisy_states(state0, batch)
    br = rollout_batch_fn(model, states, None, fields=None, length=steps)
    t = time.perf_counter()
    br.compile(model, states, None)
    tc = time.perf_counter() - t
    dt = min(_timed(lambda s: br(model, s)[0], states) for _ in range(repeat))
    res = {"status": "ok", "sps": batch * steps / dt, "compile_s": tc, "wall_s": dt,
           "threads": br.nthread, "process_peak_rss_mb": _maxrss_mb()}
    _put_peak(res, br.memory_analysis())
    return res


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _bench_mujoco(path, batch, steps, threads, repeat):
    import mujoco
    import numpy as np
    from mujoco import rollout

    m = mujoco.MjModel.from_xml_path(path)
    rss0 = _maxrss_mb()
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    noise = np.random.default_rng(0).standard_normal((batch, m.nq)) * 1e-3
    qpos0 = d.qpos.copy()
    state0 = np.zeros((batch, mujoco.mj_stateSize(m, spec)))
    for i in range(batch):
        d.qpos[:] = qpos0 + noise[i]
        mujoco.mj_getState(m, d, state0[i], spec)
    ctrl = np.zeros((batch, steps, m.nu))
    datas = [mujoco.MjData(m) for _ in range(threads)]
    runner = rollout.Rollout(nthread=threads)
    try:
        runner.rollout([m] * batch, datas, state0, ctrl)  # warm-up (thread pool, pages)
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            runner.rollout([m] * batch, datas, state0, ctrl)
            best = min(best, time.perf_counter() - t)
    finally:
        if hasattr(runner, "close"):
            runner.close()
    return {"status": "ok", "sps": batch * steps / best, "wall_s": best, "threads": threads,
            "peak_mb": _maxrss_mb() - rss0}


def worker(a: argparse.Namespace) -> dict:
    """One engine, one model, one batch, in this process; returns the result dict."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if a.engine == "mujoco":
        return _bench_mujoco(a.model, a.batch, a.steps, a.threads, a.repeat)
    import jax

    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    dtype = jnp.float64 if a.dtype == "float64" else jnp.float32
    sys.path.insert(0, ROOT)
    import jaxsim

    # the same XLA options for both JAX engines: XLA's defaults, or jaxsim's own choice
    options = jaxsim.compiler_options() if a.xla_options == "jaxsim" else None
    if a.engine in JAXSIM:
        try:
            model = jaxsim.load(a.model, dtype=dtype)
            state0 = jaxsim.make_state(model, keyframe=0 if model.nkey else None)
            if a.engine == "jaxsim_batch":
                return _bench_batch(model, state0, a.batch, a.steps, a.repeat)
            return _bench_jax(jaxsim.step, model, state0, a.batch, a.steps, a.repeat, options)
        except (jaxsim.MJCFError, NotImplementedError) as e:
            return {"status": "rejected", "error": f"{type(e).__name__}: {e}"}
    import mujoco
    from mujoco import mjx

    m = mujoco.MjModel.from_xml_path(a.model)
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    try:
        mx = mjx.put_model(m)
        dx = mjx.put_data(m, d)
    except (NotImplementedError, ValueError) as e:
        return {"status": "rejected", "error": f"{type(e).__name__}: {e}"}
    return _bench_jax(mjx.step, mx, dx, a.batch, a.steps, a.repeat, options)


# ----------------------------------------------------------------------------- driver


def run_one(engine: str, path: str, batch: int, a: argparse.Namespace) -> dict:
    """Runs one measurement in a subprocess under the time limit; never raises."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--engine", engine,
           "--model-path", path, "--batch", str(batch), "--steps", str(a.steps),
           "--dtype", a.dtype, "--threads", str(a.threads), "--repeat", str(a.repeat),
           "--xla-options", a.xla_options]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"no result within {a.timeout:g} s"}
    res = None
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        tail = [s for s in (r.stderr or "").strip().splitlines() if s.strip()][-1:] or [""]
        res = {"status": "failed", "error": f"exit {r.returncode}: {tail[0][:300]}"}
    res["total_s"] = time.perf_counter() - t
    return res


def _fmt(r: dict | None, key: str, spec: str) -> str:
    if r is None:
        return "-"
    if r.get("status") != "ok":
        return r.get("status", "?")
    v = r.get(key)
    return "-" if v is None else format(v, spec)


def _ratio(a: dict | None, b: dict | None) -> str:
    if a and b and a.get("status") == "ok" and b.get("status") == "ok":
        return f"{a['sps'] / b['sps']:.2f}"
    return "-"


def markdown(rows: list[dict], engines: list[str], title: str, meta: str) -> str:
    head = ["model", "nbody", "nv", "batch"]
    head += [f"{e} steps/s" for e in engines]
    pairs = [(j, e) for j in engines if j in JAXSIM for e in engines if e not in JAXSIM]
    head += [f"{j}/{e}" for j, e in pairs]
    head += [f"{e} compile s" for e in engines if e != "mujoco"]
    head += [f"{e} peak MB" for e in engines]
    lines = [f"## {title}", "", meta, "", "| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    notes = []
    for row in rows:
        res = row["results"]
        cells = [row["model"], str(row.get("nbody", "-")), str(row.get("nv", "-")),
                 str(row["batch"])]
        cells += [_fmt(res.get(e), "sps", ",.0f") for e in engines]
        cells += [_ratio(res.get(j), res.get(e)) for j, e in pairs]
        cells += [_fmt(res.get(e), "compile_s", ".1f") for e in engines if e != "mujoco"]
        cells += [_fmt(res.get(e), "peak_mb", ".2f") for e in engines]
        lines.append("| " + " | ".join(cells) + " |")
        for e in engines:
            r = res.get(e)
            if r and r.get("status") != "ok":
                notes.append(f"- {row['model']} batch {row['batch']} {e}: {r['status']}: "
                             f"{r.get('error', '')}")
    if notes:
        lines += ["", "Not measured:", ""] + notes
    return "\n".join(lines) + "\n"


COLORS = {"jaxsim": (31, 119, 180), "jaxsim_batch": (148, 103, 189), "mjx": (255, 127, 14),
          "mujoco": (44, 160, 44)}


def plot(path: str, rows: list[dict], engines: list[str], x_key: str, group_key: str,
         xlabel: str, title: str) -> None:
    """steps/s against `x_key`, one panel per value of `group_key`, one line per engine."""
    import numpy as np

    sys.path.insert(0, ROOT)
    from jaxsim.pngplot import Panel, Series, save_figure

    panels = []
    for g in dict.fromkeys(r[group_key] for r in rows):
        sub = [r for r in rows if r[group_key] == g]
        p = Panel(f"{group_key} {g}" if group_key != "model" else str(g), xlabel, "steps/s",
                  logx=True, logy=True)
        for e in engines:
            pts = sorted((float(r[x_key]), r["results"][e]["sps"]) for r in sub
                         if r["results"].get(e, {}).get("status") == "ok")
            if pts:
                x, y = np.array(pts).T
                p.series.append(Series(x, y, COLORS.get(e, (0, 0, 0)), e, 2, True))
        panels.append(p)
    if panels:
        save_figure(path, panels, cols=min(3, len(panels)), panel_w=400, panel_h=300,
                    title=title)


def sweep(models, batches, engines, a, progress_name) -> list[dict]:
    rows = []
    for name, path in models:
        info = model_info(path) if path else {"error": "model file not found"}
        for b in batches:
            row = {"model": name, "path": path, "batch": b, "results": {},
                   **{k: v for k, v in info.items() if k != "error"}}
            for e in engines:
                if path is None or "error" in info:
                    res = {"status": "failed", "error": info.get("error", "no file")}
                else:
                    res = run_one(e, path, b, a)
                row["results"][e] = res
                val = (f"{res['sps']:,.0f} steps/s" if res["status"] == "ok"
                       else f"{res['status']}: {res.get('error', '')[:120]}")
                extra = f", compile {res['compile_s']:.1f} s" if "compile_s" in res else ""
                print(f"[{progress_name}] {name:14s} batch {b:5d} {e:12s} {val}{extra}",
                      file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=DEFAULT_MODELS,
                   help="comma list: gym names (ant, hopper, half_cheetah, humanoid), "
                        "mjx_humanoid, mjx_barkour, bundled (models/*.xml but pile*), names in models/, "
                        f"or paths (default {DEFAULT_MODELS})")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--batch", default="1,64,1024", help="comma list of batch sizes")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="MuJoCo rollout threads (default: all cores)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs, best kept")
    p.add_argument("--xla-options", choices=("default", "jaxsim"), default="default",
                   help="XLA compile options of both JAX engines: XLA's defaults (as the "
                   "referee's bench.py) or jaxsim.compiler_options() (as rollout_batch)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    p.add_argument("--out", default="bench_out")
    p.add_argument("--no-main", action="store_true", help="skip the model table")
    p.add_argument("--scaling", action="store_true",
                   help="also measure steps/s vs number of bodies and vs batch size")
    p.add_argument("--scaling-models", default="pile1,pile10,pile100",
                   help="models for the bodies sweep (add pile1000 for the largest)")
    p.add_argument("--scaling-bodies-batch", default="1,64")
    p.add_argument("--scaling-batch-model", default="quadruped")
    p.add_argument("--scaling-batches", default="1,4,16,64,256,1024")
    # worker mode (internal)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--model-path", dest="model", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.worker:
        a.batch = int(a.batch)
        try:
            res = worker(a)
        except Exception as e:  # noqa: BLE001
            res = {"status": "failed", "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    engines = [e for e in a.engines.split(",") if e]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        p.error(f"unknown engines {bad}; choose from {ENGINES}")
    os.makedirs(a.out, exist_ok=True)
    meta = (f"{a.steps} steps, {a.dtype}, zero control, qpos noise 1e-3; XLA options "
            f"{a.xla_options}; MuJoCo rollout with "
            f"{a.threads} threads; {os.cpu_count()} CPU cores; time limit {a.timeout:g} s per "
            f"measurement; {time.strftime('%Y-%m-%d %H:%M')}")
    report = {"meta": meta, "args": vars(a)}
    if not a.no_main:
        batches = [int(b) for b in a.batch.split(",")]
        rows = sweep(resolve_models(a.models), batches, engines, a, "bench")
        md = markdown(rows, engines, "jaxsim vs MJX vs MuJoCo", meta)
        report["main"] = rows
        with open(os.path.join(a.out, "benchmark.md"), "w") as f:
            f.write(md)
        plot(os.path.join(a.out, "benchmark.png"), rows, engines, "batch", "model", "batch",
             f"steps/s vs batch ({a.steps} steps, {a.dtype})")
        print(md)
    if a.scaling:
        bodies = sweep(resolve_models(a.scaling_models),
                       [int(b) for b in a.scaling_bodies_batch.split(",")], engines, a,
                       "bodies")
        batch = sweep(resolve_models(a.scaling_batch_model),
                      [int(b) for b in a.scaling_batches.split(",")], engines, a, "batch")
        report["scaling_bodies"], report["scaling_batch"] = bodies, batch
        md = (markdown(bodies, engines, "Scaling with the number of bodies", meta) + "\n"
              + markdown(batch, engines, "Scaling with the batch size", meta))
        with open(os.path.join(a.out, "scaling.md"), "w") as f:
            f.write(md)
        plot(os.path.join(a.out, "scaling_bodies.png"), bodies, engines, "nbody", "batch",
             "bodies (nbody)", "steps/s vs number of bodies")
        plot(os.path.join(a.out, "scaling_batch.png"), batch, engines, "batch", "model",
             "batch", "steps/s vs batch size")
        print(md)
    with open(os.path.join(a.out, "benchmark.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"wrote {a.out}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
