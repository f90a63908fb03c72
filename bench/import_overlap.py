"""Can a run's set-up imports overlap? Wall and CPU seconds of the heavy imports a GPU run of
the SmolLM2 example makes, one after another and split over two threads, each in a fresh
interpreter, alternating.

If the imports are bound by the interpreter (CPU seconds close to wall seconds) two threads
cannot help under the GIL; if they wait on the file system (wall well above CPU, as on a host
whose file reads are slow) a second thread importing another package tree overlaps them.

    python bench/import_overlap.py --reps 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

# what the run imports after torch: the tokenizer's and model's transformers, and the compile
# stack (dynamo, inductor, triton) the compiled decode step and the Triton sampler need
FIRST = "import torch"
A = "from transformers import AutoTokenizer, AutoModelForCausalLM"
B = "import torch._dynamo, torch._inductor.compile_fx" + (
    ", triton" if importlib.util.find_spec("triton") else "")

CHILD = r"""
import json, os, resource, sys, threading, time
t0 = time.perf_counter()
exec(sys.argv[1])
t1 = time.perf_counter()
if sys.argv[4] == "threads":
    th = threading.Thread(target=exec, args=(sys.argv[2],))
    th.start()
    exec(sys.argv[3])
    th.join()
else:
    exec(sys.argv[2])
    exec(sys.argv[3])
t2 = time.perf_counter()
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"first": t1 - t0, "rest": t2 - t1, "user": r.ru_utime, "sys": r.ru_stime,
                  "modules": len(sys.modules)}))
"""


def once(mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, FIRST, A, B, mode], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    once("serial")  # the file cache warm for both
    for rep in range(a.reps):
        for mode in ("serial", "threads"):
            r = once(mode)
            print(f"import_overlap rep {rep} {mode:7s}: torch {r['first']:.2f} s, then "
                  f"{r['rest']:.2f} s; CPU user {r['user']:.2f} sys {r['sys']:.2f}; "
                  f"{r['modules']} modules", flush=True)


if __name__ == "__main__":
    main()
