// libFuzzer target over the JSON tree reader: any input either parses into a valid tree or throws
// std::invalid_argument; an accepted tree must validate and survive a write/read round trip
// unchanged. Anything else (another exception, a crash, a mismatch) aborts so the fuzzer reports
// it.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "treeattn/tree/builders.h"
#include "treeattn/tree/prefix_tree.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treeattn;
  const std::string text(reinterpret_cast<const char*>(data), size);
  PrefixTree tree;
  try {
    tree = tree_from_json(text);
  } catch (const std::invalid_argument&) {
    return 0;  // a clear error is the expected outcome for most inputs
  }
  validate(tree);  // must not throw: the reader only returns valid trees
  (void)build_index(tree);
  (void)unique_tokens(tree);
  int64_t pages = 0;
  for (const TreeNode& nd : tree.nodes) pages += static_cast<int64_t>(nd.pages.size());
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
