"""The participant runtime (DESIGN.md sections 1, 3, 5 and 6; docs/participant.md).

- ``history``: where interactions come from (a synthetic person, a Firefox profile);
  ``synthetic``: the one adapter to the simulation's population model;
- ``signal``: the vote and metrics of the interactions since the last contribution;
- ``privacy``: DP noise on the vote, the round's cost, the ledger's persistence;
- ``state``: identity key, ledger and progress kept in ``--state DIR``; the pinned key;
- ``session``: one participant's protocol driver, sans-I/O;
- ``runner``: N sessions over one broker transport (``fedrank participant``).

Imports frecency, crypto and broker only, never aggregator (docs/architecture.md).
"""
