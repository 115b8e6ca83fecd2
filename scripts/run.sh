#!/usr/bin/env bash
# The main job. Until the RabbitMQ stack lands (issue "The stack"), it runs the paper's
# simulation (section 5.1) on the learning core: 5000 synthetic participants, 400 per
# round, 48 rounds, true preference = the paper's simplified frecency, and prints the
# per-round table and how the model improved on held-out interactions.
# Extra arguments go to `fedrank simulate` (see `fedrank simulate --help`).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
ensure_venv dev
cd "$ROOT"
mkdir -p run
exec fedrank simulate --json run/simulation.json "$@"
