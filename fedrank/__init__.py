"""fedrank: private federated training of ranking heuristics."""

__version__ = "0.1.0"
