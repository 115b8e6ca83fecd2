"""The shipped model specs by name (DESIGN.md section 2): ``firefox-2018`` (the paper's)
and ``firefox-current`` (what Firefox stores today)."""

from __future__ import annotations

from frecency.model import FrecencyModel

MODEL_NAMES: tuple[str, ...] = ("firefox-2018", "firefox-current")
DEFAULT_MODEL = "firefox-2018"


def get_model(name: str) -> FrecencyModel:
    """The model named ``name``; ``KeyError`` naming the known ones otherwise."""
    if name == "firefox-2018":
        from frecency.firefox2018 import Firefox2018Model

        return Firefox2018Model()
    if name == "firefox-current":
        from frecency.firefox_current import FirefoxCurrentModel

        return FirefoxCurrentModel()
    raise KeyError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
