"""The cause catalogue on the 2026-11-02 incident: its story holds, nothing else is claimed."""

import pytest

from kvforensics.causes import IDS
from kvforensics.replay import ReplayOptions, replay_logs, verdict_text
from tests.conftest import FIXTURES

INC = FIXTURES / "logs" / "incident"


@pytest.fixture(scope="module")
def incident():
    return replay_logs(
        [INC / "pp0.log", INC / "pp3.log"], ReplayOptions(["fixed", "upstream", "drain", "park"])
    )


def test_every_cause_is_reported_in_catalogue_order(incident):
    d = incident.as_dict()
    assert [c["id"] for c in d["causes"]] == list(IDS)
    for c in d["causes"]:
        assert c["held"] in (True, False, None) and c["summary"]


def test_incident_holds_unreserved_tail_and_nothing_else(incident):
    held = {c.id: c.held for c in incident.causes}
    assert held == {cid: cid == "unreserved_tail" for cid in IDS}
    tail = incident.cause("unreserved_tail")
    assert tail.figures.as_dict() == incident.as_dict()["root_cause"]
    assert (tail.figures.intruder_rid, tail.figures.leftover_chunk_budget) == (
        "as-xpkq7d03n5",
        192,
    )
    # the crash surfaced in the forced branch, on the victim's last piece: not a cause here
    forced = incident.cause("forced_resume")
    assert forced.figures.piece == (91968, 94024) and forced.figures.rem_total_tokens == 0
    assert incident.drops == ()


def test_verdict_tells_the_held_story_and_every_policy(incident):
    d = incident.as_dict()
    lines = verdict_text(d["root_cause"], d["observed_oom"], incident.results, incident.causes)
    assert lines[0].startswith("as-1keim4u1e8 (94024 tokens) was truncated in round 7747")
    assert any(line.startswith("Three conditions held together") for line in lines)
    assert not any("No known cause" in line for line in lines)
    assert "Under park: no out of memory." in lines


def test_park_avoids_the_incident_at_a_first_token_cost(incident):
    park = incident.results["park"]
    assert park.oom is None
    delays = {x["rid"]: x for x in incident.as_dict()["policies"]["park"]["delays"]}
    assert delays["as-xpkq7d03n5"]["delay_s"] == pytest.approx(4.0)


def test_verdict_says_plainly_when_no_known_cause_holds(incident):
    causes = [type(c)(c.id, False if c.held else c.held, "ruled out") for c in incident.causes]
    observed = incident.observed_oom
    lines = verdict_text(None, observed, incident.results, causes)
    assert lines[0].startswith("No known cause explains the out-of-memory in round 7750")
    assert not any("Three conditions" in line for line in lines)
