"""What the handlers share: settings and the services built from them (kopf's ``memo``)."""

from __future__ import annotations

from dataclasses import dataclass

from craft_operator.config import Settings


@dataclass
class OperatorContext:
    """Passed to every handler as ``memo``; kopf shallow-copies it per object."""

    settings: Settings
