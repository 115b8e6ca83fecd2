#!/usr/bin/env bash
# The stack without Docker (docs/operating.md, "The stack without Docker"): a local
# RabbitMQ (started, or installed from Debian's package when run as root, if none answers),
# one `fedrank aggregator` and N `fedrank participant` processes running R secure rounds
# (DESIGN.md section 5), then the round table and how the model improved on held-out
# synthetic people (characters typed and rank selected, before and after).
#
# Usage: scripts/stack.sh [--processes N] [--per-process M] [--rounds R] [--cohort K]
#                         [--quorum T] [--seed S] [--keep-vhost] [-- extra aggregator flags]
# Environment: FEDRANK_AMQP_URL (use that broker and vhost instead of a fresh local vhost).
# Everything a run writes goes to run/stack-<time>/ (state/, logs/, aggregator.pub).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"

PROCESSES=12        # participant processes
PER_PROCESS=2       # participants per process (--count)
ROUNDS=12
COHORT=16
QUORUM=10
SEED=1
KEEP_VHOST=0
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --processes) PROCESSES="$2"; shift 2 ;;
        --per-process) PER_PROCESS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --cohort) COHORT="$2"; shift 2 ;;
        --quorum) QUORUM="$2"; shift 2 ;;
        --seed) SEED="$2"; shift 2 ;;
        --keep-vhost) KEEP_VHOST=1; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) log "unknown argument $1 (see --help)"; exit 2 ;;
    esac
done

ensure_venv dev
cd "$ROOT"

RUN="run/stack-$(date -u +%Y%m%dT%H%M%SZ)"
STATE="$RUN/state"
LOGS="$RUN/logs"
mkdir -p "$STATE" "$LOGS"

VHOST=""
CHILDREN=()
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for pid in "${CHILDREN[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${CHILDREN[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "$VHOST" ] && [ "$KEEP_VHOST" = 0 ]; then
        rabbitmqctl -q delete_vhost "$VHOST" >/dev/null 2>&1 || true
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${FEDRANK_AMQP_URL:-}" ]; then
    URL="$FEDRANK_AMQP_URL"
    log "using the broker at FEDRANK_AMQP_URL"
else
    ensure_rabbitmq
    VHOST="fedrank-stack-$(date -u +%Y%m%d%H%M%S)-$$"
    rabbitmqctl -q add_vhost "$VHOST" >/dev/null
    rabbitmqctl -q set_permissions -p "$VHOST" guest '.*' '.*' '.*' >/dev/null
    URL="amqp://guest:guest@127.0.0.1:5672/$VHOST"
    log "fresh vhost $VHOST on the local broker"
fi
export FEDRANK_AMQP_URL="$URL"

# The aggregator makes its signing key on first use; participants pin the public key.
fedrank aggregator --state "$STATE" --export-key > "$RUN/aggregator.pub"

log "aggregator: $ROUNDS rounds, cohort $COHORT, quorum $QUORUM (log: $LOGS/aggregator.log)"
fedrank aggregator --state "$STATE" --rounds "$ROUNDS" --cohort "$COHORT" --quorum "$QUORUM" \
    ${EXTRA[@]+"${EXTRA[@]}"} 2> "$LOGS/aggregator.log" &
AGGREGATOR=$!
CHILDREN+=("$AGGREGATOR")

log "participants: $PROCESSES processes x $PER_PROCESS (logs: $LOGS/participant-*.log)"
for i in $(seq 1 "$PROCESSES"); do
    fedrank participant --aggregator-key "$RUN/aggregator.pub" \
        --synthetic "$((SEED * 1000 + i))" --count "$PER_PROCESS" --id "p$i" \
        2> "$LOGS/participant-$i.log" &
    CHILDREN+=("$!")
done

# Watch the rounds as they are logged, until the aggregator has run its rounds.
fedrank rounds --state "$STATE" --follow >&2 &
FOLLOW=$!
CHILDREN+=("$FOLLOW")
set +e
wait "$AGGREGATOR"
AGGREGATOR_STATUS=$?
set -e
kill -TERM "$FOLLOW" 2>/dev/null || true
if [ "$AGGREGATOR_STATUS" != 0 ]; then
    log "the aggregator exited with status $AGGREGATOR_STATUS; last lines of its log:"
    tail -n 20 "$LOGS/aggregator.log" >&2
    exit 1
fi

log "stopping participants"
for pid in "${CHILDREN[@]}"; do
    if [ "$pid" != "$AGGREGATOR" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
done

echo
echo "== rounds ($STATE/rounds.jsonl)"
fedrank rounds --state "$STATE"
echo
echo "== how the model improved (held-out synthetic people)"
python -m fedrank.commands.evaluate --state "$STATE"
echo
echo "run directory: $RUN (state, logs, aggregator.pub)"
