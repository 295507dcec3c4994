from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = ROOT / "fixtures" / "scenarios" / "incident-2026-11-02.toml"
POSTMORTEM = ROOT / "fixtures" / "scenarios" / "postmortem-abc.toml"


@pytest.fixture(scope="session")
def incident_plans():
    from kvforensics.exec import plan_from_scenario

    return {
        p: plan_from_scenario(str(INCIDENT), p) for p in ("prefix", "fixed", "upstream", "drain")
    }
