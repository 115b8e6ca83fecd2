# Shared by scripts/run.sh and scripts/test.sh: a virtualenv with fedrank installed, and a
# RabbitMQ broker answering on 127.0.0.1:5672 (started, or installed from Debian's package
# when running as root, if none answers). Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FEDRANK_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

log() { printf '[fedrank] %s\n' "$*" >&2; }

ensure_venv() {
    local extras="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating virtualenv $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    local stamp="$VENV/.fedrank-installed-$extras"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        log "installing fedrank[$extras] into $VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$extras]"
        touch "$stamp"
    fi
    export PATH="$VENV/bin:$PATH"
}

broker_answers() {
    "$VENV/bin/python" - <<'PY'
import socket, sys
s = socket.socket(); s.settimeout(1.0)
try:
    s.connect(("127.0.0.1", 5672)); sys.exit(0)
except OSError:
    sys.exit(1)
finally:
    s.close()
PY
}

ensure_rabbitmq() {
    if broker_answers; then return 0; fi
    if ! command -v rabbitmq-server >/dev/null 2>&1; then
        if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
            log "no RabbitMQ answers on 127.0.0.1:5672: installing Debian's rabbitmq-server"
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
        else
            log "no RabbitMQ on 127.0.0.1:5672 and not root: install rabbitmq-server or set FEDRANK_AMQP_URL"
            return 1
        fi
    fi
    if ! broker_answers; then
        log "starting rabbitmq-server"
        rabbitmq-server -detached || true
        for _ in $(seq 1 120); do
            if broker_answers && rabbitmqctl -q status >/dev/null 2>&1; then break; fi
            sleep 1
        done
    fi
    broker_answers || { log "RabbitMQ did not start"; return 1; }
    rabbitmqctl -q await_startup >/dev/null 2>&1 || true
}
