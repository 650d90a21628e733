# The start that the bench/ab device scripts share, sourced from the repository root.
# `ab_start DIR SECONDS` sets OUT (default DIR), creates it with an empty summary.txt ($S), and
# starts the clock T0 against DEADLINE (default SECONDS). Then:
#   left      seconds left of DEADLINE
#   lim N     a step's timeout: N, or what is left when less (at least 1)
#   note ...  prints its words and appends them to $S
#   gpu_note  notes the GPU's name and the UTC time
#   ab_build SRC DIR [JOBS]  configures and builds the CLI alone (sm_90a) of tree SRC in DIR
#   ab_cli, ncu_sass, stall_start, stall_report   (below)
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
# ab_cli [SECONDS]: builds the working tree's CLI into build-final (bench/device_final.sh
# STAGES=build) unless it is there; exits the script when the build fails
ab_cli() {
  [[ -x build-final/treeattn ]] && return
  STAGES=build OUT=/tmp/b timeout -s KILL "${1:-330}" bash bench/device_final.sh >/tmp/b.log 2>&1
  grep -E "^(gpu|build)" /tmp/b/summary.txt | tee -a "$S"
  grep -q "^build: rc=0 " /tmp/b/summary.txt || { note "build failed or killed"; exit 1; }
}
# ncu_sass NAME REGEX SECONDS [ncu flags ...] -- COMMAND ...: ncu's per-SASS-instruction warp-stall
# samples (SourceCounters, with WarpStateStats and SpeedOfLight) of one launch of the kernels
# whose mangled name matches REGEX, COMMAND killed after SECONDS; exports $W/NAME.csv (the SASS
# table, `--page source --csv --print-source sass`) and $W/NAME.details, and gzips the table into
# $OUT/NAME.sass.csv.gz. ncu's output goes to $W/NAME.log. Fails when ncu wrote no report.
ncu_sass() {
  local name=$1 re=$2 to=$3 flags=()
  shift 3
  while [[ $# -gt 0 && $1 != -- ]]; do flags+=("$1"); shift; done
  shift
  timeout -s KILL "$to" ncu --kernel-name-base mangled -k "regex:$re" -c 1 ${flags[@]+"${flags[@]}"} \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --import-source no -f -o "$W/$name" "$@" >"$W/$name.log" 2>&1
  note "ncu $name: rc=$? at $(($(date +%s) - T0)) s"
  [[ -f "$W/$name.ncu-rep" ]] || return 1
  ncu -i "$W/$name.ncu-rep" --page source --csv --print-source sass >"$W/$name.csv" 2>>"$W/$name.log"
  ncu -i "$W/$name.ncu-rep" --page details >"$W/$name.details" 2>>"$W/$name.log"
  gzip -c "$W/$name.csv" >"$OUT/$name.sass.csv.gz"
}
# stall_start DIR SECONDS: the start of a warp-stall diagnostic (ncu_sass runs): ab_start DIR,
# the work folder W (DIR_work), the GPU note, the CLI (ab_cli) and an empty $OUT/stalls.txt
stall_start() {
  ab_start "$1" "$2"
  W=$1_work
  mkdir -p "$W"
  gpu_note
  ab_cli 300
  : >"$OUT/stalls.txt"
}
# stall_report NAME TITLE: appends ncu_sass run NAME's headline metrics and its top SASS
# instructions by stall samples (bench/ab/stall_top.py) to $OUT/stalls.txt
stall_report() {
  { echo "===== $1 ($2)"
    grep -E "Duration|Issued Warp|Warp Cycles Per Issued|SM Frequency|Compute \(SM\) Throughput|Memory Throughput" "$W/$1.details" | head -8
    python3 bench/ab/stall_top.py "$W/$1.csv" 30; } >>"$OUT/stalls.txt" 2>&1
}
