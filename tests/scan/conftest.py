from pathlib import Path

import pytest

from kvforensics.synth.fleet import write_fleet


@pytest.fixture(scope="session")
def fleet_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out)
    return out
