"""Commands whose output a bad path would spoil, on every rank of one job: the path is refused before the work
starts, with one line, on every rank (a rank left measuring alone would wait for the others forever)."""

from __future__ import annotations

import pytest


@pytest.mark.ranks(2, 3)
@pytest.mark.parametrize("where", ["missing directory", "a directory"])
def test_calibrate_network_refuses_a_bad_output_on_every_rank_before_measuring(command, shared_tmp, where):
    target = shared_tmp / "absent" / "network.json" if where == "missing directory" else shared_tmp
    status, out, err = command("calibrate", "--network", "--output", str(target))
    assert status == 2 and out == "", (status, out, err)
    expected = "does not exist" if where == "missing directory" else "is a directory"
    assert expected in err and err.count("\n") == 1, err


@pytest.mark.ranks(2, 3)
def test_closed_plans_refuse_every_entry_point_alike_on_every_rank(comm, shared_tmp):
    """A closed SpmmPlan or SpgemmPlan: multiply, transpose, save and trace raise the same InputError on every rank
    (closing is collective, so no rank is left waiting), never an MPI error or an abort of the job."""
    import numpy as np

    import sparsewire
    from sparsewire.errors import InputError

    matrix = sparsewire.distribute(comm, "stencil2d:6")
    plan = matrix.spmm_plan(2, strategy="column")
    b = np.ones((plan.input_rows, 2))
    expected = plan.multiply(b)
    plan.close()
    assert plan.closed
    for call in (lambda: plan.multiply(b), plan.transpose, lambda: plan.save(shared_tmp / "plan.npz")):
        with pytest.raises(InputError, match="this SpmmPlan was closed"):
            call()
    with pytest.raises(InputError, match="this SpmmPlan was closed; trace an open one"):
        with sparsewire.trace(plan):
            pass
    with matrix.spmm_plan(2, strategy="column") as again:  # the job goes on
        assert np.array_equal(again.multiply(b), expected)
    spgemm = sparsewire.plan_spgemm(matrix, matrix)
    spgemm.close()
    with pytest.raises(InputError, match="this SpgemmPlan was closed"):
        spgemm.multiply()
    with pytest.raises(InputError, match="this SpgemmPlan was closed; trace an open one"):
        with sparsewire.trace(spgemm):
            pass


@pytest.mark.ranks(2)
def test_a_trace_into_a_file_instead_of_a_directory_is_refused_on_every_rank(comm, shared_tmp):
    import sparsewire
    from sparsewire.errors import InputError

    if comm.Get_rank() == 0:
        (shared_tmp / "taken").write_text("a file")
    comm.Barrier()
    matrix = sparsewire.distribute(comm, "stencil2d:6")
    with matrix.spmm_plan(1, strategy="column") as plan:
        with pytest.raises(InputError, match="taken is a file; give a directory for the trace"):
            with sparsewire.trace(plan, shared_tmp / "taken"):
                pass
        with sparsewire.trace(plan, shared_tmp / "traces") as tracer:  # a good one still works
            plan.multiply(__import__("numpy").ones((plan.input_rows, 1)))
        assert comm.Get_rank() != 0 or (shared_tmp / "traces" / "trace.json").is_file(), tracer.path
