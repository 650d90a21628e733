// Host check for the CuTe experiment (issue 22 item 3): CuTe's GMMA shared-memory layouts
// (mma_cute.cuh) put every element of Q, K and V at the byte the producer writes it to (the
// column-block layout with the 128-byte swizzle of wgmma.cuh), for both tile configs and head
// dims. Prints the number of mismatches per layout; exit status 1 on any.
#include <cutlass/numeric_types.h>

#include <cstdint>
#include <cstdio>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

// byte of element (r, c) of a [rows][hd] tile: hd / 64 column blocks of [rows][64], chunk
// (c % 64) / 8 of row r at chunk ((c % 64) / 8) ^ (r & 7)
static int ours(int rows, int r, int c) {
  return (c / 64) * rows * 128 + r * 128 + ((((c % 64) / 8) ^ (r & 7)) * 16) + (c % 8) * 2;
}

template <int ROWS, int BN, int HD>
static int check() {
  using namespace cute;
  using TA = cutlass::half_t;
  auto q = tile_to_shape(GMMA::Layout_K_SW128_Atom<TA>{}, Shape<Int<ROWS>, Int<HD>>{});
  auto k = tile_to_shape(GMMA::Layout_K_SW128_Atom<TA>{}, Shape<Int<BN>, Int<HD>>{});
  auto vt =
      tile_to_shape(GMMA::Layout_MN_SW128_Atom<TA>{}, Shape<Int<HD>, Int<BN>>{}, Step<_2, _1>{});
  // the swizzle of a GMMA layout acts on the shared-memory address (bytes): evaluate through a
  // tensor on a 1024-byte aligned pointer, as the kernel does
  TA* base = reinterpret_cast<TA*>(uintptr_t{1} << 20);
  auto byte = [&](auto layout, int i, int j) {
    auto t = make_tensor(make_smem_ptr(base), layout);
    return int(reinterpret_cast<char*>(raw_pointer_cast(&t(i, j))) - reinterpret_cast<char*>(base));
  };
  int bad_q = 0, bad_k = 0, bad_v = 0;
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < HD; ++c) bad_q += byte(q, r, c) != ours(ROWS, r, c);
  for (int t = 0; t < BN; ++t)
    for (int c = 0; c < HD; ++c) {
      bad_k += byte(k, t, c) != ours(BN, t, c);
      bad_v += byte(vt, c, t) != ours(BN, t, c);  // V^T: (head dim, token)
    }
  std::printf("rows %3d tokens %3d head_dim %3d: Q %d, K %d, V %d mismatches of %d / %d / %d\n",
              ROWS, BN, HD, bad_q, bad_k, bad_v, ROWS * HD, BN * HD, BN * HD);
  return bad_q + bad_k + bad_v;
}

int main() {
  int bad =
      check<64, 64, 64>() + check<64, 64, 128>() + check<128, 128, 64>() + check<128, 128, 128>();
  return bad == 0 ? 0 : 1;
}
