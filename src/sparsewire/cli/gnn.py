"""``sparsewire gcn`` (under mpiexec): full-graph GNN training, a thin handler over
:mod:`sparsewire.gnn` (load on rank 0, :func:`distribute_graph`, :func:`train`)."""

from __future__ import annotations

import argparse
import contextlib
import sys

from sparsewire.cli.common import (
    MATRIX_HELP,
    add_backend_arguments,
    add_compress_argument,
    add_partition_arguments,
    add_topology_arguments,
    add_transport_argument,
    agree_on_arguments,
    json_text,
    number,
    options_from_args,
    positive_int,
    progress_printer,
    refuse_oversized,
    resolve_backend_arguments,
    seed_number,
    topology_from_args,
)
from sparsewire.cli.profiling import (
    add_profiling_arguments,
    check_profiling_arguments,
    print_profiling,
    profiling_request,
    trace_fields,
    write_profiling_pictures,
)
from sparsewire.errors import InputError

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``gcn`` to the CLI's subparsers."""
    gcn = commands.add_parser(
        "gcn",
        help="train a GCN, GraphSAGE or GAT node classifier on the whole graph under mpiexec",
        description=(
            "Full-batch node classification on the ranks of mpiexec -n P: each rank holds its nodes' features and labels, "
            "every propagation is a distributed SpMM on the plan of the chosen strategy, and its gradient runs on the "
            "transposed plan; a GAT layer's softmax-aggregate is merged exactly from partials on the attention plan. Defaults "
            "are Kipf and Welling's Cora settings (2 layers, hidden 16, dropout 0.5, Adam lr 0.01, weight decay 5e-4 on the "
            "first layer, 200 epochs), and for --model gat those of PyG's examples/gat.py (8 heads of 8, dropout 0.6, lr "
            "0.005, weight decay 5e-4 on every layer). Prints a line every 10 epochs and the test accuracy."
        ),
    )
    gcn.add_argument(
        "data",
        help=f"a Planetoid .npz (features, labels, split), cora (the Planetoid Cora graph that ships with sparsewire), "
        f"an OGB node-property dataset directory (raw/ and split/ as OGB unpacks them, e.g. dataset/ogbn_arxiv), "
        f"or with --features/--classes {MATRIX_HELP}",
    )
    gcn.add_argument(
        "--model",
        choices=["gcn", "sage", "gat"],
        default="gcn",
        help="GCNConv, SAGEConv (mean) or GATConv layers (default: gcn)",
    )
    gcn.add_argument("--heads", type=positive_int, default=8, help="attention heads of gat's hidden layers (default: 8)")
    gcn.add_argument("--layers", type=positive_int, default=2, help="graph convolutions (default: 2)")
    gcn.add_argument("--hidden", type=positive_int, help="hidden width, per head for gat (default: 16; gat 8)")
    gcn.add_argument("--epochs", type=positive_int, default=200, help="training epochs (default: 200)")
    gcn.add_argument("--lr", type=number(0.0, above=True), help="Adam learning rate (default: 0.01; gat 0.005)")
    gcn.add_argument(
        "--weight-decay",
        type=number(0.0),
        default=5e-4,
        help="L2 weight decay of the first layer (gat: of every layer) (default: 5e-4)",
    )
    gcn.add_argument(
        "--dropout",
        type=number(0.0, below=1.0),
        help="dropout before every layer, masks from global node ids; gat's attention dropout too (default: 0.5; gat 0.6)",
    )
    gcn.add_argument(
        "--strategy",
        default="auto",
        help="SpMM strategy of the propagations: auto, block, column, row, joint (and column-hier, joint-hier, joint-group "
        "with a topology); gat's attention plans take auto (= joint), column, row, joint or column-hier (default: auto)",
    )
    add_partition_arguments(gcn)
    gcn.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="features, weights and propagations (default: float32, as PyTorch trains)",
    )
    add_transport_argument(gcn)
    add_compress_argument(gcn)
    add_backend_arguments(gcn, default="torch")
    gcn.add_argument(
        "--transfer-calibration",
        help="file of 'sparsewire calibrate --device': messages below its threshold are staged "
        "through host memory (default: the stored calibration of the device's type when there is one, else none is)",
    )
    gcn.add_argument(
        "--threads", "-T", type=positive_int, default=1, help="threads per rank for the executor and PyTorch (default: 1)"
    )
    gcn.add_argument("--seed", type=seed_number, default=0, help="weights and dropout masks (default: 0)")
    gcn.add_argument(
        "--allow-nonfinite", action="store_true", help="train even where the adjacency or features hold NaN or infinite values"
    )
    gcn.add_argument("--features", help="random:F: F seeded random features per node, for a matrix that is not a Planetoid file")
    gcn.add_argument("--classes", type=positive_int, help="number of classes with --features (random labels)")
    gcn.add_argument(
        "--symmetrize",
        action="store_true",
        help="edge lists: use the undirected graph max(A, A^T); an OGB directory: "
        "PyG's to_undirected, as OGB's arxiv examples train",
    )
    add_topology_arguments(gcn, allow_mpi=True)
    gcn.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    add_profiling_arguments(gcn, "training", "the training", "DIR/trace-gcn.json", unit="epochs", traffic_map=False)
    gcn.set_defaults(handler=run_gcn)


#: Each model's defaults of the options left out (gat: PyG's examples/gat.py).
_DEFAULTS = {"gcn": (16, 0.01, 0.5), "sage": (16, 0.01, 0.5), "gat": (8, 0.005, 0.6)}


def run_gcn(args: argparse.Namespace) -> int:
    for name, default in zip(("hidden", "lr", "dropout"), _DEFAULTS[args.model]):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if not 0 <= args.dropout < 1:
        raise InputError(f"--dropout must be in [0, 1) (got {args.dropout})")
    if not args.lr > 0 or args.weight_decay < 0:
        raise InputError(f"--lr must be positive and --weight-decay non-negative (got {args.lr}, {args.weight_decay})")
    check_profiling_arguments(args)
    try:
        import torch
    except ImportError:
        raise InputError("sparsewire gcn needs PyTorch; install it with 'pip install -r requirements.lock'") from None

    from sparsewire import trace as trace_training
    from sparsewire.comm.runtime import agree_on_error, world
    from sparsewire.gnn import distribute_graph, load_graph, open_ogb_cache, train
    from sparsewire.gnn.train import training_bytes
    from sparsewire.io import is_ogb_directory
    from sparsewire.plan.strategies import parse_strategies
    from sparsewire.wire.paths import messages_per_path

    torch.set_num_threads(args.threads)  # one pool per rank at the executor's size (see distribute_graph)
    comm = world()
    agree_on_arguments(comm, args)
    resolve_backend_arguments(args, "torch", comm)
    rank = comm.Get_rank()
    data, problem = None, None
    if args.features is None and args.partition == "even" and is_ogb_directory(args.data):
        # each rank reads only its rows of the dataset's cache (another partitioner needs the whole graph on rank 0)
        data = open_ogb_cache(comm, args.data, undirected=args.symmetrize, progress=progress_printer(args))
    elif rank == 0:
        try:
            data = load_graph(args.data, features=args.features, classes=args.classes, seed=args.seed, symmetrize=args.symmetrize)
        except InputError as error:
            problem = error
    agree_on_error(comm, problem)
    topology = topology_from_args(args, comm)
    if args.strategy != "auto":  # in flags: a hierarchical strategy without --group-size/--topology
        parse_strategies(args.strategy, executable_only=True, hierarchical=topology is not None and len(topology.levels) > 1)
    progress = progress_printer(args)
    graph = distribute_graph(
        comm,
        data,
        args.model,
        partition=args.partition,
        imbalance=args.imbalance,
        dtype=getattr(torch, args.dtype),
        options=options_from_args(args, topology, strategy=args.strategy),
        allow_nonfinite=args.allow_nonfinite,
    )
    if progress and rank == 0:
        progress(
            f"{args.data}: {graph.n} nodes, {graph.operator.matrix.nnz} nonzeros, {graph.classes} classes; P = {comm.Get_size()}"
        )
    channels = [int(graph.features.shape[1])] + [args.hidden] * (args.layers - 1) + [graph.classes]
    refuse_oversized(
        comm,
        training_bytes(graph, channels, args.heads if args.model == "gat" else 1),
        f"--layers {args.layers} --hidden {args.hidden} with {graph.classes} classes",
        "use a smaller --hidden, fewer --layers or fewer classes",
    )
    trace = profiling_request(args, comm)
    traced = contextlib.nullcontext()
    if trace is not None:  # (directory or None, window in epochs, summary): the first epoch is 0
        traced = trace_training(graph.operator, trace[0], window=trace[1], name="trace-gcn.json", summary=trace[2])
    with traced as tracer:
        result = train(
            comm,
            graph,
            model=args.model,
            heads=args.heads,
            layers=args.layers,
            hidden=args.hidden,
            epochs=args.epochs,
            lr=args.lr,
            weight_decay=args.weight_decay,
            dropout=args.dropout,
            seed=args.seed,
            progress=progress,
        )
    strategies = sorted({plan.rank_plan.strategy.value for plan in graph.operator.plans.values()})
    strategies += sorted({plan.strategy for plan in graph.operator.attention_plans.values()})
    counted_by = next((plan.counted_by for plan in graph.operator.plans.values()), None)
    attention = [plan.summary() for plan in graph.operator.attention_plans.values()]
    if attention:
        counted_by = "MPI receive statuses (MPI_Get_count)"
    # Messages per path over every propagation plan, forward and transposed (the backward passes
    # made the transposes; transpose() returns them, the same on every rank).
    paths = {}
    for plan in graph.operator.plans.values():
        for each in (plan, plan.transpose()):
            for path, messages in messages_per_path(each.transfer_summary).items():
                paths[path] = paths.get(path, 0) + messages
    graph.operator.close()
    if rank != 0:
        return 0
    report = {
        "data": args.data,
        "model": args.model,
        "heads": args.heads if args.model == "gat" else None,
        "ranks": comm.Get_size(),
        "nodes": graph.n,
        "classes": graph.classes,
        "layers": args.layers,
        "hidden": args.hidden,
        "epochs": args.epochs,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "dropout": args.dropout,
        "seed": args.seed,
        "strategy_requested": args.strategy,
        "strategies": strategies,
        "transport": args.transport,
        "compress": args.compress,
        "backend": args.backend,
        "device": args.device,
        "bytes_counted_by": counted_by,
        "dtype": args.dtype,
        "transfer_paths": paths,
        "attention_plans": attention,
        "history": result.history,
        "test_accuracy": result.test_accuracy,
        "seconds_per_epoch": result.seconds_per_epoch,
        "bytes_per_epoch": result.bytes_per_epoch,
        "wire_bytes_per_epoch": result.wire_bytes_per_epoch,
    }
    if trace is not None:
        report.update(trace_fields(tracer))
        write_profiling_pictures(args, report, f"{args.data}: {args.model}, P = {comm.Get_size()}")
    if args.json:
        print(json_text(report))
    else:
        print(
            f"test accuracy {result.test_accuracy:.4f} after {args.epochs} epochs ({args.model}, strategy "
            f"{', '.join(strategies)}); "
            f"{result.seconds_per_epoch * 1e3:.1f} ms and {result.bytes_per_epoch} bytes per epoch (forward + backward, all "
            "ranks)" + (f", {result.wire_bytes_per_epoch} on the wire ({args.compress})" if args.compress != "none" else "")
        )
        print_profiling(report, f"{args.model} training")
    sys.stdout.flush()
    return 0
