"""The member's side of a secure-aggregation round, sans-I/O (DESIGN.md section 5, steps
2-6; Bonawitz et al. 2017, figure 4, user side; Bell et al. 2020 for SecAgg+).

``SecAggClient`` takes each server message (and ``now``) and returns the one message to
send back, or raises ``RemoteProtocolError`` (after which it refuses everything). The rules
that carry the security argument are enforced here:

- a roster is refused below t, with a duplicate member, with a signature that fails, or
  misstating this member's keys; every message must carry this round and session;
- shares are decrypted with sender, recipient, session and round as associated data;
- the survivor list must not overlap the dropout list, must be the one this member signed,
  and must come with at least t survivor signatures, of which the client verifies, in the
  order given, those of its closed neighbourhood until it holds the neighbourhood
  threshold of valid ones (t on the complete graph; docs/secure-aggregation.md,
  "Consistency check": an invalid one met on the way is refused);
- each peer gets exactly one ``PeerStatus``, and only that status decides which share is
  revealed, so revealing both the self-mask share and the key share of one peer cannot be
  expressed; and the client reveals at most once.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from crypto.hazmat import primitives, shamir
from crypto.secagg import transcript
from crypto.secagg.errors import LocalProtocolError, Refusal, RemoteProtocolError
from crypto.secagg.messages import (
    AdvertiseKeys,
    ClientMessage,
    ConsistencyCheckRequest,
    EncryptedShare,
    EncryptedShares,
    MaskedInput,
    MaskedInputRequest,
    RevealedShare,
    RosterEntry,
    ServerMessage,
    ShareKeysRequest,
    ShareKind,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
)
from crypto.secagg.params import NeighbourGraph, RoundParameters, build_graph, check_member_id


class ClientPhase(enum.Enum):
    NEW = "new"
    ADVERTISED = "advertised"
    SHARED = "shared"
    MASKED = "masked"
    SIGNED = "signed"
    DONE = "done"
    FAILED = "failed"


class PeerStatus(enum.Enum):
    """What the client believes about a peer that shared with it; decides what it reveals."""

    SURVIVED = "survived"  # reveal the share of its self-mask seed b_v
    DROPPED_AFTER_SHARING = "dropped-after-sharing"  # reveal the share of its mask key s_v^SK


@dataclass(frozen=True, slots=True)
class _HeldShares:
    key_share: bytes
    seed_share: bytes

    def reveal(self, owner: int, status: PeerStatus) -> RevealedShare:
        if status is PeerStatus.SURVIVED:
            return RevealedShare(owner, ShareKind.SELF_MASK_SEED, self.seed_share)
        return RevealedShare(owner, ShareKind.MASK_KEY, self.key_share)


def _refuse(refusal: Refusal, detail: str) -> RemoteProtocolError:
    return RemoteProtocolError(refusal, detail)


def _agree(private_key: X25519PrivateKey, peer_public_key: bytes, peer: int) -> bytes:
    """X25519 with a peer's advertised key; a malformed or low-order key is refused."""
    try:
        return primitives.exchange(private_key, peer_public_key)
    except ValueError:
        raise _refuse(Refusal.MALFORMED, f"unusable public key of member {peer}") from None


class SecAggClient:
    """One member in one round. Construct, call ``advertise``, then ``receive`` each
    server message; send what it returns."""

    def __init__(
        self,
        parameters: RoundParameters,
        member: int,
        identity_key: bytes,
        directory: Mapping[int, bytes],
        input_vector: NDArray[np.uint32],
        *,
        expires_at: float = math.inf,
        random: primitives.RandomSource = os.urandom,
    ) -> None:
        check_member_id(member)
        vector = np.asarray(input_vector)
        if vector.dtype != np.uint32 or vector.shape != (parameters.vector_length,):
            raise LocalProtocolError(
                f"input must be a uint32 vector of length {parameters.vector_length}"
            )
        self.parameters = parameters
        self.member = member
        self.phase = ClientPhase.NEW
        self._identity_key = identity_key
        self._directory = dict(directory)
        self._input = vector.copy()
        self._expires_at = expires_at
        self._random = random
        self._cipher_key = primitives.generate_agreement_key(random)
        self._mask_key = primitives.generate_agreement_key(random)
        self._cipher_agreement = primitives.load_agreement_key(self._cipher_key)
        self._seed = random(primitives.KEY_SIZE)
        self._session = b""
        self._graph: NeighbourGraph | None = None
        self._roster: dict[int, RosterEntry] = {}
        self._held: dict[int, _HeldShares] = {}
        self._survivors: tuple[int, ...] = ()

    # --- driving --------------------------------------------------------------------

    def advertise(self, now: float) -> AdvertiseKeys:
        """Round 0: the signed public keys of this member."""
        self._expect(ClientPhase.NEW, "advertise")
        self._check_time(now)
        cipher_public = primitives.public_agreement_key(self._cipher_key)
        mask_public = primitives.public_agreement_key(self._mask_key)
        payload = transcript.advert_payload(
            self.parameters.round, self.member, cipher_public, mask_public
        )
        self.phase = ClientPhase.ADVERTISED
        return AdvertiseKeys(
            round=self.parameters.round,
            sender=self.member,
            cipher_public_key=cipher_public,
            mask_public_key=mask_public,
            signature=primitives.sign(self._identity_key, payload),
        )

    def receive(self, message: ServerMessage, now: float) -> ClientMessage:
        """The reply to one server message; ``RemoteProtocolError`` if refused."""
        if self.phase in (ClientPhase.FAILED, ClientPhase.DONE):
            raise LocalProtocolError(f"client is {self.phase.value}; start a new round")
        try:
            self._check_time(now)
            if message.round != self.parameters.round:
                raise _refuse(Refusal.WRONG_ROUND, f"round {message.round}")
            if message.recipient != self.member:
                raise _refuse(Refusal.WRONG_RECIPIENT, f"recipient {message.recipient}")
            if isinstance(message, ShareKeysRequest) and self.phase is ClientPhase.ADVERTISED:
                return self._share_keys(message)
            if message.session_id != self._session:
                raise _refuse(Refusal.WRONG_SESSION, "session id differs from the roster's")
            if isinstance(message, MaskedInputRequest) and self.phase is ClientPhase.SHARED:
                return self._masked_input(message)
            if isinstance(message, ConsistencyCheckRequest) and self.phase is ClientPhase.MASKED:
                return self._sign_survivors(message)
            if isinstance(message, UnmaskRequest) and self.phase is ClientPhase.SIGNED:
                return self._unmask(message)
            raise _refuse(
                Refusal.UNEXPECTED_MESSAGE, f"{type(message).__name__} in {self.phase.value}"
            )
        except RemoteProtocolError:
            self.phase = ClientPhase.FAILED
            raise

    # --- phases ---------------------------------------------------------------------

    def _share_keys(self, message: ShareKeysRequest) -> EncryptedShares:
        roster = message.roster
        members = [entry.member for entry in roster]
        if len(set(members)) != len(members):
            raise _refuse(Refusal.DUPLICATE_MEMBER, "roster lists a member twice")
        if len(roster) < self.parameters.threshold:
            raise _refuse(
                Refusal.BELOW_THRESHOLD,
                f"roster of {len(roster)} < t={self.parameters.threshold}",
            )
        for entry in roster:
            if entry.member not in self._directory:
                raise _refuse(Refusal.UNKNOWN_MEMBER, f"member {entry.member}")
            self._roster[entry.member] = entry
        own = (
            primitives.public_agreement_key(self._cipher_key),
            primitives.public_agreement_key(self._mask_key),
        )
        mine = self._roster.get(self.member)
        if mine is None or (mine.cipher_public_key, mine.mask_public_key) != own:
            raise _refuse(Refusal.INCONSISTENT_LISTS, "roster misstates this member's keys")
        session = transcript.session_id(self.parameters, roster)
        if message.session_id != session:
            raise _refuse(Refusal.WRONG_SESSION, "session id does not hash the roster")
        self._session = session
        graph = build_graph(self.parameters, tuple(sorted(members)), session)
        # only the keys of neighbours are used, so only theirs need verifying (SecAgg+:
        # O(log n) signatures per member; the full graph verifies everyone)
        for entry in roster:
            if graph.are_neighbours(self.member, entry.member):
                self._verify_advert(entry)
        self._graph = graph
        holders = graph.share_holders(self.member)
        shares = shamir.split([self._mask_key, self._seed], graph.threshold, holders, self._random)
        encrypted = []
        for holder, row in zip(holders, shares, strict=True):
            held = _HeldShares(shamir.encode_share(row[0]), shamir.encode_share(row[1]))
            if holder == self.member:
                self._held[holder] = held
                continue
            key = transcript.share_encryption_key(
                _agree(self._cipher_agreement, self._roster[holder].cipher_public_key, holder),
                session,
                self.parameters.round,
                self.member,
                holder,
            )
            plaintext = transcript.share_plaintext(held.key_share, held.seed_share)
            associated = transcript.share_associated_data(
                self.member, holder, session, self.parameters.round
            )
            ciphertext = primitives.encrypt_single_use(key, plaintext, associated)
            encrypted.append(EncryptedShare(self.member, holder, ciphertext))
        self.phase = ClientPhase.SHARED
        return EncryptedShares(self.parameters.round, session, self.member, tuple(encrypted))

    def _verify_advert(self, entry: RosterEntry) -> None:
        payload = transcript.advert_payload(
            self.parameters.round, entry.member, entry.cipher_public_key, entry.mask_public_key
        )
        if not primitives.verify(self._directory[entry.member], entry.signature, payload):
            raise _refuse(Refusal.BAD_SIGNATURE, f"advert of member {entry.member}")

    def _masked_input(self, message: MaskedInputRequest) -> MaskedInput:
        graph = self._require_graph()
        for share in message.shares:
            if share.recipient != self.member:
                raise _refuse(Refusal.WRONG_RECIPIENT, f"share for {share.recipient}")
            if not graph.are_neighbours(self.member, share.sender):
                raise _refuse(Refusal.UNKNOWN_MEMBER, f"share from non-neighbour {share.sender}")
            if share.sender in self._held:
                raise _refuse(Refusal.DUPLICATE_MEMBER, f"two shares from {share.sender}")
            self._held[share.sender] = self._decrypt_share(share)
        if len(self._held) < graph.threshold:
            raise _refuse(
                Refusal.BELOW_THRESHOLD,
                f"{len(self._held)} members shared with this one < t={graph.threshold}",
            )
        length = self.parameters.vector_length
        masked = self._input + transcript.self_mask(
            self._seed, self._session, self.parameters.round, length
        )
        mask_key = primitives.load_agreement_key(self._mask_key)
        for peer in self._held:
            if peer == self.member:
                continue
            secret = _agree(mask_key, self._roster[peer].mask_public_key, peer)
            mask = transcript.pairwise_mask(
                secret, self._session, self.parameters.round, self.member, peer, length
            )
            masked = masked + mask if peer > self.member else masked - mask
        self.phase = ClientPhase.MASKED
        return MaskedInput(self.parameters.round, self._session, self.member, masked)

    def _decrypt_share(self, share: EncryptedShare) -> _HeldShares:
        key = transcript.share_encryption_key(
            _agree(
                self._cipher_agreement, self._roster[share.sender].cipher_public_key, share.sender
            ),
            self._session,
            self.parameters.round,
            share.sender,
            self.member,
        )
        associated = transcript.share_associated_data(
            share.sender, self.member, self._session, self.parameters.round
        )
        try:
            plaintext = primitives.decrypt_single_use(key, share.ciphertext, associated)
            key_share, seed_share = transcript.parse_share_plaintext(plaintext)
            shamir.decode_share(key_share)
            shamir.decode_share(seed_share)
        except primitives.DecryptionError:
            raise _refuse(Refusal.DECRYPTION_FAILED, f"share from {share.sender}") from None
        except ValueError:
            raise _refuse(Refusal.MALFORMED, f"share from {share.sender}") from None
        return _HeldShares(key_share, seed_share)

    def _sign_survivors(self, message: ConsistencyCheckRequest) -> SurvivorSignature:
        graph = self._require_graph()
        survivors = message.survivors
        self._check_member_list(survivors, "survivor")
        if self.member not in survivors:
            raise _refuse(Refusal.INCONSISTENT_LISTS, "this member is missing from survivors")
        if len(survivors) < self.parameters.threshold:
            raise _refuse(
                Refusal.BELOW_THRESHOLD,
                f"{len(survivors)} survivors < t={self.parameters.threshold}",
            )
        unseen = {
            s for s in survivors if s not in self._held and graph.are_neighbours(self.member, s)
        }
        if unseen:
            raise _refuse(
                Refusal.INCONSISTENT_LISTS, f"survivors {sorted(unseen)} never shared here"
            )
        self._survivors = tuple(sorted(survivors))
        payload = transcript.survivors_payload(
            self._session, self.parameters.round, self._survivors
        )
        self.phase = ClientPhase.SIGNED
        return SurvivorSignature(
            self.parameters.round,
            self._session,
            self.member,
            primitives.sign(self._identity_key, payload),
        )

    def _unmask(self, message: UnmaskRequest) -> UnmaskResponse:
        graph = self._require_graph()
        survivors, dropped = set(message.survivors), set(message.dropped)
        self._check_member_list(message.survivors, "survivor")
        self._check_member_list(message.dropped, "dropout")
        if survivors & dropped:
            raise _refuse(
                Refusal.OVERLAPPING_LISTS, f"both lists name {sorted(survivors & dropped)}"
            )
        if tuple(sorted(survivors)) != self._survivors:
            raise _refuse(Refusal.INCONSISTENT_LISTS, "survivors differ from the list signed")
        expected_dropped = set(self._held) - survivors
        dropped_here = {w for w in dropped if graph.are_neighbours(self.member, w)}
        if dropped_here != expected_dropped:
            raise _refuse(
                Refusal.INCONSISTENT_LISTS, "dropouts differ from the neighbours that shared"
            )
        self._check_survivor_signatures(message, graph)
        statuses: dict[int, PeerStatus] = {}
        for owner in sorted(self._held):
            statuses[owner] = (
                PeerStatus.SURVIVED if owner in survivors else PeerStatus.DROPPED_AFTER_SHARING
            )
        revealed = tuple(
            self._held[owner].reveal(owner, status) for owner, status in statuses.items()
        )
        self._held.clear()
        self.phase = ClientPhase.DONE
        return UnmaskResponse(self.parameters.round, self._session, self.member, revealed)

    def _check_survivor_signatures(self, message: UnmaskRequest, graph: NeighbourGraph) -> None:
        """At least t distinct survivors signed; of the signatures of this member's closed
        neighbourhood, the first ``graph.threshold`` are verified, and must all be valid.

        On the complete graph that is t valid signatures on the one survivor list this
        member signed (Bonawitz et al. 2017, round 3: t suffice, more add nothing); on
        SecAgg+ the neighbourhood's, whose shares are the only ones this member reveals
        (Bell et al. 2020). The argument is in docs/secure-aggregation.md."""
        survivors = frozenset(self._survivors)
        signers: set[int] = set()
        for item in message.signatures:
            if item.member in signers:
                raise _refuse(Refusal.DUPLICATE_MEMBER, f"two signatures of {item.member}")
            if item.member not in survivors:
                raise _refuse(Refusal.UNKNOWN_MEMBER, f"signature of non-survivor {item.member}")
            signers.add(item.member)
        if len(signers) < self.parameters.threshold:
            raise _refuse(
                Refusal.BELOW_THRESHOLD,
                f"{len(signers)} survivor signatures < t={self.parameters.threshold}",
            )
        payload = transcript.survivors_payload(
            self._session, self.parameters.round, self._survivors
        )
        needed = graph.threshold
        valid = 0
        for item in message.signatures:
            if valid >= needed:
                return
            if item.member != self.member and not graph.are_neighbours(self.member, item.member):
                continue
            identity = self._directory[item.member]
            if not primitives.verify(identity, item.signature, payload):
                raise _refuse(Refusal.BAD_SIGNATURE, f"survivor signature of {item.member}")
            valid += 1
        if valid < needed:
            raise _refuse(
                Refusal.BELOW_THRESHOLD,
                f"{valid} neighbourhood survivor signatures < t={needed}",
            )

    # --- helpers --------------------------------------------------------------------

    def _check_member_list(self, members: tuple[int, ...], what: str) -> None:
        if len(set(members)) != len(members):
            raise _refuse(Refusal.DUPLICATE_MEMBER, f"{what} list names a member twice")
        unknown = set(members) - self._roster.keys()
        if unknown:
            raise _refuse(Refusal.UNKNOWN_MEMBER, f"{what}s {sorted(unknown)} not in roster")

    def _require_graph(self) -> NeighbourGraph:
        if self._graph is None:
            raise LocalProtocolError("no roster yet")
        return self._graph

    def _expect(self, phase: ClientPhase, action: str) -> None:
        if self.phase is not phase:
            raise LocalProtocolError(f"cannot {action} in phase {self.phase.value}")

    def _check_time(self, now: float) -> None:
        if now > self._expires_at:
            raise _refuse(Refusal.EXPIRED, f"now={now} > expires_at={self._expires_at}")
