"""The synthetic person's building blocks, from the paper's simulation (section 5.1).

The one adapter between ``participant/`` and the population model of
``simulation/population.py``: everything the participant runtime needs of it is
re-exported here, so when the population model moves to ``frecency/`` only this file
changes (the layering rule of docs/architecture.md then holds again).
"""

from __future__ import annotations

# moves to frecency.synthetic
from simulation.population import (
    History,
    PopulationConfig,
    VisitPool,
    draw_history,
    draw_slots,
    plan_queries,
    true_preference,
)

__all__ = [
    "History",
    "PopulationConfig",
    "VisitPool",
    "draw_history",
    "draw_slots",
    "plan_queries",
    "true_preference",
]
