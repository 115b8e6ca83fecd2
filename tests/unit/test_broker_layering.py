"""DESIGN.md section 1: broker/rabbitmq.py is the only module that imports pika."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("frecency", "crypto", "broker", "participant", "aggregator", "simulation", "fedrank")


def pika_importers() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                if any(name == "pika" or name.startswith("pika.") for name in names):
                    found.add(str(path.relative_to(REPO)))
    return found


def test_only_the_rabbitmq_transport_imports_pika() -> None:
    assert pika_importers() == {"broker/rabbitmq.py"}
