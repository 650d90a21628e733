// Tiny command-line parser shared by every treeattn subcommand (plan, check, workloads, bench):
// `--name value`, `--name=value` and boolean `--name` flags declared up front; anything else
// (unknown flags, positional words, missing or malformed values) throws std::invalid_argument
// whose message starts with the offending flag, which main() prints before exiting with code 2.
// Numbers are parsed strictly (decimal digits only, a '-' only where negatives make sense, no
// whitespace, '+', hex forms or trailing characters; reals in decimal notation only) and
// range-checked. Flags that name files say whether
// the command reads or writes them, and an output that is the same file as an input or another
// output (same device and inode: links and other spellings of a path count) is refused before
// anything runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace treeattn::cli {

/// What a flag's value names, for the check that no output overwrites an input.
enum class FileRole { kNone, kInput, kOutput };

struct FlagSpec {
  std::string name;                 ///< without the leading "--"
  bool takes_value;                 ///< false: boolean switch
  std::string help;                 ///< one line for --help
  bool optional_value = false;      ///< with takes_value: a bare `--name` means the value "-"
  FileRole file = FileRole::kNone;  ///< a file the command reads or writes ("-": a stream)
};

/// Strict decimal integer: an optional '-' then digits only; false on anything else (empty,
/// whitespace, '+', trailing characters) or a value outside int64. The one integer parser of
/// the CLI: every numeric flag goes through it.
bool parse_int64(const std::string& s, int64_t* out);
/// The same for unsigned 64-bit values: digits only (no sign at all).
bool parse_uint64(const std::string& s, uint64_t* out);

class Args {
 public:
  /// Parses argv[first..argc) against `flags` ("--help" is always accepted), then refuses an
  /// output file that is the same file as an input or another output.
  Args(int argc, char** argv, int first, std::vector<FlagSpec> flags);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool help() const { return help_; }
  /// The flag's value, or `def` when absent.
  std::string str(const std::string& name, const std::string& def = "") const;
  /// Integer value in [lo, hi], or `def` when absent; throws naming the flag otherwise.
  int64_t integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  /// Finite real value in [lo, hi], or `def` when absent; throws naming the flag otherwise.
  double real(const std::string& name, double def, double lo, double hi) const;
  /// Unsigned 64-bit value (seeds), or `def` when absent; throws naming the flag otherwise.
  uint64_t u64(const std::string& name, uint64_t def) const;
  /// "Q/KV" head counts such as "32/8" (or a single "32" for MHA); throws naming the flag.
  bool heads(const std::string& name, int32_t* qo, int32_t* kv) const;
  /// Help text listing the declared flags.
  std::string usage(const std::string& command) const;

 private:
  void refuse_overwriting_inputs() const;

  std::vector<FlagSpec> flags_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

}  // namespace treeattn::cli
