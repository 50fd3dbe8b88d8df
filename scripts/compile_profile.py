"""Where the compile time of a batched rollout goes: XLA's pass times, and the LLVM time of
every kernel mapped to the jaxsim source line that produced it.

    python scripts/compile_profile.py MODEL.xml [--batch 1024] [--steps 100] [--top 30]

Runs jit(vmap(scan(step))) (as ../shared/referee/bench.py does) in a child process with
XLA's timing logs on (TF_CPP_VMODULE) and the optimized HLO dumped, then prints: the phases
(trace+lower, HLO passes, backend), the summed LLVM time over kernels, the slowest kernels
with their source lines, and the kernel count and LLVM time by source function. XLA:CPU
compiles each fusion as its own LLVM module, so both the number of kernels and a few
expensive ones (minor-axis concatenates, see math.stack_last) show up here.
(profile_step.py --what kernels counts the kernels without compiling them twice.)
"""
from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from profile_step import Frames  # the same source mapping as its kernel counts

_CHILD = r"""
import os, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp
import jaxsim
path, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = jaxsim.load(path, dtype=jnp.float32)
s0 = jaxsim.make_state(m)
noise = 1e-3 * jax.random.normal(jax.random.PRNGKey(0), (B,) + s0.qpos.shape, s0.qpos.dtype)
st = jax.vmap(lambda n: s0.replace(qpos=s0.qpos + n))(noise)
def roll(s):
    return jax.lax.scan(lambda s, _: (jaxsim.step(m, s), None), s, None, length=T)[0]
f = jax.jit(jax.vmap(roll))
t = time.perf_counter(); lo = f.lower(st); tl = time.perf_counter() - t
t = time.perf_counter(); lo.compile(); tc = time.perf_counter() - t
print(f"PROFILE trace+lower {tl:.1f} s  compile {tc:.1f} s", flush=True)
"""

_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _seconds(v: str, unit: str) -> float:
    return float(v) * _UNIT[unit]


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0",
                   TF_CPP_VMODULE="cpu_compiler=1,hlo_pass_pipeline=1,ir_compiler=1",
                   XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={tmp}"
                              " --xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_roll"))
        r = subprocess.run([sys.executable, "-c", _CHILD, a.model, str(a.batch), str(a.steps)],
                           env=env, capture_output=True, text=True)
        log = r.stdout + r.stderr
        if r.returncode:
            sys.exit(log[-3000:])
        dumps = sorted(pathlib.Path(tmp).glob("*jit_roll.cpu_after_optimizations.txt"))
        hlo = dumps[-1].read_text() if dumps else ""
    print(next(ln for ln in log.splitlines() if ln.startswith("PROFILE"))[8:])
    for what in ("Running HLO passes on [jit_roll]", "Compiling [jit_roll] for CPU using JIT"):
        m = re.search(re.escape(what) + r".*? time: ([\d.]+) (us|ms|s) ", log)
        if m:
            print(f"  {what.split(' [')[0].lower().replace('compiling', 'backend')}: "
                  f"{_seconds(*m.groups()):.1f} s")
    kernels = []
    for m in re.finditer(r"Compiled LLVM module: (\S+) time: ([\d.]+) (us|ms|s) ", log):
        name = re.sub(r"^(__compute_module_)+", "", m.group(1))
        name = re.sub(r"(_elemental)?_kernel_module$", "", name)
        kernels.append((_seconds(m.group(2), m.group(3)), name))
    kernels.sort(reverse=True)
    print(f"  LLVM: {len(kernels)} kernels, {sum(t for t, _ in kernels):.1f} s summed over "
          "the compile threads")
    frames = Frames(hlo)
    line_of = {ln[3:ln.index(" ", 3)]: ln for ln in hlo.splitlines() if ln.startswith("  %")}
    where = {k: frames.of(line_of.get(k, "")) for _, k in kernels}
    print(f"\nslowest {a.top} kernels (s, kernel, source: innermost first)")
    for t, k in kernels[:a.top]:
        print(f"  {t:6.2f}  {k:42s} {where[k] if where[k] != '?' else '(no source: XLA-made)'}")
    count, total = collections.Counter(), collections.Counter()
    for t, k in kernels:
        inner = where[k].split(" < ")[0]  # "file:line function"
        key = re.sub(r":\d+", "", inner) if where[k] != "?" else "(no source: XLA-made)"
        count[key] += 1
        total[key] += t
    print("\nkernels and LLVM seconds by source function")
    for key, n in count.most_common(a.top):
        print(f"  {n:4d} {total[key]:6.2f}  {key}")


if __name__ == "__main__":
    main()
