// The stable JSON tree format (see builders.h): a small hand-written, strict JSON reader (depth
// limit, exact integer ranges, \u escapes, duplicate keys rejected, errors naming the JSON path
// such as "nodes[3].parent") and the writer tree_to_json().
//
// Keys beyond the documented ones: "num_pages" (top level), "page_offset" per node (only with
// "pages"), "free_pages" (top level), and the informational "dtype"/"name"/"comment" (ignored).
// tree_to_json() always writes pages, page_offset and num_pages, so a round trip is exact for
// live nodes (dead node slots are dropped). "queries" name nodes by their "id".
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "tree_internal.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/builders.h"

namespace treeattn {

namespace {

constexpr int kMaxDepth = 64;

struct JValue {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  bool b = false;
  std::string text;  // number literal or decoded string
  std::vector<JValue> arr;
  std::vector<std::pair<std::string, JValue>> obj;
};

const char* type_name(JValue::Type t) {
  switch (t) {
    case JValue::kNull:
      return "null";
    case JValue::kBool:
      return "a boolean";
    case JValue::kNumber:
      return "a number";
    case JValue::kString:
      return "a string";
    case JValue::kArray:
      return "an array";
    case JValue::kObject:
      return "an object";
  }
  return "?";
}

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  JValue parse_document() {
    JValue v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  // The JSON path of the value being parsed, built only when an error is reported.
  struct Segment {
    const std::string* key;  // object member, or nullptr for an array element
    size_t index;
  };
  std::string path() const {
    std::string p;
    for (const Segment& sg : path_) {
      if (sg.key) {
        if (!p.empty()) p += '.';
        p += *sg.key;
      } else {
        p += detail::concat("[", sg.index, "]");
      }
    }
    return p.empty() ? "$" : p;
  }
  [[noreturn]] void fail(const std::string& what) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw std::invalid_argument(
        detail::concat("json: ", what, " at line ", line, " column ", col, " (in ", path(), ")"));
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
      if (pos_ >= s_.size() || s_[pos_] != *p) fail(detail::concat("invalid literal"));
    }
  }

  JValue parse_value(int depth) {
    if (depth > kMaxDepth) fail(detail::concat("nesting deeper than ", kMaxDepth));
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    JValue v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.type = JValue::kObject;
      if (eat('}')) return v;
      while (true) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
        std::string key = parse_string();
        for (const auto& kv : v.obj) {
          if (kv.first == key) fail(detail::concat("duplicate key \"", key, "\""));
        }
        if (!eat(':')) fail("expected ':'");
        v.obj.emplace_back(std::move(key), JValue());
        path_.push_back({&v.obj.back().first, 0});
        v.obj.back().second = parse_value(depth + 1);
        path_.pop_back();
        if (eat(',')) continue;
        if (eat('}')) return v;
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++pos_;
      v.type = JValue::kArray;
      if (eat(']')) return v;
      while (true) {
        path_.push_back({nullptr, v.arr.size()});
        JValue elem = parse_value(depth + 1);
        path_.pop_back();
        v.arr.push_back(std::move(elem));
        if (eat(',')) continue;
        if (eat(']')) return v;
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type = JValue::kString;
      v.text = parse_string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.type = JValue::kBool;
      v.b = c == 't';
      expect_word(v.b ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      expect_word("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = JValue::kNumber;
      v.text = parse_number();
      return v;
    }
    fail(detail::concat("unexpected character '", printable(c), "'"));
  }

  static std::string printable(char c) {
    if (c >= 0x20 && c < 0x7f) return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
    return buf;
  }

  std::string parse_number() {
    const size_t begin = pos_;
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (s_[pos_] == '-') ++pos_;
    if (!digit()) fail("invalid number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digit()) fail("invalid number");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) fail("invalid number");
      while (digit()) ++pos_;
    }
    return s_.substr(begin, pos_ - begin);
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

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
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
          append_utf8(out, cp);
          break;
        }
        default:
          fail(detail::concat("invalid escape '\\", printable(e), "'"));
      }
    }
  }

  static void append_utf8(std::string& out, unsigned cp) {
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

  const std::string& s_;
  size_t pos_ = 0;
  std::vector<Segment> path_;
};

// ---- typed accessors: every error names the JSON path.

int64_t to_int(const JValue& v, const std::string& path, int64_t lo, int64_t hi) {
  TA_CHECK_ARG(v.type == JValue::kNumber, path, "expected an integer, got ", type_name(v.type));
  const std::string& t = v.text;
  TA_CHECK_ARG(t.find_first_of(".eE") == std::string::npos, path, "expected an integer, got ", t);
  const bool neg = t[0] == '-';
  // Accumulate as a negative number so INT64_MIN is representable; reject overflow.
  int64_t acc = 0;
  for (size_t i = neg ? 1 : 0; i < t.size(); ++i) {
    const int d = t[i] - '0';
    TA_CHECK_ARG(acc >= (std::numeric_limits<int64_t>::min() + d) / 10, path, "integer ", t,
                 " is out of range [", lo, ", ", hi, "]");
    acc = acc * 10 - d;
  }
  if (!neg) {
    TA_CHECK_ARG(acc != std::numeric_limits<int64_t>::min(), path, "integer ", t,
                 " is out of range [", lo, ", ", hi, "]");
    acc = -acc;
  }
  TA_CHECK_ARG(acc >= lo && acc <= hi, path, "integer ", t, " is out of range [", lo, ", ", hi,
               "]");
  return acc;
}

int32_t to_i32(const JValue& v, const std::string& path, int32_t lo) {
  return static_cast<int32_t>(to_int(v, path, lo, std::numeric_limits<int32_t>::max()));
}

const JValue& expect(const JValue& v, JValue::Type t, const std::string& path) {
  TA_CHECK_ARG(v.type == t, path, "expected ", type_name(t), ", got ", type_name(v.type));
  return v;
}

const JValue* find_key(const JValue& obj, const char* key) {
  for (const auto& kv : obj.obj) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

void check_keys(const JValue& obj, const std::string& path,
                std::initializer_list<const char*> known) {
  for (const auto& kv : obj.obj) {
    bool ok = false;
    for (const char* k : known) ok = ok || kv.first == k;
    TA_CHECK_ARG(ok, path.empty() ? kv.first : path + "." + kv.first, "unknown key");
  }
}

// Fast path for a plain non-negative int32 literal; false on anything else.
bool try_page_id(const JValue& v, int32_t* out) {
  if (v.type != JValue::kNumber || v.text.empty() || v.text.size() > 10) return false;
  int64_t acc = 0;
  for (char c : v.text) {
    if (c < '0' || c > '9') return false;
    acc = acc * 10 + (c - '0');
  }
  if (acc > std::numeric_limits<int32_t>::max()) return false;
  *out = static_cast<int32_t>(acc);
  return true;
}

std::vector<int32_t> page_list(const JValue& v, const std::string& path) {
  expect(v, JValue::kArray, path);
  std::vector<int32_t> out(v.arr.size());
  for (size_t k = 0; k < v.arr.size(); ++k) {
    // The path string is built only for an element that is not a plain page id.
    if (!try_page_id(v.arr[k], &out[k]))
      out[k] = to_i32(v.arr[k], detail::concat(path, "[", k, "]"), 0);
  }
  return out;
}

}  // namespace

PrefixTree tree_from_json(const std::string& text) {
  const JValue doc = Parser(text).parse_document();
  expect(doc, JValue::kObject, "json");
  check_keys(doc, "",
             {"page_size", "heads", "head_dim", "num_pages", "nodes", "queries", "free_pages",
              "dtype", "name", "comment"});
  PrefixTree tree;
  if (const JValue* v = find_key(doc, "page_size")) tree.page_size = to_i32(*v, "page_size", 1);
  if (const JValue* v = find_key(doc, "heads")) {
    expect(*v, JValue::kArray, "heads");
    TA_CHECK_ARG(v->arr.size() == 2, "heads", "expected [qo_heads, kv_heads], got ", v->arr.size(),
                 " entries");
    tree.shape.num_qo_heads = to_i32(v->arr[0], "heads[0]", 1);
    tree.shape.num_kv_heads = to_i32(v->arr[1], "heads[1]", 1);
    TA_CHECK_ARG(tree.shape.num_qo_heads % tree.shape.num_kv_heads == 0, "heads", "query heads ",
                 tree.shape.num_qo_heads, " are not a multiple of kv heads ",
                 tree.shape.num_kv_heads);
  }
  if (const JValue* v = find_key(doc, "head_dim")) tree.shape.head_dim = to_i32(*v, "head_dim", 1);
  const JValue* nodes = find_key(doc, "nodes");
  TA_CHECK_ARG(nodes != nullptr, "nodes", "missing");
  expect(*nodes, JValue::kArray, "nodes");
  TA_CHECK_ARG(!nodes->arr.empty(), "nodes", "empty: the tree needs at least one node");
  TA_CHECK_ARG(static_cast<int64_t>(nodes->arr.size()) <= kMaxTreeNodes, "nodes", "has ",
               nodes->arr.size(), " nodes, above the limit kMaxTreeNodes=", kMaxTreeNodes);
  const int32_t n = static_cast<int32_t>(nodes->arr.size());

  // Pass 1: ids, tokens, pages.
  std::unordered_map<int64_t, int32_t> index_of;
  std::vector<const JValue*> parent_val(n, nullptr);
  int with_pages = 0;
  tree.nodes.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    const std::string path = detail::concat("nodes[", i, "]");
    const JValue& o = expect(nodes->arr[i], JValue::kObject, path);
    check_keys(o, path, {"id", "parent", "tokens", "pages", "page_offset"});
    TreeNode& nd = tree.nodes[i];
    const JValue* id = find_key(o, "id");
    TA_CHECK_ARG(id != nullptr, path + ".id", "missing");
    nd.id = to_int(*id, path + ".id", std::numeric_limits<int64_t>::min(),
                   std::numeric_limits<int64_t>::max());
    auto [it, fresh] = index_of.emplace(nd.id, i);
    TA_CHECK_ARG(fresh, path + ".id", "duplicate id ", nd.id, " (also nodes[", it->second, "])");
    const JValue* tok = find_key(o, "tokens");
    TA_CHECK_ARG(tok != nullptr, path + ".tokens", "missing");
    nd.tokens = to_i32(*tok, path + ".tokens", 1);
    parent_val[i] = find_key(o, "parent");
    if (const JValue* pg = find_key(o, "pages")) {
      nd.pages = page_list(*pg, path + ".pages");
      ++with_pages;
    }
    if (const JValue* off = find_key(o, "page_offset")) {
      TA_CHECK_ARG(find_key(o, "pages") != nullptr, path + ".page_offset",
                   "given without \"pages\"");
      nd.page_offset = to_i32(*off, path + ".page_offset", 0);
      TA_CHECK_ARG(nd.page_offset < tree.page_size, path + ".page_offset", "must be < page_size ",
                   tree.page_size, ", got ", nd.page_offset);
    } else {
      nd.page_offset = -1;  // filled from the start position below
    }
  }
  TA_CHECK_ARG(with_pages == 0 || with_pages == n, "nodes", "either every node has \"pages\" or ",
               "none (", with_pages, " of ", n, " have them)");
  // Pass 2: parents by id.
  for (int32_t i = 0; i < n; ++i) {
    const std::string path = detail::concat("nodes[", i, "].parent");
    const JValue* pv = parent_val[i];
    if (pv == nullptr || pv->type == JValue::kNull) continue;
    const int64_t pid =
        to_int(*pv, path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    auto it = index_of.find(pid);
    TA_CHECK_ARG(it != index_of.end(), path, "unknown parent id ", pid);
    tree.nodes[i].parent = it->second;
  }
  // Queries by node id.
  const JValue* queries = find_key(doc, "queries");
  TA_CHECK_ARG(queries != nullptr, "queries", "missing");
  expect(*queries, JValue::kArray, "queries");
  TA_CHECK_ARG(!queries->arr.empty(), "queries", "empty: the tree needs at least one query");
  TA_CHECK_ARG(static_cast<int64_t>(queries->arr.size()) <= kMaxTreeQueries, "queries", "has ",
               queries->arr.size(), " queries, above the limit kMaxTreeQueries=", kMaxTreeQueries);
  for (size_t q = 0; q < queries->arr.size(); ++q) {
    const std::string path = detail::concat("queries[", q, "]");
    const JValue& o = expect(queries->arr[q], JValue::kObject, path);
    check_keys(o, path, {"node"});
    const JValue* nv = find_key(o, "node");
    TA_CHECK_ARG(nv != nullptr, path + ".node", "missing");
    const int64_t id = to_int(*nv, path + ".node", std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max());
    auto it = index_of.find(id);
    TA_CHECK_ARG(it != index_of.end(), path + ".node", "unknown node id ", id);
    tree.query_node.push_back(it->second);
  }
  // Structure checks before the layout (cycles would make start positions meaningless).
  {
    // Only the structure is checked here: a page size that fits any node in one page keeps this
    // cheap however many tokens the nodes claim.
    PrefixTree shape_only;
    shape_only.page_size = std::numeric_limits<int32_t>::max();
    shape_only.nodes.resize(n);
    for (int32_t i = 0; i < n; ++i) {
      shape_only.nodes[i].id = tree.nodes[i].id;
      shape_only.nodes[i].parent = tree.nodes[i].parent;
      shape_only.nodes[i].tokens = tree.nodes[i].tokens;
      shape_only.nodes[i].pages.assign(1, i);  // distinct pages: the layout is checked later
    }
    shape_only.num_pages = n;
    shape_only.query_node = tree.query_node;
    validate(shape_only);
  }
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
  tree.num_pages = max_page + 1;
  if (const JValue* v = find_key(doc, "num_pages")) tree.num_pages = to_i32(*v, "num_pages", 0);
  if (const JValue* v = find_key(doc, "free_pages")) {
    tree.free_pages = page_list(*v, "free_pages");
    for (size_t k = 0; k < tree.free_pages.size(); ++k) {
      TA_CHECK_ARG(tree.free_pages[k] < tree.num_pages, detail::concat("free_pages[", k, "]"),
                   "page id ", tree.free_pages[k], " out of range [0, num_pages=", tree.num_pages,
                   ")");
    }
  }
  validate(tree);
  return tree;
}

PrefixTree tree_from_json_file(const std::string& path) {
  std::error_code ec;
  TA_CHECK_ARG(!std::filesystem::is_directory(path, ec), "path", "'", path,
               "' is a directory, expected a JSON tree file");
  std::ifstream in(path, std::ios::binary);
  TA_CHECK_ARG(in.good(), "path", "cannot open '", path, "'");
  // Read in chunks up to the limit (the size of /dev/zero or a pipe is not known up front).
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    TA_CHECK_ARG(static_cast<int64_t>(text.size()) <= kMaxJsonFileBytes, "path", "'", path,
                 "' is larger than the limit kMaxJsonFileBytes=", kMaxJsonFileBytes, " bytes");
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
