"""Run one flow instance through SimGrid and write each flow's completion time (the golden file).

Usage (Debian's python3-simgrid 3.32, system Python; needs no NumPy):
    /usr/bin/python3 tests/golden/simgrid_run.py tests/golden/INSTANCE.json

Model: CM02 without cross traffic and TCP window (``network/crosstraffic:0``, ``TCP-gamma:0``),
every link latency 0: plain max-min fair sharing (../shared/research/simulation.md). One sender
actor and one receiver actor per flow, all starting at time 0; the receiver records the clock
when its message has arrived. The instance file gains ``simgrid`` (version, model, seconds per
flow) in place.
"""

import json
import sys
import time

import simgrid
from simgrid import Actor, Engine, LinkInRoute, Mailbox, NetZone


def main(path):
    with open(path) as handle:
        instance = json.load(handle)
    engine = Engine(
        [
            "simgrid_run",
            "--cfg=network/model:CM02",
            "--cfg=network/crosstraffic:0",
            "--cfg=network/TCP-gamma:0",
            "--log=root.threshold:warning",
        ]
    )
    zone = NetZone.create_full_zone("cluster")
    hosts = [zone.create_host(f"host{i}", 1e9).seal() for i in range(instance["hosts"])]
    links = [zone.create_link(f"link{j}", capacity).set_latency(0).seal() for j, capacity in enumerate(instance["capacities"])]
    routed = set()
    for flow in instance["flows"]:
        pair = (flow["source"], flow["destination"])
        if pair in routed:
            continue
        routed.add(pair)
        zone.add_route(
            hosts[pair[0]].netpoint,
            hosts[pair[1]].netpoint,
            None,
            None,
            [LinkInRoute(links[link]) for link in flow["route"]],
            False,
        )
    zone.seal()
    finish = [0.0] * len(instance["flows"])

    def sender(index, size):
        Mailbox.by_name(f"flow{index}").put(index, int(size))

    def receiver(index):
        Mailbox.by_name(f"flow{index}").get()
        finish[index] = Engine.clock

    for index, flow in enumerate(instance["flows"]):
        Actor.create(f"send{index}", hosts[flow["source"]], sender, index, flow["bytes"])
        Actor.create(f"receive{index}", hosts[flow["destination"]], receiver, index)
    started = time.process_time()
    engine.run()
    instance["simgrid"] = {
        "version": getattr(simgrid, "__version__", "3.32 (Debian python3-simgrid)"),
        "model": "CM02, crosstraffic 0, TCP-gamma 0, zero link latency",
        "cpu_seconds": round(time.process_time() - started, 2),
        "finish_seconds": finish,
    }
    with open(path, "w") as handle:
        json.dump(instance, handle)


if __name__ == "__main__":
    main(sys.argv[1])
