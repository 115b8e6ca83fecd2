"""The synthetic person's building blocks, from the paper's simulation (section 5.1).

Re-exports what the participant runtime needs of the population model in
``frecency/synthetic.py`` (history data, DESIGN.md section 1), which the simulation and the
participant share.
"""

from __future__ import annotations

from frecency.synthetic import (
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
