// libFuzzer target over the JSON tree reader: any input either parses into a valid tree or throws
// std::invalid_argument; an accepted tree must validate and survive a write/read round trip
// unchanged. The reader's heap use is measured per input (sanitizer malloc/free hooks) and must
// stay within the bound json.cc states: 6 bytes per byte of text, plus about 8 bytes per page it
// lays out itself (checked here with margins: 8 bytes per byte, 16 per page listed by the tree,
// 1 MB). Anything else (another exception, a crash, a mismatch, more memory) aborts so the fuzzer
// reports it. tools/test.sh runs it with the seeds of tests/fuzz/make_seeds.py (large flat
// objects, long arrays, many nodes and pages, big page sizes) and per-input time and memory limits
// (fuzz_tree_json.flags).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "fuzz_heap.h"
#include "treeattn/tree/json.h"
#include "treeattn/tree/prefix_tree.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  treeattn::fuzz::track_heap();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treeattn;
  const std::string text(reinterpret_cast<const char*>(data), size);
  PrefixTree tree;
  bool accepted = true;
  fuzz::HeapPeak peak;
  try {
    tree = tree_from_json(text);
  } catch (const std::invalid_argument&) {
    accepted = false;  // a clear error is the expected outcome for most inputs
  }
  const int64_t growth = peak.growth();
  int64_t pages = 0;
  for (const TreeNode& nd : tree.nodes) pages += static_cast<int64_t>(nd.pages.size());
  // A rejected input may have had up to kMaxBuilderPages (src/tree/tree_internal.h) pages laid
  // out before a later check failed.
  const int64_t laid_out = accepted ? pages : int64_t{1} << 24;
  const int64_t bound = 8 * static_cast<int64_t>(size) + 16 * laid_out + (int64_t{1} << 20);
  if (growth > bound) {
    std::fprintf(stderr, "tree_from_json used %lld heap bytes for %zu bytes of text (bound %lld)\n",
                 static_cast<long long>(growth), size, static_cast<long long>(bound));
    __builtin_trap();
  }
  if (!accepted) return 0;
  validate(tree);  // must not throw: the reader only returns valid trees
  (void)build_index(tree);
  (void)unique_tokens(tree);
  if (pages > 200000) return 0;  // keep the round trip cheap
  const std::string out = tree_to_json(tree);
  const PrefixTree back = tree_from_json(out);
  if (tree_to_json(back) != out) __builtin_trap();
  if (back.num_queries() != tree.num_queries()) __builtin_trap();
  for (int32_t q = 0; q < tree.num_queries(); ++q) {
    if (query_context(back, q) != query_context(tree, q)) __builtin_trap();
  }
  return 0;
}
