"""The rank x rank traffic map (sparsewire.profile.traffic): hand-made maps in this process. The map MPI's receive
statuses give equal to the plan's at P = 1..4, flat and hierarchical, every mode, with a planted wrong count caught,
is a collective case in tests/mpi/test_traces.py (tests/profile/traffic_checks.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sparsewire.profile.traffic import TrafficMap, planned_traffic
from sparsewire.topology.model import Topology


def test_a_hand_made_plan_gives_its_map_and_link_classes():
    stats = SimpleNamespace(
        n_ranks=4,
        sources=np.array([0, 0, 1, 3, 2]),
        destinations=np.array([1, 1, 2, 0, 3]),
        message_bytes=np.array([8, 16, 40, 24, 32]),
        message_counts=np.array([1, 1, 1, 1, 1]),
    )
    traffic = planned_traffic(stats)
    assert traffic.bytes[0, 1] == 24 and traffic.messages[0, 1] == 2 and traffic.bytes[3, 0] == 24
    assert int(traffic.bytes.sum()) == 120 and int(traffic.messages.sum()) == 5
    topology = Topology.nodes(2)  # ranks {0, 1} and {2, 3}
    classes = traffic.per_link_class(topology)
    intra, inter = topology.levels[0].link.name, topology.levels[-1].link.name
    assert classes[intra] == {"bytes": 24 + 32, "messages": 3} and classes[inter] == {"bytes": 40 + 24, "messages": 2}
    assert traffic.per_link_class(None) == {"all": {"bytes": 120, "messages": 5}}
    planted = TrafficMap(traffic.bytes.copy(), traffic.messages.copy())
    planted.bytes[2, 3] += 1
    assert planted.differences(traffic) == ["rank 2 -> rank 3: 33 bytes in 1 messages, planned 32 bytes in 1"]
