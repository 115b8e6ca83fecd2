"""A browser history as the frecency models see it (DESIGN.md section 2).

These plain, frozen types are what every source of history produces: the synthetic
population of the paper's simulation (section 5.1) and the reader of a real Firefox
``places.sqlite``. The models (``frecency.firefox2018``, ``frecency.firefox_current``)
turn a sequence of pages into numpy arrays once, then score them under many weight
vectors at a time.

Times are PRTime: integer microseconds since 1970-01-01 UTC, as Firefox stores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

MICROSECONDS_PER_DAY = 86_400 * 1_000_000


class Transition(IntEnum):
    """Firefox's visit transition types (``moz_historyvisits.visit_type``)."""

    LINK = 1
    TYPED = 2
    BOOKMARK = 3
    EMBED = 4
    REDIRECT_PERMANENT = 5
    REDIRECT_TEMPORARY = 6
    DOWNLOAD = 7
    FRAMED_LINK = 8
    RELOAD = 9


class VisitSource(IntEnum):
    """``moz_historyvisits.source``: where the visit came from."""

    ORGANIC = 0
    SPONSORED = 1
    BOOKMARKED = 2
    SEARCHED = 3


@dataclass(frozen=True, slots=True)
class Visit:
    """One row of ``moz_historyvisits`` for a page."""

    time_us: int
    transition: Transition
    source: VisitSource = VisitSource.ORGANIC
    #: This visit was the source of a redirect (a later visit has it as ``from_visit``
    #: with a redirect transition).
    redirect_source: bool = False
    #: For a redirect target: the transition of the visit that redirected to it.
    redirect_from: Transition | None = None


@dataclass(frozen=True, slots=True)
class PageView:
    """One row of ``moz_places_metadata``: how long a page was in view and typed into."""

    time_us: int
    view_time_ms: int
    key_presses: int


@dataclass(frozen=True, slots=True)
class Page:
    """A page of history (a ``moz_places`` row with what hangs off it)."""

    url: str
    title: str
    #: Firefox's ``visit_count`` (excludes downloads, framed links and reloads).
    visit_count: int
    #: Every known visit, newest first.
    visits: tuple[Visit, ...] = ()
    #: The page has a bookmark (or a tag) in ``moz_bookmarks``.
    bookmarked: bool = False
    #: ``dateAdded`` of the newest bookmark, if bookmarked.
    bookmark_added_us: int | None = None
    #: ``moz_places.typed``: the address was typed at least once.
    typed: bool = False
    #: Page views from ``moz_places_metadata``, newest first.
    views: tuple[PageView, ...] = ()
    #: The ``frecency`` column Firefox stored, when read from a real profile.
    stored_frecency: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Interaction:
    """One URL-bar selection (DESIGN.md section 3).

    ``shown`` are indices into the person's page list in display order, ``selected``
    is a position in ``shown``.
    """

    prefix: str
    shown: tuple[int, ...]
    selected: int
    chars_typed: int

    @property
    def rank_selected(self) -> int:
        """0-based rank of the selected suggestion, as the 2018 ping reported it."""
        return self.selected
