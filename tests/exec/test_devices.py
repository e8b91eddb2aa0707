"""Devices: the torch backend's staged copies on each device, what the tests' ``torch-grouped`` transport (NCCL's
protocol on Gloo) refuses (its exact runs are collective cases in tests/mpi/test_executor.py), the command
line's device handling, and, where PyTorch sees a GPU, the whole executor and GCN training on
CUDA. Tests parametrised over ``cuda`` skip with "CUDA absent" where there is none; every MPI test
runs ``mpiexec -n P`` with a timeout."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import extra_transports  # noqa: E402, F401 - registers torch-grouped
from mpi_driver import planned_runs  # noqa: E402

from conftest import _seed, cuda_devices, on_devices, run_mpi  # noqa: E402
from sparsewire.exec.transports import transport_problem  # noqa: E402
from sparsewire.kernels.torch_backend import TorchBackend  # noqa: E402


@pytest.mark.parametrize("device", on_devices("cpu", "cuda"))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_staged_copies_carry_a_message_out_of_and_into_the_buffers_exactly(rng, device, dtype):
    backend = TorchBackend(device)
    rows, k = int(rng.integers(1, 40)), int(rng.integers(1, 9))
    buffer = backend.zeros((rows, k), dtype)
    flat = backend.flat(buffer)
    values = rng.integers(-1000, 1000, rows * k).astype(dtype)
    stage_in, stage_out = backend.stage_zeros(rows * k, dtype), backend.stage_zeros(rows * k, dtype)
    stage_in[:] = values
    start, stop = sorted(rng.integers(0, rows * k + 1, 2))
    backend.copy_in(stage_in[start:stop], flat[start:stop])  # one message of the buffer
    backend.copy_out(flat, stage_out)
    backend.synchronize()
    expected = np.zeros(rows * k, dtype)
    expected[start:stop] = values[start:stop]
    np.testing.assert_array_equal(stage_out, expected)
    np.testing.assert_array_equal(buffer.cpu().numpy().reshape(-1), expected)
    if device.startswith("cuda"):
        assert torch.from_numpy(stage_in).is_pinned(), "staged host memory must be page-locked for asynchronous copies"
        assert isinstance(backend.mpi_memory(buffer), torch.Tensor) and backend.mpi_memory(buffer).is_cuda
    else:
        assert isinstance(backend.mpi_memory(buffer), np.ndarray)


def test_the_grouped_transport_runs_whole_exchanges_only():
    assert "bulk, overlap, pipelined modes on cuda:0 (not early)" in transport_problem("torch", "early", "cuda:0")
    assert transport_problem("torch", "overlap", "cuda:0") is None
    assert transport_problem("mpi", "early", "cuda:0") is None  # MPI binds each message on its own
    assert transport_problem("torch", "early", "cpu") is None
    assert "not early" in transport_problem("torch-grouped", "early", "cpu")  # NCCL's protocol on Gloo (the tests' transport)


def test_the_command_line_names_the_device_problem_in_one_line():
    if cuda_devices():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    completed = run_mpi(2, ["-m", "sparsewire", "spmm", "rmat:8:8:1", "--device", "cuda"], timeout=60)
    assert completed.returncode != 0
    lines = [line for line in completed.stderr.splitlines() if "sees no CUDA device" in line]
    assert lines and "device='cpu'" in lines[0], completed.stderr[-2000:]
    numpy_on_gpu = run_mpi(1, ["-m", "sparsewire", "spmm", "rmat:8:8:1", "--backend", "numpy", "--device", "cuda:0"], timeout=60)
    assert numpy_on_gpu.returncode != 0 and "numpy backend runs on the CPU" in numpy_on_gpu.stderr


# --- on a GPU (skipped where PyTorch sees none) ---------------------------------------------------


@pytest.mark.parametrize("device", on_devices("cuda"))
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_torch_backend_on_cuda_over_mpi_is_exact_for_every_strategy_and_mode(device, ranks):
    """Ranks may share a GPU on the MPI transport (messages staged through pinned host memory, or
    direct with a CUDA-aware MPI)."""
    completed = run_mpi(ranks, ["tests/exec/mpi_driver.py", str(_seed()), "1", "mpi", "torch", device], timeout=500)
    assert completed.returncode == 0, completed.stdout + completed.stderr[-4000:]
    assert completed.stdout.strip() == f"OK {planned_runs([1], 'mpi', 'torch', 'cuda:0') * ranks}"


@pytest.mark.parametrize("device", on_devices("cuda"))
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_nccl_moves_cuda_buffers_exactly(device, ranks):
    if cuda_devices() < ranks:
        pytest.skip(f"NCCL needs one GPU per rank: {ranks} ranks, {cuda_devices()} GPU(s)")
    completed = run_mpi(ranks, ["tests/exec/mpi_driver.py", str(_seed()), "1", "torch", "torch", device], timeout=500)
    assert completed.returncode == 0, completed.stdout + completed.stderr[-4000:]
    assert completed.stdout.strip() == f"OK {planned_runs([1], 'torch', 'torch', 'cuda:0') * ranks}"


@pytest.mark.parametrize("device", on_devices("cuda"))
def test_nccl_refuses_ranks_that_share_a_gpu_naming_them(device):
    completed = run_mpi(
        2,
        ["-m", "sparsewire", "spmm", "rmat:8:8:1", "--device", f"{device}:0", "--transport", "torch", "--mode", "bulk"],
        timeout=120,
    )
    assert completed.returncode != 0
    assert "ranks 0 and 1 share GPU cuda:0" in completed.stderr and "NCCL needs one GPU per rank" in completed.stderr, (
        completed.stderr[-2000:]
    )


@pytest.mark.parametrize("device", on_devices("cuda"))
def test_cuda_messages_take_the_path_the_rule_gives(tmp_path, device):
    """A planted calibration on CUDA: with the MPICH wheel (not CUDA-aware) every message is
    staged whatever the file says; C exact, bytes as planned, staged memory equal to the buffers."""
    completed = run_mpi(
        3,
        ["tests/wire/transfer_driver.py", f"split:{tmp_path / 'cuda.json'}", "torch", str(_seed()), device],
        timeout=300,
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-4000:]
    totals = json.loads(completed.stdout.strip().splitlines()[-1])
    assert totals["staged"] > 0


@pytest.mark.parametrize("device", on_devices("cuda"))
def test_spmm_command_on_cuda_checks_against_scipy(device):
    completed = run_mpi(
        2,
        ["-m", "sparsewire", "spmm", "rmat:10:8:1", "--device", device, "--mode", "bulk,overlap,early", "--check", "--json"],
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert report["backend"] == "torch" and report["device"].startswith("cuda")
    assert all(run["check_passed"] for run in report["runs"])


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_cuda_branches_give_the_same_c_when_copies_run_as_late_as_a_gpu_may_run_them(tmp_path, ranks):
    """The whole executor on the torch backend's CUDA branches (tensors to MPI for direct
    messages, staged copies on a copy stream, synchronize before MPI) over tests/wire/deferred_streams.py:
    each staged copy runs only once the host or the compute stream waits for it. C exact for two
    different B, bytes as planned, both paths at P = 3. (Dropping the synchronize before MPI
    starts the sends, or the compute stream's wait for an incoming copy, makes C differ.)"""
    completed = run_mpi(
        ranks,
        [
            "tests/wire/transfer_driver.py",
            f"split:{tmp_path / 'planted.json'}",
            "torch",
            str(_seed() + ranks),
            "cpu-deferred-streams",
        ],
        timeout=240,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-4000:]
    totals = json.loads(completed.stdout.strip().splitlines()[-1])
    assert totals["staged"] > 0 and totals["deferred_copies"] > 0, totals
    if ranks >= 3 and totals["distinct_sizes"] >= 2:  # messages of one size are all staged
        assert totals["direct"] > 0, totals


def test_the_cuda_copy_branches_order_their_streams(rng, monkeypatch):
    """Without a GPU, the CUDA branches of the staged copies run against recording streams: the
    copy stream waits for the compute stream before each copy, an incoming copy makes the compute
    stream wait for it, and synchronize waits for both; the data still moves (CPU tensors)."""
    log = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            log.append(f"{self.name} waits for {other.name}")

        def synchronize(self):
            log.append(f"{self.name} synchronized")

    class Using:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            log.append(f"on {self.stream.name}")

        def __exit__(self, *exc):
            log.append(f"off {self.stream.name}")

    compute = Stream("compute")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: compute)
    monkeypatch.setattr(torch.cuda, "stream", Using)
    backend = TorchBackend("cpu")
    backend._copies = Stream("copies")  # what __init__ makes on a CUDA device
    buffer = backend.zeros((5, 3), np.float64)
    assert backend.mpi_memory(buffer) is buffer  # a CUDA tensor goes to MPI as it is
    values = rng.integers(-9, 10, 15).astype(np.float64)
    stage = values.copy()
    backend.copy_in(stage, backend.flat(buffer))
    assert log == ["copies waits for compute", "on copies", "off copies", "compute waits for copies"]
    log.clear()
    out = np.zeros(15)
    backend.copy_out(backend.flat(buffer), out)
    assert log == ["copies waits for compute", "on copies", "off copies"]
    log.clear()
    backend.synchronize()
    assert log == ["copies synchronized", "compute synchronized"]
    np.testing.assert_array_equal(out, values)
