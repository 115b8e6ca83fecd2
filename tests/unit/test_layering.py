"""The dependency rule of DESIGN.md section 1, checked on the source (docs/architecture.md).

Every ``import`` and ``from ... import`` in each package is read with ``ast``; a package
may import only the project packages its row allows. pika may be imported only by
``broker/rabbitmq.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = {"fedrank", "frecency", "crypto", "broker", "aggregator", "participant", "simulation"}
ALLOWED: dict[str, set[str]] = {
    "frecency": set(),
    "crypto": set(),
    "broker": {"crypto", "frecency"},
    "aggregator": {"frecency", "crypto", "broker"},
    "participant": {"frecency", "crypto", "broker"},
    "simulation": {"frecency", "crypto", "broker", "aggregator", "participant"},
    "fedrank": PROJECT,
}


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    offences = []
    for path in sources(package):
        for name in imported_top_levels(path) & PROJECT - {package} - ALLOWED[package]:
            offences.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offences, "\n".join(offences)


def test_only_the_rabbitmq_transport_imports_pika() -> None:
    importers = [
        str(path.relative_to(ROOT))
        for package in PROJECT
        for path in sources(package)
        if "pika" in imported_top_levels(path)
    ]
    assert importers in ([], ["broker/rabbitmq.py"]), importers


def test_every_package_has_sources() -> None:
    assert all(sources(package) for package in PROJECT)
