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
