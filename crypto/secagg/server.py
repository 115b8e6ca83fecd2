"""The aggregator's side of a secure-aggregation round, sans-I/O (DESIGN.md section 5,
steps 2-6; Bonawitz et al. 2017, figure 4, server side; Bell et al. 2020 for SecAgg+).

``SecAggServer`` takes client messages with ``receive(message, now)`` and the passage of
time with ``tick(now)``; each returns a ``ServerStep``: messages to send and, at the end,
the outcome (``AggregateSum`` or ``RoundAborted``). A phase closes when every expected
member has answered or its deadline passes; below t members at any phase the round aborts
with the phase and the counts. A refused message raises ``RemoteProtocolError`` and leaves
the state unchanged (the runtime logs it and carries on).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from crypto.hazmat import primitives, shamir
from crypto.secagg import transcript
from crypto.secagg.errors import AbortReason, LocalProtocolError, Refusal, RemoteProtocolError
from crypto.secagg.messages import (
    AdvertiseKeys,
    ClientMessage,
    ConsistencyCheckRequest,
    EncryptedShare,
    EncryptedShares,
    MaskedInput,
    MaskedInputRequest,
    MemberSignature,
    Outcome,
    Phase,
    RosterEntry,
    RoundAborted,
    ServerStep,
    ShareKeysRequest,
    ShareKind,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
)
from crypto.secagg.params import NeighbourGraph, RoundParameters, build_graph, check_member_id
from crypto.secagg.unmask import unmask

MAX_CIPHERTEXT_SIZE = 1024


def _refuse(refusal: Refusal, detail: str) -> RemoteProtocolError:
    return RemoteProtocolError(refusal, detail)


class SecAggServer:
    """The server of one round over the members of ``directory`` (id -> Ed25519 key)."""

    def __init__(
        self,
        parameters: RoundParameters,
        directory: Mapping[int, bytes],
        *,
        now: float,
        phase_timeout: float,
        max_members: int | None = None,
        random: primitives.RandomSource = os.urandom,
    ) -> None:
        for member in directory:
            check_member_id(member)
        if phase_timeout <= 0:
            raise LocalProtocolError("phase timeout must be positive")
        self.parameters = parameters
        self.phase = Phase.ADVERTISE_KEYS
        self.outcome: Outcome | None = None
        self._directory = dict(directory)
        self._timeout = phase_timeout
        self._deadline = now + phase_timeout
        self._max_members = max_members or len(self._directory)
        self._expected: frozenset[int] = frozenset(self._directory)
        self._adverts: dict[int, AdvertiseKeys] = {}
        self._probe_key = primitives.load_agreement_key(primitives.generate_agreement_key(random))
        self._session = b""
        self._graph: NeighbourGraph | None = None
        self._shares: dict[int, EncryptedShares] = {}
        self._masked: dict[int, NDArray[np.uint32]] = {}
        self._signatures: dict[int, bytes] = {}
        self._revealed: dict[int, dict[int, bytes]] = {}

    @property
    def session_id(self) -> bytes:
        return self._session

    @property
    def roster_members(self) -> tuple[int, ...]:
        """The members of the roster (empty before ShareKeys)."""
        return self._graph.members if self._graph is not None else ()

    @property
    def deadline(self) -> float:
        return self._deadline

    # --- driving --------------------------------------------------------------------

    def receive(self, message: ClientMessage, now: float) -> ServerStep:
        """Take one client message; close the phase early when everyone has answered."""
        if self.outcome is not None:
            raise _refuse(Refusal.UNEXPECTED_MESSAGE, "round is over")
        if message.round != self.parameters.round:
            raise _refuse(Refusal.WRONG_ROUND, f"round {message.round}")
        if not isinstance(message, AdvertiseKeys) and message.session_id != self._session:
            raise _refuse(Refusal.WRONG_SESSION, f"from member {message.sender}")
        if message.sender not in self._expected:
            raise _refuse(
                Refusal.UNKNOWN_MEMBER,
                f"member {message.sender} not expected in {self.phase.value}",
            )
        collected: Mapping[int, object]
        if isinstance(message, AdvertiseKeys) and self.phase is Phase.ADVERTISE_KEYS:
            collected = self._adverts
            self._check_new(message.sender, collected)
            self._check_advert(message)
            self._adverts[message.sender] = message
        elif isinstance(message, EncryptedShares) and self.phase is Phase.SHARE_KEYS:
            collected = self._shares
            self._check_new(message.sender, collected)
            self._check_shares(message)
            self._shares[message.sender] = message
        elif isinstance(message, MaskedInput) and self.phase is Phase.MASKED_INPUT_COLLECTION:
            collected = self._masked
            self._check_new(message.sender, collected)
            masked = np.asarray(message.masked)
            if masked.dtype != np.uint32 or masked.shape != (self.parameters.vector_length,):
                raise _refuse(Refusal.MALFORMED, f"masked input of member {message.sender}")
            self._masked[message.sender] = masked
        elif isinstance(message, SurvivorSignature) and self.phase is Phase.CONSISTENCY_CHECK:
            collected = self._signatures
            self._check_new(message.sender, collected)
            payload = transcript.survivors_payload(
                self._session, self.parameters.round, tuple(sorted(self._masked))
            )
            identity = self._directory[message.sender]
            if not primitives.verify(identity, message.signature, payload):
                raise _refuse(Refusal.BAD_SIGNATURE, f"survivor list of member {message.sender}")
            self._signatures[message.sender] = message.signature
        elif isinstance(message, UnmaskResponse) and self.phase is Phase.UNMASKING:
            collected = self._revealed
            self._check_new(message.sender, collected)
            self._revealed[message.sender] = self._check_revealed(message)
        else:
            raise _refuse(
                Refusal.UNEXPECTED_MESSAGE, f"{type(message).__name__} in {self.phase.value}"
            )
        everyone_answered = collected.keys() >= self._expected
        cohort_full = self.phase is Phase.ADVERTISE_KEYS and len(self._adverts) >= self._max_members
        if everyone_answered or cohort_full:
            return self.close_phase(now)
        return ServerStep()

    def tick(self, now: float) -> ServerStep:
        """Close the current phase if its deadline has passed."""
        if self.outcome is None and now >= self._deadline:
            return self.close_phase(now)
        return ServerStep()

    def close_phase(self, now: float) -> ServerStep:
        """End the current phase with whoever has answered, and start the next."""
        if self.outcome is not None:
            raise LocalProtocolError("round is over")
        self._deadline = now + self._timeout
        if self.phase is Phase.ADVERTISE_KEYS:
            return self._start_share_keys()
        if self.phase is Phase.SHARE_KEYS:
            return self._start_masked_input()
        if self.phase is Phase.MASKED_INPUT_COLLECTION:
            return self._start_consistency_check()
        if self.phase is Phase.CONSISTENCY_CHECK:
            return self._start_unmasking()
        return self._finish()

    # --- phase transitions ----------------------------------------------------------

    def _below_threshold(self, count: int) -> ServerStep | None:
        if count >= self.parameters.threshold:
            return None
        return self._abort(
            AbortReason.BELOW_THRESHOLD,
            f"below threshold at {self.phase.value}: {count} of t={self.parameters.threshold}",
        )

    def _abort(self, reason: AbortReason, detail: str) -> ServerStep:
        self.outcome = RoundAborted(self.parameters.round, self.phase, reason, detail)
        self.phase = Phase.FINISHED
        return ServerStep(outcome=self.outcome)

    def _start_share_keys(self) -> ServerStep:
        aborted = self._below_threshold(len(self._adverts))
        if aborted:
            return aborted
        roster = tuple(
            RosterEntry(a.sender, a.cipher_public_key, a.mask_public_key, a.signature)
            for a in sorted(self._adverts.values(), key=lambda a: a.sender)
        )
        self._session = transcript.session_id(self.parameters, roster)
        members = tuple(entry.member for entry in roster)
        self._graph = build_graph(self.parameters, members, self._session)
        self._expected = frozenset(members)
        self.phase = Phase.SHARE_KEYS
        return ServerStep(
            tuple(
                ShareKeysRequest(self.parameters.round, self._session, member, roster)
                for member in members
            )
        )

    def _start_masked_input(self) -> ServerStep:
        aborted = self._below_threshold(len(self._shares))
        if aborted:
            return aborted
        graph = self._require_graph()
        shared = frozenset(self._shares)
        inbox: dict[int, list[EncryptedShare]] = {member: [] for member in shared}
        for message in self._shares.values():
            for share in message.shares:
                if share.recipient in shared:
                    inbox[share.recipient].append(share)
        # a member whose neighbourhood shared too little would refuse: leave it out
        requested = [m for m in sorted(shared) if len(inbox[m]) + 1 >= graph.threshold]
        self.phase = Phase.MASKED_INPUT_COLLECTION
        aborted = self._below_threshold(len(requested))
        if aborted:
            return aborted
        self._expected = frozenset(requested)
        return ServerStep(
            tuple(
                MaskedInputRequest(self.parameters.round, self._session, m, tuple(inbox[m]))
                for m in requested
            )
        )

    def _start_consistency_check(self) -> ServerStep:
        aborted = self._below_threshold(len(self._masked))
        if aborted:
            return aborted
        survivors = tuple(sorted(self._masked))
        self._expected = frozenset(survivors)
        self.phase = Phase.CONSISTENCY_CHECK
        return ServerStep(
            tuple(
                ConsistencyCheckRequest(self.parameters.round, self._session, m, survivors)
                for m in survivors
            )
        )

    def _start_unmasking(self) -> ServerStep:
        aborted = self._below_threshold(len(self._signatures))
        if aborted:
            return aborted
        survivors = tuple(sorted(self._masked))
        dropped = tuple(sorted(self._shares.keys() - self._masked.keys()))
        signatures = tuple(
            MemberSignature(m, signature) for m, signature in sorted(self._signatures.items())
        )
        graph = self._require_graph()
        signers = frozenset(self._signatures)
        # a member whose closed neighbourhood signed less than its threshold would refuse
        # (it verifies only those signatures, SecAgg+): leave it out, as at MaskedInput
        requested = sorted(
            m
            for m in signers
            if graph.complete or len(graph.neighbours(m) & signers) + 1 >= graph.threshold
        )
        self.phase = Phase.UNMASKING
        aborted = self._below_threshold(len(requested))
        if aborted:
            return aborted
        self._expected = frozenset(requested)
        return ServerStep(
            tuple(
                UnmaskRequest(
                    self.parameters.round, self._session, m, survivors, dropped, signatures
                )
                for m in requested
            )
        )

    def _finish(self) -> ServerStep:
        aborted = self._below_threshold(len(self._revealed))
        if aborted:
            return aborted
        outcome = unmask(
            self.parameters,
            self._require_graph(),
            self._session,
            {a.sender: a.mask_public_key for a in self._adverts.values()},
            frozenset(self._shares),
            self._masked,
            self._revealed,
        )
        self.outcome = outcome
        self.phase = Phase.FINISHED
        return ServerStep(outcome=outcome)

    # --- checks on client messages --------------------------------------------------

    def _check_new(self, sender: int, collected: Mapping[int, object]) -> None:
        if sender in collected:
            raise _refuse(Refusal.DUPLICATE_MEMBER, f"second message of member {sender}")

    def _check_advert(self, message: AdvertiseKeys) -> None:
        if len(self._adverts) >= self._max_members:
            raise _refuse(Refusal.UNEXPECTED_MESSAGE, "cohort is full")
        keys = (message.cipher_public_key, message.mask_public_key)
        if any(len(key) != primitives.KEY_SIZE for key in keys):
            raise _refuse(Refusal.MALFORMED, f"key size in advert of member {message.sender}")
        try:  # rejects low-order points, whose agreement would be all zeros
            for key in keys:
                primitives.exchange(self._probe_key, key)
        except ValueError:
            raise _refuse(
                Refusal.MALFORMED, f"unusable key in advert of member {message.sender}"
            ) from None
        payload = transcript.advert_payload(self.parameters.round, message.sender, *keys)
        if not primitives.verify(self._directory[message.sender], message.signature, payload):
            raise _refuse(Refusal.BAD_SIGNATURE, f"advert of member {message.sender}")

    def _check_shares(self, message: EncryptedShares) -> None:
        graph = self._require_graph()
        recipients = [share.recipient for share in message.shares]
        if len(recipients) != graph.degree or set(recipients) != graph.neighbours(message.sender):
            raise _refuse(Refusal.MALFORMED, f"share recipients of member {message.sender}")
        for share in message.shares:
            if share.sender != message.sender or len(share.ciphertext) > MAX_CIPHERTEXT_SIZE:
                raise _refuse(Refusal.MALFORMED, f"share of member {message.sender}")

    def _check_revealed(self, message: UnmaskResponse) -> dict[int, bytes]:
        graph = self._require_graph()
        sender = message.sender
        masked = self._masked
        seed, key, size = ShareKind.SELF_MASK_SEED, ShareKind.MASK_KEY, shamir.SHARE_SIZE
        revealed: dict[int, bytes] = {}
        for item in message.shares:
            owner = item.owner
            if owner in revealed:
                raise _refuse(Refusal.DUPLICATE_MEMBER, f"two shares of owner {owner}")
            if item.kind is not (seed if owner in masked else key) or len(item.share) != size:
                raise _refuse(Refusal.MALFORMED, f"share of owner {owner}")
            revealed[owner] = item.share
        # the owners expected: the sender and its neighbours that shared (all of U2 on the
        # complete graph); checked by counting, then membership, without building the set
        shared = self._shares
        if graph.complete:
            wrong = len(revealed) != len(shared) or not all(o in shared for o in revealed)
        else:
            owners = (graph.neighbours(sender) | {sender}) & shared.keys()
            wrong = revealed.keys() != owners
        if wrong:
            raise _refuse(Refusal.MALFORMED, f"member {sender} revealed the wrong owners")
        return revealed

    def _require_graph(self) -> NeighbourGraph:
        if self._graph is None:
            raise LocalProtocolError("no roster yet")
        return self._graph
