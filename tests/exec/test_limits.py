"""What exec allocates is bounded before anything is allocated: a pool or a layout that
cannot fit is a one-line error naming the need and the limit, never an allocation."""

from __future__ import annotations

import pytest

from kvforensics.errors import InputError
from kvforensics.exec.kvcache import KvLayout
from kvforensics.exec.limits import CPU_BYTES, check_fits, footprint
from kvforensics.exec.plan import Plan, PoolSnapshot, Step
from tests.exec.conftest import POSTMORTEM
from tests.reliability._run import run_cli

SMALL = KvLayout(layers=1, kv_lora_rank=8, rope_dim=0)


def _plan(size: int, loaded: int = 0) -> Plan:
    steps = (Step(0, "load_back", owner="a", start=0, end=loaded),) if loaded else ()
    return Plan(PoolSnapshot(size=size, page_size=64, free=size), steps)


def test_the_footprint_counts_kv_host_copies_and_books():
    fp = footprint(_plan(64 * 1000, loaded=640), SMALL)
    assert fp.kv == 64 * 1000 * 16  # 1 layer x 8 bf16 = 16 bytes a slot
    assert fp.host_rows == 640 * 16
    assert fp.on_host("cpu") == fp.kv + fp.host_rows + fp.books
    assert fp.on_host("cuda:0") == fp.host_rows + fp.books  # the pool lives on the device


def test_a_pool_of_2_to_the_40_is_refused_as_too_large():
    with pytest.raises(InputError) as exc:
        check_fits(_plan(2**40), SMALL, "cpu")
    msg = str(exc.value)
    assert "1099511627776 slots" in msg and "the pool itself is too large" in msg
    assert "\n" not in msg


def test_a_wide_layout_is_refused_with_what_to_lower():
    wide = KvLayout(layers=61, kv_lora_rank=512, rope_dim=64)
    with pytest.raises(InputError, match="lower --layers, --kv-dim or --rope-dim"):
        check_fits(_plan(262144), wide, "cpu")


def test_the_largest_layout_that_fits_is_accepted():
    size = 64 * 1000
    per_slot_left = (CPU_BYTES - footprint(_plan(size), SMALL).books) // size
    fits = KvLayout(layers=1, kv_lora_rank=per_slot_left // 2, rope_dim=0)
    check_fits(_plan(size), fits, "cpu")  # no error
    over = KvLayout(layers=1, kv_lora_rank=per_slot_left // 2 + 1, rope_dim=0)
    with pytest.raises(InputError):
        check_fits(_plan(size), over, "cpu")


@pytest.mark.parametrize(
    "flags",
    [["--layers", "100000"], ["--kv-dim", "4000000"], ["--layers", "1000", "--dtype", "fp32"]],
)
def test_exec_refuses_a_layout_too_large_in_one_line(flags):
    res = run_cli("exec", POSTMORTEM, "--device", "cpu", *flags)
    assert res.code == 2, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "12000 slots" in line and "exec allows on cpu" in line


def test_exec_refuses_a_huge_scenario_pool(tmp_path):
    text = POSTMORTEM.read_text().replace("pool_size = 12000", f"pool_size = {2**40}")
    sc = tmp_path / "huge.toml"
    sc.write_text(text)
    res = run_cli("exec", sc, "--device", "cpu")
    assert res.code == 2, res.stderr
    assert f"{2**40} slots" in res.stderr and "too large to execute" in res.stderr
