"""Host keys: each agent signs its reports with a key of its own host's, so that one host's agent
(or whatever took its Kafka credentials) cannot report for another: claim another host's runs,
say they ended, or give it capacity it does not have.

Kafka does not tell a consumer who produced a record, and every agent writes the same topic. So
each report carries the header `peloton-host-signature`: HMAC-SHA256 of the record's value, hex,
keyed with the host's key, which is HMAC-SHA256 of the cluster's agents key and the host's id.
The host manager (launch) holds the cluster's key (PELOTON_AGENT_REPORT_KEY) and derives each
host's; an agent holds only its own host's (PELOTON_HOST_KEY, `pelotonctl auth host-key HOST`
prints it), so no agent can sign for another. A process that simulates many hosts (benchmarks)
is given the cluster's key and derives theirs.

The other way, the host manager seals each command to an agent with its host's key
(ChaCha20-Poly1305, the host id as authenticated data): Kafka's ACLs stop at the topic, so every
agent may read all of agent-commands, but only the host's own agent opens its launches (their
commands, environments and users).
"""

from __future__ import annotations

import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

HEADER = "peloton-host-signature"


def host_key(cluster_key: str, host_id: str) -> str:
    """The key of one host (hex), from the cluster's agents key."""
    return hmac.new(cluster_key.encode(), b"host:" + host_id.encode(), hashlib.sha256).hexdigest()


def signature(key: str, value: bytes) -> bytes:
    """The header's value for a report `value` signed with a host's key (hex)."""
    return hmac.new(bytes.fromhex(key), value, hashlib.sha256).hexdigest().encode()


def _sealing_key(key: str) -> ChaCha20Poly1305:
    return ChaCha20Poly1305(hmac.new(bytes.fromhex(key), b"seal", hashlib.sha256).digest())


def seal(key: str, host_id: str, plain: bytes) -> bytes:
    """`plain` sealed for the agent of `host_id` (holding `key`): nonce, then ciphertext and tag."""
    nonce = os.urandom(12)
    return nonce + _sealing_key(key).encrypt(nonce, plain, host_id.encode())


def unseal(key: str, host_id: str, sealed: bytes) -> bytes:
    """What `seal` sealed; ValueError when it was not sealed with this key for this host."""
    try:
        return _sealing_key(key).decrypt(sealed[:12], sealed[12:], host_id.encode())
    except (InvalidTag, ValueError):
        raise ValueError(f"not sealed with the key of host {host_id!r}") from None


class HostKeys:
    """The host manager's side: each host's key derived once, each report checked, each command
    sealed."""

    def __init__(self, cluster_key: str):
        self.cluster_key = cluster_key
        self._keys: dict[str, str] = {}

    def key(self, host_id: str) -> str:
        key = self._keys.get(host_id)
        if key is None:
            key = self._keys[host_id] = host_key(self.cluster_key, host_id)
        return key

    def problem(self, host_id: str, value: bytes, header: bytes | None) -> str | None:
        """Why a report for `host_id` is not that host's agent's, or None."""
        if not header:
            return f"unsigned: a report for host {host_id!r} must carry its host's signature ({HEADER})"
        key = self.key(host_id)
        if not hmac.compare_digest(signature(key, value), header):
            return f"not signed with the key of host {host_id!r}: another host's agent, or a forged report"
        return None
