"""Secure aggregation as a hypothesis state machine (DESIGN.md s. 5; sans-I/O contract):
messages are delivered in any order, members die at any moment (losing what they had in
flight or not), deadlines pass at any moment. Honest clients never refuse an honest
server; the outcome is the exact sum over the members whose masked input arrived, or an
abort at a phase where fewer than t members got through.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from crypto.secagg import (
    AbortReason,
    AggregateSum,
    ClientMessage,
    Phase,
    RemoteProtocolError,
    RoundAborted,
    RoundParameters,
    ServerMessage,
    ServerStep,
    build_cohort,
)
from crypto.secagg.simulate import InProcessCohort

PHASE_OF_REPLY = {
    "AdvertiseKeys": Phase.ADVERTISE_KEYS,
    "EncryptedShares": Phase.SHARE_KEYS,
    "MaskedInput": Phase.MASKED_INPUT_COLLECTION,
    "SurvivorSignature": Phase.CONSISTENCY_CHECK,
    "UnmaskResponse": Phase.UNMASKING,
}


class SecAggRound(RuleBasedStateMachine):
    group: InProcessCohort
    inputs: dict[int, np.ndarray]

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(2, 10), label="n")
        self.threshold = data.draw(st.integers(1, n), label="t")
        length = data.draw(st.integers(1, 8), label="d")
        self.secagg_plus = data.draw(st.booleans(), label="secagg_plus")
        degree = data.draw(st.sampled_from([None, 2, 4]), label="degree")
        parameters = RoundParameters(
            round=5,
            threshold=self.threshold,
            vector_length=length,
            secagg_plus=self.secagg_plus,
            degree=degree,
        )
        rng = np.random.default_rng(n)  # input values only
        self.inputs = {
            m: rng.integers(0, 2**32, size=length, dtype=np.uint32) for m in range(1, n + 1)
        }
        self.group = build_cohort(self.inputs, parameters)
        self.now = 0.0
        self.dead: set[int] = set()
        self.arrived: dict[Phase, set[int]] = {phase: set() for phase in Phase}
        self.to_server: list[ClientMessage] = [
            client.advertise(self.now) for client in self.group.clients.values()
        ]
        self.to_clients: list[ServerMessage] = []

    def take(self, step: ServerStep) -> None:
        self.to_clients.extend(step.messages)

    @property
    def running(self) -> bool:
        return self.group.server.outcome is None

    @precondition(lambda self: self.to_server)
    @rule(data=st.data())
    def deliver_to_server(self, data: st.DataObject) -> None:
        self.deliver_to_server_at(data.draw(st.integers(0, len(self.to_server) - 1)))

    def deliver_to_server_at(self, index: int) -> None:
        message = self.to_server.pop(index)
        phase = self.group.server.phase
        if not self.running:
            with pytest.raises(RemoteProtocolError):
                self.group.server.receive(message, self.now)
            return
        try:
            self.take(self.group.server.receive(message, self.now))
        except RemoteProtocolError:
            # only a late message (its phase already closed) may be refused
            assert PHASE_OF_REPLY[type(message).__name__] is not phase
            return
        self.arrived[phase].add(message.sender)

    @precondition(lambda self: self.to_clients)
    @rule(data=st.data())
    def deliver_to_client(self, data: st.DataObject) -> None:
        self.deliver_to_client_at(data.draw(st.integers(0, len(self.to_clients) - 1)))

    def deliver_to_client_at(self, index: int) -> None:
        message = self.to_clients.pop(index)
        if message.recipient in self.dead:
            return
        # an honest client never refuses an honest server, whatever the order
        reply = self.group.clients[message.recipient].receive(message, self.now)
        self.to_server.append(reply)

    @rule(data=st.data(), lose_in_flight=st.booleans(), roll=st.integers(0, 5))
    def kill(self, data: st.DataObject, lose_in_flight: bool, roll: int) -> None:
        if roll != 5:  # rarely (hypothesis favours 0): most rounds live long enough to sum
            return
        member = data.draw(st.sampled_from(sorted(self.group.clients)))
        self.dead.add(member)
        if lose_in_flight:
            self.to_server = [m for m in self.to_server if m.sender != member]

    @rule()
    def deadline_passes(self) -> None:
        # only once someone got through in this phase, else most rounds die at once
        if self.running and self.arrived[self.group.server.phase]:
            self.pass_deadline()

    def pass_deadline(self) -> None:
        self.now = self.group.server.deadline
        self.take(self.group.server.tick(self.now))

    def teardown(self) -> None:
        if not hasattr(self, "group"):
            return
        while self.running:  # let the round run to its end, everything delivered in order
            if self.to_server:
                self.deliver_to_server_at(0)
            elif self.to_clients:
                self.deliver_to_client_at(0)
            else:
                self.pass_deadline()
        outcome = self.group.server.outcome
        event("sum" if isinstance(outcome, AggregateSum) else "abort")
        if isinstance(outcome, AggregateSum):
            survivors = self.arrived[Phase.MASKED_INPUT_COLLECTION]
            assert set(outcome.survivors) == survivors
            assert len(survivors) >= self.threshold
            expected = sum(
                (self.inputs[m].astype(np.uint64) for m in survivors), start=np.uint64(0)
            )
            assert np.array_equal(outcome.total, (expected % 2**32).astype(np.uint32))
        else:
            assert isinstance(outcome, RoundAborted)
            if outcome.reason is AbortReason.BELOW_THRESHOLD:
                assert len(self.arrived[outcome.phase]) < self.threshold
            else:
                assert outcome.reason is AbortReason.NEIGHBOURHOOD_BELOW_THRESHOLD
                assert self.secagg_plus


SecAggRound.TestCase.settings = settings(max_examples=40, stateful_step_count=60, deadline=None)
test_secagg_round_under_any_interleaving = SecAggRound.TestCase
