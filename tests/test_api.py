"""The public library API: the jobs that must end (tests/api_driver.py; the collective programs are in
tests/mpi/test_api.py), the transposed plan's bytes for every strategy, ``auto`` against every candidate,
and errors that never hang."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import sparsewire
from conftest import ROOT, run_mpi
from oracles import random_integer_matrix, replay_plan
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES
from sparsewire.plan.transpose import transpose_comm_plan

DRIVER = str(ROOT / "tests" / "api_driver.py")


def test_loading_on_another_number_of_ranks_is_a_one_line_error(tmp_path):
    script = (
        "import sys, numpy as np; from mpi4py import MPI; import sparsewire\n"
        "m = sparsewire.distribute(MPI.COMM_WORLD, 'stencil2d:12')\n"
        "if sys.argv[1] == 'save':\n"
        "    m.spmm_plan(2).save(sys.argv[2])\n"
        "else:\n"
        "    try: sparsewire.SpmmPlan.load(sys.argv[2], m)\n"
        "    except sparsewire.PlanMismatchError as e: print('ERR', e)\n"
    )
    path = str(tmp_path / "plan.npz")
    assert run_mpi(2, ["-c", script, "save", path], timeout=120).returncode == 0
    completed = run_mpi(3, ["-c", script, "load", path], timeout=120)
    # Every rank prints its error (lines of several ranks may interleave).
    assert completed.stdout.count("holds a plan for P = 2 ranks, not 3; load it on 2 ranks or plan again") == 3, (
        completed.stdout + completed.stderr
    )


def test_wrong_b_shape_on_one_rank_aborts_the_job_quickly():
    completed = run_mpi(3, [DRIVER, "wrong_shape"], timeout=10)
    assert completed.returncode != 0, completed.stdout
    assert "rank 1: the B block has shape (" in completed.stderr and "aborting the job" in completed.stderr
    assert "rank 1: rank 1:" not in completed.stderr  # the rank named once
    assert "OK wrong_shape" not in completed.stdout


#: Every mode and backend that runs it: a complex B is refused before any mode's schedule runs (the backends' B check).
COMBINATIONS = [f"{m}/{b}" for m in ("bulk", "overlap", "pipelined", "early") for b in ("numpy", "torch")] + ["partitioned/numpy"]


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_a_complex_b_is_refused_not_multiplied_as_its_real_part(combination):
    """In-process (one rank): the refusal names the dtype in every mode and backend, and the plan then multiplies a
    real B exactly."""
    from mpi4py import MPI

    mode, backend = combination.split("/")
    if backend == "torch":
        pytest.importorskip("torch")
    matrix = sparsewire.distribute(MPI.COMM_SELF, "stencil2d:12")
    expected = matrix.gather() @ np.ones((matrix.shape[1], 2))
    with matrix.spmm_plan(2, mode=mode, backend=backend) as plan:
        with pytest.raises(sparsewire.PlanMismatchError, match=r"the B block's values are complex128 \(complex\)"):
            plan.multiply(np.ones((plan.input_rows, 2)) * (1 + 2j))
        c = plan.multiply(np.ones((plan.input_rows, 2)))
        assert np.array_equal(c.numpy() if backend == "torch" else c, expected)


# At P > 1 a refused multiply ends the job (the same check, then the job's end, whatever the mode): one job per backend.
@pytest.mark.parametrize("ranks, combination", [(3, "overlap/numpy"), (4, "early/torch")])
def test_a_complex_b_on_several_ranks_ends_the_job_with_the_error(ranks, combination):
    completed = run_mpi(ranks, [DRIVER, "complex_b", combination], timeout=120)
    assert completed.returncode != 0 and "should not have" not in completed.stdout, completed.stdout
    assert "the B block's values are complex128 (complex)" in completed.stderr, completed.stderr


@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_transposed_plan_is_exact_and_moves_the_same_bytes_for_every_strategy(rng, ranks):
    for shape in [(45, 45), (33, 58), (64, 21)]:
        matrix = random_integer_matrix(rng, *shape, 0.1)
        rows, cols = sparsewire.partition.partition(matrix, ranks, "even").partitions
        for strategy in EXECUTABLE_STRATEGIES:
            for layout in ("merged", "pipelined"):
                topology = sparsewire.Topology.nodes(2) if strategy.hierarchical or layout == "pipelined" else None
                plan = sparsewire.plan.build_plan(matrix, rows, cols, strategy, topology, layout=layout)
                transposed = transpose_comm_plan(plan)
                g = rng.integers(-3, 4, (shape[0], 2)).astype(float)
                assert np.array_equal(replay_plan(transposed, g), matrix.T @ g), (strategy, layout)
                forward = sparsewire.plan.plan_stats(plan.ranks, 2, 8)
                backward = sparsewire.plan.plan_stats(transposed.ranks, 2, 8)
                assert backward.total_bytes == forward.total_bytes and backward.messages == forward.messages


def test_importing_sparsewire_does_not_start_mpi():
    code = "import sys, sparsewire\nassert 'mpi4py.MPI' not in sys.modules\nprint('ok')\n"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.stdout.strip() == "ok", completed.stderr


def test_every_public_function_and_method_says_whether_it_is_collective():
    import inspect

    undocumented = []
    for name in sparsewire.__all__:
        obj = getattr(sparsewire, name)
        assert inspect.getdoc(obj), name
        members = (
            [(name, obj)]
            if not inspect.isclass(obj)
            else [
                (f"{name}.{member}", getattr(value, "__func__", value))
                for member, value in vars(obj).items()
                if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)))
            ]
        )
        for label, function in members:
            if not inspect.isclass(function) and "ollective" not in (inspect.getdoc(function) or ""):
                undocumented.append(label)
    assert not undocumented, f"docstrings that do not say Collective or Not collective: {undocumented}"


def _api_doc_programs() -> list[str]:
    text = (ROOT / "docs" / "api.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_docs_api_examples_are_programs_the_collective_job_runs():
    """Each program of docs/api.md compiles; the collective job at P = 2 runs each on every rank
    (tests/mpi/test_api.py::test_docs_api_example_runs_on_every_rank)."""
    programs = _api_doc_programs()
    assert len(programs) >= 3
    for index, program in enumerate(programs):
        compile(program, f"docs/api.md example {index + 1}", "exec")
        assert "MPI.COMM_WORLD" in program and "import sparsewire" in program, f"example {index + 1}"


def test_error_classes_derive_from_the_matching_builtins():
    assert issubclass(sparsewire.InputError, ValueError) and issubclass(sparsewire.PlanMismatchError, ValueError)
    assert issubclass(sparsewire.InputError, sparsewire.SparsewireError)


@pytest.mark.parametrize("script", ["power_iteration.py", "bfs_spgemm.py"])
def test_examples_say_how_to_run_them_and_the_collective_jobs_run_them(script, monkeypatch, capsys):
    """Each example's docstring gives its ``mpiexec`` line and its ``--help`` explains its arguments (in this
    process); the collective jobs at P = 1 and 3 run both (tests/mpi/test_api.py::test_examples_run_on_every_rank)."""
    import runpy

    path = ROOT / "examples" / script
    assert re.search(rf"mpiexec -n \d \.venv/bin/python examples/{script}", path.read_text())
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(path), run_name="__main__")
    assert ended.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage:") and "--" in usage, usage


def test_help_lists_every_command():
    from conftest import run_cli

    completed = run_cli(["--help"])
    assert completed.returncode == 0
    for command in (
        "analyze",
        "spmm",
        "eigs",
        "spgemm",
        "bfs",
        "sssp",
        "triangles",
        "reach",
        "gcn",
        "simulate",
        "calibrate",
        "netsparse",
    ):
        assert f"    {command}" in completed.stdout, command


def test_a_plan_multiplied_from_two_threads_at_once_refuses_the_second(rng):
    """One plan from two threads gave wrong products at P = 1 (28 of 100) and a raw MPI error at
    P = 2: now the second concurrent multiply is one clear error, and no product is wrong."""
    import threading

    from mpi4py import MPI

    a = random_integer_matrix(rng, 2000, 2000, 0.004)
    b = rng.integers(-3, 4, (2000, 16)).astype(np.float64)
    expected = a @ b
    matrix = sparsewire.distribute(MPI.COMM_SELF, a)
    with matrix.spmm_plan(16) as plan:
        with plan.executor._running:  # as while another thread's multiply runs
            with pytest.raises(sparsewire.PlanMismatchError, match="already multiplying in another thread"):
                plan.multiply(b)
        exact, refused = [], []

        def work() -> None:
            for _ in range(40):
                try:
                    exact.append(np.array_equal(plan.multiply(b), expected))
                except sparsewire.PlanMismatchError as error:
                    refused.append("one multiply at a time" in str(error))

        threads = [threading.Thread(target=work) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(exact) and all(refused) and len(exact) + len(refused) == 80 and exact


@pytest.mark.parametrize("mode", ["bulk", "overlap", "pipelined", "early", "partitioned"])
def test_every_mode_plans_and_prices_its_steps_in_flight(rng, mode):
    """One process (COMM_SELF): a plan in every mode is made and multiplies exactly, and its predicted time takes the
    steps the mode keeps in flight on its transport (one for a transport that does not send message by message)."""
    from mpi4py import MPI

    from sparsewire.plan.cost import predicted_communication_seconds
    from sparsewire.plan.modes import Mode

    a = random_integer_matrix(rng, 300, 300, 0.02)
    b = rng.integers(-3, 4, (300, 4)).astype(np.float64)
    matrix = sparsewire.distribute(MPI.COMM_SELF, a)
    with matrix.spmm_plan(4, mode=mode, threads=2, topology=sparsewire.parse_topology("nodes:1")) as plan:
        assert np.array_equal(plan.multiply(b), a @ b)
        message_by_message = plan.executor.transport.sends_message_by_message
        assert message_by_message == (mode != "partitioned")
        assert Mode(mode).steps_in_flight == {"bulk": None, "partitioned": 1}.get(mode, 2)
        in_flight = Mode(mode).steps_in_flight if message_by_message else 1
        expected = predicted_communication_seconds(plan.stats, steps_in_flight=in_flight)
        assert plan.predicted_communication_seconds == expected
