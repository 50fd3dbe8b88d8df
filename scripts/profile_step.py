"""Where a vmapped step spends its run time and its compile time, by pipeline stage and by
source line.

    python scripts/profile_step.py MODEL.xml [--batch 1024] [--dtype float32]
        [--warm 100] [--what stages,kernels,trace] [--top 25]

stages   each stage of `forward` (and `step`), jitted and vmapped on its own over a batch of
         states taken `--warm` steps from the initial one (so contacts exist): run time per
         call and per world, and the compile time of each. Each call also copies the whole
         state: the "(state copy)" row is that baseline.
kernels  the compiled `vmap(step)`: the executable instructions (fusions, copies, loops,
         library calls) of every non-fused computation, counted by the jaxsim source line
         that made them (the innermost three frames). XLA:CPU compiles each fusion as a
         kernel of its own, so this is where compile time goes; the count is exact and does
         not depend on the machine's load, unlike timings.
trace    a `--steps`-step rollout under jax.profiler: thunk time per HLO instruction, summed
         over the steps and both worker threads (a `while` counts its body too), with the
         source line of each instruction; then the inclusive time of each function of the
         call stacks (file:function), over the instructions that have a source.

Timings on a shared machine vary by tens of percent from run to run: compare A and B in
alternation, several times, and trust the kernel counts over small timing differences.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxsim  # noqa: E402
from jaxsim import constraint, passive, rne, smooth  # noqa: E402
from jaxsim.collision import driver as collision  # noqa: E402

fwd = sys.modules["jaxsim.forward"]  # the module (jaxsim.forward is the function)


def _stages():
    return [
        ("(state copy)", lambda m, d: d.replace(time=d.time + 0)),
        ("kinematics", smooth.kinematics), ("com_pos", smooth.com_pos),
        ("tendon", smooth.tendon), ("make_m", smooth.make_m), ("factor_m", smooth.factor_m),
        ("collision", collision.collision), ("transmission", smooth.transmission),
        ("fwd_position", fwd.fwd_position), ("com_vel", smooth.com_vel),
        ("passive", passive.passive), ("rne", rne.rne), ("fwd_velocity", fwd.fwd_velocity),
        ("fwd_actuation", fwd.fwd_actuation), ("fwd_acceleration", fwd.fwd_acceleration),
        ("make_constraint", constraint.make_constraint),
        ("fwd_constraint", fwd.fwd_constraint), ("forward", jaxsim.forward),
        ("step", jaxsim.step),
    ]


def _best(fn, *args, reps: int = 10) -> float:
    out = fn(*args)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def stages(model, states, batch: int) -> None:
    print(f"{'stage':18s} {'run ms':>9s} {'us/world':>9s} {'lower s':>8s} {'compile s':>9s}")
    for name, f in _stages():
        jax.clear_caches()
        g = jax.jit(jax.vmap(lambda d, f=f: f(model, d)))
        t0 = time.perf_counter()
        lowered = g.lower(states)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        run = _best(compiled, states)
        print(f"{name:18s} {run * 1e3:9.2f} {run / batch * 1e6:9.2f} {t1 - t0:8.2f} "
              f"{t2 - t1:9.2f}", flush=True)


class Frames:
    """Source locations of the instructions of a compiled module's text (its FileNames,
    FunctionNames, FileLocations and StackFrames tables)."""

    def __init__(self, text: str):
        self.files, self.funcs, self.locs, self.frames = {}, {}, {}, {}
        section = None
        for line in text.splitlines():
            s = line.strip()
            if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
                section = s
                continue
            if section and not s:
                section = None
                continue
            if section in ("FileNames", "FunctionNames"):
                i, v = s.split(" ", 1)
                (self.files if section == "FileNames" else self.funcs)[int(i)] = (
                    v.strip('"').split("/")[-1])
            elif section in ("FileLocations", "StackFrames"):
                i = int(s.split(" ")[0])
                kv = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", s)}
                if section == "FileLocations":
                    self.locs[i] = (kv["file_name_id"], kv.get("function_name_id", 0),
                                    kv["line"])
                else:
                    # the printed parent id is one past the parent's index
                    self.frames[i] = (kv["file_location_id"], kv.get("parent_frame_id", 0) - 1)

    def _walk(self, frame: int, depth: int):
        """(file, function, line) of the stack's frames, innermost first, at most depth."""
        out = []
        while frame in self.frames and len(out) < depth:
            loc, parent = self.frames[frame]
            f, fn, line = self.locs[loc]
            out.append((self.files.get(f, "?"), self.funcs.get(fn, ""), line))
            if parent == frame or parent <= 0:
                break
            frame = parent
        return out

    def functions(self, frame: int) -> list:
        """file:function of every frame of the stack, innermost first (no line numbers)."""
        return [f"{f}:{fn}" for f, fn, _ in self._walk(frame, 64)]

    def chain(self, frame: int, depth: int = 3) -> str:
        out = [f"{f}:{line} {fn}" for f, fn, line in self._walk(frame, depth)]
        return " < ".join(out) or "?"

    def of(self, instruction_line: str) -> str:
        m = re.search(r"stack_frame_id=(\d+)", instruction_line)
        return self.chain(int(m.group(1))) if m else "?"


_SKIP = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast")


def _executable(text: str):
    """(name, opcode, line) of the instructions of the non-fused computations: the entry
    computation and the bodies and conditions of loops and conditionals (named
    `%region...`), but not the reducers (`to_apply=`) nor the fused computations."""
    reducers = set(re.findall(r"to_apply=%?([\w.\-]+)", text))
    for comp in re.split(r"\n(?=%|ENTRY)", text):
        head = comp.split(" ", 1)[0]
        if ("fused" in head or "_computation" in head or head.startswith("%wrapped")
                or head.lstrip("%") in reducers):
            continue
        for line in comp.splitlines()[1:]:
            m = re.match(r"\s*(?:ROOT )?%(\S+) = \S+ (\w[\w-]*)\(", line)
            if m and m.group(2) not in _SKIP:
                yield m.group(1), m.group(2), line


def kernels(model, states, top: int) -> None:
    g = jax.jit(jax.vmap(lambda d: jaxsim.step(model, d)))
    text = g.lower(states).compile().as_text()
    frames = Frames(text)
    by_src, by_kind = collections.Counter(), collections.Counter()
    for name, op, line in _executable(text):
        kind = re.sub(r"\.\d+$", "", name) if op == "fusion" else op
        by_kind[kind] += 1
        by_src[frames.of(line)] += 1
    print(f"executable instructions of vmap(step): {sum(by_kind.values())} "
          f"(fused computations: {len(re.findall(r'^%fused_computation', text, re.M))})")
    print("by kind:")
    for k, v in by_kind.most_common(top):
        print(f"  {v:5d} {k}")
    print("by source:")
    for k, v in by_src.most_common(top):
        print(f"  {v:5d} {k}")


def trace(model, states, steps: int, top: int) -> None:
    def roll(s):
        return jax.lax.scan(lambda s, _: (jaxsim.step(model, s), None), s, None,
                            length=steps)[0]

    compiled = jax.jit(jax.vmap(roll)).lower(states).compile()
    frames = Frames(compiled.as_text())
    where, stacks = {}, {}
    for name, _, line in _executable(compiled.as_text()):
        where[name] = frames.of(line)
        m = re.search(r"stack_frame_id=(\d+)", line)
        stacks[name] = frames.functions(int(m.group(1))) if m else []
    jax.block_until_ready(compiled(states))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        with jax.profiler.trace(tmp):
            jax.block_until_ready(compiled(states))
        wall = time.perf_counter() - t
        from jax.profiler import ProfileData

        pd = ProfileData.from_file(glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True)[0])
        total, count = collections.Counter(), collections.Counter()
        for plane in pd.planes:
            for line in plane.lines:
                if not line.name.startswith("tf_XLAEigen"):
                    continue
                for ev in line.events:
                    if not ev.name.startswith("ThunkExecutor"):
                        total[ev.name] += ev.duration_ns
                        count[ev.name] += 1
    print(f"{steps} steps, {wall:.2f} s under the profiler; thunk ms per step, calls per step:")
    for k, v in total.most_common(top):
        print(f"  {v / 1e6 / steps:9.3f} {count[k] / steps:8.1f}  {k:32s} {where.get(k, '')}")
    # inclusive time of each jaxsim function over the instructions with a source (loops
    # and conditionals, which carry none, are left out: their bodies are counted)
    incl = collections.Counter()
    for k, v in total.items():
        for fn in dict.fromkeys(stacks.get(k, ())):
            incl[fn] += v
    print(f"inclusive thunk ms per step by function (all thunks with a source: "
          f"{sum(v for k, v in total.items() if stacks.get(k)) / 1e6 / steps:.2f}, "
          f"all: {sum(total.values()) / 1e6 / steps:.2f}):")
    for k, v in incl.most_common(2 * top):
        print(f"  {v / 1e6 / steps:9.3f}  {k}")


def warm_states(model, batch: int, warm: int):
    """`batch` states (keyframe 0 or the initial one, qpos noise 1e-3) after `warm` steps
    with zero control."""
    s0 = jaxsim.make_state(model, keyframe=0) if model.nkey else jaxsim.make_state(model)
    noise = 1e-3 * jax.random.normal(jax.random.PRNGKey(0), (batch,) + s0.qpos.shape,
                                     s0.qpos.dtype)
    states = jax.vmap(lambda n: s0.replace(qpos=s0.qpos + n))(noise)
    if warm:
        states = jax.jit(jax.vmap(lambda d: jax.lax.fori_loop(
            0, warm, lambda i, d: jaxsim.step(model, d), d)))(states)
    return states


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--warm", type=int, default=100)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--what", default="stages,kernels,trace")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    model = jaxsim.load(a.model, dtype=jnp.float32 if a.dtype == "float32" else jnp.float64)
    states = warm_states(model, a.batch, a.warm)
    states = jax.jit(jax.vmap(lambda d: jaxsim.forward(model, d)))(states)
    print(f"{os.path.basename(a.model)}: batch {a.batch}, {a.dtype}, after {a.warm} steps: "
          f"{float(jnp.mean(jnp.sum(states.contact.active, -1))):.1f} active contacts of "
          f"{states.contact.active.shape[-1]} slots, solver iterations "
          f"{float(jnp.mean(states.solver_niter)):.2f} on average")
    what = a.what.split(",")
    if "stages" in what:
        stages(model, states, a.batch)
    if "kernels" in what:
        kernels(model, states, a.top)
    if "trace" in what:
        trace(model, states, a.steps, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
