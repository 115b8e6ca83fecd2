"""Bad input against the running stack (the stack issue, "What must hold"; DESIGN.md
section 7: "every message is size-limited, schema-validated and checked against the
current round and phase; anything else is rejected, logged and acked away").

While the real aggregator and participants run rounds on a fresh vhost, the test
publishes, as a broker user with every right on the vhost (a stand-in for a compromised
or buggy peer):

- to the aggregator (``fedrank.submit``): garbage bytes, a message of a known kind that
  fails its schema, an oversized message, a check-in for a round that is not the current
  one, and a replay of a real participant's round-1 message during a later round;
- to every participant (``fedrank.model``): garbage bytes, an unsigned model
  announcement and one signed with a key that is not the pinned one.

Each is rejected with a reason in the receiving process's log, nobody crashes, the
participants keep the model they had, and the next round completes.

And a participant that poisons its secure input (a vote coordinate of 1000): the unmasked
total breaks the poisoning bound |v_k| <= survivors, so the round aborts with that reason
and the model does not change (DESIGN.md section 4).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest

from broker.codec import PROTOCOL_VERSION, encode
from broker.messages import CheckIn, ModelAnnouncement, sign_announcement
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.topology import MODEL_EXCHANGE, SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY
from crypto.hazmat import primitives
from tests.integration.stack import StackProcess, running_stack
from tests.integration.stack_wire import DirectTap
from tests.integration.test_stack_run import FAST, start_participants_then_aggregator

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(180)]

PROCESSES = 6
REJECTED = re.compile(r"reject", re.IGNORECASE)


def _count(process: StackProcess, pattern: re.Pattern[str]) -> int:
    return sum(1 for line in process.log().splitlines() if pattern.search(line))


def _forged_announcement(template: bytes, private_key: bytes | None) -> bytes:
    """The real announcement ``template`` re-signed with ``private_key`` (None: unsigned),
    with weights the aggregator never published."""
    from broker.codec import decode

    real = decode(template, ModelAnnouncement)
    assert isinstance(real, ModelAnnouncement)
    forged = real.model_copy(
        update={
            "round": real.round + 1,
            "model_version": real.model_version + 1,
            "weights": tuple(w + 7.0 for w in real.weights),
            "signature": b"",
        }
    )
    if private_key is not None:
        forged = sign_announcement(private_key, forged)
    return encode(forged)


def test_bad_input_is_rejected_with_a_reason_and_rounds_go_on(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        vhost = stack.amqp_url.rsplit("/", 1)[1]
        taps: list[DirectTap] = []

        def install_tap() -> None:
            taps.append(DirectTap(stack.amqp_url, {}, lambda _victim: None))
            taps[0].install()

        start_participants_then_aggregator(
            stack,
            vhost,
            PROCESSES,
            "--cohort",
            str(PROCESSES),
            "--quorum",
            "4",
            *FAST,
            before_aggregator=install_tap,
        )
        tap = taps[0]
        aggregator = stack.processes[-1]
        participants = stack.processes[:-1]
        try:
            first = stack.wait_rounds(1, timeout=90)
            last_round = max(r.round for r in first)
            # A real round-1 submission to replay later, and the real announcement to forge.
            round_one = [
                body for body in tap.submitted if msgpack.unpackb(body)[2].get("round") == 1
            ]
            assert round_one, "no round-1 submission was captured"
            announcement = stack.wait_for(
                "an announcement on the wire",
                lambda: _latest_announcement(stack.amqp_url),
                timeout=30,
            )
            rejected_before = _count(aggregator, REJECTED)
            with RabbitMQTransport(RabbitMQSettings.from_url(stack.amqp_url)) as attacker:
                to_aggregator = [
                    b"\x00\xffnot msgpack at all",
                    msgpack.packb([PROTOCOL_VERSION, "check-in", {"round": 1, "bogus": True}]),
                    msgpack.packb(
                        [
                            PROTOCOL_VERSION,
                            "check-in",
                            {
                                "round": last_round + 1,
                                "session": b"",
                                "participant_id": "intruder-0",
                                "identity_key": b"\x01" * 4096,
                                "model_version": 1,
                            },
                        ]
                    ),
                    encode(
                        CheckIn(
                            round=10_000,
                            participant_id="intruder-1",
                            identity_key=primitives.public_signing_key(
                                primitives.generate_signing_key()
                            ),
                            model_version=0,
                        )
                    ),
                    round_one[0],
                ]
                for body in to_aggregator:
                    attacker.publish_bytes(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, body)
                stranger = primitives.generate_signing_key()
                for body in (
                    b"garbage to every participant",
                    _forged_announcement(announcement, None),
                    _forged_announcement(announcement, stranger),
                ):
                    attacker.publish_bytes(MODEL_EXCHANGE, "", body)

            # One logged reason per bad message (the receive edge's, then the round's).
            for reason in (
                r"rejected .*: not a msgpack",
                r"rejected .*: check-in fails its schema",
                r"rejected .*: check-in of \d+ bytes exceeds its cap",
                r"rejected check-in from participant intruder-1 .*wrong round",
                r"rejected \S+ from participant p\d+-0 .*wrong round: \S+ for round 1$",
            ):
                stack.wait_log(aggregator, reason, timeout=60)
            assert _count(aggregator, REJECTED) >= rejected_before + len(to_aggregator)
            for participant in participants:
                stack.wait_log(participant, r"refused model announcement .*unsigned", 30)
                stack.wait_log(participant, r"refused model announcement .*does not verify", 30)
                stack.wait_log(participant, r"(?i)reject.*fedrank\.participant\.", 30)
            after = stack.wait_for(
                "a round completed after the bad input",
                lambda: (
                    [
                        r
                        for r in stack.records()
                        if r.outcome == "completed" and r.round > last_round
                    ]
                    or None
                ),
                timeout=90,
            )
        finally:
            tap.close()
        assert all(p.running() for p in stack.processes), stack.logs_text()
        logs = {p.name: p.log() for p in stack.processes}
        stack.stop_all()

    # Nobody adopted the forged weights: the next round started from the real model.
    assert after[0].weights_before == first[-1].weights_after
    assert after[0].version_before == first[-1].version_after
    for name, text in logs.items():
        assert "Traceback" not in text, f"{name} crashed:\n{text[-3000:]}"


def _latest_announcement(amqp_url: str) -> bytes | None:
    """The aggregator's current announcement, as a late joiner gets it: a ModelRequest
    answered on ``fedrank.direct`` to a throwaway participant id."""
    from broker.messages import ModelRequest
    from broker.topology import declare_participant, participant_queue

    settings = RabbitMQSettings.from_url(amqp_url)
    with RabbitMQTransport(settings) as observer:
        declare_participant(observer, "observer-0")
        observer.publish(
            SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, ModelRequest(round=0, participant_id="observer-0")
        )
        deadline_polls = 40
        for _ in range(deadline_polls):
            delivery = observer.get(participant_queue("observer-0"), timeout=0.25)
            if delivery is None:
                continue
            observer.ack(delivery)
            if msgpack.unpackb(delivery.body)[1] == "model-announcement":
                return delivery.body
    return None


#: A participant whose secure input adds 1000 to the first vote coordinate (in Z_2^32),
#: far outside what a ternary vote can be: the real `fedrank participant` with its input
#: encoder wrapped. Secure aggregation hides who did it; the sum gives it away.
POISONED_PARTICIPANT = """
import sys
import numpy as np
import participant.session as session
honest = session.encode_input
def poisoned(vote, metrics):
    encoded = np.array(honest(vote, metrics), dtype=np.uint32, copy=True)
    encoded[0] = np.uint32((int(encoded[0]) + 1000) % 2**32)
    return encoded
session.encode_input = poisoned
from fedrank.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_vote_total_outside_the_bound_aborts_the_round_model_unchanged(
    tmp_path: Path,
) -> None:
    with running_stack(tmp_path) as stack:
        vhost = stack.amqp_url.rsplit("/", 1)[1]

        def start_attacker() -> None:
            # Joins late (after the honest queues are bound); its model request waits in
            # the aggregator's queue like everyone else's.
            argv = stack.command(
                "participant",
                "--aggregator-key",
                str(stack.key_file),
                "--synthetic",
                "99",
                "--id",
                "mallory",
            )
            stack.spawn("participant-mallory", [argv[0], "-c", POISONED_PARTICIPANT, *argv[3:]])

        start_participants_then_aggregator(
            stack,
            vhost,
            5,
            "--cohort",
            "6",
            "--quorum",
            "4",
            *FAST,
            before_aggregator=start_attacker,
        )
        aggregator = stack.processes[-1]
        records = stack.wait_rounds(1, timeout=90, outcome=None)
        state = stack.state()
        assert aggregator.running(), stack.logs_text()
        stack.stop_all()

    first = records[0]
    assert "mallory-0" in first.survivor_ids, "the attacker was not in the sum"
    assert first.outcome == "aborted", first
    assert first.abort_reason is not None and "poisoning bound" in first.abort_reason
    assert "coordinate 0" in first.abort_reason
    assert first.version_after == first.version_before == 0
    assert first.weights_after == first.weights_before
    assert state is None or state.version == 0
