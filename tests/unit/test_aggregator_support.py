"""Stand-ins for participants in the aggregator's tests (no tests here): a member built
from crypto.secagg's client and the wire messages only (never participant/), and a pump
that serves a set of members over any transport."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import crypto.secagg as secagg
from broker.codec import DecodeError, WireMessage, decode
from broker.memory import MemoryTransport
from broker.messages import (
    PARTICIPANT_INBOX_TYPES,
    CheckIn,
    CohortInvitation,
    ModelAnnouncement,
    SecAggRequest,
    submission_from_crypto,
    verify_message,
)
from broker.payload import ParticipantMetrics, encode_input
from broker.topology import SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, participant_queue
from broker.transport import PublishRejected, Transport
from crypto.hazmat import primitives


@dataclass
class Member:
    """A participant reduced to what the wire needs: identity, vote, secagg client.

    ``stop_at``: the message kind at which it goes silent for good (a dropout);
    ``auto_check_in``: check in to every new announced round (the pump's members)."""

    pid: str
    vote: np.ndarray
    pinned_key: bytes
    metrics: ParticipantMetrics = field(default_factory=lambda: ParticipantMetrics(2, 3.0, 8, 2, 9))
    key: bytes = field(default_factory=primitives.generate_signing_key)
    client: secagg.SecAggClient | None = None
    stop_at: str | None = None
    announcement: ModelAnnouncement | None = None
    auto_check_in: bool = False
    checked_in_rounds: list[int] = field(default_factory=list)
    contributed_rounds: list[int] = field(default_factory=list)
    raw_input: np.ndarray | None = None  # a dishonest payload, bypassing the clip

    def check_in(self) -> CheckIn:
        assert self.announcement is not None
        self.checked_in_rounds.append(self.announcement.round)
        return CheckIn(
            round=self.announcement.round,
            participant_id=self.pid,
            identity_key=primitives.public_signing_key(self.key),
            model_version=self.announcement.model_version,
        )

    def handle(self, message: WireMessage) -> WireMessage | None:
        if self.stop_at == message.kind:
            self.stop_at = "everything"
        if self.stop_at == "everything":
            return None
        if isinstance(message, ModelAnnouncement):
            assert verify_message(self.pinned_key, message), "announcement signature"
            self.announcement = message
            if self.auto_check_in and message.round not in self.checked_in_rounds:
                if self.stop_at == "check-in":
                    return None
                return self.check_in()
            return None
        if isinstance(message, CohortInvitation):
            assert verify_message(self.pinned_key, message), "invitation signature"
            inputs = (
                self.raw_input
                if self.raw_input is not None
                else encode_input(self.vote, self.metrics)
            )
            self.client = secagg.SecAggClient(
                message.crypto_parameters(),
                message.member,
                self.key,
                message.crypto_directory(),
                inputs,
            )
            return submission_from_crypto(self.client.advertise(0.0), self.pid)
        assert self.client is not None and isinstance(message, SecAggRequest)
        reply = self.client.receive(message.to_crypto(), 0.0)
        if isinstance(reply, secagg.MaskedInput):
            self.contributed_rounds.append(message.round)
        return submission_from_crypto(reply, self.pid)


def serve(
    transport: Transport,
    members: dict[str, Member],
    done: Callable[[], bool],
    *,
    poll: float = 0.01,
) -> None:
    """Answer every message in the members' queues until ``done()``."""
    while not done():
        idle = True
        for pid, member in members.items():
            delivery = transport.get(participant_queue(pid), timeout=0.0)
            if delivery is None:
                continue
            idle = False
            try:
                message = decode(delivery.body, PARTICIPANT_INBOX_TYPES)
            except DecodeError:
                transport.ack(delivery)
                continue
            reply = member.handle(message)
            transport.ack(delivery)
            if reply is not None:
                with contextlib.suppress(PublishRejected):
                    transport.publish(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, reply)
        if idle:
            transport.keep_alive(poll)
            if isinstance(transport, MemoryTransport):  # its keep_alive does not wait
                time.sleep(poll)
