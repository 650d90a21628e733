// The stable JSON tree format (include/treeattn/tree/json.h): a small hand-written, strict JSON
// reader (depth limit, exact integer ranges, \u escapes, strings checked to be UTF-8, duplicate
// keys rejected in every object, errors naming the JSON path such as "nodes[3].parent") and the
// writer tree_to_json(). tree_from_json_file() refuses a path holding a NUL byte and a regular file
// over the size limit before reading it, and reads a stream (a pipe) in chunks up to the limit
// into a buffer reserved once (resident memory: what was read); a NUL byte, never part of JSON
// text, ends the read of any file (/dev/zero: its first chunk).
//
// The reader is a single pass that fills the tree's own arrays: node fields, page ids as int32,
// query node ids. Values it does not use ("dtype", "name", "comment") are checked and dropped;
// only the keys of their objects are kept while the object is open (the duplicate check).
// Arrays it keeps are counted first, then reserved exactly.
// Cost, for text of T bytes (at most kMaxJsonFileBytes):
//  * time O(T), plus O(k log k) to check the k keys of each skipped object and O(n log n) for
//    n node ids that are not compact (sorted instead of tabled);
//  * memory beyond the text: about 6 T bytes at most on any input, plus about 8 bytes per page
//    the reader lays out itself for a tree without "pages" (at most kMaxBuilderPages: 128 MB).
//    Measured peaks (1M-element inputs): 6 T for one node listing one page id millions of times
//    (4 bytes per id and 8 per repeated use, for 2 bytes of text; then rejected), 3 T for a flat
//    object of keys or for minimal nodes with queries, 2 T for copy-on-write siblings, 1 T for
//    distinct pages, O(1) for skipped arrays and strings. TreeJson.MemoryWithinSixTimesTheText
//    checks 6 T on a large file, fuzz_tree_json 8 T + 1 MB on every input.
//
// Keys beyond the documented ones: "num_pages" (top level), "page_offset" per node (only with
// "pages"), "free_pages" (top level), and the informational "dtype"/"name"/"comment" (ignored).
// tree_to_json() always writes pages, page_offset and num_pages, so a round trip is exact for
// live nodes (dead node slots are dropped). "queries" name nodes by their "id".
#include "treeattn/tree/json.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include "tree_internal.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace {

constexpr int kMaxDepth = 64;
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// Fewest bytes an element of each array the reader keeps can take, separator included: they cap
// what is reserved from an element count (see Reader::array_capacity).
constexpr size_t kMinNodeBytes = sizeof(R"({"id":0,"tokens":1},)") - 1;
constexpr size_t kMinQueryBytes = sizeof(R"({"node":0},)") - 1;
constexpr size_t kMinIntBytes = sizeof("0,") - 1;
// nodes[i].parent while the parent is known by id only (resolved once every node is read).
constexpr int32_t kParentById = -2;

enum class JType { kNull, kBool, kNumber, kString, kArray, kObject };

const char* type_name(JType t) {
  switch (t) {
    case JType::kNull:
      return "null";
    case JType::kBool:
      return "a boolean";
    case JType::kNumber:
      return "a number";
    case JType::kString:
      return "a string";
    case JType::kArray:
      return "an array";
    case JType::kObject:
      return "an object";
  }
  return "?";
}

std::string printable(char c) {
  if (c >= 0x20 && c < 0x7f) return std::string(1, c);
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
  return buf;
}

// Length of the well-formed UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0 when it is not
// one (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF, no truncation).
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A pull reader over the document text: the caller asks for the value it expects next (an
// object with given keys, an array, an integer) or skips a value, which is then checked without
// being stored. Keys of skipped objects are the only thing kept for skipped values (the
// duplicate-key check); keys without escapes are referenced in the text, not copied.
class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}

  // A syntax error: "json: <what> at line L column C (in <path>)".
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw std::invalid_argument(detail::concat("json: ", what, " at line ", line, " column ", col,
                                               " (in ", path("$"), ")"));
  }
  // A well-formed value of the wrong kind or range: "<path>: <what>".
  [[noreturn]] void fail_value(const std::string& what) const {
    throw std::invalid_argument(detail::concat(path("json"), ": ", what));
  }

  // The kind of the value starting at the next non-blank byte (nothing is consumed but blanks).
  JType peek(int depth) {
    if (depth > kMaxDepth) fail(detail::concat("nesting deeper than ", kMaxDepth));
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') return JType::kObject;
    if (c == '[') return JType::kArray;
    if (c == '"') return JType::kString;
    if (c == 't' || c == 'f') return JType::kBool;
    if (c == 'n') return JType::kNull;
    if (c == '-' || (c >= '0' && c <= '9')) return JType::kNumber;
    fail(detail::concat("unexpected character '", printable(c), "'"));
  }

  void expect_end() {
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
  }

  // Checks one value of any kind and moves past it.
  void skip_value(int depth) {
    switch (peek(depth)) {
      case JType::kObject:
        skip_object(depth);
        return;
      case JType::kArray:
        array(depth, [&](size_t, int d) { skip_value(d); });
        return;
      case JType::kString:
        scan_string();
        return;
      case JType::kNumber:
        scan_number();
        return;
      case JType::kBool:
        expect_word(s_[pos_] == 't' ? "true" : "false");
        return;
      case JType::kNull:
        expect_word("null");
        return;
    }
  }

  // Consumes a null and returns true, or returns false at any other value.
  bool null(int depth) {
    if (peek(depth) != JType::kNull) return false;
    expect_word("null");
    return true;
  }

  // An integer literal in [lo, hi]; errors name the JSON path and quote the literal.
  int64_t integer(int depth, int64_t lo, int64_t hi) {
    const JType t = peek(depth);
    if (t != JType::kNumber) mismatch("an integer", t, depth);
    const size_t begin = pos_;
    const bool plain = scan_number();
    const std::string_view lit(s_.data() + begin, pos_ - begin);
    if (!plain) fail_value(detail::concat("expected an integer, got ", lit));
    const bool neg = lit[0] == '-';
    // Accumulated as a negative number so that INT64_MIN is representable.
    int64_t acc = 0;
    bool ok = true;
    for (size_t i = neg ? 1 : 0; i < lit.size() && ok; ++i) {
      const int d = lit[i] - '0';
      ok = acc >= (kInt64Min + d) / 10;
      if (ok) acc = acc * 10 - d;
    }
    if (ok && !neg) {
      ok = acc != kInt64Min;
      acc = -acc;
    }
    if (!ok || acc < lo || acc > hi)
      fail_value(detail::concat("integer ", lit, " is out of range [", lo, ", ", hi, "]"));
    return acc;
  }

  // An array; element(index, depth + 1) must read or skip one value.
  template <typename F>
  void array(int depth, F&& element) {
    const JType t = peek(depth);
    if (t != JType::kArray) mismatch(type_name(JType::kArray), t, depth);
    ++pos_;
    if (eat(']')) return;
    for (size_t i = 0;; ++i) {
      path_.push_back(Segment::at_index(i));
      element(i, depth + 1);
      path_.pop_back();
      if (eat(',')) continue;
      if (eat(']')) return;
      fail("expected ',' or ']'");
    }
  }

  // An object whose keys must be among `names` (at most 32), each at most once;
  // member(i, depth + 1) must read or skip the value of names[i].
  template <size_t N, typename F>
  void object(int depth, const std::string_view (&names)[N], F&& member) {
    static_assert(N <= 32, "the keys seen are a 32-bit mask");
    const JType t = peek(depth);
    if (t != JType::kObject) mismatch(type_name(JType::kObject), t, depth);
    ++pos_;
    if (eat('}')) return;
    uint32_t seen = 0;
    while (true) {
      const size_t side = side_.size();
      const KeyRef key = read_key();
      size_t i = 0;
      while (i < N && names[i] != view(key)) ++i;
      if (i == N) {
        path_.push_back(Segment::at_key(key));
        fail_value("unknown key");
      }
      if (seen >> i & 1) {
        pos_ = key.at;
        fail(detail::concat("duplicate key \"", names[i], "\""));
      }
      seen |= uint32_t{1} << i;
      side_.resize(side);
      if (!eat(':')) fail("expected ':'");
      path_.push_back(Segment::named(names[i]));
      member(i, depth + 1);
      path_.pop_back();
      if (eat(',')) continue;
      if (eat('}')) return;
      fail("expected ',' or '}'");
    }
  }

  // How many elements to reserve for the array at the next non-blank byte: its element count
  // (a scan to the matching bracket that does not check the syntax), but no more than its bytes
  // could hold if every element took at least `min_bytes` bytes with its separator. 0 when no
  // array starts here.
  size_t array_capacity(size_t min_bytes) {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != '[') return 0;
    size_t depth = 1, commas = 0, i = pos_ + 1;
    bool empty = true;
    for (; i < s_.size(); ++i) {
      const char c = s_[i];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
      if ((c == ']' || c == '}') && --depth == 0) break;
      empty = false;
      if (c == '"') {
        for (++i; i < s_.size() && s_[i] != '"'; ++i)
          if (s_[i] == '\\') ++i;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ',' && depth == 1) {
        ++commas;
      }
    }
    const size_t inner = std::min(i, s_.size()) - pos_;
    return std::min(empty ? 0 : commas + 1, inner / min_bytes + 1);
  }

 private:
  // A key: where it starts in the text (its opening quote) and its decoded bytes, in the text
  // when it has no escapes, else in side_.
  struct KeyRef {
    uint32_t at, begin, len;
    bool side;
  };
  // One step of the JSON path of the value being read; names are resolved only for a message.
  struct Segment {
    enum Kind { kName, kKey, kIndex } kind;
    std::string_view name;
    KeyRef key;
    size_t index;
    static Segment named(std::string_view n) { return {kName, n, {}, 0}; }
    static Segment at_key(KeyRef k) { return {kKey, {}, k, 0}; }
    static Segment at_index(size_t i) { return {kIndex, {}, {}, i}; }
  };

  std::string path(const char* root) const {
    std::string p;
    for (const Segment& sg : path_) {
      if (sg.kind == Segment::kIndex) {
        p += detail::concat("[", sg.index, "]");
        continue;
      }
      if (!p.empty()) p += '.';
      p += sg.kind == Segment::kName ? sg.name : view(sg.key);
    }
    return p.empty() ? root : p;
  }

  std::string_view view(const KeyRef& k) const {
    return std::string_view(k.side ? side_.data() : s_.data(), k.side ? side_.size() : s_.size())
        .substr(k.begin, k.len);
  }

  // Skips the value (so that a syntax error inside it is reported first), then reports that it
  // is not what was expected.
  [[noreturn]] void mismatch(const char* want, JType got, int depth) {
    skip_value(depth);
    fail_value(detail::concat("expected ", want, ", got ", type_name(got)));
  }

  // An object nobody reads: its values are skipped, its keys must be distinct. The keys of the
  // objects being skipped are a stack in keys_ (and side_ for keys with escapes); each object
  // sorts its own range when it closes, so the check takes O(k log k) for k keys.
  void skip_object(int depth) {
    ++pos_;
    const size_t base = keys_.size(), side_base = side_.size();
    if (!eat('}')) {
      while (true) {
        const KeyRef key = read_key();
        if (!eat(':')) fail("expected ':'");
        keys_.push_back(key);
        path_.push_back(Segment::at_key(key));
        skip_value(depth + 1);
        path_.pop_back();
        if (eat(',')) continue;
        if (eat('}')) break;
        fail("expected ',' or '}'");
      }
    }
    const auto first = keys_.begin() + static_cast<std::ptrdiff_t>(base);
    std::sort(first, keys_.end(), [&](const KeyRef& a, const KeyRef& b) {
      const int c = view(a).compare(view(b));
      return c != 0 ? c < 0 : a.at < b.at;
    });
    // The first repeat in document order: the earliest second key of a run of equal keys.
    const KeyRef* repeat = nullptr;
    for (auto it = first; it + 1 < keys_.end(); ++it) {
      if (view(*it) == view(*(it + 1)) && (it == first || view(*(it - 1)) != view(*it)) &&
          (repeat == nullptr || (it + 1)->at < repeat->at))
        repeat = &*(it + 1);
    }
    if (repeat != nullptr) {
      pos_ = repeat->at;
      fail(detail::concat("duplicate key \"", view(*repeat), "\""));
    }
    keys_.resize(base);
    side_.resize(side_base);
  }

  // A key and its ':' separator are not consumed together: the caller checks the ':'.
  KeyRef read_key() {
    skip_ws();
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
    const size_t at = pos_;
    const bool escaped = scan_string();
    if (!escaped) {
      return {static_cast<uint32_t>(at), static_cast<uint32_t>(at + 1),
              static_cast<uint32_t>(pos_ - at - 2), false};
    }
    const size_t begin = side_.size();
    decode_string(at, &side_);
    return {static_cast<uint32_t>(at), static_cast<uint32_t>(begin),
            static_cast<uint32_t>(side_.size() - begin), true};
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect_word(const char* w) {
    for (const char* p = w; *p; ++p, ++pos_) {
      if (pos_ >= s_.size() || s_[pos_] != *p) fail("invalid literal");
    }
  }

  // Moves past a number; true when it has no fraction and no exponent.
  bool scan_number() {
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    bool plain = true;
    if (s_[pos_] == '-') ++pos_;
    if (!digit()) fail("invalid number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      plain = false;
      ++pos_;
      if (!digit()) fail("invalid number");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      plain = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) fail("invalid number");
      while (digit()) ++pos_;
    }
    return plain;
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        fail("invalid \\u escape");
      }
    }
    return v;
  }

  // Checks the string starting at the quote at pos_ and moves past it; returns whether it has
  // escapes. Decoded bytes go to `out` when given.
  bool scan_string(std::string* out = nullptr) {
    ++pos_;  // opening quote
    bool escaped = false;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return escaped;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        const size_t n = utf8_sequence(s_, pos_ - 1);
        if (n == 0) {
          --pos_;
          fail(detail::concat("invalid UTF-8 byte '", printable(c), "' in string"));
        }
        if (out) out->append(s_, pos_ - 1, n);
        pos_ += n - 1;
        continue;
      }
      if (c != '\\') {
        if (out) *out += c;
        continue;
      }
      escaped = true;
      if (pos_ >= s_.size()) fail("unterminated string");
      const char e = s_[pos_++];
      char plain = 0;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          plain = e;
          break;
        case 'b':
          plain = '\b';
          break;
        case 'f':
          plain = '\f';
          break;
        case 'n':
          plain = '\n';
          break;
        case 'r':
          plain = '\r';
          break;
        case 't':
          plain = '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate in \\u escape");
          }
          if (out) append_utf8(*out, cp);
          continue;
        }
        default:
          fail(detail::concat("invalid escape '\\", printable(e), "'"));
      }
      if (out) *out += plain;
    }
  }

  // Decodes the (already checked) string whose opening quote is at `at` into `out`.
  void decode_string(size_t at, std::string* out) {
    const size_t end = pos_;
    pos_ = at;
    scan_string(out);
    pos_ = end;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::vector<Segment> path_;
  std::vector<KeyRef> keys_;  // keys of the skipped objects now open, innermost last
  std::string side_;          // decoded keys that have escapes
};

}  // namespace

// One pass over the text fills the tree's own arrays; ids (parents, queries) are resolved once
// every node is read, then the structure is checked before the page layout is derived.
PrefixTree tree_from_json(const std::string& text) {
  TA_CHECK_ARG(static_cast<int64_t>(text.size()) <= kMaxJsonFileBytes, "json", "text of ",
               text.size(),
               " bytes is larger than the limit kMaxJsonFileBytes=", kMaxJsonFileBytes);
  static constexpr std::string_view kTopKeys[] = {"page_size", "heads",   "head_dim",   "num_pages",
                                                  "nodes",     "queries", "free_pages", "dtype",
                                                  "name",      "comment"};
  static constexpr std::string_view kNodeKeys[] = {"id", "parent", "tokens", "pages",
                                                   "page_offset"};
  static constexpr std::string_view kQueryKeys[] = {"node"};
  Reader r(text);
  PrefixTree tree;
  int64_t page_size = tree.page_size;
  bool have_nodes = false, have_queries = false, have_num_pages = false;
  int32_t num_pages = 0, with_pages = 0;
  std::vector<int64_t> parent_id;  // per node, used where nodes[i].parent == kParentById
  std::vector<int64_t> query_id;   // node id of every query
  auto read_ints = [&](int depth, std::vector<int32_t>* out) {
    out->reserve(r.array_capacity(kMinIntBytes));
    r.array(depth, [&](size_t, int d) {
      out->push_back(static_cast<int32_t>(r.integer(d, 0, kInt32Max)));
    });
  };
  auto read_node = [&](size_t i, int depth) {
    TA_CHECK_ARG(static_cast<int64_t>(i) < kMaxTreeNodes, "nodes", "more than the limit ",
                 "kMaxTreeNodes=", kMaxTreeNodes, " nodes");
    TreeNode nd;
    nd.parent = kNoParent;
    nd.page_offset = -1;  // not given: derived from the start position below
    int64_t pid = 0;
    bool has_id = false, has_tokens = false, has_pages = false;
    r.object(depth, kNodeKeys, [&](size_t key, int d) {
      switch (key) {
        case 0:
          nd.id = r.integer(d, kInt64Min, kInt64Max);
          has_id = true;
          break;
        case 1:
          if (!r.null(d)) {
            pid = r.integer(d, kInt64Min, kInt64Max);
            nd.parent = kParentById;
          }
          break;
        case 2:
          nd.tokens = static_cast<int32_t>(r.integer(d, 1, kInt32Max));
          has_tokens = true;
          break;
        case 3:
          read_ints(d, &nd.pages);
          has_pages = true;
          break;
        default:
          nd.page_offset = static_cast<int32_t>(r.integer(d, 0, kInt32Max));
          break;
      }
    });
    TA_CHECK_ARG(has_id, detail::concat("nodes[", i, "].id"), "missing");
    TA_CHECK_ARG(has_tokens, detail::concat("nodes[", i, "].tokens"), "missing");
    TA_CHECK_ARG(has_pages || nd.page_offset < 0, detail::concat("nodes[", i, "].page_offset"),
                 "given without \"pages\"");
    with_pages += has_pages;
    tree.nodes.push_back(std::move(nd));
    parent_id.push_back(pid);
  };
  r.object(0, kTopKeys, [&](size_t key, int d) {
    switch (key) {
      case 0:
        page_size = r.integer(d, kInt64Min, kInt64Max);
        break;
      case 1: {
        int32_t h[2] = {0, 0};
        size_t count = 0;
        r.array(d, [&](size_t i, int d2) {
          if (i < 2) {
            h[i] = static_cast<int32_t>(r.integer(d2, 1, kInt32Max));
          } else {
            r.skip_value(d2);
          }
          count = i + 1;
        });
        TA_CHECK_ARG(count == 2, "heads", "expected [qo_heads, kv_heads], got ", count, " entries");
        TA_CHECK_ARG(h[0] % h[1] == 0, "heads", "query heads ", h[0],
                     " are not a multiple of kv heads ", h[1]);
        tree.shape.num_qo_heads = h[0];
        tree.shape.num_kv_heads = h[1];
        break;
      }
      case 2:
        tree.shape.head_dim = static_cast<int32_t>(r.integer(d, 1, kInt32Max));
        break;
      case 3:
        num_pages = static_cast<int32_t>(r.integer(d, 0, kInt32Max));
        have_num_pages = true;
        break;
      case 4: {
        have_nodes = true;
        const size_t cap = std::min<size_t>(r.array_capacity(kMinNodeBytes), kMaxTreeNodes);
        tree.nodes.reserve(cap);
        parent_id.reserve(cap);
        r.array(d, read_node);
        break;
      }
      case 5:
        have_queries = true;
        query_id.reserve(std::min<size_t>(r.array_capacity(kMinQueryBytes), kMaxTreeQueries));
        r.array(d, [&](size_t q, int d2) {
          TA_CHECK_ARG(static_cast<int64_t>(q) < kMaxTreeQueries, "queries",
                       "more than the limit kMaxTreeQueries=", kMaxTreeQueries, " queries");
          bool has_node = false;
          r.object(d2, kQueryKeys, [&](size_t, int d3) {
            query_id.push_back(r.integer(d3, kInt64Min, kInt64Max));
            has_node = true;
          });
          TA_CHECK_ARG(has_node, detail::concat("queries[", q, "].node"), "missing");
        });
        break;
      case 6:
        read_ints(d, &tree.free_pages);
        break;
      default:  // informational keys: checked, not kept
        r.skip_value(d);
        break;
    }
  });
  r.expect_end();

  check_page_size(page_size, "page_size");
  tree.page_size = static_cast<int32_t>(page_size);

  TA_CHECK_ARG(have_nodes, "nodes", "missing");
  TA_CHECK_ARG(!tree.nodes.empty(), "nodes", "empty: the tree needs at least one node");
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  for (int32_t i = 0; i < n; ++i) {
    const int32_t off = tree.nodes[i].page_offset;
    TA_CHECK_ARG(off < tree.page_size, detail::concat("nodes[", i, "].page_offset"),
                 "must be < page_size ", tree.page_size, ", got ", off);
  }
  TA_CHECK_ARG(with_pages == 0 || with_pages == n, "nodes", "either every node has \"pages\" or ",
               "none (", with_pages, " of ", n, " have them)");
  {
    const detail::IdIndex ids(tree);
    const auto [first, later] = ids.first_duplicate();
    TA_CHECK_ARG(later < 0, detail::concat("nodes[", later, "].id"), "duplicate id ",
                 tree.nodes[later].id, " (also nodes[", first, "])");
    for (int32_t i = 0; i < n; ++i) {
      if (tree.nodes[i].parent != kParentById) continue;
      const int32_t p = ids.find(parent_id[i]);
      TA_CHECK_ARG(p >= 0, detail::concat("nodes[", i, "].parent"), "unknown parent id ",
                   parent_id[i]);
      tree.nodes[i].parent = p;
    }
    std::vector<int64_t>().swap(parent_id);
    TA_CHECK_ARG(have_queries, "queries", "missing");
    TA_CHECK_ARG(!query_id.empty(), "queries", "empty: the tree needs at least one query");
    tree.query_node.resize(query_id.size());
    for (size_t q = 0; q < query_id.size(); ++q) {
      tree.query_node[q] = ids.find(query_id[q]);
      TA_CHECK_ARG(tree.query_node[q] >= 0, detail::concat("queries[", q, "].node"),
                   "unknown node id ", query_id[q]);
    }
    std::vector<int64_t>().swap(query_id);
  }
  // Cycles would make start positions meaningless, and the token limit keeps them in range.
  detail::validate_structure(tree);
  // Start positions in preorder, then the page layout.
  const std::vector<int32_t> order = detail::preorder_of(tree);
  std::vector<int64_t> start(n, 0);
  for (int32_t v : order) {
    const int32_t p = tree.nodes[v].parent;
    if (p != kNoParent) start[v] = start[p] + tree.nodes[p].tokens;
    if (tree.nodes[v].page_offset < 0)
      tree.nodes[v].page_offset = static_cast<int32_t>(start[v] % tree.page_size);
  }
  int32_t max_page = -1;
  if (with_pages == 0) {
    int64_t total = 0;
    for (int32_t i = 0; i < n; ++i) {
      const TreeNode& nd = tree.nodes[i];
      total += ceil_div(int64_t{nd.page_offset} + nd.tokens, tree.page_size);
      TA_CHECK_ARG(total <= detail::kMaxBuilderPages, "nodes", "layout needs more than ",
                   detail::kMaxBuilderPages, " pages");
    }
    int32_t next = 0;
    for (int32_t i = 0; i < n; ++i) {
      TreeNode& nd = tree.nodes[i];
      nd.pages.resize(ceil_div(int64_t{nd.page_offset} + nd.tokens, tree.page_size));
      for (int32_t& p : nd.pages) p = next++;
    }
    max_page = next - 1;
  } else {
    for (const TreeNode& nd : tree.nodes)
      for (int32_t p : nd.pages) max_page = std::max(max_page, p);
  }
  tree.num_pages = have_num_pages ? num_pages : max_page + 1;
  for (size_t k = 0; k < tree.free_pages.size(); ++k) {
    TA_CHECK_ARG(tree.free_pages[k] < tree.num_pages, detail::concat("free_pages[", k, "]"),
                 "page id ", tree.free_pages[k], " out of range [0, num_pages=", tree.num_pages,
                 ")");
  }
  validate(tree);
  return tree;
}

PrefixTree tree_from_json_file(const std::string& path) {
  // A C path ends at its first NUL: the file opened would not be the one named.
  TA_CHECK_ARG(path.find('\0') == std::string::npos, "path", "contains a NUL byte");
  std::error_code ec;
  TA_CHECK_ARG(!std::filesystem::is_directory(path, ec), "path", "'", path,
               "' is a directory, expected a JSON tree file");
  const auto too_large = [&] {
    return detail::concat(
        "'", path, "' is larger than the limit kMaxJsonFileBytes=", kMaxJsonFileBytes, " bytes");
  };
  const bool regular = std::filesystem::is_regular_file(path, ec);
  const uintmax_t size = regular ? std::filesystem::file_size(path, ec) : 0;
  TA_CHECK_ARG(!regular || ec || size <= static_cast<uintmax_t>(kMaxJsonFileBytes), "path",
               too_large());
  std::ifstream in(path, std::ios::binary);
  TA_CHECK_ARG(in.good(), "path", "cannot open '", path, "'");
  // Read in chunks up to the limit (the size of /dev/zero or a pipe is not known up front). The
  // buffer is reserved once, at the file's size or for a stream at the limit plus one chunk
  // (address space only: resident memory follows what is read), so it is never copied to grow.
  std::string text;
  char buf[1 << 16];
  text.reserve(regular && !ec ? size : static_cast<size_t>(kMaxJsonFileBytes) + sizeof(buf));
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    const size_t got = static_cast<size_t>(in.gcount());
    // JSON text never holds a NUL byte: a binary file or /dev/zero stops at its first chunk.
    const void* nul = std::memchr(buf, 0, got);
    TA_CHECK_ARG(nul == nullptr, "path", "'", path, "' holds a NUL byte at offset ",
                 text.size() + static_cast<size_t>(static_cast<const char*>(nul) - buf),
                 ": not JSON text");
    text.append(buf, got);
    TA_CHECK_ARG(static_cast<int64_t>(text.size()) <= kMaxJsonFileBytes, "path", too_large());
  }
  TA_CHECK_ARG(!in.bad(), "path", "error reading '", path, "'");
  try {
    return tree_from_json(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(detail::concat(path, ": ", e.what()));
  }
}

std::string tree_to_json(const PrefixTree& tree) {
  validate(tree);
  std::ostringstream os;
  os << "{\"page_size\": " << tree.page_size;
  if (tree.shape.num_qo_heads > 0 && tree.shape.num_kv_heads > 0)
    os << ", \"heads\": [" << tree.shape.num_qo_heads << ", " << tree.shape.num_kv_heads << "]";
  if (tree.shape.head_dim > 0) os << ", \"head_dim\": " << tree.shape.head_dim;
  os << ", \"num_pages\": " << tree.num_pages << ",\n \"nodes\": [";
  bool first = true;
  for (const TreeNode& nd : tree.nodes) {
    if (!nd.alive) continue;
    os << (first ? "\n  " : ",\n  ");
    first = false;
    os << "{\"id\": " << nd.id << ", \"parent\": ";
    if (nd.parent == kNoParent) {
      os << "null";
    } else {
      os << tree.nodes[nd.parent].id;
    }
    os << ", \"tokens\": " << nd.tokens << ", \"page_offset\": " << nd.page_offset
       << ", \"pages\": [";
    for (size_t k = 0; k < nd.pages.size(); ++k) os << (k ? ", " : "") << nd.pages[k];
    os << "]}";
  }
  os << "],\n \"queries\": [";
  for (int32_t q = 0; q < tree.num_queries(); ++q)
    os << (q ? ", " : "") << "{\"node\": " << tree.nodes[tree.query_node[q]].id << "}";
  os << "]";
  if (!tree.free_pages.empty()) {
    os << ",\n \"free_pages\": [";
    for (size_t k = 0; k < tree.free_pages.size(); ++k) os << (k ? ", " : "") << tree.free_pages[k];
    os << "]";
  }
  os << "}\n";
  return os.str();
}

}  // namespace treeattn
