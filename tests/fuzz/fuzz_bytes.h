// Shared by the libFuzzer targets: reads the fuzz input one byte at a time (zeros once it runs
// out), so every input decodes into some case.
#pragma once

#include <cstddef>
#include <cstdint>

namespace treeattn::fuzz {

struct Bytes {
  const uint8_t* p;
  size_t n;
  size_t i = 0;
  bool more() const { return i < n; }
  uint8_t next() { return i < n ? p[i++] : 0; }
};

}  // namespace treeattn::fuzz
