"""Hostile JSON tree texts, shared by the CLI table (`treeattn plan --tree FILE`) and the Python
table (`PrefixTree.from_json_str`): malformed JSON, hostile trees (cycles, duplicate ids, pages
out of range or aliased, deep nesting, huge page_size), hostile sizes (80k-key objects, huge
arrays and strings), NUL bytes and invalid UTF-8, and valid texts that must be accepted.

TEXTS: (name, text as bytes, where) with `where` the place the error must name (a JSON path
such as "nodes[1].parent", or "json" for a syntax error), None for a valid tree."""

from __future__ import annotations

from typing import List, Optional, Tuple


def tree(nodes: str = '{"id": 0, "parent": null, "tokens": 20}', extra: str = "",
         queries: str = '{"node": 0}', page_size: str = "16") -> str:
    """A tree text: page_size, then `extra` top-level members, nodes and queries."""
    return (f'{{"page_size": {page_size}{", " + extra if extra else ""}, "nodes": [{nodes}], '
            f'"queries": [{queries}]}}')


ROOT = '{"id": 0, "parent": null, "tokens": 20}'
ROOT_PAGES = '{"id": 0, "parent": null, "tokens": 32, "pages": [0, 1]}'


def _nested(depth: int) -> str:
    return tree(extra='"comment": ' + "[" * depth + "]" * depth)


def _flat_object(n: int, dup: bool = False) -> str:
    keys = ", ".join(f'"k{i}": {i % 10}' for i in range(n))
    return tree(extra=f'"comment": {{{keys}{", " + chr(34) + "k0" + chr(34) + ": 1" if dup else ""}}}')


def _chain(n: int, queries: int = 1) -> str:
    nodes = ", ".join(f'{{"id": {i}, "parent": {i - 1 if i else "null"}, "tokens": 1}}'
                      for i in range(n))
    return tree(nodes, queries=", ".join([f'{{"node": {n - 1}}}'] * queries))


def texts() -> List[Tuple[str, bytes, Optional[str]]]:
    s: List[Tuple[str, str | bytes, Optional[str]]] = [
        # ---- malformed JSON
        ("empty text", "", "json"),
        ("whitespace only", "  \n\t ", "json"),
        ("not JSON", "page_size = 16", "json"),
        ("top-level array", "[]", "json"),
        ("top-level null", "null", "json"),
        ("top-level number", "16", "json"),
        ("truncated", tree()[:-7], "json"),
        ("trailing comma in object", tree()[:-1] + ", }", "json"),
        ("trailing comma in array", tree(queries='{"node": 0},'), "json"),
        ("text after the value", tree() + " {}", "json"),
        ("two values", tree() + tree(), "json"),
        ("NaN literal", tree(page_size="NaN"), "json"),
        ("Infinity literal", tree(page_size="Infinity"), "json"),
        ("single quotes", tree().replace('"page_size"', "'page_size'"), "json"),
        ("unquoted key", tree().replace('"page_size"', "page_size"), "json"),
        ("comment syntax", "// tree\n" + tree(), "json"),
        ("bad escape", tree(extra='"name": "a\\xb"'), "json"),
        ("unterminated string", tree(extra='"name": "abc'), "json"),
        ("leading zeros", tree(page_size="016"), "json"),
        ("plus sign", tree(page_size="+16"), "json"),
        ("vertical tab as whitespace", tree().replace(" ", "\v", 1), "json"),
        ("duplicate top-level key", tree(extra='"page_size": 8'), "page_size"),
        ("duplicate node key", tree('{"id": 0, "id": 1, "parent": null, "tokens": 4}'), "id"),
        # ---- bytes: NUL, invalid UTF-8, BOM, surrogates
        ("NUL inside a string", tree(extra='"name": "a\x00b"'), "json"),
        ("NUL after the value", tree() + "\x00", "json"),
        ("NUL before the value", "\x00" + tree(), "json"),
        ("invalid UTF-8 in a string", tree(extra='"name": "aXb"').encode().replace(b"X", b"\xff\xfe"),
         "json"),
        ("invalid UTF-8 outside strings", b"\xc3" + tree().encode(), "json"),
        ("overlong UTF-8 in a string",
         tree(extra='"name": "aXb"').encode().replace(b"X", b"\xc0\xaf"), "json"),
        ("UTF-8 BOM", "\ufeff" + tree(), "json"),
        ("unpaired surrogate escape", tree(extra='"name": "\\ud800"'), "json"),
        ("escaped NUL in a name (valid)", tree(extra='"name": "a\\u0000b"'), None),
        ("raw control character", tree(extra='"name": "a\x01b"'), "json"),
        # ---- types and ranges
        ("page_size 0", tree(page_size="0"), "page_size"),
        ("page_size -1", tree(page_size="-1"), "page_size"),
        ("page_size 4097", tree(page_size="4097"), "page_size"),
        ("page_size 1048576", tree(page_size="1048576"), "page_size"),
        ("page_size 2^31-1", tree(page_size="2147483647"), "page_size"),
        ("page_size 2^63", tree(page_size="9223372036854775808"), "page_size"),
        ("page_size 1e3", tree(page_size="1e3"), "page_size"),
        ("page_size 16.0", tree(page_size="16.0"), "page_size"),
        ("page_size string", tree(page_size='"16"'), "page_size"),
        ("page_size 300 digits", tree(page_size="9" * 300), "page_size"),
        ("tokens 0", tree('{"id": 0, "parent": null, "tokens": 0}'), "nodes[0].tokens"),
        ("tokens -1", tree('{"id": 0, "parent": null, "tokens": -1}'), "nodes[0].tokens"),
        ("tokens 2^31", tree('{"id": 0, "parent": null, "tokens": 2147483648}'),
         "nodes[0].tokens"),
        ("tokens missing", tree('{"id": 0, "parent": null}'), "nodes[0]"),
        ("tokens -0 float", tree('{"id": 0, "parent": null, "tokens": -0.0}'), "nodes[0].tokens"),
        ("id 2^63", tree('{"id": 9223372036854775808, "parent": null, "tokens": 4}'),
         "nodes[0].id"),
        ("id string", tree('{"id": "a", "parent": null, "tokens": 4}'), "nodes[0].id"),
        ("parent float", tree(ROOT + ', {"id": 1, "parent": 0.0, "tokens": 4}'),
         "nodes[1].parent"),
        ("heads 7/2", tree(extra='"heads": [7, 2]'), "heads"),
        ("heads one entry", tree(extra='"heads": [8]'), "heads"),
        ("heads 0/0", tree(extra='"heads": [0, 0]'), "heads"),
        ("head_dim -64", tree(extra='"head_dim": -64'), "head_dim"),
        ("nodes an object", '{"page_size": 16, "nodes": {}, "queries": []}', "nodes"),
        ("nodes missing", '{"page_size": 16, "queries": [{"node": 0}]}', "nodes"),
        ("nodes empty", '{"page_size": 16, "nodes": [], "queries": []}', "nodes"),
        ("unknown top-level key", tree(extra='"colour": 3'), "colour"),
        ("unknown node key", tree('{"id": 0, "parent": null, "tokens": 4, "weight": 1}'),
         "nodes[0].weight"),
        ("query without node", tree(queries="{}"), "queries[0]"),
        ("query node string", tree(queries='{"node": "0"}'), "queries[0].node"),
        ("query unknown node", tree(queries='{"node": 7}'), "queries[0].node"),
        ("no queries", tree(queries=""), "queries"),
        # ---- tree structure
        ("duplicate node ids", tree(ROOT + ', {"id": 0, "parent": null, "tokens": 4}'),
         "nodes[1].id"),
        ("self parent", tree('{"id": 0, "parent": 0, "tokens": 4}'), "nodes[0].parent"),
        ("two-node cycle", tree('{"id": 0, "parent": 1, "tokens": 4}, '
                                '{"id": 1, "parent": 0, "tokens": 4}'), "cycle"),
        ("long cycle", tree(", ".join(f'{{"id": {i}, "parent": {(i + 1) % 500}, "tokens": 1}}'
                                      for i in range(500))), "cycle"),
        ("unknown parent", tree(ROOT + ', {"id": 1, "parent": 9, "tokens": 4}'),
         "nodes[1].parent"),
        ("child before parent (valid)", tree('{"id": 1, "parent": 0, "tokens": 4}, ' + ROOT,
                                             queries='{"node": 1}'), None),
        ("sparse node ids (valid)", tree('{"id": 1000000000000, "parent": null, "tokens": 4}, '
                                         '{"id": -5, "parent": 1000000000000, "tokens": 4}',
                                         queries='{"node": -5}'), None),
        # ---- pages
        ("page out of range", tree(ROOT_PAGES, extra='"num_pages": 1'), "nodes[0].pages[1]"),
        ("page id -1", tree('{"id": 0, "parent": null, "tokens": 16, "pages": [-1]}'),
         "nodes[0].pages[0]"),
        ("page id 2^31", tree('{"id": 0, "parent": null, "tokens": 16, "pages": [2147483648]}'),
         "nodes[0].pages[0]"),
        ("page listed twice", tree('{"id": 0, "parent": null, "tokens": 32, "pages": [1, 1]}'),
         "nodes[0].pages[1]"),
        ("page aliased by two roots", tree(ROOT_PAGES + ', {"id": 1, "parent": null, "tokens": 4, '
                                           '"pages": [1]}'), "nodes[1].pages[0]"),
        ("page aliased by a child", tree('{"id": 0, "parent": null, "tokens": 16, "pages": [0]}, '
                                         '{"id": 1, "parent": 0, "tokens": 20, "pages": [0, 1]}'),
         "nodes[1].pages[0]"),
        ("too few pages", tree('{"id": 0, "parent": null, "tokens": 33, "pages": [0, 1]}'),
         "nodes[0].pages"),
        ("too many pages", tree('{"id": 0, "parent": null, "tokens": 3, "pages": [0, 1]}'),
         "nodes[0].pages"),
        ("page_offset 16", tree('{"id": 0, "parent": null, "tokens": 3, "page_offset": 16, '
                                '"pages": [0]}'), "nodes[0].page_offset"),
        ("page_offset without pages", tree('{"id": 0, "parent": null, "tokens": 3, '
                                           '"page_offset": 2}'), "nodes[0].page_offset"),
        ("copy-on-write sharing (valid)", tree('{"id": 0, "parent": null, "tokens": 10, '
                                               '"pages": [0]}, {"id": 1, "parent": 0, "tokens": 4, '
                                               '"page_offset": 10, "pages": [0]}',
                                               queries='{"node": 1}'), None),
        ("num_pages -1", tree(extra='"num_pages": -1'), "num_pages"),
        ("num_pages 2^31", tree(extra='"num_pages": 2147483648'), "num_pages"),
        ("num_pages below the pages", tree(ROOT_PAGES, extra='"num_pages": 1'),
         "nodes[0].pages[1]"),
        ("num_pages 2^31-1 (valid)", tree(ROOT_PAGES, extra='"num_pages": 2147483647'), None),
        ("free_pages listed twice", tree(ROOT_PAGES, extra='"num_pages": 8, "free_pages": [3, 3]'),
         "free_pages[1]"),
        ("free_pages in use", tree(ROOT_PAGES, extra='"num_pages": 8, "free_pages": [1]'),
         "free_pages[0]"),
        ("free_pages out of range", tree(ROOT_PAGES, extra='"num_pages": 8, "free_pages": [8]'),
         "free_pages[0]"),
        ("laid-out pages over the limit", tree('{"id": 0, "parent": null, "tokens": 2147483647}, '
                                               '{"id": 1, "parent": null, "tokens": 2147483647}',
                                               page_size="1"), "kMaxTreeTokens"),
        # ---- nesting and sizes
        ("nesting 64 (valid)", _nested(62), None),
        ("nesting 100", _nested(100), "json"),
        ("nesting 100000", _nested(100000), "json"),
        ("80k-key object (valid)", _flat_object(80000), None),
        ("80k-key object with a duplicate", _flat_object(80000, dup=True), "comment"),
        ("1M-element ignored array (valid)", tree(extra='"comment": [' + ",".join(["0"] * 10**6)
                                                  + "]"), None),
        ("8 MB ignored string (valid)", tree(extra='"name": "' + "x" * (8 << 20) + '"'), None),
        ("200k-digit number", tree(extra='"comment": ' + "1" * 200000), None),
        ("chain of 4096 nodes with 8193 queries", _chain(4096, 8193), "kMaxPathDepthSum"),
        ("chain of 20000 nodes (valid)", _chain(20000), None),
        ("one node listing 2^20 page ids", tree(
            '{"id": 0, "parent": null, "tokens": 1048576, "pages": ['
            + ",".join(str(i) for i in range(1 << 20)) + "]}", page_size="1"), None),
        ("one page id repeated 2^20 times", tree(
            '{"id": 0, "parent": null, "tokens": 1048576, "pages": ['
            + ",".join(["0"] * (1 << 20)) + "]}", page_size="1"), "nodes[0].pages[1]"),
    ]
    return [(n, t.encode() if isinstance(t, str) else t, w) for n, t, w in s]
