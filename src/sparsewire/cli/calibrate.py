"""The ``calibrate`` command: the local SpMM rate the compute model of ``simulate`` reads, with ``--device``
the transfer paths between two ranks, or with ``--network`` the link classes between the job's ranks
(both under mpiexec; :mod:`sparsewire.calibration`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparsewire._lib.text import format_bytes, format_table
from sparsewire.calibration.compute import default_calibration_path, measure_compute_rate
from sparsewire.cli.common import (
    check_writable,
    json_text,
    positive_int,
    progress_printer,
    resolve_backend_arguments,
    write_output,
)
from sparsewire.errors import InputError
from sparsewire.kernels import BACKENDS
from sparsewire.topology.records import record_path, write_record
from sparsewire.wire.transfer_records import default_transfer_record_path

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``calibrate`` to the CLI's subparsers."""

    calibrate = commands.add_parser(
        "calibrate",
        help="measure this machine's local SpMM rate for the compute model of 'simulate', or with --device the transfer paths",
        description="Without --device: time the executor's CSR x dense kernel (one thread) on an R-MAT graph (scale 16, edge "
        "factor 8) "
        "at k = 16, 32, 64 and write the median rate in nonzero-columns per second to a JSON file. With --device D (run as "
        "'mpiexec -n 2 sparsewire calibrate --device D'): time messages of each --sizes between ranks 0 and 1 sent directly from "
        "the "
        "backend's buffers and staged through host memory, and write the size below which staging is faster; the executor stages "
        "messages below it (the hybrid communication of the semiring SpGEMM paper, sec. 5.2). With --network (run as "
        "'mpiexec -n P sparsewire calibrate --network'): measure latency and bandwidth inside a node and between nodes (nodes "
        "as MPI sees them: shared memory), the latter also with every rank of a node sending out at once, and write a topology "
        "file that --topology FILE reads (spmm, analyze, explain(), --strategy auto).",
    )
    calibrate.add_argument(
        "--output",
        help=f"where to write (default: {default_calibration_path()}; with --device "
        f"{default_transfer_record_path('cpu').parent}/transfer-<device type>.json)",
    )
    calibrate.add_argument(
        "--repeat",
        type=positive_int,
        help="timed products per k (default: 5), or with --device timed round trips per message size and path (default: 20)",
    )
    what = calibrate.add_mutually_exclusive_group()
    what.add_argument(
        "--device", help="measure the transfer paths of this device (cpu, cuda or cuda:N) instead of the compute rate"
    )
    what.add_argument(
        "--network",
        action="store_true",
        help=f"measure the links between the job's ranks and write a topology file (default: {record_path('network')})",
    )
    calibrate.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="with --device: the kernel backend whose buffers are sent (default: numpy on the CPU, torch on cuda)",
    )
    calibrate.add_argument(
        "--sizes",
        default=",".join(str(4**e) for e in range(3, 12)),
        help="with --device: message sizes in bytes, comma-separated (default: 64, 256, ..., 4194304)",
    )
    calibrate.add_argument(
        "--message-bytes",
        type=positive_int,
        default=4 << 20,
        help="with --network: the streamed message size (default: 4194304)",
    )
    calibrate.add_argument("--json", action="store_true", help="print the measurement as JSON")
    calibrate.set_defaults(handler=_run_calibrate)


def _run_calibrate(args: argparse.Namespace) -> int:
    if args.network:
        return _run_calibrate_network(args)
    if args.device is not None:
        return _run_calibrate_transfers(args)
    path = Path(args.output) if args.output else default_calibration_path()
    if args.output:
        check_writable(path, "--output")
    result = measure_compute_rate(args.repeat or 5, progress_printer(args))
    write_output(path, "--output", lambda target: write_record(target, result))
    result["path"] = str(path)
    if args.json:
        print(json_text(result))
    else:
        print(f"local SpMM rate {result['compute_rate']:.3g} nonzero-columns/s, written to {path}")
    return 0


def _run_calibrate_transfers(args: argparse.Namespace) -> int:
    """``calibrate --device``: the transfer sweep (Collective over MPI_COMM_WORLD)."""
    from mpi4py import MPI

    from sparsewire.calibration.transfer import measure_transfer_paths
    from sparsewire.kernels import make_backend

    try:
        sizes = sorted({int(text) for text in args.sizes.split(",") if text.strip()})
    except ValueError:
        raise InputError(f"--sizes must be whole numbers of bytes, comma-separated (got {args.sizes!r})") from None
    if not sizes or sizes[0] < 8:
        raise InputError(f"--sizes needs at least one size, each at least 8 bytes (one float64; got {args.sizes!r})")
    comm = MPI.COMM_WORLD
    resolve_backend_arguments(args, "numpy", comm)
    path = Path(args.output) if args.output else default_transfer_record_path(args.device)
    if args.output:
        check_writable(path, "--output")
    backend = make_backend(args.backend, args.device)
    progress = progress_printer(args) if comm.Get_rank() == 0 else None
    record = measure_transfer_paths(comm, backend, args.device, sizes, args.repeat or 20, progress)
    if comm.Get_rank() == 0:
        write_output(path, "--output", lambda target: write_record(target, record))
        if args.json:
            print(json_text({**record, "path": str(path)}))
        else:
            rows = [
                [
                    format_bytes(r["bytes"]),
                    f"{r['direct_seconds'] * 1e6:.2f}",
                    f"{r['staged_seconds'] * 1e6:.2f}",
                    "direct" if r["direct_seconds"] <= r["staged_seconds"] else "staged",
                ]
                for r in record["sweep"]
            ]
            print(format_table(["message", "direct us", "staged us", "faster"], rows))
            print(f"staged below {record['staged_below_bytes']} bytes on device {record['device']}; written to {path}")
    return 0


def _run_calibrate_network(args: argparse.Namespace) -> int:
    """``calibrate --network``: the link classes (Collective over MPI_COMM_WORLD)."""
    from mpi4py import MPI

    from sparsewire.calibration.network import measure_network
    from sparsewire.comm.runtime import agree_on_error

    comm = MPI.COMM_WORLD
    path = Path(args.output) if args.output else record_path("network")
    problem = None
    if args.output and comm.Get_rank() == 0:  # rank 0 writes; every rank learns a bad path before the measurement
        try:
            check_writable(path, "--output")
        except InputError as error:
            problem = error
    agree_on_error(comm, problem)
    progress = progress_printer(args) if comm.Get_rank() == 0 else None
    record = measure_network(comm, args.message_bytes, args.repeat or 10, progress)
    if comm.Get_rank() != 0:
        return 0
    write_output(path, "--output", lambda target: write_record(target, record))
    if args.json:
        print(json_text({**record, "path": str(path)}))
        return 0
    rows = [
        [
            name,
            f"{entry['pair'][0]}-{entry['pair'][1]}",
            f"{entry['latency_seconds'] * 1e6:.1f}",
            f"{entry['single_pair_bandwidth'] / 2**20:.1f}",
            f"{entry['bandwidth_bytes_per_second'] / 2**20:.1f}",
        ]
        for name, entry in record["links"].items()
    ]
    print(format_table(["link", "ranks", "latency us", "one pair MiB/s", "per rank, all sending MiB/s"], rows))
    if "inter_node" in record["links"]:
        inter = record["links"]["inter_node"]
        print(
            f"inter-node burst after idle: {inter['burst_bytes'] / 2**20:.2f} MiB; every node sending at once "
            f"({len(inter['aggregate_flows'])} flows): {inter['aggregate_bandwidth_bytes_per_second'] / 2**20:.1f} MiB/s together"
        )
        overlap = inter["overlap"]
        print(
            f"a stream of every node at once beside the CSR kernel on every rank: {overlap['stream_seconds'] * 1e3:.1f} ms and "
            f"{overlap['work_seconds'] * 1e3:.1f} ms alone, {overlap['together_seconds'] * 1e3:.1f} ms together: "
            f"{overlap['fraction']:.2f} of the shorter hidden"
        )
        pieces = inter.get("piece_overlap")
        if pieces is not None:
            print(
                f"the same in {pieces['pieces']} pieces, the kernel run a row range after each: "
                f"{pieces['stream_seconds'] * 1e3:.1f} ms and {pieces['work_seconds'] * 1e3:.1f} ms alone, "
                f"{pieces['together_seconds'] * 1e3:.1f} ms together: {pieces['fraction']:.2f} of the shorter hidden"
            )
        if "relay" in inter:
            relay = inter["relay"]
            measured = zip(relay["sizes"], relay["extra"])
            extras = ", ".join(f"{size / 2**10:.0f} KiB {extra * 1e6:.0f} us" for size, extra in measured)
            print(
                f"a relay through rank {relay['ranks'][1]} beyond its two hops: {extras}; priced "
                f"{inter['relay_seconds'] * 1e6:.0f} us + {inter['relay_seconds_per_byte'] * 1e9:.2f} ns per byte"
            )
    local = record["local"]
    print(
        f"local work per rank, all ranks at once ({local['threads']} thread(s)): CSR product "
        f"{local['nonzero_columns_per_second']:.3g} nonzero-columns/s, copy {local['copy_bytes_per_second'] / 2**20:.0f} MiB/s; "
        f"on one rank while the others wait: CSR product {local['alone_nonzero_columns_per_second']:.3g} nonzero-columns/s, "
        f"copy {local['alone_copy_bytes_per_second'] / 2**20:.0f} MiB/s"
    )
    print(f"groups {record['rank_groups']}; written to {path} (use it as --topology {path})")
    return 0
