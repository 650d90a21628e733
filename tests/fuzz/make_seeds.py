"""Writes the large seed inputs of the fuzzers (too big to keep in git) into OUT/<corpus>/:
for fuzz_tree_json a flat object of 100k keys, a long ignored array, many nodes and queries,
a node listing many pages, and a tree whose pages the reader lays out itself. Each stays under
the fuzzer's -max_len (tests/fuzz/fuzz_tree_json.flags). tools/test.sh runs it before the fuzz
step; the small seeds live in tests/fuzz/corpus_*.

usage: python3 tests/fuzz/make_seeds.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

TREE = '"nodes": [{"id": 0, "tokens": 1}], "queries": [{"node": 0}]'


def json_seeds() -> dict[str, str]:
    keys = ", ".join(f'"k{i}": {i % 10}' for i in range(100_000))
    zeros = ",".join(["0"] * 600_000)
    n = 20_000
    nodes = ", ".join(f'{{"id": {i}, "parent": {i // 2 if i else "null"}, "tokens": {1 + i % 17}}}'
                      for i in range(n))
    queries = ", ".join(f'{{"node": {i}}}' for i in range(n // 2, n))
    pages = ",".join(str(p) for p in range(150_000))
    return {
        "flat_object.json": f'{{"comment": {{{keys}}}, {TREE}}}',
        "long_array.json": f'{{"comment": [{zeros}], {TREE}}}',
        "many_nodes.json": f'{{"page_size": 16, "nodes": [{nodes}], "queries": [{queries}]}}',
        "many_pages.json": (f'{{"page_size": 1, "nodes": [{{"id": 0, "tokens": 150000, '
                            f'"pages": [{pages}]}}], "queries": [{{"node": 0}}]}}'),
        "laid_out_pages.json": ('{"page_size": 1, "nodes": [{"id": 0, "tokens": 2000000}], '
                                '"queries": [{"node": 0}]}'),
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = Path(sys.argv[1]) / "tree_json"
    out.mkdir(parents=True, exist_ok=True)
    for name, text in json_seeds().items():
        (out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
