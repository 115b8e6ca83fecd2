"""Run one or many participants (DESIGN.md sections 3, 5 and 6; docs/participant.md).

Each participant turns its URL-bar interactions into a vote on the announced model and
takes part in the round's secure aggregation over RabbitMQ. History: ``--synthetic SEED``
(a person of the simulation's population model, browsing a little every round) or
``--places FILE`` (a Firefox profile's input history). ``--count N`` runs N
participants ``<id>-0 .. <id>-<N-1>`` in one process over one connection.

The aggregator's public key (``fedrank aggregator --export-key``) is pinned with
``--aggregator-key``: announcements and invitations signed otherwise are refused.
``--state DIR`` keeps each participant's identity key and privacy ledger across runs.
Exits 0 when stopped (SIGTERM / SIGINT) or after ``--rounds R``; 2 with a one-line reason
when it cannot start.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from participant.runner import ParticipantRunner

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
PARTICIPANT_USER_PREFIX = "participant-"
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class CommandError(Exception):
    """A one-line reason not to start."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--amqp",
        default=os.environ.get("FEDRANK_AMQP_URL", DEFAULT_AMQP_URL),
        metavar="URL",
        help="broker URL (default: $FEDRANK_AMQP_URL, else the local broker as guest)",
    )
    parser.add_argument(
        "--aggregator-key",
        required=True,
        type=Path,
        metavar="FILE",
        help="the aggregator's Ed25519 public key, as `fedrank aggregator --export-key` prints",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--synthetic", type=int, metavar="SEED", help="a synthetic person")
    source.add_argument("--places", type=Path, metavar="FILE", help="a Firefox places.sqlite")
    parser.add_argument("--count", type=int, default=1, metavar="N", help="participants (1)")
    parser.add_argument(
        "--id",
        dest="id_prefix",
        metavar="PREFIX",
        help="participant ids are PREFIX-0 .. PREFIX-(N-1) (default: host name and pid; "
        "with a participant-<id> broker user: that id)",
    )
    parser.add_argument("--state", type=Path, metavar="DIR", help="keep keys and ledgers here")
    parser.add_argument(
        "--rounds", type=int, metavar="R", help="exit after R rounds (default: run until stopped)"
    )
    parser.add_argument(
        "--interactions-per-round",
        type=int,
        metavar="K",
        help="synthetic: URL-bar uses per round (default: int(Exponential(0.8)) + 1)",
    )
    parser.add_argument(
        "--dp-budget",
        metavar="EPS,DELTA",
        help="stop voting once this (epsilon, delta) privacy budget is spent",
    )
    parser.add_argument(
        "--connect-attempts",
        type=int,
        default=8,
        metavar="N",
        help="broker connection attempts (exponential backoff) before giving up (8)",
    )
    parser.add_argument("--model", default="firefox-2018", help="the model trained")
    parser.add_argument("--log-level", default="INFO", help="logging level (INFO)")


def _parse_budget(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        epsilon, delta = (float(part) for part in text.split(","))
    except ValueError:
        raise CommandError(f"--dp-budget {text!r}: expected EPSILON,DELTA") from None
    if not epsilon > 0 or not 0 < delta < 1:
        raise CommandError(f"--dp-budget {text!r}: need epsilon > 0 and 0 < delta < 1")
    return epsilon, delta


def _default_prefix() -> str:
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}"


def participant_ids(prefix: str, count: int) -> list[str]:
    """``prefix-0 .. prefix-(count-1)``, each a valid participant id."""
    from broker.topology import check_participant_id

    try:
        return [check_participant_id(f"{prefix}-{i}") for i in range(count)]
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _build(args: argparse.Namespace) -> ParticipantRunner:
    """The runner, with every participant loaded; CommandError if it cannot be."""
    from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
    from crypto.accountant import PrivacyBudget
    from frecency.places import NotAPlacesDatabase
    from frecency.registry import get_model
    from participant.history import HistorySource, PlacesSource, SyntheticHistory, SyntheticPerson
    from participant.runner import ParticipantRunner, RunnerConfig
    from participant.session import ParticipantSession, SessionConfig
    from participant.state import ParticipantStore, StateError, load_aggregator_key

    if args.count < 1:
        raise CommandError("--count must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        raise CommandError("--rounds must be at least 1")
    if args.interactions_per_round is not None and args.interactions_per_round < 1:
        raise CommandError("--interactions-per-round must be at least 1")
    if args.synthetic is not None and args.synthetic < 0:
        raise CommandError("--synthetic SEED must be >= 0")
    budget_values = _parse_budget(args.dp_budget)
    budget = None if budget_values is None else PrivacyBudget(*budget_values)
    try:
        settings = RabbitMQSettings.from_url(
            args.amqp, reconnect_attempts=max(1, args.connect_attempts)
        )
        model = get_model(args.model)
        aggregator_key = load_aggregator_key(args.aggregator_key)
    except (ValueError, KeyError, StateError) as exc:
        raise CommandError(str(exc).strip("'\"")) from None
    own_user = settings.username.startswith(PARTICIPANT_USER_PREFIX)
    if own_user:
        user_id = settings.username.removeprefix(PARTICIPANT_USER_PREFIX)
        if args.count != 1 or (args.id_prefix is not None and args.id_prefix != user_id):
            raise CommandError(
                f"broker user {settings.username} is one participant: use --count 1 "
                f"and no other --id than {user_id}"
            )
        ids = [user_id]
    else:
        ids = participant_ids(args.id_prefix or _default_prefix(), args.count)
    sessions = []
    for participant_id in ids:
        store = ParticipantStore(args.state, participant_id)
        try:
            record = store.load(budget)
            history: HistorySource
            if args.places is not None:
                history = PlacesSource(args.places, model, record.places_contributed)
            else:
                person = SyntheticPerson(
                    args.synthetic, participant_id, model, args.interactions_per_round
                )
                history = SyntheticHistory(person)
        except StateError as exc:
            raise CommandError(str(exc)) from None
        except (NotAPlacesDatabase, OSError) as exc:
            raise CommandError(f"--places {args.places}: {exc}") from None
        sessions.append(
            ParticipantSession(
                SessionConfig(participant_id, aggregator_key),
                history,
                record,
                persist=store.save,
            )
        )
    return ParticipantRunner(
        sessions,
        lambda: RabbitMQTransport(settings),
        RunnerConfig(rounds=args.rounds, declare_queues=not own_user),
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # fedrank.broker reports
    from broker.transport import BrokerError

    try:
        runner = _build(args)
        runner.open()
    except CommandError as exc:
        print(f"fedrank participant: {exc}", file=sys.stderr)
        return 2
    except BrokerError as exc:
        print(f"fedrank participant: cannot start: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("fedrank.participant").info("%s: stopping", signal.Signals(signum).name)
        runner.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.getLogger("fedrank.participant").info(
        "%d participant(s) %s running", len(runner.sessions), runner.sessions[0].participant_id
    )
    try:
        runner.run()
    except BrokerError as exc:
        print(f"fedrank participant: broker failed: {exc}", file=sys.stderr)
        return 1
    return 0
