"""report.md's books legend says what the memory need counts under the profile the runs
used, with the numbers the model's profile gives."""

import pytest

from kvforensics.model import Config
from kvforensics.model.profiles import PROFILES, get_profile
from kvforensics.report.report import need_legend
from kvforensics.synth.incidents import INCIDENTS
from tests.replay.test_replay_cli import cli

COLUMNS = "Columns: memory need = remaining prompt (including host hits) + "


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("max_new", [1, 8192])
def test_the_legend_counts_what_the_profile_counts(name, max_new):
    cfg = Config(page_size=32, chunked_prefill_size=4096, max_prefill_tokens=16384,
                 pool_size=65536, max_new_tokens=max_new)  # fmt: skip
    profile = get_profile(name)
    got = need_legend((cfg, profile))
    assert got.startswith(f"memory need = remaining prompt (including host hits) + {profile.max_new(cfg)}")
    assert ("clipped to" in got) == (profile.max_new(cfg) < max_new)
    assert got.endswith(" + page") == (profile.check_page(cfg) == cfg.page_size)
    assert ("no page" in got) == (profile.check_page(cfg) == 0)


def test_report_on_logs_states_the_rule_of_the_profile_used(tmp_path):
    inc = INCIDENTS["swa_page_estimate"]()
    paths = inc.write(tmp_path / "logs")
    legends = {}
    for profile in ("sglang-0.5.9", "fork"):
        out = tmp_path / profile
        r = cli("report", *paths, "-o", out, "--profile", profile, "--policy", "prefix,fixed")
        assert r.returncode in (0, 4), r.stderr
        md = (out / "report.md").read_text()
        legends[profile] = next(line for line in md.splitlines() if line.startswith(COLUMNS))
    assert "+ 1, no page (sglang-0.5.9's check counts none);" in legends["sglang-0.5.9"]
    assert legends["fork"].startswith(COLUMNS + "1 + page;")
