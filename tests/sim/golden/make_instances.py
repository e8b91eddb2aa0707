"""Write the flow instances whose SimGrid results are the golden files of tests/sim/test_sim.py.

    .venv/bin/python tests/golden/make_instances.py          # writes tests/golden/*.json (no results)
    /usr/bin/python3 tests/golden/simgrid_run.py FILE.json   # adds SimGrid's completion times

Instances: 16 hosts on a leaf-spine (2 racks of 8, 4 spines) with an all-to-all of random sizes;
128 hosts on the NetSparse leaf-spine (Table 5) with the per-pair bytes of the ``column`` plan of
an R-MAT graph (scale 14, edge factor 8) at K = 16; 32 hosts on a dragonfly with random sparse
traffic.
"""

import json
from pathlib import Path

import numpy as np

from sparsewire.io.generators import rmat
from sparsewire.partition import partition
from sparsewire.plan.stats import strategy_stats
from sparsewire.sim.network_builders import build_network, dragonfly, leaf_spine

HERE = Path(__file__).resolve().parent


def write(name, network, sources, destinations, sizes):
    offsets, links = network.route_lists(sources, destinations)
    flows = [
        {"source": int(s), "destination": int(d), "bytes": int(b), "route": [int(x) for x in links[offsets[i] : offsets[i + 1]]]}
        for i, (s, d, b) in enumerate(zip(sources, destinations, sizes))
    ]
    instance = {
        "name": name,
        "network": network.describe(),
        "hosts": network.n_hosts,
        "capacities": [float(c) for c in network.capacities],
        "flows": flows,
    }
    (HERE / f"{name}.json").write_text(json.dumps(instance))
    print(f"{name}: {len(flows)} flows")


def main():
    rng = np.random.default_rng(2026)
    small = leaf_spine(16, rack_size=8, spines=4)
    s, d = np.nonzero(~np.eye(16, dtype=bool))
    write("leafspine16_alltoall", small, s, d, rng.integers(1, 5_000_000, s.size))

    big = build_network("netsparse-leafspine")
    matrix = rmat(14, 8, seed=3)
    rows, cols = partition(matrix, 128, "even").partitions
    stats = strategy_stats(matrix, rows, cols, "column", 16, 4)
    write("leafspine128_column_plan", big, stats.pair_sources, stats.pair_destinations, stats.pair_bytes)

    fly = dragonfly(32, hosts_per_switch=2, switches_per_group=4, global_ports=2)
    mask = rng.random((32, 32)) < 0.3
    np.fill_diagonal(mask, False)
    s, d = np.nonzero(mask)
    write("dragonfly32_random", fly, s, d, rng.integers(1000, 20_000_000, s.size))


if __name__ == "__main__":
    main()
