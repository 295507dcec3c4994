"""Paths -> files -> nodes: files, directories, globs, gzip, fsspec URLs, bad paths."""

import gzip
import os
import shutil

import pytest

from kvforensics.scan import NodeSpec, ScanOptions, discover, scan, scan_node
from tests.conftest import FIXTURES

CLEAN = FIXTURES / "logs" / "clean" / "pp0.log"


@pytest.fixture
def tree(tmp_path):
    for node in ("a", "b/c"):
        d = tmp_path / node
        d.mkdir(parents=True)
        (d / "pp0.log").write_text("x\n")
        (d / "README.md").write_text("not a log\n")
    with gzip.open(tmp_path / "a" / "pp1.log.gz", "wt") as fh:
        fh.write("x\n")
    (tmp_path / "a" / ".hidden.log").write_text("x\n")
    return tmp_path


def test_a_directory_is_searched_recursively_and_grouped_by_directory(tree):
    found = discover([str(tree)])
    assert found.nodes == (
        NodeSpec(str(tree / "a"), (str(tree / "a" / "pp0.log"), str(tree / "a" / "pp1.log.gz"))),
        NodeSpec(str(tree / "b" / "c"), (str(tree / "b" / "c" / "pp0.log"),)),
    )
    assert found.problems == ()


def test_group_by_file_makes_a_node_per_file(tree):
    found = discover([str(tree / "a")], group_by="file")
    assert [n.files for n in found.nodes] == [(n.node,) for n in found.nodes]
    assert len(found.nodes) == 2


def test_globs_files_and_missing_paths(tree):
    found = discover(
        [
            str(tree / "*" / "pp0.log"),
            str(tree / "b" / "c" / "README.md"),
            str(tree / "nope.log"),
            str(tree / "z*"),
        ]
    )
    files = [f for n in found.nodes for f in n.files]
    assert files == [str(tree / "a" / "pp0.log"), str(tree / "b" / "c" / "README.md")]
    assert found.problems == (
        (str(tree / "nope.log"), "no such file or directory"),
        (str(tree / "z*"), "no file matches this pattern"),
    )


def test_a_file_named_twice_is_read_once(tree):
    p = str(tree / "a" / "pp0.log")
    assert discover([p, p]).nodes == (NodeSpec(str(tree / "a"), (p,)),)


def test_fsspec_local_and_memory_urls(tree):
    import fsspec

    local = discover([f"file://{tree}/a"])
    assert [f.rsplit("/", 1)[-1] for n in local.nodes for f in n.files] == ["pp0.log", "pp1.log.gz"]
    mem = fsspec.filesystem("memory")
    mem.pipe("/fleet/n1/pp0.log", CLEAN.read_bytes())
    mem.pipe("/fleet/n2/pp0.log", gzip.compress(CLEAN.read_bytes()))
    try:
        found = discover(["memory://fleet"])
        assert [n.node for n in found.nodes] == ["memory:///fleet/n1", "memory:///fleet/n2"]
        # the memory filesystem lives in this process: scan it without a pool
        fleet = scan(["memory://fleet/*/pp0.log"], ScanOptions(), jobs=1)
        on_disk = scan_node(NodeSpec("clean", (str(CLEAN),)), ScanOptions())
        for n in fleet.nodes:
            assert n.error is None
            assert n.whole_log == on_disk.whole_log
            assert n.rounds == on_disk.rounds
    finally:
        mem.rm("/fleet", recursive=True)


def test_an_unknown_url_scheme_is_one_problem(tree):
    found = discover(["nosuchfs://bucket/logs", str(tree / "a")])
    assert len(found.nodes) == 1
    ((path, reason),) = found.problems
    assert path == "nosuchfs://bucket/logs" and reason.startswith("cannot open this URL")


def test_an_unreadable_file_is_one_line_and_the_node_goes_on(tmp_path):
    d = tmp_path / "n"
    d.mkdir()
    shutil.copyfile(CLEAN, d / "pp0.log")
    os.mkfifo(d / "pp1.log")  # listed, but not a regular file
    fleet = scan(
        [str(d / "pp0.log"), str(d / "pp1.log"), str(tmp_path / "gone.log")], ScanOptions(), jobs=1
    )
    (n,) = fleet.nodes
    assert n.error is None and n.rounds > 0
    assert n.unreadable == ((str(d / "pp1.log"), "not a regular file"),)
    assert fleet.unreadable() == [
        (str(tmp_path / "gone.log"), "no such file or directory"),
        (str(d / "pp1.log"), "not a regular file"),
    ]


def test_a_node_that_is_not_a_prefill_log_fails_alone(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.log").write_text("hello\n")
    (tmp_path / "good").mkdir()
    shutil.copyfile(CLEAN, tmp_path / "good" / "pp0.log")
    fleet = scan([str(tmp_path)], ScanOptions(), jobs=1)
    bad, good = fleet.nodes
    assert "no line of these files is an SGLang scheduler" in bad.error and bad.whole_log is None
    assert good.error is None
    assert fleet.totals()["failed"] == 1


def test_a_cut_gzip_is_read_as_far_as_it_goes(fleet_dir, tmp_path):
    d = tmp_path / "cut"
    shutil.copytree(fleet_dir / "incident", d)
    whole = (d / "pp1.log.gz").read_bytes()
    (d / "pp1.log.gz").write_bytes(whole[: len(whole) // 2])
    (n,) = scan([str(d)], ScanOptions(), jobs=1).nodes
    assert n.error is None and n.unreadable == ()
    assert any("gzip stream ends early" in note for note in n.as_dict()["notes"])
    assert n.ooms[0].rid == "as-1keim4u1e8"


def test_a_missing_url_is_one_problem():
    found = discover(["memory://nowhere/logs", "memory://nowhere/*.log"])
    assert found.nodes == ()
    assert [r for _, r in found.problems] == ["no such file or directory", "no log files here"]
