"""A lying or replaying server is refused by the client (DESIGN.md s. 6; Bonawitz et al.
2017, figure 4 checks), and the server refuses malformed or repeated client messages."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from crypto.hazmat import primitives
from crypto.secagg import (
    AbortReason,
    AggregateSum,
    ConsistencyCheckRequest,
    EncryptedShare,
    LocalProtocolError,
    MaskedInput,
    MaskedInputRequest,
    MemberSignature,
    Phase,
    Refusal,
    RemoteProtocolError,
    RosterEntry,
    RoundAborted,
    RoundParameters,
    SecAggClient,
    ServerMessage,
    ShareKeysRequest,
    ShareKind,
    UnmaskRequest,
    UnmaskResponse,
    build_cohort,
    build_graph,
    drive,
    transcript,
)
from crypto.secagg.simulate import InProcessCohort

N = 6
T = 4
D = 3


def cohort(round_number: int = 0, n: int = N) -> InProcessCohort:
    inputs = {m: np.full(D, m, dtype=np.uint32) for m in range(1, n + 1)}
    return build_cohort(inputs, RoundParameters(round=round_number, threshold=T, vector_length=D))


def refusal_of(group: InProcessCohort, member: int) -> Refusal:
    return group.refusals[member].refusal


def test_honest_round_sums_and_nobody_refuses() -> None:
    group = cohort()
    outcome = drive(group)
    assert isinstance(outcome, AggregateSum)
    assert outcome.total.tolist() == [sum(range(1, N + 1))] * D
    assert group.refusals == {}


def test_overlapping_survivor_and_dropout_lists_are_refused() -> None:
    def overlap(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest) and message.recipient == 1:
            return dataclasses.replace(message, dropped=(*message.dropped, 2))
        return message

    group = cohort()
    drive(group, {3: Phase.CONSISTENCY_CHECK}, intercept=overlap)
    assert refusal_of(group, 1) is Refusal.OVERLAPPING_LISTS


def test_forged_roster_signature_is_refused() -> None:
    def forge(message: ServerMessage) -> ServerMessage:
        if isinstance(message, ShareKeysRequest) and message.recipient == 1:
            entry = message.roster[2]
            forged = dataclasses.replace(
                entry,
                mask_public_key=primitives.public_agreement_key(
                    primitives.generate_agreement_key()
                ),
            )
            roster = (*message.roster[:2], forged, *message.roster[3:])
            # a consistent liar: the session id hashes the forged roster
            session = transcript.session_id(group.parameters, roster)
            return dataclasses.replace(message, roster=roster, session_id=session)
        return message

    group = cohort()
    drive(group, intercept=forge)
    assert refusal_of(group, 1) is Refusal.BAD_SIGNATURE
    assert set(group.refusals) == {1}


def test_duplicate_member_in_roster_is_refused() -> None:
    def duplicate(message: ServerMessage) -> ServerMessage:
        if isinstance(message, ShareKeysRequest) and message.recipient == 1:
            return dataclasses.replace(message, roster=(*message.roster, message.roster[1]))
        return message

    group = cohort()
    drive(group, intercept=duplicate)
    assert refusal_of(group, 1) is Refusal.DUPLICATE_MEMBER


def test_roster_below_threshold_is_refused() -> None:
    def shrink(message: ServerMessage) -> ServerMessage:
        if isinstance(message, ShareKeysRequest) and message.recipient == 1:
            return dataclasses.replace(message, roster=message.roster[: T - 1])
        return message

    group = cohort()
    drive(group, intercept=shrink)
    assert refusal_of(group, 1) is Refusal.BELOW_THRESHOLD


def test_session_id_not_matching_the_roster_is_refused() -> None:
    def relabel(message: ServerMessage) -> ServerMessage:
        if isinstance(message, ShareKeysRequest) and message.recipient == 1:
            return dataclasses.replace(message, session_id=bytes(32))
        return message

    group = cohort()
    drive(group, intercept=relabel)
    assert refusal_of(group, 1) is Refusal.WRONG_SESSION


def _captured_shares(round_number: int) -> dict[int, tuple[EncryptedShare, ...]]:
    captured: dict[int, tuple[EncryptedShare, ...]] = {}

    def capture(message: ServerMessage) -> ServerMessage:
        if isinstance(message, MaskedInputRequest):
            captured[message.recipient] = message.shares
        return message

    drive(cohort(round_number), intercept=capture)
    return captured


@pytest.mark.parametrize("other_round", [0, 1], ids=["other-session", "other-round"])
def test_share_replayed_from_another_session_or_round_is_refused(other_round: int) -> None:
    old = _captured_shares(other_round)

    def replay(message: ServerMessage) -> ServerMessage:
        if isinstance(message, MaskedInputRequest) and message.recipient == 1:
            return dataclasses.replace(message, shares=(old[1][0], *message.shares[1:]))
        return message

    group = cohort(round_number=0)
    drive(group, intercept=replay)
    assert refusal_of(group, 1) is Refusal.DECRYPTION_FAILED
    assert str(group.refusals[1].detail) == f"share from {old[1][0].sender}"


def test_tampered_ciphertext_is_refused_with_one_opaque_error() -> None:
    def tamper(message: ServerMessage) -> ServerMessage:
        if isinstance(message, MaskedInputRequest) and message.recipient == 1:
            share = message.shares[0]
            flipped = bytearray(share.ciphertext)
            flipped[20] ^= 0x01
            bad = dataclasses.replace(share, ciphertext=bytes(flipped))
            return dataclasses.replace(message, shares=(bad, *message.shares[1:]))
        return message

    group = cohort()
    drive(group, intercept=tamper)
    assert refusal_of(group, 1) is Refusal.DECRYPTION_FAILED


def test_share_addressed_to_another_member_is_refused() -> None:
    def misroute(message: ServerMessage) -> ServerMessage:
        if isinstance(message, MaskedInputRequest) and message.recipient == 1:
            return dataclasses.replace(message, recipient=2)
        return message

    group = cohort()
    drive(group, intercept=misroute)
    assert refusal_of(group, 1) is Refusal.WRONG_RECIPIENT


def test_survivor_list_changed_after_signing_is_refused() -> None:
    def change(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest) and message.recipient == 1:
            return dataclasses.replace(message, survivors=message.survivors[:-1])
        return message

    group = cohort()
    drive(group, intercept=change)
    assert refusal_of(group, 1) is Refusal.INCONSISTENT_LISTS


def test_forged_survivor_signature_is_refused() -> None:
    def forge(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest) and message.recipient == 1:
            fake = MemberSignature(message.signatures[0].member, bytes(64))
            return dataclasses.replace(message, signatures=(fake, *message.signatures[1:]))
        return message

    group = cohort()
    drive(group, intercept=forge)
    assert refusal_of(group, 1) is Refusal.BAD_SIGNATURE


def test_too_few_survivor_signatures_are_refused() -> None:
    def strip(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest) and message.recipient == 1:
            return dataclasses.replace(message, signatures=message.signatures[: T - 1])
        return message

    group = cohort()
    drive(group, intercept=strip)
    assert refusal_of(group, 1) is Refusal.BELOW_THRESHOLD


def test_message_of_another_round_is_refused_and_client_then_stays_failed() -> None:
    def shift(message: ServerMessage) -> ServerMessage:
        if isinstance(message, ConsistencyCheckRequest) and message.recipient == 1:
            return dataclasses.replace(message, round=7)
        return message

    group = cohort()
    drive(group, intercept=shift)
    assert refusal_of(group, 1) is Refusal.WRONG_ROUND
    with pytest.raises(LocalProtocolError):
        group.clients[1].receive(
            ConsistencyCheckRequest(0, group.server.session_id, 1, (1, 2, 3, 4)), 0.0
        )


def test_client_reveals_exactly_one_share_per_peer_and_only_once() -> None:
    requests: dict[int, UnmaskRequest] = {}

    def keep(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest):
            requests[message.recipient] = message
        return message

    group = cohort()
    revealed: list[UnmaskResponse] = []
    original_receive = group.server.receive

    def spy(message: object, now: float) -> object:
        if isinstance(message, UnmaskResponse):
            revealed.append(message)
        return original_receive(message, now)  # type: ignore[arg-type]

    group.server.receive = spy  # type: ignore[assignment,method-assign]
    outcome = drive(group, {5: Phase.MASKED_INPUT_COLLECTION}, intercept=keep)
    assert isinstance(outcome, AggregateSum)
    for response in revealed:
        owners = [share.owner for share in response.shares]
        assert len(owners) == len(set(owners)) == N
        kinds = {share.owner: share.kind for share in response.shares}
        assert kinds[5] is ShareKind.MASK_KEY
        assert all(kinds[m] is ShareKind.SELF_MASK_SEED for m in kinds if m != 5)
    with pytest.raises(LocalProtocolError):
        group.clients[1].receive(requests[1], 1e9)


def test_server_refuses_duplicates_wrong_session_and_late_messages() -> None:
    group = cohort()
    server = group.server
    adverts = {m: client.advertise(0.0) for m, client in group.clients.items()}
    for member in range(1, N):
        server.receive(adverts[member], 0.0)
    with pytest.raises(RemoteProtocolError) as duplicate:
        server.receive(adverts[1], 0.0)
    assert duplicate.value.refusal is Refusal.DUPLICATE_MEMBER
    forged = dataclasses.replace(adverts[N], signature=adverts[1].signature)
    with pytest.raises(RemoteProtocolError) as bad:
        server.receive(forged, 0.0)
    assert bad.value.refusal is Refusal.BAD_SIGNATURE
    assert server.tick(server.deadline - 1).messages == ()
    step = server.tick(server.deadline)
    assert len(step.messages) == N - 1
    with pytest.raises(RemoteProtocolError) as late:
        server.receive(adverts[N], 0.0)
    assert late.value.refusal is Refusal.UNKNOWN_MEMBER
    stray = MaskedInput(0, bytes(32), 1, np.zeros(D, dtype=np.uint32))
    with pytest.raises(RemoteProtocolError) as wrong:
        server.receive(stray, 0.0)
    assert wrong.value.refusal is Refusal.WRONG_SESSION


def test_server_abort_says_phase_and_counts() -> None:
    dropouts = {1: Phase.SHARE_KEYS, 2: Phase.SHARE_KEYS, 3: Phase.SHARE_KEYS}
    outcome = drive(cohort(), dropouts)
    assert isinstance(outcome, RoundAborted)
    assert outcome.phase is Phase.SHARE_KEYS
    assert outcome.detail == f"below threshold at ShareKeys: {N - 3} of t={T}"
    outcome = drive(cohort(), {1: Phase.UNMASKING, 2: Phase.UNMASKING, 3: Phase.UNMASKING})
    assert isinstance(outcome, RoundAborted)
    assert outcome.detail == f"below threshold at Unmasking: {N - 3} of t={T}"


def test_secagg_plus_member_refuses_a_forged_neighbour_advert() -> None:
    n = 24
    inputs = {m: np.full(D, m, dtype=np.uint32) for m in range(1, n + 1)}
    parameters = RoundParameters(round=0, threshold=12, vector_length=D, secagg_plus=True, degree=4)
    group = build_cohort(inputs, parameters)

    def forge(message: ServerMessage) -> ServerMessage:
        if isinstance(message, ShareKeysRequest) and message.recipient == 1:
            graph = build_graph(
                parameters, tuple(e.member for e in message.roster), message.session_id
            )
            neighbour = min(graph.neighbours(1))
            roster = tuple(
                dataclasses.replace(e, signature=bytes(64)) if e.member == neighbour else e
                for e in message.roster
            )
            return dataclasses.replace(message, roster=roster)
        return message

    outcome = drive(group, intercept=forge)
    assert refusal_of(group, 1) is Refusal.BAD_SIGNATURE
    assert set(group.refusals) == {1}
    assert isinstance(outcome, AggregateSum)
    assert 1 not in outcome.survivors


def test_low_order_public_keys_are_refused_by_server_and_client() -> None:
    group = cohort()
    advert = group.clients[1].advertise(0.0)
    low_order = bytes(32)  # the point 0: its agreement is all zeros
    with pytest.raises(RemoteProtocolError) as refused:
        group.server.receive(dataclasses.replace(advert, mask_public_key=low_order), 0.0)
    assert refused.value.refusal is Refusal.MALFORMED

    def poison(message: ServerMessage) -> ServerMessage:
        # a lying server swaps in a low-order key for a member (and a matching session)
        if isinstance(message, ShareKeysRequest) and message.recipient == 2:
            entry = dataclasses.replace(message.roster[0], cipher_public_key=low_order)
            roster = (entry, *message.roster[1:])
            session = transcript.session_id(group.parameters, roster)
            return dataclasses.replace(message, roster=roster, session_id=session)
        return message

    group = cohort()
    drive(group, intercept=poison)
    # the forged entry fails its signature before its key is ever used
    assert refusal_of(group, 2) is Refusal.BAD_SIGNATURE


def test_corrupted_key_share_aborts_the_round_instead_of_a_wrong_sum() -> None:
    group = cohort()
    receive = group.server.receive

    def corrupt(message: object, now: float) -> object:
        if isinstance(message, UnmaskResponse) and message.sender == 1:
            shares = tuple(
                dataclasses.replace(item, share=bytes(len(item.share)))
                if item.kind is ShareKind.MASK_KEY
                else item
                for item in message.shares
            )
            message = dataclasses.replace(message, shares=shares)
        return receive(message, now)  # type: ignore[arg-type]

    group.server.receive = corrupt  # type: ignore[assignment,method-assign]
    outcome = drive(group, {6: Phase.MASKED_INPUT_COLLECTION})
    assert isinstance(outcome, RoundAborted)
    assert outcome.reason is AbortReason.INCONSISTENT_SHARES
    assert "member 6" in outcome.detail


def test_client_refuses_messages_after_its_round_expired() -> None:
    inputs = np.zeros(D, dtype=np.uint32)
    identity = primitives.generate_signing_key()
    directory = {1: primitives.public_signing_key(identity)}
    parameters = RoundParameters(round=0, threshold=1, vector_length=D)
    client = SecAggClient(parameters, 1, identity, directory, inputs, expires_at=10.0)
    advert = client.advertise(5.0)
    roster = (RosterEntry(1, advert.cipher_public_key, advert.mask_public_key, advert.signature),)
    request = ShareKeysRequest(0, transcript.session_id(parameters, roster), 1, roster)
    with pytest.raises(RemoteProtocolError) as late:
        client.receive(request, 11.0)
    assert late.value.refusal is Refusal.EXPIRED


def _counting_verify(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count Ed25519 verifications of survivor lists (payloads with the survivors label)."""
    calls: list[int] = []
    real = primitives.verify

    def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
        if transcript.SURVIVORS_LABEL.encode() in message:
            calls.append(1)
        return real(public_key, signature, message)

    monkeypatch.setattr(primitives, "verify", verify)
    return calls


def test_full_graph_member_verifies_t_survivor_signatures_not_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n, t = 12, 7
    inputs = {m: np.full(D, m, dtype=np.uint32) for m in range(1, n + 1)}
    group = build_cohort(inputs, RoundParameters(round=0, threshold=t, vector_length=D))
    calls = _counting_verify(monkeypatch)
    outcome = drive(group)
    assert isinstance(outcome, AggregateSum) and group.refusals == {}
    # the server verifies each of the n signatures once; each member verifies t
    assert len(calls) == n + n * t


def test_secagg_plus_member_checks_only_its_neighbourhood_signatures() -> None:
    n = 24
    inputs = {m: np.full(D, m, dtype=np.uint32) for m in range(1, n + 1)}
    parameters = RoundParameters(round=0, threshold=12, vector_length=D, secagg_plus=True, degree=4)
    group = build_cohort(inputs, parameters)
    forged: dict[str, int] = {}

    def forge(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest) and message.recipient in (1, 2):
            graph = build_graph(parameters, tuple(range(1, n + 1)), message.session_id)
            closed = graph.neighbours(message.recipient) | {message.recipient}
            # member 1: a non-neighbour's signature forged (not its concern);
            # member 2: a neighbour's signature forged (refused)
            target = (
                min(set(range(1, n + 1)) - closed)
                if message.recipient == 1
                else min(graph.neighbours(2))
            )
            forged[str(message.recipient)] = target
            signatures = tuple(
                MemberSignature(s.member, bytes(64)) if s.member == target else s
                for s in message.signatures
            )
            return dataclasses.replace(message, signatures=signatures)
        return message

    outcome = drive(group, intercept=forge)
    assert set(forged) == {"1", "2"}
    assert 1 not in group.refusals
    assert refusal_of(group, 2) is Refusal.BAD_SIGNATURE
    assert isinstance(outcome, AggregateSum)


def test_secagg_plus_member_refuses_too_few_neighbourhood_signatures() -> None:
    n = 24
    inputs = {m: np.full(D, m, dtype=np.uint32) for m in range(1, n + 1)}
    parameters = RoundParameters(round=0, threshold=12, vector_length=D, secagg_plus=True, degree=4)
    group = build_cohort(inputs, parameters)

    def strip(message: ServerMessage) -> ServerMessage:
        if isinstance(message, UnmaskRequest) and message.recipient == 1:
            graph = build_graph(parameters, tuple(range(1, n + 1)), message.session_id)
            kept = tuple(s for s in message.signatures if s.member not in graph.neighbours(1))
            return dataclasses.replace(message, signatures=kept)
        return message

    drive(group, intercept=strip)
    # still >= t signatures overall, but only its own in its neighbourhood (threshold 3)
    assert refusal_of(group, 1) is Refusal.BELOW_THRESHOLD


def test_share_ciphertext_is_the_fixed_plaintext_and_tag_only() -> None:
    group = cohort()
    sizes: set[int] = set()

    def look(message: ServerMessage) -> ServerMessage:
        if isinstance(message, MaskedInputRequest):
            sizes.update(len(share.ciphertext) for share in message.shares)
        return message

    assert isinstance(drive(group, intercept=look), AggregateSum)
    assert sizes == {2 * 36 + 16}
