#!/usr/bin/env bash
# The main job: the fedrank stack on this machine. A local RabbitMQ (started, or
# installed from Debian's package when run as root, if none answers on 127.0.0.1:5672),
# one `fedrank aggregator` and several `fedrank participant` processes with synthetic
# histories run secure-aggregation rounds; at the end it prints the round table and how
# the model improved on held-out synthetic people (characters typed and rank selected,
# before and after). Arguments go to scripts/stack.sh (see `bash scripts/stack.sh --help`).
# The paper's simulation is `fedrank simulate` (docs/simulation.md).
exec bash "$(dirname "${BASH_SOURCE[0]}")/stack.sh" "$@"
