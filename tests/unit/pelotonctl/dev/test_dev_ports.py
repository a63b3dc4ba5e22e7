"""The ports the dev stack and the tests give their servers, and what a server's log says when it
stopped on start."""

from __future__ import annotations

import os
import socket
import time

import pytest

from pelotonctl.dev import processes
from pelotonctl.dev.processes import PORTS_FROM, ephemeral_floor, first_errors, free_port, port_is_free


@pytest.fixture(autouse=True)
def claims(tmp_path, monkeypatch):
    """The claims of these tests' ports, apart from the machine's."""
    monkeypatch.setattr(processes, "CLAIMS_DIR", tmp_path / "claims")
    return tmp_path / "claims"


class Chooser:
    """Draws the given ports in turn."""

    def __init__(self, *picks: int):
        self.picks = list(picks)

    def randrange(self, low, high):
        return self.picks.pop(0)


def test_a_free_port_lies_below_the_range_outgoing_connections_take_theirs_from() -> None:
    ports = {free_port() for _ in range(50)}
    assert all(PORTS_FROM <= p < ephemeral_floor() for p in ports), sorted(ports)
    assert len(ports) > 40  # spread, so two workers choosing at once rarely meet
    assert all(port_is_free(p) for p in ports)


def test_a_port_someone_listens_on_is_not_chosen(monkeypatch) -> None:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken, other = held.getsockname()[1], free_port()
    (processes.CLAIMS_DIR / str(other)).unlink()  # free_port claimed it; the chooser must be able to give it
    try:
        assert not port_is_free(taken)
        monkeypatch.setattr(processes, "_choose", Chooser(taken, taken, other))  # held twice, then free
        monkeypatch.setattr(processes, "ephemeral_floor", lambda: 65000)
        assert free_port() == other
    finally:
        held.close()


def test_a_chosen_port_is_not_given_again_until_its_claim_is_old(monkeypatch, claims) -> None:
    # Between a port's choice and its server's bind it is free to see (CI gave one broker the
    # same port twice); a later choice, in this process or another worker, must not land on it.
    first, second, third = free_port(), free_port(), free_port()
    (claims / str(third)).unlink()  # chosen here only to be a free port the chooser can draw
    monkeypatch.setattr(processes, "ephemeral_floor", lambda: 65000)
    monkeypatch.setattr(processes, "_choose", Chooser(first, second, first, third))
    assert port_is_free(first) and port_is_free(second)
    assert free_port() == third  # the two claimed ones are passed over
    old = time.time() - processes.CLAIM_S - 1
    os.utime(claims / str(first), (old, old))
    monkeypatch.setattr(processes, "_choose", Chooser(second, first))
    assert free_port() == first  # its claim ran out: the server it was for bound it or went
    assert (claims / str(first)).stat().st_mtime > old  # and it is claimed anew


def test_a_machine_with_no_room_below_its_range_gets_a_port_the_kernel_chose(monkeypatch) -> None:
    monkeypatch.setattr(processes, "ephemeral_floor", lambda: PORTS_FROM + 10)
    assert port_is_free(free_port())


def test_a_server_that_stopped_on_start_is_explained_by_its_first_errors_of_that_start(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[t] ERROR an earlier start's trouble\n[t] INFO started\n")
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write("[t] INFO starting\n"
                "[t] ERROR [KafkaRaftServer nodeId=3] Fatal error during broker startup\n"
                "[t] INFO shutting down\n"
                "[t] ERROR Socket server failed to bind to 127.0.0.1:43433: Address already in use\n")
    assert first_errors(log, start).splitlines() == [
        "[t] ERROR [KafkaRaftServer nodeId=3] Fatal error during broker startup",
        "[t] ERROR Socket server failed to bind to 127.0.0.1:43433: Address already in use"]
    assert first_errors(tmp_path / "missing.log") == ""
