"""The calibration's relay timing (:func:`sparsewire.calibration.relay.measure_relay`) on three ranks of one machine: what a
planted wait in the proxy's forwarding adds is what the measurement reports beyond the two hops, and the price is the
line through it; without the plant the extra is small."""

from __future__ import annotations

import time

import pytest

from sparsewire.calibration import relay

SIZES = [1 << 14, 1 << 20]


@pytest.mark.ranks(3)
def test_a_planted_wait_in_the_proxy_is_what_the_relay_adds(comm, monkeypatch):
    plain = relay.measure_relay(comm, (0, 1, 2), SIZES, 5)
    assert plain["relay"]["ranks"] == [0, 1, 2] and plain["relay"]["sizes"] == SIZES
    # shared memory: the extra is a copy and a wake-up, well under the plant below
    assert all(abs(extra) < 0.01 for extra in plain["relay"]["extra"]), plain
    fixed, per_mib = 0.02, 0.03  # the proxy waits 20 ms plus 30 ms per MiB before it sends a message on
    forward = relay._forward

    def slow_forward(message):
        time.sleep(fixed + per_mib * message.nbytes / 2**20)
        return forward(message)

    monkeypatch.setattr(relay, "_forward", slow_forward)
    planted = relay.measure_relay(comm, (0, 1, 2), SIZES, 5)
    for size, extra in zip(SIZES, planted["relay"]["extra"]):
        wait = fixed + per_mib * size / 2**20
        # the direct hops' medians, subtracted, can lose a few ms to a rank descheduled on 3 ranks over 2 cores
        assert wait - 0.005 <= extra < wait + 0.015, (size, extra, planted)
    assert planted["relay_seconds"] == pytest.approx(fixed, abs=0.01), planted
    assert planted["relay_seconds_per_byte"] == pytest.approx(per_mib / 2**20, rel=0.3), planted
    price = (planted["relay_seconds"], planted["relay_seconds_per_byte"])
    assert price == relay.relay_price(SIZES, planted["relay"]["extra"])
    assert comm.allgather(price) == [price] * comm.Get_size()  # every rank has the sender's times
