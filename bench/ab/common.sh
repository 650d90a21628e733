# The start that the bench/ab device scripts share, sourced from the repository root.
# `ab_start DIR SECONDS` sets OUT (default DIR), creates it with an empty summary.txt ($S), and
# starts the clock T0 against DEADLINE (default SECONDS). Then:
#   left      seconds left of DEADLINE
#   lim N     a step's timeout: N, or what is left when less (at least 1)
#   note ...  prints its words and appends them to $S
#   gpu_note  notes the GPU's name and the UTC time
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
