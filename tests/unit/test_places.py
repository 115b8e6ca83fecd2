"""frecency.places on a real Firefox 153 profile (tests/fixtures/places, made by
make_fixture.py) and on files that are not one."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from frecency.history import MICROSECONDS_PER_DAY, Page, Transition, VisitSource
from frecency.places import NotAPlacesDatabase, PlacesHistory, read_places
from frecency.registry import get_model

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "places" / "places.sqlite"
BASE = "http://127.0.0.1:38517"


@pytest.fixture(scope="module")
def history() -> PlacesHistory:
    return read_places(FIXTURE)


def page(history: PlacesHistory, path: str) -> Page:
    return history.page(BASE + path)


def days_before_newest(history: PlacesHistory, time_us: int) -> float:
    newest = history.newest_visit_us
    assert newest is not None
    return (newest - time_us) / MICROSECONDS_PER_DAY


def test_every_page_with_firefox_stored_frecency(history: PlacesHistory) -> None:
    assert len(history.pages) == 32
    assert history.schema_version >= 80
    assert history.skipped_visits == 0
    assert all(p.stored_frecency is not None for p in history.pages)
    assert sum(len(p.visits) for p in history.pages) == 54


def test_visits_are_newest_first(history: PlacesHistory) -> None:
    for p in history.pages:
        times = [v.time_us for v in p.visits]
        assert times == sorted(times, reverse=True), p.url
        view_times = [v.time_us for v in p.views]
        assert view_times == sorted(view_times, reverse=True), p.url


def test_link_clicks_and_navigations(history: PlacesHistory) -> None:
    home = page(history, "/")
    assert home.title == "Fixture home"
    assert home.visit_count == len(home.visits) == 7
    assert {v.transition for v in home.visits} == {Transition.LINK}
    assert not home.typed and not home.bookmarked


def test_permanent_and_temporary_redirect_chains(history: PlacesHistory) -> None:
    (source,) = page(history, "/old-address").visits
    (target,) = page(history, "/new-address.html").visits
    assert source.transition is Transition.LINK and source.redirect_source
    assert target.transition is Transition.REDIRECT_PERMANENT
    assert target.redirect_from is Transition.LINK and not target.redirect_source
    assert 0 <= target.time_us - source.time_us < 10_000_000
    (login,) = page(history, "/login").visits
    (dashboard,) = page(history, "/dashboard.html").visits
    assert login.redirect_source and dashboard.transition is Transition.REDIRECT_TEMPORARY
    assert dashboard.redirect_from is Transition.LINK
    assert BASE + "/old-address" in history.hidden_urls
    assert BASE + "/new-address.html" not in history.hidden_urls


def test_typed_url_that_redirects(history: PlacesHistory) -> None:
    go = page(history, "/go")
    (typed,) = go.visits
    assert go.typed and typed.transition is Transition.TYPED and typed.redirect_source
    (landing,) = page(history, "/landing.html").visits
    assert landing.transition is Transition.REDIRECT_TEMPORARY
    assert landing.redirect_from is Transition.TYPED


def test_typed_framed_download_reload(history: PlacesHistory) -> None:
    typed = page(history, "/typed.html")
    assert typed.typed and [v.transition for v in typed.visits] == [Transition.TYPED]
    framed = page(history, "/frame-content.html")
    assert [v.transition for v in framed.visits] == [Transition.FRAMED_LINK]
    assert framed.visit_count == 0 and framed.url in history.hidden_urls
    download = page(history, "/report.csv")
    assert [v.transition for v in download.visits] == [Transition.DOWNLOAD]
    assert download.visit_count == 0
    reloaded = page(history, "/reload-many.html")
    assert [v.transition for v in reloaded.visits].count(Transition.RELOAD) == 3
    assert reloaded.visit_count == 1
    # Firefox keeps embed visits in memory only
    with pytest.raises(KeyError):
        page(history, "/embedded-widget.html")


def test_visits_over_a_year_old(history: PlacesHistory) -> None:
    report = page(history, "/archive/2024-report.html")
    assert [v.transition for v in report.visits] == [
        Transition.LINK,
        Transition.TYPED,
        Transition.LINK,
        Transition.LINK,
    ]
    ages = [days_before_newest(history, v.time_us) for v in report.visits]
    assert ages == pytest.approx([366, 370, 380, 400], abs=1)


def test_many_visits_bookmarked_and_typed(history: PlacesHistory) -> None:
    manual = page(history, "/docs/manual.html")
    assert manual.visit_count == len(manual.visits) == 13
    assert [v.transition for v in manual.visits].count(Transition.TYPED) == 4
    assert manual.typed and manual.bookmarked


def test_bookmarks_tags_and_sources(history: PlacesHistory) -> None:
    twice = page(history, "/bookmarked-visited.html")
    assert twice.bookmarked and twice.bookmark_added_us is not None
    # two bookmarks, 200 and 90 days old: the newest counts
    assert days_before_newest(history, twice.bookmark_added_us) == pytest.approx(90, abs=1)
    assert [v.transition for v in twice.visits][1:] == [Transition.BOOKMARK] * 2
    unvisited = page(history, "/unvisited-bookmark.html")
    assert unvisited.bookmarked and unvisited.visits == () and unvisited.visit_count == 0
    tagged = page(history, "/tagged-only.html")
    assert tagged.bookmarked and history.tags[tagged.url] == ("recipes",)
    assert history.tags[BASE + "/weather.html"] == ("daily", "outdoor")
    article = page(history, "/article-1.html")
    assert [v.source for v in article.visits] == [VisitSource.BOOKMARKED, VisitSource.ORGANIC]
    (searched, _) = page(history, "/searched.html").visits
    assert searched.transition is Transition.TYPED and searched.source is VisitSource.SEARCHED
    (sponsored,) = page(history, "/sponsored.html").visits
    assert sponsored.source is VisitSource.SPONSORED
    query = history.page("place:sort=8&maxResults=10")
    assert query.bookmarked and query.visits == ()


def test_page_views(history: PlacesHistory) -> None:
    (long_view,) = page(history, "/long-read.html").views
    assert long_view.view_time_ms == 95_000
    short, keyed = page(history, "/read-later.html").views
    assert (short.view_time_ms, keyed.view_time_ms, keyed.key_presses) == (5_000, 25_000, 80)
    notes = page(history, "/notes.html").views  # recorded by Firefox itself
    assert notes and notes[0].view_time_ms >= 20_000


def test_input_history(history: PlacesHistory) -> None:
    entries = {(e.input, e.url): e.use_count for e in history.input_history}
    assert entries[("dash", BASE + "/dashboard.html")] == pytest.approx(1.9)
    assert entries[("man", BASE + "/docs/manual.html")] == pytest.approx(1.0)
    assert len(entries) == 3


def test_firefox_current_defaults_reproduce_stored_frecency(history: PlacesHistory) -> None:
    model = get_model("firefox-current")
    newest = history.newest_visit_us
    assert newest is not None
    values = model.frecency(model.encode(history.pages, newest), model.spec.defaults())
    got = {p.url: int(v) for p, v in zip(history.pages, values, strict=True)}
    stored = {p.url: p.stored_frecency for p in history.pages}
    assert got == stored
    assert len(set(stored.values())) > 10  # the fixture exercises many distinct values


# --- the WAL and a running Firefox -------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def live_profile(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A copy of the fixture held open in WAL mode with an exclusive lock and an
    uncheckpointed write, as a running Firefox leaves it."""
    db_path = tmp_path / "places.sqlite"
    shutil.copyfile(FIXTURE, db_path)
    writer = sqlite3.connect(db_path)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("PRAGMA locking_mode=EXCLUSIVE")
    writer.execute(
        "UPDATE moz_places SET title = 'Changed in the WAL' WHERE url = ?", (BASE + "/",)
    )
    writer.commit()
    yield db_path, writer
    writer.close()


def test_reads_uncheckpointed_wal_of_locked_profile_without_touching_it(
    live_profile: tuple[Path, sqlite3.Connection],
) -> None:
    db_path, _writer = live_profile
    wal = db_path.with_name("places.sqlite-wal")
    assert wal.stat().st_size > 0
    before = (_digest(db_path), _digest(wal))
    history = read_places(db_path)
    assert history.page(BASE + "/").title == "Changed in the WAL"
    assert (_digest(db_path), _digest(wal)) == before


def test_reads_in_place_without_wal_even_when_locked(tmp_path: Path) -> None:
    db_path = tmp_path / "places.sqlite"
    shutil.copyfile(FIXTURE, db_path)
    holder = sqlite3.connect(db_path)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert len(read_places(db_path).pages) == 32
    finally:
        holder.rollback()
        holder.close()


# --- not a places database -----------------------------------------------------------


def _error(path: Path) -> str:
    with pytest.raises(NotAPlacesDatabase) as info:
        read_places(path)
    return str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "absent.sqlite")


def test_directory(tmp_path: Path) -> None:
    assert "not a regular file" in _error(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "places.sqlite"
    empty.write_bytes(b"")
    assert "empty file" in _error(empty)


def test_not_sqlite(tmp_path: Path) -> None:
    text = tmp_path / "places.sqlite"
    text.write_text("this is a text file, not a database\n" * 20)
    assert "not an SQLite database" in _error(text)


def test_truncated_sqlite(tmp_path: Path) -> None:
    broken = tmp_path / "places.sqlite"
    broken.write_bytes(FIXTURE.read_bytes()[:150])
    message = _error(broken)
    assert str(broken) in message


def test_sqlite_without_places_tables(tmp_path: Path) -> None:
    other = tmp_path / "cookies.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE moz_cookies (id INTEGER PRIMARY KEY, name TEXT)")
    message = _error(other)
    for table in ("moz_places", "moz_historyvisits", "moz_bookmarks", "moz_inputhistory"):
        assert table in message
    assert "moz_cookies" not in message


def test_missing_columns_are_named(tmp_path: Path) -> None:
    db_path = tmp_path / "places.sqlite"
    with _minimal_places(db_path) as db:
        db.execute("ALTER TABLE moz_places DROP COLUMN frecency")
        db.execute("ALTER TABLE moz_historyvisits DROP COLUMN source")
    db.close()
    message = _error(db_path)
    assert "moz_places.frecency" in message and "moz_historyvisits.source" in message
    assert "missing tables" not in message


def _minimal_places(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT, title TEXT,
            visit_count INTEGER, typed INTEGER, hidden INTEGER, frecency INTEGER);
        CREATE TABLE moz_historyvisits (id INTEGER PRIMARY KEY, from_visit INTEGER,
            place_id INTEGER, visit_date INTEGER, visit_type INTEGER, source INTEGER);
        CREATE TABLE moz_bookmarks (id INTEGER PRIMARY KEY, fk INTEGER, parent INTEGER,
            title TEXT, dateAdded INTEGER, guid TEXT);
        CREATE TABLE moz_inputhistory (place_id INTEGER, input TEXT, use_count REAL);
        INSERT INTO moz_places VALUES (1, 'https://a.test/', NULL, 2, 0, 0, -1);
        INSERT INTO moz_historyvisits VALUES (1, 0, 1, 1000, 1, 4);
        INSERT INTO moz_historyvisits VALUES (2, 0, 1, 2000, 0, 0);
        """
    )
    db.commit()
    return db


def test_older_profile_without_page_views_and_odd_values(tmp_path: Path) -> None:
    db_path = tmp_path / "places.sqlite"
    _minimal_places(db_path).close()
    history = read_places(db_path)
    (only,) = history.pages
    assert only.title == "" and only.views == () and only.stored_frecency == -1
    # visit_type 0 is no transition: skipped and counted; source 4 (synced) is organic
    assert history.skipped_visits == 1
    (visit,) = only.visits
    assert visit.time_us == 1000 and visit.source is VisitSource.ORGANIC
    assert np.isclose(history.newest_visit_us or 0, 1000)


def test_page_views_table_with_missing_column(tmp_path: Path) -> None:
    db_path = tmp_path / "places.sqlite"
    db = _minimal_places(db_path)
    db.execute("CREATE TABLE moz_places_metadata (id INTEGER PRIMARY KEY, place_id INTEGER)")
    db.commit()
    db.close()
    message = _error(db_path)
    assert "moz_places_metadata.created_at" in message
    assert "moz_places_metadata.total_view_time" in message
