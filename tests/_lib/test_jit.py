"""sparsewire._lib.jit.njit: processes that need the same uncompiled kernel at once compile it once; the others
wait and load it from Numba's cache."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import CHILD_ENV, ROOT

KERNEL = """
import numpy as np
from sparsewire._lib.jit import njit


@njit(cache=True)
def weighted_sum(values, weights):
    total = 0.0
    for i in range(values.size):
        total += values[i] * weights[i % weights.size]
    return total
"""

# Each process waits until every process has imported the module (a file per process in the barrier folder), so that
# all of them ask for the kernel's first compile within milliseconds of each other.
PROCESS = """
import json, os, sys, time
from pathlib import Path

import numpy as np

sys.path.insert(0, sys.argv[1])
barrier, count, planted = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "planted"
import kernel

compile_now = kernel.weighted_sum._compiler.compile


def compile_slowly(*args):  # a kernel that takes a second to compile: the processes overlap however loaded the machine
    time.sleep(1.0)
    return compile_now(*args)


kernel.weighted_sum._compiler.compile = compile_slowly
if planted:  # the fault: Numba's own compile, without the lock
    kernel.weighted_sum.compile = kernel.weighted_sum.compile.__wrapped__
(barrier / str(os.getpid())).touch()
while len(list(barrier.iterdir())) < count:
    time.sleep(0.001)
value = kernel.weighted_sum(np.arange(7.0), np.array([1.0, 2.0]))
stats = kernel.weighted_sum.stats
print(json.dumps({"value": value, "misses": sum(stats.cache_misses.values()), "hits": sum(stats.cache_hits.values())}))
"""


def start_together(folder, processes: int, planted: bool) -> list[subprocess.Popen]:
    """``processes`` processes that each import a new cached kernel (in ``folder``, its cache there too) and call it
    at the same moment."""
    folder.mkdir()
    (folder / "kernel.py").write_text(KERNEL)
    barrier = folder / "barrier"
    barrier.mkdir()
    environment = {**CHILD_ENV, "NUMBA_CACHE_DIR": str(folder / "cache")}
    arguments = [str(folder), str(barrier), str(processes), "planted" if planted else "locked"]
    return [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PROCESS), *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=ROOT,
        )  # fmt: skip
        for _ in range(processes)
    ]


def results(started: list[subprocess.Popen]) -> list[dict]:
    found = []
    for process in started:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        found.append(json.loads(out))
    return found


def test_processes_that_need_a_new_kernel_at_once_compile_it_once_and_without_the_lock_each_compiles(tmp_path):
    """Two processes with the lock, and beside them two with Numba's compile alone (the planted fault)."""
    locked, planted = start_together(tmp_path / "locked", 2, False), start_together(tmp_path / "planted", 2, True)
    locked, planted = results(locked), results(planted)
    expected = float(sum(v * (1.0 if i % 2 == 0 else 2.0) for i, v in enumerate(range(7))))  # 0 + 2 + 2 + 6 + 4 + 10 + 6
    assert [r["value"] for r in locked + planted] == [expected] * 4 == [30.0] * 4
    assert sorted(r["misses"] for r in locked) == [0, 1]  # one compiled; the one that waited loaded its result
    assert sorted(r["hits"] for r in locked) == [0, 1]
    assert [r["misses"] for r in planted] == [1, 1]
