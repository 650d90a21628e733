// libFuzzer target over the block-table builder and the tree updates. The input bytes decode
// into a page size (now and then one at or past kMaxPageSize, or hostile), requests (length,
// table) with small page ids so that prefixes collide, then a list of update operations: single
// appends, adds, removes, forks, the checked num_pages setter, and bulk appends of up to 131k
// pages' worth of tokens on given pages (reversed, also pooled, with a repeat or a page in use)
// that reach many pages. Builders and updates may only throw std::invalid_argument, and an update
// that throws must leave the tree as it was; every tree they return must validate and round-trip to
// the same block tables. Anything else aborts.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "fuzz_bytes.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/prefix_tree.h"

namespace {

using treeattn::fuzz::Bytes;

constexpr int32_t kBigPageSizes[] = {treeattn::kMaxPageSize,
                                     treeattn::kMaxPageSize + 1,
                                     1 << 20,
                                     std::numeric_limits<int32_t>::max(),
                                     0,
                                     -1};

// What a failed update must leave as it was (cheap enough for trees of millions of pages).
struct Fingerprint {
  uint64_t version;
  int32_t num_pages;
  size_t nodes, queries, free_pages;
  int64_t tokens, listed, live;
  bool operator==(const Fingerprint& o) const {
    return version == o.version && num_pages == o.num_pages && nodes == o.nodes &&
           queries == o.queries && free_pages == o.free_pages && tokens == o.tokens &&
           listed == o.listed && live == o.live;
  }
};

Fingerprint fingerprint(const treeattn::PrefixTree& t) {
  Fingerprint f{
      t.version, t.num_pages, t.nodes.size(), t.query_node.size(), t.free_pages.size(), 0, 0, 0};
  for (const treeattn::TreeNode& nd : t.nodes) {
    if (!nd.alive) continue;
    f.tokens += nd.tokens;
    f.listed += static_cast<int64_t>(nd.pages.size());
    ++f.live;
  }
  return f;
}

// Runs one update; one that throws std::invalid_argument must leave the tree as it was.
template <typename F>
void checked(treeattn::PrefixTree& tree, F&& update) {
  const Fingerprint before = fingerprint(tree);
  try {
    update();
  } catch (const std::invalid_argument&) {
    if (!(fingerprint(tree) == before)) __builtin_trap();
    throw;
  }
}

// Appends about `count` pages' worth of tokens to query q on fresh page ids given in a list;
// `flags` picks their order, whether the pool lists them too, and a fault at the end of the
// pages needed (a repeat or a page in use).
void bulk_append(treeattn::PrefixTree& tree, int32_t q, int64_t count, uint8_t flags) {
  const int64_t base = tree.num_pages;
  const int64_t m = count + 2;
  if (base + m > std::numeric_limits<int32_t>::max()) return;
  checked(tree, [&] { tree.set_num_pages(static_cast<int32_t>(base + m)); });
  std::vector<int32_t> pages(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    pages[i] = static_cast<int32_t>(flags & 1 ? base + m - 1 - i : base + i);
  if (flags & 2) tree.free_pages.insert(tree.free_pages.end(), pages.begin(), pages.end());
  if ((flags & 12) == 4) pages[count - 1] = pages[0];  // a repeat among the pages needed
  if ((flags & 12) == 8) {                             // a page in use
    for (const treeattn::TreeNode& nd : tree.nodes)
      if (nd.alive && !nd.pages.empty()) pages[count - 1] = nd.pages[0];
  }
  const int64_t k = std::min<int64_t>(count * tree.page_size, std::numeric_limits<int32_t>::max());
  checked(tree, [&] { tree.append_tokens(q, static_cast<int32_t>(k), pages); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treeattn;
  Bytes in{data, size};
  const uint8_t pb = in.next();
  const int32_t page_size = pb >= 250 ? kBigPageSizes[pb - 250] : 1 + pb % 20;
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
  int heavy_ops = 0;
  while (in.more()) {
    const uint8_t op = in.next();
    const int32_t q = static_cast<int32_t>(in.next() % (tree.num_queries() + 1));
    const uint8_t arg = in.next();
    try {
      if (op >= 240) {
        const int64_t count = 1 + ((int64_t{arg} << 8 | in.next()) << 1);
        const uint8_t flags = in.next();
        if (heavy_ops == 0) bulk_append(tree, q, count, flags);
      } else if (op >= 232) {
        checked(tree, [&] { tree.set_num_pages(tree.num_pages + static_cast<int8_t>(arg)); });
      } else {
        checked(tree, [&] {
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
        });
      }
    } catch (const std::invalid_argument&) {
      // bad index, k = 0, empty pool, dead node, last query, limits: all clear errors
    }
    validate(tree);
    if (tree.num_queries() > 4096) break;
    // A few operations once the tree or its pool is large keep every input within a second.
    const Fingerprint now = fingerprint(tree);
    if (now.listed + static_cast<int64_t>(now.free_pages) > (int64_t{1} << 16) && ++heavy_ops > 4)
      break;
  }
  to_block_tables(tree, &out, &out_lens);
  return 0;
}
