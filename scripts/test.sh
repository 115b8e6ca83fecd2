#!/usr/bin/env bash
# The test command: lint, type-check and run every test (unit, property, integration
# against a real RabbitMQ). Installs what it needs.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
ensure_venv dev
ensure_rabbitmq
cd "$ROOT"
log "ruff"
ruff check .
log "mypy --strict (crypto, frecency, broker)"
mypy crypto frecency broker
log "pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no test: that is a failure here, not a pass.
exit $rc
