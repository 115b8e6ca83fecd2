"""Print the frecency of every page of a Firefox places.sqlite under a model's weights.

Reads the history with frecency.places (a profile in use is read from a private copy
including its -wal) and scores each page with the chosen model (DESIGN.md section 2):
firefox-current (default; what Firefox 153 stores in moz_places.frecency) or
firefox-2018 (the study's bucket-and-bonus frecency, which depends on the date: --now).
Weights default to the model's Firefox defaults; --weights FILE takes a JSON list of all
d numbers in spec order, or an object {name: value} that overrides some of them.
Output: a table, highest frecency first, with Firefox's stored value beside ours; or,
with --json, a JSON list of {"url", "frecency", "stored_frecency"}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from frecency.model import FloatArray
from frecency.places import NotAPlacesDatabase, read_places
from frecency.registry import MODEL_NAMES, get_model
from frecency.spec import ModelSpec

DEFAULT_MODEL_NAME = "firefox-current"


class CommandError(Exception):
    """A one-line reason to stop: printed without a traceback."""


@dataclass(frozen=True, slots=True)
class PageFrecency:
    url: str
    frecency: int
    stored_frecency: int | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--places", required=True, type=Path, metavar="FILE", help="a Firefox places.sqlite"
    )
    parser.add_argument(
        "--model",
        choices=MODEL_NAMES,
        default=DEFAULT_MODEL_NAME,
        help=f"frecency model (default {DEFAULT_MODEL_NAME})",
    )
    parser.add_argument(
        "--weights",
        type=Path,
        metavar="FILE",
        help="JSON weights: a list of d numbers or {name: value}",
    )
    parser.add_argument(
        "--now", metavar="ISO8601", help="date to score at (firefox-2018 only; default: now)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list")


def run(args: argparse.Namespace) -> int:
    try:
        rows = compute(args.places, args.model, args.weights, args.now)
    except (CommandError, NotAPlacesDatabase) as exc:
        print(f"fedrank frecency: error: {exc}", file=sys.stderr)
        return 1
    try:
        if args.json:
            print(json.dumps([asdict(row) for row in rows], indent=1))
        else:
            print(format_table(rows))
        sys.stdout.flush()
    except BrokenPipeError:  # `fedrank frecency ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


def compute(
    places: Path, model_name: str, weights_file: Path | None, now: str | None
) -> list[PageFrecency]:
    """Each page's frecency under the weights, highest first (ties in database order)."""
    model = get_model(model_name)
    weights = load_weights(weights_file, model.spec) if weights_file else model.spec.defaults()
    history = read_places(places)
    batch = model.encode(history.pages, parse_now(now))
    values = model.frecency(batch, weights)
    rows = [
        PageFrecency(page.url, int(value), page.stored_frecency)
        for page, value in zip(history.pages, values, strict=True)
    ]
    return sorted(rows, key=lambda r: -r.frecency)


def parse_now(text: str | None) -> int:
    """PRTime of ``text`` (ISO 8601, UTC if no zone), or of the present."""
    if text is None:
        return time.time_ns() // 1000
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"--now {text!r} is not an ISO 8601 date") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def load_weights(path: Path, spec: ModelSpec) -> FloatArray:
    """The weight vector in ``path`` (see the module docstring), validated against
    ``spec``: known names, finite numbers, integers where the pref is one, in bounds."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read weights {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CommandError(f"weights {path} are not valid JSON: {exc}") from exc
    weights = spec.defaults()
    if isinstance(data, list):
        if len(data) != spec.dimension:
            raise CommandError(
                f"weights {path}: {len(data)} numbers given, {spec.name} has {spec.dimension}"
            )
        items = list(zip(spec.names, data, strict=True))
    elif isinstance(data, dict):
        unknown = [name for name in data if name not in spec.names]
        if unknown:
            raise CommandError(
                f"weights {path}: unknown weight {', '.join(map(repr, unknown))} for "
                f"{spec.name} (known: {', '.join(spec.names)})"
            )
        items = list(data.items())
    else:
        raise CommandError(f"weights {path}: expected a JSON list or object")
    for name, value in items:
        weights[spec.index(name)] = _checked_value(path, spec, name, value)
    return weights


def _checked_value(path: Path, spec: ModelSpec, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CommandError(f"weights {path}: {name} must be a number, not {value!r}")
    number = float(value)
    param = spec.params[spec.index(name)]
    if not math.isfinite(number):
        raise CommandError(f"weights {path}: {name} must be finite")
    if param.integer and not number.is_integer():
        raise CommandError(f"weights {path}: {name} must be an integer, not {value!r}")
    if not param.lower <= number <= param.upper:
        raise CommandError(
            f"weights {path}: {name}={value!r} outside [{param.lower:g}, {param.upper:g}]"
        )
    return number


def format_table(rows: list[PageFrecency]) -> str:
    """An aligned table: frecency, Firefox's stored value, url."""
    stored = ["-" if r.stored_frecency is None else str(r.stored_frecency) for r in rows]
    width_f = max([len("frecency"), *(len(str(r.frecency)) for r in rows)])
    width_s = max([len("stored"), *(len(s) for s in stored)])
    lines = [f"{'frecency':>{width_f}}  {'stored':>{width_s}}  url"]
    lines += [
        f"{r.frecency:>{width_f}}  {s:>{width_s}}  {r.url}"
        for r, s in zip(rows, stored, strict=True)
    ]
    return "\n".join(lines)
