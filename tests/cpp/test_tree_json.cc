// JSON tree format: the issue's example, the example files in tests/data, exact round trips of
// random trees, reader errors (syntax, depth, integer ranges, paths naming the offender), values
// the reader skips (still checked), and its time and peak memory on large inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "test_tree_util.h"
#include "treeattn/tree/json.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::expect_invalid;

const char* kIssueExample = R"({"page_size": 16, "heads": [32, 8], "head_dim": 128,
 "nodes": [{"id": 0, "parent": null, "tokens": 4096},
           {"id": 1, "parent": 0, "tokens": 256}],
 "queries": [{"node": 1}, {"node": 1}]})";

TEST(TreeJson, IssueExampleParses) {
  const PrefixTree t = tree_from_json(kIssueExample);
  EXPECT_EQ(t.page_size, 16);
  EXPECT_EQ(t.shape.num_qo_heads, 32);
  EXPECT_EQ(t.shape.num_kv_heads, 8);
  EXPECT_EQ(t.shape.head_dim, 128);
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[0].pages.size(), 256u);
  EXPECT_EQ(t.nodes[1].parent, 0);
  EXPECT_EQ(t.nodes[1].page_offset, 0);
  EXPECT_EQ(t.nodes[1].pages.front(), 256);
  EXPECT_EQ(t.num_pages, 272);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({1, 1}));
  EXPECT_EQ(query_context(t, 0), 4352);
}

TEST(TreeJson, DataFilesParse) {
  const std::string dir = TREEATTN_TEST_DATA_DIR;
  const PrefixTree ex = tree_from_json_file(dir + "/issue_example.json");
  testing_util::expect_same_tree(ex, tree_from_json(kIssueExample));

  const PrefixTree forest = tree_from_json_file(dir + "/forest_tile_edges.json");
  EXPECT_EQ(build_index(forest).roots.size(), 2u);
  EXPECT_EQ(forest.num_queries(), 5);
  EXPECT_EQ(query_context(forest, 0), 127 + 17 + 65);
  EXPECT_EQ(forest.nodes[1].page_offset, 127 % 16);  // starts mid-page: own first page
  testing_util::expect_distinct_slots(forest);

  const PrefixTree pages = tree_from_json_file(dir + "/explicit_pages.json");
  EXPECT_EQ(pages.num_pages, 12);
  EXPECT_EQ(pages.nodes[2].pages, std::vector<int32_t>({0, 11}));
  EXPECT_EQ(pages.free_pages, std::vector<int32_t>({1, 2}));
  EXPECT_EQ(testing_util::expand(pages, 0),
            (std::vector<std::pair<int32_t, int32_t>>{
                {7, 0}, {7, 1}, {7, 2}, {7, 3}, {3, 0}, {3, 1}, {9, 2}, {9, 3}}));

  const PrefixTree chain = tree_from_json_file(dir + "/deep_chain.json");
  EXPECT_EQ(query_context(chain, 0), 15 + 16 + 17 + 1 + 31 + 32 + 33 + 63 + 64 + 65);
  testing_util::expect_distinct_slots(chain);
  expect_invalid([&] { tree_from_json_file(dir + "/no_such_file.json"); }, {"no_such_file"});
}

TEST(TreeJson, MidPageLayoutWithoutPages) {
  const PrefixTree t = tree_from_json(
      R"({"page_size": 8, "nodes": [{"id": 5, "tokens": 10}, {"id": 6, "parent": 5, "tokens": 7}],
          "queries": [{"node": 6}]})");
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({0, 1}));
  EXPECT_EQ(t.nodes[1].page_offset, 2);
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({2, 3}));  // 2 + 7 slots -> 2 fresh pages
  testing_util::expect_distinct_slots(t);
}

TEST(TreeJson, RoundTripRandomTrees) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    RandomTreeOptions opts;
    opts.page_size = 1 + static_cast<int32_t>(seed % 20);
    PrefixTree t = random_tree(seed, opts);
    t.shape = {static_cast<int32_t>(8 * (seed % 3)), static_cast<int32_t>(8 * (seed % 3)), 64};
    const std::string text = tree_to_json(t);
    const PrefixTree back = tree_from_json(text);
    testing_util::expect_same_tree(t, back);
    EXPECT_EQ(tree_to_json(back), text) << "seed " << seed;
  }
}

TEST(TreeJson, RoundTripDropsDeadSlots) {
  PrefixTree t = random_tree(7);
  while (t.num_queries() > 1) t.remove_query(0);
  const PrefixTree back = tree_from_json(tree_to_json(t));
  ASSERT_EQ(back.num_queries(), 1);
  EXPECT_EQ(testing_util::expand(back, 0), testing_util::expand(t, 0));
  EXPECT_EQ(back.free_pages, t.free_pages);
}

TEST(TreeJson, SyntaxErrors) {
  expect_invalid([] { tree_from_json(""); }, {"json", "end of input"});
  expect_invalid([] { tree_from_json("{\"nodes\": [}"); }, {"json", "line 1"});
  expect_invalid([] { tree_from_json("{\"page_size\": 16,}"); }, {"json"});
  expect_invalid([] { tree_from_json("{} x"); }, {"json", "after the JSON value"});
  expect_invalid([] { tree_from_json("{\"page_size\": 016}"); }, {"json"});
  expect_invalid([] { tree_from_json("{\"name\": \"a\\qb\"}"); }, {"json", "escape", "name"});
  expect_invalid([] { tree_from_json("{\"name\": \"\\ud800\"}"); }, {"json", "surrogate"});
  expect_invalid([] { tree_from_json("{\"name\": \"a\nb\"}"); }, {"json", "control"});
  expect_invalid([] { tree_from_json("[tru]"); }, {"json", "literal"});
  expect_invalid([] { tree_from_json("{\"nodes\": [{\"id\": 1,\n \"tokens\": -}]}"); },
                 {"json", "line 2", "nodes[0].tokens"});
  expect_invalid([] { tree_from_json("[1, 2]"); }, {"json", "expected an object"});
}

TEST(TreeJson, DepthLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_invalid([&] { tree_from_json(deep); }, {"json", "nesting"});
  const std::string ok = std::string(30, '[') + std::string(30, ']');
  expect_invalid([&] { tree_from_json(ok); }, {"json", "expected an object"});
}

TEST(TreeJson, IntegerRanges) {
  auto tree_with_tokens = [](const std::string& tok) {
    return "{\"page_size\": 4096, \"nodes\": [{\"id\": 0, \"tokens\": " + tok +
           "}], \"queries\": [{\"node\": 0}]}";
  };
  EXPECT_EQ(tree_from_json(tree_with_tokens("2147483647")).nodes.at(0).tokens, 2147483647);
  expect_invalid(
      [] {
        tree_from_json(R"({"page_size": 1, "nodes": [{"id": 0, "tokens": 2147483647}],
                           "queries": [{"node": 0}]})");
      },
      {"nodes", "pages"});
  expect_invalid([&] { tree_from_json(tree_with_tokens("2147483648")); },
                 {"nodes[0].tokens", "out of range"});
  expect_invalid([&] { tree_from_json(tree_with_tokens("99999999999999999999999")); },
                 {"nodes[0].tokens", "out of range"});
  expect_invalid([&] { tree_from_json(tree_with_tokens("0")); }, {"nodes[0].tokens"});
  expect_invalid([&] { tree_from_json(tree_with_tokens("1.5")); }, {"nodes[0].tokens", "integer"});
  expect_invalid([&] { tree_from_json(tree_with_tokens("1e3")); }, {"nodes[0].tokens"});
  expect_invalid([&] { tree_from_json(tree_with_tokens("\"7\"")); },
                 {"nodes[0].tokens", "got a string"});
  expect_invalid(
      [] {
        tree_from_json(R"({"page_size": 0, "nodes": [{"id": 0, "tokens": 1}],
                           "queries": [{"node": 0}]})");
      },
      {"page_size"});
  // int64 ids at the extremes are fine.
  const PrefixTree t = tree_from_json(
      R"({"nodes": [{"id": -9223372036854775808, "tokens": 1},
                    {"id": 9223372036854775807, "parent": -9223372036854775808, "tokens": 1}],
          "queries": [{"node": 9223372036854775807}]})");
  EXPECT_EQ(t.nodes[1].parent, 0);
  expect_invalid([] { tree_from_json(R"({"nodes": [{"id": 9223372036854775808, "tokens": 1}]})"); },
                 {"nodes[0].id", "out of range"});
}

TEST(TreeJson, SemanticErrorsNameThePath) {
  const std::string head = R"({"page_size": 16, "nodes": [{"id": 0, "tokens": 4}, )";
  expect_invalid(
      [&] {
        tree_from_json(head +
                       R"({"id": 1, "parent": 99, "tokens": 4}], "queries": [{"node": 1}]})");
      },
      {"nodes[1].parent", "unknown parent id 99"});
  expect_invalid(
      [&] {
        tree_from_json(head + R"({"id": 0, "parent": 0, "tokens": 4}], "queries": [{"node": 0}]})");
      },
      {"nodes[1].id", "duplicate id 0"});
  expect_invalid(
      [&] { tree_from_json(head + R"({"id": 1, "tokens": 4}], "queries": [{"node": 5}]})"); },
      {"queries[0].node", "unknown node id 5"});
  expect_invalid(
      [&] { tree_from_json(head + R"({"id": 1, "tokns": 4}], "queries": [{"node": 1}]})"); },
      {"nodes[1].tokns", "unknown key"});
  expect_invalid([&] { tree_from_json(head + R"({"id": 1}], "queries": [{"node": 1}]})"); },
                 {"nodes[1].tokens", "missing"});
  expect_invalid(
      [&] { tree_from_json(head + R"({"id": 1, "tokens": 4, "tokens": 5}], "queries": []})"); },
      {"json", "duplicate key", "nodes[1]"});
  expect_invalid([&] { tree_from_json(head + R"({"id": 1, "tokens": 4}], "queries": []})"); },
                 {"queries", "empty"});
  expect_invalid([] { tree_from_json(R"({"nodes": [], "queries": [{"node": 0}]})"); },
                 {"nodes", "empty"});
  expect_invalid([] { tree_from_json(R"({"queries": [{"node": 0}]})"); }, {"nodes", "missing"});
  // Cycle: 0 -> 1 -> 0 besides a proper root.
  expect_invalid(
      [] {
        tree_from_json(R"({"nodes": [{"id": 0, "parent": 1, "tokens": 1},
                                     {"id": 1, "parent": 0, "tokens": 1},
                                     {"id": 2, "tokens": 1}],
                           "queries": [{"node": 2}]})");
      },
      {"cycle", ".parent"});
  // Pages: all or nothing; count must match; ids within num_pages.
  expect_invalid(
      [&] {
        tree_from_json(head +
                       R"({"id": 1, "tokens": 4, "pages": [3]}], "queries": [{"node": 1}]})");
      },
      {"nodes", "every node"});
  expect_invalid(
      [] {
        tree_from_json(R"({"page_size": 4, "nodes": [{"id": 0, "tokens": 5, "pages": [0]}],
                           "queries": [{"node": 0}]})");
      },
      {"nodes[0].pages", "need 2"});
  expect_invalid(
      [] {
        tree_from_json(R"({"page_size": 4, "num_pages": 2,
                           "nodes": [{"id": 0, "tokens": 5, "pages": [0, 2]}],
                           "queries": [{"node": 0}]})");
      },
      {"nodes[0].pages[1]", "page id 2"});
  expect_invalid(
      [] {
        tree_from_json(R"({"page_size": 4, "nodes": [{"id": 0, "tokens": 5, "pages": [0, -2]}],
                           "queries": [{"node": 0}]})");
      },
      {"nodes[0].pages[1]"});
  expect_invalid(
      [] {
        tree_from_json(R"({"page_size": 4, "nodes": [{"id": 0, "tokens": 3, "page_offset": 4,
                           "pages": [0]}], "queries": [{"node": 0}]})");
      },
      {"nodes[0].page_offset"});
  expect_invalid([] { tree_from_json(R"({"heads": [32], "nodes": []})"); }, {"heads"});
  expect_invalid([] { tree_from_json(R"({"heads": [32, 5], "nodes": []})"); }, {"heads"});
}

TEST(TreeJson, SkippedValuesAreChecked) {
  const std::string tail = R"("nodes": [{"id": 0, "tokens": 1}], "queries": [{"node": 0}]})";
  const PrefixTree t = tree_from_json(
      R"({"comment": [1, -2.5e3, {"a": [true, null, {"b": "x\u00e9"}]}, [], {}], "dtype": "fp16",
          "name": {"a": 1, "b": {"a": 2}, "\u0062b": 3}, )" +
      tail);
  EXPECT_EQ(t.nodes.size(), 1u);
  expect_invalid([&] { tree_from_json(R"({"comment": [1, 2,], )" + tail); },
                 {"json", "unexpected character ']'", "comment[2]"});
  expect_invalid([&] { tree_from_json(R"({"comment": {"a": 1, "b": 2, "a": 3}, )" + tail); },
                 {"json", "duplicate key \"a\"", "line 1 column 30", "in comment)"});
  // Keys are compared decoded, in nested skipped objects too.
  expect_invalid([&] { tree_from_json(R"({"name": [{"k": {"ab": 1, "a\u0062": 2}}], )" + tail); },
                 {"json", "duplicate key \"ab\"", "name[0].k"});
  expect_invalid([&] { tree_from_json(R"({"comment": [01], )" + tail); },
                 {"json", "expected ',' or ']'", "in comment)"});
  expect_invalid([&] { tree_from_json(R"({"comment": "a)"); }, {"json", "unterminated"});
  expect_invalid([&] { tree_from_json(std::string(R"({"comment": )") + std::string(70, '[')); },
                 {"json", "nesting"});
}

std::string flat_object(int keys, const std::string& last_key) {
  std::string s = "{";
  for (int i = 0; i < keys; ++i)
    s += "\"key" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  return s + "\"" + last_key + "\": 0}";
}

TEST(TreeJson, FlatObjectOf80kKeysIsLinear) {
  // The duplicate-key check compared every key with every earlier one: 80,000 keys (about 1 MB)
  // took 33 s. Linear, it takes milliseconds; 2 s is a generous bound for a loaded machine.
  const std::string tail = R"("nodes": [{"id": 0, "tokens": 1}], "queries": [{"node": 0}]})";
  const std::string ok = "{\"comment\": " + flat_object(80000, "last") + ", " + tail;
  const std::string dup = "{\"comment\": " + flat_object(80000, "key17") + ", " + tail;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tree_from_json(ok).nodes.size(), 1u);
  expect_invalid([&] { tree_from_json(dup); }, {"json", "duplicate key \"key17\"", "comment"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);
}

// Growth of the peak resident memory (bytes) while `fn` runs: the kernel's high-water mark
// VmHWM, reset through /proc/self/clear_refs (Linux 4.0+) after free heap memory is returned to
// the system, so that the measure starts from what is in use. -1 where that is not available.
int64_t peak_rss_growth(const std::function<void()>& fn) {
  auto status_kb = [](const std::string& field) -> int64_t {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      if (line.compare(0, field.size(), field) == 0) return std::stoll(line.substr(field.size()));
    return -1;
  };
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5" << std::flush;
    if (!reset) return -1;
  }
  const int64_t base = status_kb("VmHWM:"), rss = status_kb("VmRSS:");
  if (base < 0 || rss < 0 || base > rss + 1024) return -1;  // the reset did not take
  fn();
  return (status_kb("VmHWM:") - base) * 1024;
}

TEST(TreeJson, MemoryWithinSixTimesTheText) {
  // A 10 MB tree: an ignored array of 4M numbers, an ignored object of 20k keys, and 2000 nodes
  // listing 200k pages. The reader kept a DOM of ~100-byte values (45x the text); its bound is
  // 6 bytes per byte of text beyond the text itself (json.cc).
  std::string text = R"({"comment": [)";
  for (int i = 0; i < 4000000; ++i) text += i ? ",0" : "0";
  text += "], \"name\": " + flat_object(20000, "last") + R"(, "page_size": 16, "nodes": [)";
  int32_t page = 0;
  for (int i = 0; i < 2000; ++i) {
    text += (i ? ", " : "") + std::string(R"({"id": )") + std::to_string(i) +
            (i ? ", \"parent\": " + std::to_string(i - 1) : "") + R"(, "tokens": 1600, "pages": [)";
    for (int k = 0; k < 100; ++k) text += (k ? ", " : "") + std::to_string(page++);
    text += "]}";
  }
  text += R"(], "queries": [{"node": 1999}]})";
  ASSERT_GT(text.size(), size_t{8} << 20);
  PrefixTree t;
  const int64_t growth = peak_rss_growth([&] { t = tree_from_json(text); });
  if (growth < 0) GTEST_SKIP() << "peak RSS cannot be reset on this system";
  EXPECT_EQ(unique_tokens(t), 2000 * 1600);
  EXPECT_LE(growth, 6 * static_cast<int64_t>(text.size()))
      << "peak grew by " << growth << " bytes for " << text.size() << " bytes of text";
}

TEST(TreeJson, StreamOfNulBytesStopsAtTheFirstChunk) {
  // /dev/zero has no size: the reader streams it, and its first NUL byte ends the read (JSON text
  // never holds one) instead of 256 MB of zeros read up to kMaxJsonFileBytes.
  if (!std::filesystem::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero on this system";
  const int64_t growth = peak_rss_growth([&] {
    expect_invalid([&] { tree_from_json_file("/dev/zero"); }, {"path", "NUL byte at offset 0"});
  });
  if (growth >= 0) EXPECT_LT(growth, int64_t{64} << 20) << "peak grew by " << growth << " bytes";
  // A NUL byte in the middle of a regular file is named at its offset.
  const std::string file = ::testing::TempDir() + "/nul_inside.json";
  {
    std::ofstream out(file, std::ios::binary);
    out << R"({"page_size": 16,)" << '\0' << "}";
  }
  expect_invalid([&] { tree_from_json_file(file); }, {"path", "NUL byte at offset 17"});
  std::filesystem::remove(file);
}

TEST(TreeJson, StringsWithEscapesAreAccepted) {
  const PrefixTree t = tree_from_json(
      "{\"name\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\\\ \\/\", \"comment\": \"\", "
      "\"nodes\": [{\"id\": 3, \"parent\": null, \"tokens\": 1}], \"queries\": [{\"node\": 3}]}");
  EXPECT_EQ(t.nodes.size(), 1u);
}

}  // namespace
}  // namespace treeattn
