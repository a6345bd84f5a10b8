"""Can Gaudi run here? Answered without importing the Gaudi SDK or torch."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pagoda.platforms.probing import platform_probe, visible_devices
from pagoda.plugins import PlatformProbe
from pagoda_gaudi.accel import DEV, SYS_CLASS, Card, gaudi_cards, node_access_problem, visible_cards
from pagoda_gaudi.sdk import sdk_missing

PLATFORM = "gaudi"
SCORE = 100
VISIBLE_ENV = "HABANA_VISIBLE_MODULES"


def find_cards(sys_class: Path = SYS_CLASS, dev: Path = DEV,
               environ: Mapping[str, str] | None = None) -> tuple[list[Card], str | None]:
    """The Gaudi cards this process may use, or the reason there are none."""
    found = gaudi_cards(sys_class)
    if found is None:
        return [], (f"no Gaudi card visible: no habanalabs device in {sys_class}/accel or "
                    f"{sys_class}/habanalabs")
    cards, dev_dir = found
    access = node_access_problem(cards, dev / dev_dir if dev_dir else dev)
    if access:
        return [], f"Gaudi cards found but not usable: {access}"
    return visible_devices(cards, VISIBLE_ENV, visible_cards, "Gaudi cards", environ)


def probe(sys_class: Path = SYS_CLASS, dev: Path = DEV,
          environ: Mapping[str, str] | None = None) -> PlatformProbe:
    cards, card_problem = find_cards(sys_class, dev, environ)
    return platform_probe(PLATFORM, (c.describe() for c in cards), (sdk_missing(), card_problem),
                          score=SCORE, visible_devices_env=(VISIBLE_ENV,))
