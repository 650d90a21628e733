// libFuzzer target over the block-table builder and the tree updates. The input bytes decode
// into a page size, requests (length, table) with small page ids so that prefixes collide, then a
// list of update operations. Builders and updates may only throw std::invalid_argument; every
// tree they return must validate and round-trip to the same block tables. Anything else aborts.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "fuzz_bytes.h"
#include "treeattn/tree/builders.h"
#include "treeattn/tree/prefix_tree.h"

namespace {

using treeattn::fuzz::Bytes;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treeattn;
  Bytes in{data, size};
  const int32_t page_size = 1 + in.next() % 20;
  const uint8_t np = in.next();
  const int32_t num_pages = np < 128 ? 0 : np % 64;
  const int requests = 1 + in.next() % 24;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int64_t> lens;
  for (int r = 0; r < requests && in.more(); ++r) {
    const uint8_t lb = in.next();
    const int64_t len = lb == 255 ? 0 : 1 + lb % 96;  // 0 now and then to hit the error path
    const int entries = in.next() % 12;
    std::vector<int32_t> tb;
    for (int k = 0; k < entries; ++k) {
      const uint8_t b = in.next();
      tb.push_back(b == 255 ? -1 : b % 40);
    }
    tables.push_back(tb);
    lens.push_back(len);
  }
  PrefixTree tree;
  try {
    tree = tree_from_block_tables(tables, lens, page_size, num_pages);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  validate(tree);
  std::vector<std::vector<int32_t>> out;
  std::vector<int64_t> out_lens;
  to_block_tables(tree, &out, &out_lens);
  if (out_lens != lens) __builtin_trap();
  for (size_t r = 0; r < tables.size(); ++r) {
    const size_t need = static_cast<size_t>((lens[r] + page_size - 1) / page_size);
    if (out[r].size() != need) __builtin_trap();
    for (size_t k = 0; k < need; ++k)
      if (out[r][k] != tables[r][k]) __builtin_trap();
  }
  // Updates on the built tree, with a stocked free-page pool.
  for (int k = 0; k < 64; ++k) tree.free_pages.push_back(tree.num_pages++);
  while (in.more()) {
    const uint8_t op = in.next();
    const int32_t q = static_cast<int32_t>(in.next() % (tree.num_queries() + 1));
    const uint8_t arg = in.next();
    try {
      switch (op % 4) {
        case 0:
          tree.append_tokens(q, arg % 50);
          break;
        case 1:
          tree.add_query(arg % (static_cast<int32_t>(tree.nodes.size()) + 1));
          break;
        case 2:
          tree.remove_query(q);
          break;
        default:
          tree.fork_query(q, arg % 4);
          break;
      }
    } catch (const std::invalid_argument&) {
      // bad index, k = 0, empty pool, dead node, last query: all clear errors
    }
    validate(tree);
    if (tree.num_queries() > 4096) break;
  }
  to_block_tables(tree, &out, &out_lens);
  return 0;
}
