"""Fixed word lists for the synthetic histories of the paper's simulation (section 5.1):
site names and page words, so that addresses and titles are made of words and typing a
prefix narrows the matches as it does in a real URL bar."""

from __future__ import annotations

_SITES = """
    acorn amber anchor apex arbor atlas aurora badger bamboo beacon birch bison blossom
    bolt breeze bronze cactus canyon cedar citadel clover cobalt comet coral cosmos cricket
    crystal cypress dahlia delta dune eagle echo ember falcon fern fjord flint forge fox
    galaxy garnet geyser glacier granite harbor hawk hazel heron horizon indigo iris ivory
    jade jasper juniper kelp kestrel lagoon lantern lark laurel lemon lotus lynx magnet
    maple marble meadow mesa meteor mint mosaic nectar nova oak oasis onyx orbit orchid
    otter owl panda pebble pepper pine pixel planet plume prism quartz quill raven reef
    ridge river robin saffron sage sequoia shadow sierra spruce summit swift thistle thunder
    tide timber topaz tulip tundra umber valley velvet violet walnut willow zephyr zinc
"""

_PAGES = """
    about account advice album alert answer archive article audio author backup banking
    basket battery bicycle blog board booking budget build calendar camera career cart
    catalog chapter chart chat checkout cinema class climate cloud club code coffee comment
    community compare concert contact contract course credit dashboard data deal debate
    design desk diary dinner docs download draft dream editor energy engine event exam
    explore family fashion festival file finance fitness flight forum friends game garden
    gift guide health help history holiday home hotel ideas image index insurance invoice
    issue journal kitchen label language learn legal library lesson login manual map market
    media meeting menu message metro mobile money movie museum music network news notes
    office order outdoor package paper parking payment people photo player podcast policy
    portal post price profile project puzzle question radio recipe record release report
    research review route salary schedule school science search season security service
    settings shop show signup soccer software space sport station status store story study
    support survey table team tennis ticket timeline tools topic tour track trade training
    travel update upload video voting wallet weather wiki winter work world yoga
"""

SITE_WORDS: tuple[str, ...] = tuple(_SITES.split())
PAGE_WORDS: tuple[str, ...] = tuple(_PAGES.split())

TOP_LEVEL_DOMAINS: tuple[str, ...] = ("com", "org", "net", "io", "de", "fr", "co.uk", "info")
