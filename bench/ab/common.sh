# The start that the bench/ab device scripts share, sourced from the repository root.
# `ab_start DIR SECONDS` sets OUT (default DIR), creates it with an empty summary.txt ($S), and
# starts the clock T0 against DEADLINE (default SECONDS). Then:
#   left      seconds left of DEADLINE
#   lim N     a step's timeout: N, or what is left when less (at least 1)
#   note ...  prints its words and appends them to $S
#   gpu_note  notes the GPU's name and the UTC time
#   ab_build SRC DIR [JOBS]  configures and builds the CLI alone (sm_90a) of tree SRC in DIR
ab_start() {
  OUT=${OUT:-$1}
  DEADLINE=${DEADLINE:-$2}
  mkdir -p "$OUT"
  S="$OUT/summary.txt"
  : >"$S"
  T0=$(date +%s)
}
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
lim() {
  local l
  l=$(left)
  echo $((l < $1 ? (l > 1 ? l : 1) : $1))
}
note() { echo "$*" | tee -a "$S"; }
gpu_note() { note "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader); date: $(date -u +%FT%TZ)"; }
ab_build() {
  cmake -S "$1" -B "$2" -G Ninja -DTREEATTN_BENCH=OFF -DTREEATTN_TESTS=OFF \
    -DTREEATTN_CUDA_ARCHS=90a >"$2.log" 2>&1 &&
    timeout -s KILL 300 ninja -C "$2" -j"${3:-8}" treeattn >>"$2.log" 2>&1
}
