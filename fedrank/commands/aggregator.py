"""Run the aggregator (DESIGN.md section 5, "The round over RabbitMQ"; section 7, state).

Runs rounds over RabbitMQ: announce, check-in, cohort, secure aggregation, quorum,
Rprop step with safeguards, publish; writes its state and one JSON line per round to
the round log in --state DIR (read it with `fedrank rounds --state DIR`). Every flag
has an environment variable (shown in brackets) whose value is the default. The
check-in window opens at the first check-in and closes after --check-in-seconds or
once --cohort participants have checked in; each secure-aggregation phase then lasts
at most --phase-seconds and ends early when every member has answered.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from aggregator.config import CoordinatorConfig
from aggregator.optimizer import RpropConfig
from aggregator.state import StateDirectory, StateError
from broker.messages import LearningObjective, PrivacySettings

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def _env(name: str, default: str | None = None) -> str | None:
    """The environment's value as the flag's default; argparse applies the flag's type
    to a string default, so a bad value is a one-line usage error."""
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _env_flag(name: str) -> bool | None:
    value = _env(name)
    if value is None:
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    flag = argparse.BooleanOptionalAction
    add("--amqp", default=_env("FEDRANK_AMQP_URL", DEFAULT_AMQP_URL), metavar="URL",
        help="broker URL [FEDRANK_AMQP_URL, default "
        + DEFAULT_AMQP_URL.replace("%", "%%") + "]")  # fmt: skip
    add("--state", type=Path, default=_env("FEDRANK_STATE"), metavar="DIR",
        help="state directory: state.json, rounds.jsonl, signing key [FEDRANK_STATE]")  # fmt: skip
    add("--rounds", type=int, default=_env("FEDRANK_ROUNDS", "0"), metavar="R",
        help="stop after R completed rounds; 0 runs until stopped [FEDRANK_ROUNDS, 0]")  # fmt: skip
    add("--cohort", type=int, default=_env("FEDRANK_COHORT", "10"), metavar="K",
        help="cohort size: participants per round [FEDRANK_COHORT, 10]")  # fmt: skip
    add("--quorum", type=int, default=_env("FEDRANK_QUORUM"), metavar="T",
        help="quorum t: members needed at every phase, also the Shamir threshold "
        "[FEDRANK_QUORUM, default ceil(0.6 K)]")  # fmt: skip
    add("--min-checkins", type=int, default=_env("FEDRANK_MIN_CHECKINS"), metavar="N",
        help="check-ins needed to start the secure round "
        "[FEDRANK_MIN_CHECKINS, the quorum]")  # fmt: skip
    add("--check-in-seconds", type=float, default=_env("FEDRANK_CHECK_IN_SECONDS", "5"),
        help="check-in window from the first check-in [FEDRANK_CHECK_IN_SECONDS, 5]")  # fmt: skip
    add("--phase-seconds", type=float, default=_env("FEDRANK_PHASE_SECONDS", "10"),
        help="deadline of each secure-aggregation phase [FEDRANK_PHASE_SECONDS, 10]")  # fmt: skip
    add("--reannounce-seconds", type=float, default=_env("FEDRANK_REANNOUNCE_SECONDS", "2"),
        help="re-announce this often while nobody has checked in "
        "[FEDRANK_REANNOUNCE_SECONDS, 2]")  # fmt: skip
    add("--secagg-plus", action=flag, default=bool(_env_flag("FEDRANK_SECAGG_PLUS")),
        help="SecAgg+: mask with O(log n) neighbours [FEDRANK_SECAGG_PLUS, off]")  # fmt: skip
    add("--degree", type=int, default=_env("FEDRANK_DEGREE"), metavar="K",
        help="SecAgg+ neighbours per member [FEDRANK_DEGREE, about 2 log2 n]")  # fmt: skip
    add("--dp", choices=("none", "rr", "skellam"), default=_env("FEDRANK_DP", "none"),
        help="differential privacy: none, randomized response on votes (local), or "
        "Skellam noise in the secure sum (central) [FEDRANK_DP, none]")  # fmt: skip
    add("--rr-epsilon", type=float, default=_env("FEDRANK_RR_EPSILON", "1.0"),
        help="--dp rr: epsilon per vote coordinate per round "
        "[FEDRANK_RR_EPSILON, 1.0]")  # fmt: skip
    add("--skellam-variance", type=float, default=_env("FEDRANK_SKELLAM_VARIANCE", "4.0"),
        help="--dp skellam: noise variance each member adds per coordinate "
        "[FEDRANK_SKELLAM_VARIANCE, 4.0]")  # fmt: skip
    add("--dp-delta", type=float, default=_env("FEDRANK_DP_DELTA", "1e-6"),
        help="delta of the privacy accounting [FEDRANK_DP_DELTA, 1e-6]")  # fmt: skip
    add("--model", choices=("firefox-2018", "firefox-current"),
        default=_env("FEDRANK_MODEL", "firefox-2018"),
        help="the model trained [FEDRANK_MODEL, firefox-2018]")  # fmt: skip
    add("--optimizer", choices=("relative", "deployed"),
        default=_env("FEDRANK_OPTIMIZER", "relative"),
        help="Rprop steps in log space (relative) or in weight units as in 2018 (deployed) "
        "[FEDRANK_OPTIMIZER, relative]")  # fmt: skip
    add("--loss", choices=("relative", "svm"), default=_env("FEDRANK_LOSS", "relative"),
        help="the loss participants vote with: relative (scale-free SVM) or svm (as shipped "
        "in 2018) [FEDRANK_LOSS, relative]")  # fmt: skip
    add("--margin", type=float, default=_env("FEDRANK_MARGIN", "0"),
        help="SVM ranking margin [FEDRANK_MARGIN, 0]")  # fmt: skip
    add("--trust-broker-user-ids", action=flag, default=_env_flag("FEDRANK_TRUST_BROKER_USER_IDS"),
        help="require each message's broker user to be participant-<its id> "
        "[FEDRANK_TRUST_BROKER_USER_IDS, on unless the aggregator's user is guest]")  # fmt: skip
    add("--export-key", action="store_true",
        help="print the public key participants pin (PEM), made if needed, and exit")  # fmt: skip
    add("--connect-attempts", type=int, default=_env("FEDRANK_CONNECT_ATTEMPTS", "8"),
        metavar="N", help="broker connection attempts (with backoff) before giving up "
        "[FEDRANK_CONNECT_ATTEMPTS, 8]")  # fmt: skip
    add("--log-level", default=_env("FEDRANK_LOG_LEVEL", "INFO"),
        help="logging level [FEDRANK_LOG_LEVEL, INFO]")  # fmt: skip


def _fail(message: str, code: int = 2) -> int:
    print(f"fedrank aggregator: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # fedrank.broker reports
    if args.state is None:
        return _fail("--state DIR is required (or set FEDRANK_STATE)")
    state = StateDirectory(Path(args.state))
    try:
        if args.export_key:
            return _export_key(state)
        config = _config(args)
        state.ensure()
    except StateError as error:
        return _fail(str(error))
    except ValueError as error:
        return _fail(f"bad setting: {error}")
    return _serve(args, state, config)


def _export_key(state: StateDirectory) -> int:
    from aggregator.signing import load_or_create_signing_key, public_key_pem

    state.ensure()
    print(public_key_pem(load_or_create_signing_key(state.signing_key_file)), end="")
    return 0


def _config(args: argparse.Namespace) -> CoordinatorConfig:
    from broker.rabbitmq import RabbitMQSettings

    quorum = args.quorum if args.quorum is not None else max(1, math.ceil(0.6 * args.cohort))
    if args.dp == "rr":
        privacy = PrivacySettings(mode="rr", rr_epsilon=args.rr_epsilon, delta=args.dp_delta)
    elif args.dp == "skellam":
        privacy = PrivacySettings(
            mode="skellam", skellam_variance=args.skellam_variance, delta=args.dp_delta
        )
    else:
        privacy = PrivacySettings(delta=args.dp_delta)
    check_users = args.trust_broker_user_ids
    if check_users is None:
        check_users = RabbitMQSettings.from_url(args.amqp).username != "guest"
    optimizer = RpropConfig.deployed() if args.optimizer == "deployed" else RpropConfig.default()
    return CoordinatorConfig(
        model=args.model,
        cohort_size=args.cohort,
        quorum=quorum,
        min_checkins=args.min_checkins,
        check_in_seconds=args.check_in_seconds,
        phase_seconds=args.phase_seconds,
        reannounce_seconds=args.reannounce_seconds,
        secagg_plus=args.secagg_plus,
        degree=args.degree,
        privacy=privacy,
        objective=LearningObjective(loss=args.loss, margin=args.margin),
        optimizer=optimizer,
        check_user_ids=check_users,
    )


def _serve(args: argparse.Namespace, state: StateDirectory, config: CoordinatorConfig) -> int:
    from aggregator.service import AggregatorService, ServiceOptions
    from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
    from broker.transport import BrokerError

    stop = threading.Event()
    _on_signals(stop.set)
    try:
        settings = RabbitMQSettings.from_url(
            args.amqp, reconnect_attempts=max(1, args.connect_attempts)
        )
        transport = RabbitMQTransport(settings)
    except ValueError as error:
        return _fail(f"bad --amqp URL: {error}")
    except BrokerError as error:
        return _fail(f"cannot reach the broker: {error}", 3)
    try:
        service = AggregatorService(
            transport, state, config, ServiceOptions(rounds=args.rounds), stop=stop
        )
        service.run()
    except StateError as error:
        return _fail(str(error))
    except BrokerError as error:
        return _fail(f"broker refused the aggregator: {error}", 3)
    finally:
        try:
            transport.close()
        except BrokerError:
            logging.getLogger("fedrank.aggregator").debug("close failed", exc_info=True)
    return 0


def _on_signals(handler: Callable[[], None]) -> None:
    def on_signal(number: int, _frame: FrameType | None) -> None:
        logging.getLogger("fedrank.aggregator").info(
            "signal %s: stopping", signal.Signals(number).name
        )
        handler()

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
