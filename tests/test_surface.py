"""The package's face: at most 25 public names, each resolving; importing ``sparsewire`` changes
no process-wide setting and loads neither MPI, Numba nor PyTorch; Numba gets a pool large enough
for ``threads=T`` where the package imports it."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import sparsewire
import sparsewire.testing
from conftest import ROOT

IMPORT_SIDE_EFFECTS = """
import json, os, sys, warnings
environment, show = dict(os.environ), warnings.showwarning
import sparsewire
print(json.dumps({
    "environment_changed": sorted(set(os.environ.items()) ^ set(environment.items())),
    "showwarning_changed": warnings.showwarning is not show,
    "loaded": sorted(m for m in ("mpi4py", "numba", "torch", "graphblas") if m in sys.modules),
}))
"""


def _run(code: str, env=None) -> dict:
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _run_each(*calls: tuple[str, dict]) -> list[dict]:
    """:func:`_run` of each ``(code, env)``, two interpreters at a time (each is mostly its imports)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda call: _run(*call), calls))


def test_the_top_level_names_are_few_and_all_resolve():
    assert len(sparsewire.__all__) <= 25 and len(set(sparsewire.__all__)) == len(sparsewire.__all__)
    for name in sparsewire.__all__:
        assert getattr(sparsewire, name) is not None
    # planner internals and test helpers live in their folders, not at the top
    for internal in ("build_plan", "build_rank_plan_collective", "minimum_vertex_cover", "deterministic_dense", "RankPlan"):
        assert internal not in sparsewire.__all__
    assert sparsewire.plan.build_plan is not None
    assert sparsewire.testing.deterministic_dense(0, 3, 2).shape == (3, 2)


def test_importing_the_package_changes_no_process_wide_setting():
    facts = _run(IMPORT_SIDE_EFFECTS)
    assert facts == {"environment_changed": [], "showwarning_changed": False, "loaded": []}


def test_a_planted_side_effect_is_seen(tmp_path):
    """A planted fault: a module that sets a variable and replaces showwarning on import is caught
    by the same check."""
    (tmp_path / "sparsewire_leaky.py").write_text(
        "import os, warnings\nos.environ['LEAKED'] = '1'\nwarnings.showwarning = lambda *a, **k: None\n"
    )
    code = IMPORT_SIDE_EFFECTS.replace("import sparsewire\n", f"sys.path.insert(0, {str(tmp_path)!r}); import sparsewire_leaky\n")
    facts = _run(code)
    assert facts["environment_changed"] == [["LEAKED", "1"]] and facts["showwarning_changed"] is True


def _without_pool_size() -> dict:
    return {key: value for key, value in os.environ.items() if key != "NUMBA_NUM_THREADS"}


def _pool_size_runs() -> list[tuple[str, dict]]:
    """The pool Numba gets where the package imports it: as the package imports it, the user's size, and the two
    paths that load python-graphblas first."""
    env = _without_pool_size()
    code = (
        "import json, os\n"
        "import sparsewire.kernels.numba_csr\n"
        "import numba\n"
        "print(json.dumps({'pool': numba.config.NUMBA_NUM_THREADS, 'cores': os.cpu_count()}))\n"
    )
    # python-graphblas imports Numba itself (its SuiteSparse settings): the paths that load it (the loader, the threads
    # limit every command sets) size the pool first too; without that, limit_threads_per_rank left a pool of the core
    # count and eigs --threads 3 failed on two cores
    grown = []
    for first in ("sparsewire.spgemm.graphblas_loader", "sparsewire.comm.runtime"):
        call = "sparsewire.comm.runtime.limit_threads_per_rank(__import__('mpi4py.MPI').MPI.COMM_SELF)\n"
        grown.append(
            code.replace("import sparsewire.kernels.numba_csr\n", f"import {first}\n" + (call if "runtime" in first else ""))
        )
    chosen = {**env, "NUMBA_NUM_THREADS": "3"}  # the user's choice wins
    return [(code, env), (code, chosen), *((each, env) for each in grown)]


@pytest.mark.prefetch(lambda: functools.partial(_run_each, *_pool_size_runs()))  # (interpreters: in the background)
def test_numba_gets_a_pool_for_more_threads_than_cores_where_the_package_imports_it(prefetched):
    facts, user, *loaders = prefetched
    assert facts["pool"] >= max(64, facts["cores"])
    assert user["pool"] == 3
    for first, found in zip(("graphblas_loader", "runtime"), loaders):
        assert found["pool"] >= max(64, facts["cores"]), first


def test_no_module_imports_numba_but_the_one_that_sizes_its_pool():
    import re

    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "src" / "sparsewire").rglob("*.py")
        if path.name != "jit.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*(import numba|from numba[ .])", line)
    ]
    assert found == [], f"import Numba through sparsewire._lib.jit: {found}"


def _graphblas_first_runs(first: str) -> list[tuple[str, dict]]:
    """The pool where ``first`` is the first module imported, and where python-graphblas is (the planted fault)."""
    env = _without_pool_size()
    code = f"import json, os\nimport {first}\nimport numba\nprint(json.dumps({{'pool': numba.config.NUMBA_NUM_THREADS}}))\n"
    planted = code.replace(f"import {first}", f"import graphblas; graphblas.binary; import {first}")
    return [(code, env), (planted, env)]


@pytest.mark.parametrize("first", ["sparsewire.spgemm.semirings", "sparsewire.apps.graphs", "sparsewire.distributed.spgemm"])
@pytest.mark.prefetch(lambda first: functools.partial(_run_each, *_graphblas_first_runs(first)))
def test_python_graphblas_which_imports_numba_loads_after_the_pool_is_sized(first, prefetched):
    """python-graphblas imports Numba: loaded first, it fixed the pool at the core count, and a plan with more threads
    than cores then failed; every module loads it through spgemm/graphblas_loader.py."""
    found, fault = prefetched
    assert found["pool"] >= 64
    assert fault["pool"] == os.cpu_count()  # the fault it guards against


def _graphblas_threads_runs(graphblas_first: bool) -> list[tuple[str, dict]]:
    """The threads python-graphblas runs at 3 and at 1 thread per rank, loaded before or after the limit."""
    env = {**os.environ, "SPARSEWIRE_THREADS_PER_RANK": "3"}
    code = (
        "import json, sys\n"
        + ("import sparsewire.spgemm.graphblas_loader\n" if graphblas_first else "")
        + "import sparsewire.comm.runtime as runtime\n"
        "threads = runtime.limit_threads_per_rank(__import__('mpi4py.MPI').MPI.COMM_SELF)\n"
        "loaded = 'graphblas' in sys.modules\n"
        "from sparsewire.spgemm.graphblas_loader import graphblas\n"
        "print(json.dumps({'threads': threads, 'loaded': loaded, 'nthreads': graphblas.ss.config['nthreads']}))\n"
    )
    return [(code, env), (code, {**env, "SPARSEWIRE_THREADS_PER_RANK": "1"})]


@pytest.mark.parametrize("graphblas_first", [False, True])
@pytest.mark.prefetch(lambda graphblas_first: functools.partial(_run_each, *_graphblas_threads_runs(graphblas_first)))
def test_graphblas_runs_the_threads_the_rank_chose_whether_it_loads_before_or_after_the_limit(graphblas_first, prefetched):
    """The threads limit leaves python-graphblas unloaded (SpMM and training never use it) and the package's loader
    gives it the rank's thread count when it loads later; loaded before, the limit sets it at once."""
    facts, one = prefetched
    assert facts == {"threads": 3, "loaded": graphblas_first, "nthreads": 3}, facts
    assert one["nthreads"] == 1
