"""Every chart, manifest URL and image tag the platform deploys, pinned here and nowhere else.

`upstream` names the folder of ../shared/upstream/ holding that version's CRDs and chart defaults,
so tests check our values and custom resources against exactly what we deploy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    name: str
    repo: str  # an https Helm repository, or an oci:// registry path holding the chart
    version: str
    upstream: str | None = None

    @property
    def is_oci(self) -> bool:
        return self.repo.startswith("oci://")

