"""The radix tree an out-of-memory message prints after its sizes
(``tree_cache.pretty_print()``): one line a node, ``print(" " * indent, len(key),
key[:10], f"r={lock_ref}")`` in pre-order, the indent 2 more a level; then
``#tokens: N``. A chunked request's computed prefix sits in the tree, locked, so the
length of a locked root-to-node path is where such a request stood at the crash.

    >>> tree_paths(" 1 [] r=1\\n   43264 [151643, 872] r=1\\n#tokens: 171200")
    (43264,)
"""

from __future__ import annotations

import re

#: one node: its indent (print's separator included), key length and lock count
_NODE = re.compile(r"^( *)(\d+) \[[^\]\n]*\]?.* r=(-?\d+)\s*$")


def tree_paths(text: str | None) -> tuple[int, ...]:
    """The lengths of the locked root-to-node paths of a tree dump in ``text`` (any other
    lines are skipped), below the root, in the order printed; () when there is none.
    A path counts when its last node is locked (``r`` > 0): an unlocked node is evictable
    cache, no request's computed prefix."""
    if not text:
        return ()
    # NOTE: pre-order: a node's parent is the last node printed at a smaller indent
    stack: list[tuple[int, int]] = []  # (indent, path length through that node)
    out: list[int] = []
    for line in text.splitlines():
        m = _NODE.match(line)
        if m is None:
            continue
        indent, size, lock = len(m[1]), int(m[2]), int(m[3])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:  # the root: its key is empty (some releases print its own count)
            stack.append((indent, 0))
            continue
        total = stack[-1][1] + size
        stack.append((indent, total))
        if lock > 0:
            out.append(total)
    return tuple(out)
