"""Read a Firefox profile's ``places.sqlite`` into ``frecency.history`` types.

DESIGN.md section 1 allows ``frecency/`` exactly this one piece of I/O; section 2's
models score what it returns. The columns read are the ones Firefox's own frecency
(``calculate_frecency`` in toolkit/components/places/SQLFunctions.cpp, summarised in
``reference/firefox-current-frecency.md``) reads:

- ``moz_places``: url, title, visit_count, typed, hidden, frecency (kept as
  ``Page.stored_frecency``);
- ``moz_historyvisits``: each visit's date, ``visit_type`` and ``source``; a visit is a
  redirect source when another visit has it as ``from_visit`` with a redirect type
  (5, 6), and a redirect target takes the type of the visit it came from;
- ``moz_bookmarks``: any row whose ``fk`` is the page (bookmarks and tag entries) makes
  it bookmarked, ``MAX(dateAdded)`` is its bookmark date; tag names are the titles of the
  folders under the tags root;
- ``moz_places_metadata`` (Firefox 91+; optional): page views, for "interesting" visits;
- ``moz_inputhistory``: what was typed in the URL bar before picking a page.

Opening: a profile in use keeps recent writes in ``places.sqlite-wal`` and Firefox holds
an exclusive lock. SQLite's ``immutable=1`` ignores both the lock and the WAL, so when a
non-empty ``-wal`` file sits beside the database, both files are copied to a private
temporary directory and the copy is opened (SQLite replays the WAL into the copy; the
original is never written). Without a WAL the file is opened in place with
``mode=ro&immutable=1``. A copy taken while Firefox writes is a best-effort snapshot;
close Firefox for an exact one.

Anything that is not a Firefox history database (missing file, empty file, not SQLite,
tables or columns missing) raises ``NotAPlacesDatabase`` naming what is wrong.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from frecency.history import Page, PageView, Transition, Visit, VisitSource

SQLITE_MAGIC = b"SQLite format 3\x00"
REDIRECT_TYPES = (int(Transition.REDIRECT_PERMANENT), int(Transition.REDIRECT_TEMPORARY))
#: ``moz_historyvisits.source`` 4 (synced from another device) counts as organic in
#: Firefox's frecency, and ``VisitSource`` has no member for it.
VISIT_SOURCE_SYNCED = 4
TAGS_ROOT_GUID = "tags________"

#: table -> columns this reader needs.
REQUIRED_COLUMNS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "moz_places": ("id", "url", "title", "visit_count", "typed", "hidden", "frecency"),
        "moz_historyvisits": ("id", "from_visit", "place_id", "visit_date", "visit_type", "source"),
        "moz_bookmarks": ("id", "fk", "parent", "title", "dateAdded", "guid"),
        "moz_inputhistory": ("place_id", "input", "use_count"),
    }
)
#: Tables read when present (older profiles lack them); their columns are then required.
OPTIONAL_COLUMNS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "moz_places_metadata": ("id", "place_id", "created_at", "total_view_time", "key_presses"),
    }
)


class NotAPlacesDatabase(Exception):
    """The file is missing, unreadable, or not a Firefox ``places.sqlite``."""


@dataclass(frozen=True, slots=True)
class InputHistoryEntry:
    """One row of ``moz_inputhistory``: typing ``input`` led to ``url``."""

    input: str
    url: str
    #: Firefox's decaying count of uses (a real number).
    use_count: float


@dataclass(frozen=True, slots=True)
class PlacesHistory:
    """Everything read from one ``places.sqlite``."""

    #: Every ``moz_places`` row, in ``id`` order.
    pages: tuple[Page, ...]
    input_history: tuple[InputHistoryEntry, ...] = ()
    #: URLs Firefox hides from results (redirect sources, framed pages).
    hidden_urls: frozenset[str] = frozenset()
    #: url -> its tag names, for tagged pages.
    tags: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: ``PRAGMA user_version``: Places' schema version (86 for Firefox 153).
    schema_version: int = 0
    #: Visits whose ``visit_type`` is no known transition, left out of ``pages``.
    skipped_visits: int = 0

    @property
    def newest_visit_us(self) -> int | None:
        """Time of the newest visit of any page, if there is one."""
        times = [page.visits[0].time_us for page in self.pages if page.visits]
        return max(times) if times else None

    def page(self, url: str) -> Page:
        """The page with this exact URL; ``KeyError`` if there is none."""
        for candidate in self.pages:
            if candidate.url == url:
                return candidate
        raise KeyError(url)


def read_places(path: str | os.PathLike[str]) -> PlacesHistory:
    """Read the Firefox history database at ``path`` (see the module docstring)."""
    with _open_read_only(Path(path)) as connection:
        try:
            _check_schema(connection, Path(path))
            return _read(connection)
        except sqlite3.DatabaseError as exc:
            raise NotAPlacesDatabase(f"{path}: cannot read the database: {exc}") from exc


@contextmanager
def _open_read_only(path: Path) -> Iterator[sqlite3.Connection]:
    if not path.exists():
        raise NotAPlacesDatabase(f"{path}: no such file")
    if not path.is_file():
        raise NotAPlacesDatabase(f"{path}: not a regular file")
    with path.open("rb") as handle:
        head = handle.read(len(SQLITE_MAGIC))
    if not head:
        raise NotAPlacesDatabase(f"{path}: empty file, not an SQLite database")
    if head != SQLITE_MAGIC:
        raise NotAPlacesDatabase(f"{path}: not an SQLite database (bad file header)")
    wal = path.with_name(path.name + "-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        with tempfile.TemporaryDirectory(prefix="fedrank-places-") as directory:
            copy = Path(directory) / "places.sqlite"
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, Path(directory) / "places.sqlite-wal")
            connection = _connect(copy.as_uri(), path)
            try:
                yield connection
            finally:
                connection.close()
        return
    connection = _connect(path.resolve().as_uri() + "?mode=ro&immutable=1", path)
    try:
        yield connection
    finally:
        connection.close()


def _connect(uri: str, shown_path: Path) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(uri, uri=True)
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise NotAPlacesDatabase(f"{shown_path}: not a readable SQLite database: {exc}") from exc
    return connection


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in connection.execute(f"PRAGMA table_info({table})")}


def _check_schema(connection: sqlite3.Connection, path: Path) -> None:
    missing_tables: list[str] = []
    missing_columns: list[str] = []
    for table, needed in [*REQUIRED_COLUMNS.items(), *OPTIONAL_COLUMNS.items()]:
        present = _columns(connection, table)
        if not present:
            if table in REQUIRED_COLUMNS:
                missing_tables.append(table)
            continue
        missing_columns += [f"{table}.{column}" for column in needed if column not in present]
    if missing_tables or missing_columns:
        parts = []
        if missing_tables:
            parts.append("missing tables " + ", ".join(missing_tables))
        if missing_columns:
            parts.append("missing columns " + ", ".join(missing_columns))
        raise NotAPlacesDatabase(f"{path}: not a Firefox history database: {'; '.join(parts)}")


def _read(connection: sqlite3.Connection) -> PlacesHistory:
    visits, skipped = _read_visits(connection)
    views = _read_views(connection)
    bookmark_dates = dict(
        connection.execute(
            "SELECT fk, MAX(dateAdded) FROM moz_bookmarks WHERE fk IS NOT NULL GROUP BY fk"
        ).fetchall()
    )
    tags_by_place: dict[int, list[str]] = defaultdict(list)
    for place_id, tag in connection.execute(
        """SELECT b.fk, t.title FROM moz_bookmarks b
           JOIN moz_bookmarks t ON t.id = b.parent
           JOIN moz_bookmarks root ON root.id = t.parent AND root.guid = ?
           WHERE b.fk IS NOT NULL ORDER BY b.fk, t.title""",
        (TAGS_ROOT_GUID,),
    ):
        tags_by_place[int(place_id)].append(str(tag))

    pages: list[Page] = []
    hidden: set[str] = set()
    tags: dict[str, tuple[str, ...]] = {}
    url_of: dict[int, str] = {}
    for place_id, url, title, visit_count, typed, is_hidden, frecency in connection.execute(
        "SELECT id, url, title, visit_count, typed, hidden, frecency FROM moz_places ORDER BY id"
    ):
        url = str(url)
        url_of[int(place_id)] = url
        added = bookmark_dates.get(place_id)
        pages.append(
            Page(
                url=url,
                title=str(title) if title is not None else "",
                visit_count=int(visit_count or 0),
                visits=tuple(visits.get(place_id, ())),
                bookmarked=place_id in bookmark_dates,
                bookmark_added_us=int(added) if added is not None else None,
                typed=bool(typed),
                views=tuple(views.get(place_id, ())),
                stored_frecency=int(frecency) if frecency is not None else None,
            )
        )
        if is_hidden:
            hidden.add(url)
        if place_id in tags_by_place:
            tags[url] = tuple(tags_by_place[place_id])

    input_history = tuple(
        InputHistoryEntry(input=str(text), url=url_of[int(place_id)], use_count=float(count))
        for place_id, text, count in connection.execute(
            "SELECT place_id, input, use_count FROM moz_inputhistory "
            "ORDER BY use_count DESC, input, place_id"
        )
        if int(place_id) in url_of
    )
    (schema_version,) = connection.execute("PRAGMA user_version").fetchone()
    return PlacesHistory(
        pages=tuple(pages),
        input_history=input_history,
        hidden_urls=frozenset(hidden),
        tags=MappingProxyType(tags),
        schema_version=int(schema_version),
        skipped_visits=skipped,
    )


def _read_visits(connection: sqlite3.Connection) -> tuple[dict[int, list[Visit]], int]:
    """Visits per place id, newest first, with their redirect relations resolved as
    ``calculate_frecency`` joins them (``from_visit`` of a redirect-typed visit)."""
    transitions = {int(t): t for t in Transition}
    sources = {int(s): s for s in VisitSource}
    rows = connection.execute(
        """SELECT id, place_id, visit_date, visit_type, source, from_visit
           FROM moz_historyvisits ORDER BY place_id, visit_date DESC, id DESC"""
    ).fetchall()
    type_of = {row[0]: row[3] for row in rows}
    redirect_sources = {row[5] for row in rows if row[3] in REDIRECT_TYPES and row[5]}
    visits: dict[int, list[Visit]] = defaultdict(list)
    skipped = 0
    for visit_id, place_id, date, visit_type, source, from_visit in rows:
        origin_type = type_of.get(from_visit) if visit_type in REDIRECT_TYPES else None
        transition = transitions.get(visit_type)
        origin = transitions.get(origin_type) if origin_type is not None else None
        if transition is None or (origin_type is not None and origin is None):
            skipped += 1
            continue
        visits[place_id].append(
            Visit(
                time_us=int(date),
                transition=transition,
                source=sources.get(source, VisitSource.ORGANIC),
                redirect_source=visit_id in redirect_sources,
                redirect_from=origin,
            )
        )
    return visits, skipped


def _read_views(connection: sqlite3.Connection) -> dict[int, list[PageView]]:
    if not _columns(connection, "moz_places_metadata"):
        return {}
    views: dict[int, list[PageView]] = defaultdict(list)
    for place_id, created_ms, view_ms, key_presses in connection.execute(
        """SELECT place_id, created_at, total_view_time, key_presses FROM moz_places_metadata
           ORDER BY place_id, created_at DESC, id DESC"""
    ):
        views[place_id].append(
            PageView(
                time_us=int(created_ms) * 1000,
                view_time_ms=int(view_ms or 0),
                key_presses=int(key_presses or 0),
            )
        )
    return views
