"""sparsewire.spgemm.transfer: packed sparse messages point to point, bytes counted from MPI's
receive statuses (in-process on a communicator of one rank, which sends to itself)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from sparsewire.spgemm.transfer import MessageCoding, SparseTransfer


@pytest.fixture
def comm():
    duplicate = MPI.COMM_SELF.Dup()
    yield duplicate
    duplicate.Free()


def _message(rng, listed: int, entries: int, itype, dtype):
    return rng.integers(0, 1000, 2 * listed + entries).astype(itype), rng.integers(-9, 10, entries).astype(dtype), listed


@pytest.mark.parametrize("itype, dtype", [(np.int32, np.float64), (np.int64, np.int64), (np.int32, np.bool_)])
def test_messages_arrive_whole_and_the_bytes_are_what_mpi_delivered(comm, rng, itype, dtype):
    transfer = SparseTransfer(itype, dtype)
    sent = [_message(rng, int(rng.integers(0, 6)), int(rng.integers(0, 40)), itype, dtype) for _ in range(4)]
    incoming = [transfer.post_header(comm, 0, tag) for tag in range(len(sent))]
    for tag, message in enumerate(sent):
        transfer.send(comm, 0, tag, message)
    for message, arriving in zip(sent, incoming):
        assert transfer.wait_header(arriving) == (message[2], message[1].size)
        transfer.post_payload(arriving)
        ints, values, listed = transfer.wait(arriving)
        assert listed == message[2] and np.array_equal(ints, message[0]) and np.array_equal(values, message[1])
        assert ints.dtype == np.dtype(itype) and values.dtype == np.dtype(dtype)
    transfer.finish_sends()
    header_bytes = 2 * np.dtype(np.int64).itemsize
    assert transfer.bytes_received == sum(header_bytes + ints.nbytes + values.nbytes for ints, values, _ in sent)


def test_a_sender_that_sends_more_than_its_header_announces_is_an_mpi_error_not_an_overrun(comm, rng):
    transfer = SparseTransfer(np.int32, np.float64)
    ints, values, listed = _message(rng, 2, 10, np.int32, np.float64)
    arriving = transfer.post_header(comm, 0, 0)
    lie = np.array([listed, values.size - 1], np.int64)  # one entry fewer than follow
    requests = [
        comm.Isend([lie, MPI.BYTE], 0, 0),
        comm.Isend([ints.view(np.uint8), MPI.BYTE], 0, 1),
        comm.Isend([values.view(np.uint8), MPI.BYTE], 0, 2),
    ]
    transfer.post_payload(arriving)
    with pytest.raises(MPI.Exception) as raised:
        transfer.wait(arriving)
    assert raised.value.Get_error_class() in (MPI.ERR_TRUNCATE, MPI.ERR_IN_STATUS)
    MPI.Request.Waitall(requests)


@pytest.mark.parametrize("coded", [frozenset({0}), frozenset()])
def test_a_set_of_coded_peers_codes_exactly_their_messages(comm, rng, coded):
    """``links`` as a set of ranks: the messages to and from those ranks carry coded integers (fewer bytes on
    the wire, a third header word), the others go as they are; both arrive bit for bit."""
    transfer = SparseTransfer(np.int64, np.float64, MessageCoding(links=coded), comm)
    ints = np.concatenate([[0, 1, 2], [40, 0, 3], np.arange(40), [1, 5, 9]]).astype(np.int64)
    message = (ints, rng.integers(-9, 10, 43).astype(np.float64), 3)
    arriving = transfer.post_header(comm, 0, 0)
    transfer.send(comm, 0, 0, message)
    transfer.post_payload(arriving)
    back, values, listed = transfer.wait(arriving)
    transfer.finish_sends()
    assert listed == 3 and np.array_equal(back, ints) and np.array_equal(values, message[1])
    assert transfer.payload_bytes_received == 16 + ints.nbytes + values.nbytes
    if coded:
        assert transfer.index_bytes_received < ints.nbytes / 4 and transfer.bytes_received < transfer.payload_bytes_received
    else:
        assert transfer.bytes_received == transfer.payload_bytes_received


def test_a_set_of_coded_peers_needs_the_plans_communicator():
    with pytest.raises(ValueError, match="communicator"):
        SparseTransfer(np.int64, np.float64, MessageCoding(links=frozenset({1})))


@pytest.mark.parametrize("entries", [0, 1, 300])
def test_bf16_values_arrive_within_their_bound_in_fewer_bytes(comm, rng, entries):
    transfer = SparseTransfer(np.int64, np.float64, MessageCoding(links=True, values="bf16"), comm)
    listed = 1 if entries else 0
    ints = np.concatenate([[0] * listed, [entries] * listed, np.arange(entries)]).astype(np.int64)
    values = rng.standard_normal(entries) * np.exp(rng.uniform(-30, 30, entries))
    arriving = transfer.post_header(comm, 0, 0)
    transfer.send(comm, 0, 0, (ints, values, listed))
    transfer.post_payload(arriving)
    back, decoded, _ = transfer.wait(arriving)
    transfer.finish_sends()
    assert np.array_equal(back, ints)
    assert np.all(np.abs(decoded - values) <= np.maximum(2.0**-8 * np.abs(values), 2.0**-134))
    assert transfer.payload_bytes_received == 16 + ints.nbytes + values.nbytes
    if entries > 100:
        assert transfer.bytes_received < 0.4 * transfer.payload_bytes_received


def test_bf16_codes_only_float_values():
    with pytest.raises(ValueError, match="float32 or float64"):
        SparseTransfer(np.int64, np.int64, MessageCoding(links=True, values="bf16"))
    with pytest.raises(ValueError, match="none or bf16"):
        MessageCoding(values="int8")
