"""The tree dump after an out-of-memory message: the locked root-to-node paths."""

from hypothesis import given
from hypothesis import strategies as st

from kvforensics.logs.tree import tree_paths


def test_nested_paths_add_up_and_unlocked_nodes_are_not_paths():
    text = "\n".join([
        "Try to allocate 16384 tokens.",
        "Available full tokens: 0 (full_available_size=0 + full_evictable_size_=0)",
        " 0 [] r=1",
        "   2784 [151643, 872, 1442] r=1",
        "     43264 [9707, 11] r=1",
        "     512 [3, 4] r=0",
        "   100 [7] r=2",
        "#tokens: 171200",
    ])  # fmt: skip
    assert tree_paths(text) == (2784, 2784 + 43264, 100)


def test_no_tree_no_paths():
    assert tree_paths(None) == ()
    assert tree_paths("") == ()
    assert tree_paths("Try to allocate 2056 tokens.\nAvailable full tokens: 0") == ()
    assert tree_paths(" 1 [] r=1\n#tokens: 5") == ()  # the root alone


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 10**6), st.integers(0, 2)),
                max_size=20))  # fmt: skip
def test_every_locked_path_is_the_sum_of_its_nodes(nodes):
    """A random pre-order tree (each node at most one level below the one before): each
    locked node's path is the sum of the lengths on the way from the root."""
    lines, stack, want = [" 0 [] r=1"], [0], []
    for depth, size, lock in nodes:
        depth = min(depth, len(stack))
        del stack[depth:]
        stack.append(stack[-1] + size)
        lines.append(" " * (2 * depth) + f" {size} [1, 2] r={lock}")
        if lock:
            want.append(stack[-1])
    assert tree_paths("\n".join(lines)) == tuple(want)
