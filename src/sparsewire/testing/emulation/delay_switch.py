"""A user-space learning switch that holds every frame a fixed time: the emulated cluster's link
delay, since this kernel has no ``netem`` (``tbf`` cannot delay). Runs inside the switch namespace:

    python -m sparsewire.testing.emulation.delay_switch DELAY_US PORT [PORT ...]

AF_PACKET sockets with ``PACKET_VNET_HDR`` relay 64 KiB GSO/TSO segments whole, so a Gbit/s link
needs only a few thousand frames a second. Measured on the 2-core machine
(``../shared/research/emulated-cluster``): 1000 us asked gives 1054 us one way, 100 us gives
160-175 us; it adds about 26 us at 0.
"""

from __future__ import annotations

import collections
import ctypes
import select
import socket
import sys
import time

__all__ = ["relay"]

_SOL_PACKET, _PACKET_VNET_HDR, _PACKET_IGNORE_OUTGOING, _ETH_P_ALL = 263, 15, 23, 3
_VNET_HEADER = 10  # the virtio_net_hdr before the Ethernet header


def relay(delay_seconds: float, ports: list[str]) -> None:
    """Not collective. Forward frames between ``ports`` (learning destination MACs, flooding the
    rest), each ``delay_seconds`` after it arrived; runs until killed. A frame that finds a full
    socket buffer is dropped, as a switch drops it."""
    try:
        ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK = 1 us: wake-ups on time
    except (OSError, AttributeError):
        pass
    sockets = []
    for port in ports:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
        s.setsockopt(_SOL_PACKET, _PACKET_VNET_HDR, 1)
        s.setsockopt(_SOL_PACKET, _PACKET_IGNORE_OUTGOING, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)
        s.bind((port, 0))
        s.setblocking(False)
        sockets.append(s)
    index_of = {s.fileno(): i for i, s in enumerate(sockets)}
    port_of_mac: dict[bytes, int] = {}
    queue: collections.deque = collections.deque()  # (due, out port, frame): FIFO, the delay is constant
    buffer = bytearray(1 << 18)
    view = memoryview(buffer)
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, out, frame = queue.popleft()
            try:
                sockets[out].send(frame)
            except OSError:
                pass
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else 1.0
        for s in select.select(sockets, [], [], timeout)[0]:  # select: microsecond timeouts
            incoming = index_of[s.fileno()]
            while True:
                try:
                    n = s.recv_into(buffer)
                except BlockingIOError:
                    break
                frame = bytes(view[:n])
                due = time.monotonic() + delay_seconds
                destination = frame[_VNET_HEADER : _VNET_HEADER + 6]
                port_of_mac[frame[_VNET_HEADER + 6 : _VNET_HEADER + 12]] = incoming
                out = port_of_mac.get(destination)
                if out is None or destination[0] & 1:
                    queue.extend((due, j, frame) for j in range(len(sockets)) if j != incoming)
                elif out != incoming:
                    queue.append((due, out, frame))


if __name__ == "__main__":
    relay(float(sys.argv[1]) * 1e-6, sys.argv[2:])
