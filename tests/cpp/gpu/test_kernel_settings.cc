// The kernel settings' environment variables (TREEATTN_GROUPED_KERNEL, TREEATTN_PARTIALS,
// TREEATTN_SHORT_M16, TREEATTN_PAIR_M16): each accepted value gives its setting, unset or empty
// gives the default, and any other value is refused with an error that names the variable and the
// accepted values. A process reads each variable once (the first reader stores it), so every case
// runs in a fresh process: a death test in the "threadsafe" style re-executes this binary up to the
// case, with the environment as the parent set it. Host code only: runs without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "treeattn/kernels/decode.h"

namespace treeattn {
namespace {

/// Prints the four settings as "grouped=G partials=P short=S pair=R" and exits 0, or prints the
/// error and exits 3.
[[noreturn]] void print_settings_and_exit() {
  try {
    const int g = static_cast<int>(grouped_kernel());
    const int p = static_cast<int>(partial_precision());
    const int s = short_m16() ? 1 : 0;
    const int r = pair_m16() ? 1 : 0;
    std::fprintf(stderr, "grouped=%d partials=%d short=%d pair=%d\n", g, p, s, r);
    std::exit(0);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(3);
  }
}

struct EnvCase {
  const char* var;
  const char* value;  ///< nullptr: unset
  int exit_code;
  const char* stderr_regex;
};

TEST(KernelSettings, EnvironmentValuesDefaultsAndErrors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // defaults: kAuto (2), kHalf (1), short kM16 on, kM16 pairs on
  const EnvCase cases[] = {
      {"TREEATTN_GROUPED_KERNEL", nullptr, 0, "grouped=2 partials=1 short=1 pair=1"},
      {"TREEATTN_GROUPED_KERNEL", "", 0, "grouped=2 partials=1 short=1 pair=1"},
      {"TREEATTN_GROUPED_KERNEL", "legacy", 0, "grouped=0 partials=1 short=1 pair=1"},
      {"TREEATTN_GROUPED_KERNEL", "ws", 0, "grouped=1 partials=1 short=1 pair=1"},
      {"TREEATTN_GROUPED_KERNEL", "auto", 0, "grouped=2 partials=1 short=1 pair=1"},
      {"TREEATTN_GROUPED_KERNEL", "WS", 3,
       "error: TREEATTN_GROUPED_KERNEL: must be legacy, ws or auto, got 'WS'"},
      {"TREEATTN_PARTIALS", "fp32", 0, "grouped=2 partials=0 short=1 pair=1"},
      {"TREEATTN_PARTIALS", "half", 0, "grouped=2 partials=1 short=1 pair=1"},
      {"TREEATTN_PARTIALS", "fp16", 3,
       "error: TREEATTN_PARTIALS: must be fp32 or half, got 'fp16'"},
      {"TREEATTN_SHORT_M16", "off", 0, "grouped=2 partials=1 short=0 pair=1"},
      {"TREEATTN_SHORT_M16", "on", 0, "grouped=2 partials=1 short=1 pair=1"},
      {"TREEATTN_SHORT_M16", "1", 3, "error: TREEATTN_SHORT_M16: must be on or off, got '1'"},
      {"TREEATTN_PAIR_M16", "off", 0, "grouped=2 partials=1 short=1 pair=0"},
      {"TREEATTN_PAIR_M16", "on", 0, "grouped=2 partials=1 short=1 pair=1"},
      {"TREEATTN_PAIR_M16", "yes", 3, "error: TREEATTN_PAIR_M16: must be on or off, got 'yes'"},
  };
  for (const char* var :
       {"TREEATTN_GROUPED_KERNEL", "TREEATTN_PARTIALS", "TREEATTN_SHORT_M16", "TREEATTN_PAIR_M16"})
    unsetenv(var);
  for (const EnvCase& c : cases) {
    SCOPED_TRACE(std::string(c.var) + "=" + (c.value ? c.value : "(unset)"));
    if (c.value != nullptr) setenv(c.var, c.value, 1);
    EXPECT_EXIT(print_settings_and_exit(), testing::ExitedWithCode(c.exit_code), c.stderr_regex);
    unsetenv(c.var);
  }
}

}  // namespace
}  // namespace treeattn
