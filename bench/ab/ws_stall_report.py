"""Per-instruction warp-stall samples of one kernel (the CSV of `ncu -i REP --page source --csv
--print-source sass`), summed per opcode and per role: producer (its copies, its global loads and
its waits on the empty barriers), consumer MMA (wgmma and its waits), consumer turn (the named
barriers of the ping-pong), consumer waits on full barriers, softmax and the rest. The two mbarrier
roles are told apart by what follows the wait: a producer's empty-barrier wait is followed by
copies (LDGSTS or, for fp8, global loads) before the next wait, a consumer's full-barrier wait is
not; the retry loops that ptxas places at the end of the function take the role of the first wait
with the same operands, and the branch after a try-wait (where a failed wait's samples land) the
wait's role. Prints the 25 instructions with the most samples as well.
Usage: python3 bench/ab/ws_stall_report.py SASS.csv"""
import csv
import re
import sys
from collections import defaultdict


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.strip()]
    # ncu prints notes before the header; the header is the first line naming the source column
    start = next(i for i, l in enumerate(lines) if "Source" in l and "," in l)
    return list(csv.DictReader(lines[start:]))


def sample_column(header):
    for name in header:
        if "Warp Stall Sampling (All" in name:
            return name
    for name in header:
        if "stall" in name.lower() and "sampl" in name.lower():
            return name
    raise SystemExit(f"no stall-sampling column in {header}")


def reach(start, ins, ops, addr_index):
    """Instruction indices reachable from `start` (fall-through and branch targets)."""
    seen, todo = set(), [start]
    while todo:
        i = todo.pop()
        if i in seen or i >= len(ins):
            continue
        seen.add(i)
        predicated = ins[i].startswith("@")
        if ops[i] == "BRA":
            m = re.search(r"0x([0-9a-f]+)\s*$", ins[i])
            if m and int(m.group(1), 16) in addr_index:
                todo.append(addr_index[int(m.group(1), 16)])
            if predicated:
                todo.append(i + 1)
        elif ops[i] in ("EXIT", "RET", "BRX", "JMX") and not predicated:
            continue
        else:
            todo.append(i + 1)
    return seen


def role(i, ins, ops, side):
    op = ops[i]
    if op.startswith("SYNCS.PHASECHK"):
        for j in range(i + 1, min(i + 80, len(ops))):
            if ops[j].startswith("SYNCS.PHASECHK"):
                break
            if ops[j].startswith(("LDGSTS", "LDG")):
                return "producer: empty-barrier waits"
        return "consumer: full-barrier (K/V) waits"
    if op.startswith(("LDGSTS", "ARRIVES", "LDG", "SHFL")):
        return "producer: copies, page loads, shuffles"
    if op.startswith(("HGMMA", "WARPGROUP")):
        return "consumer: wgmma issue and waits"
    if op.startswith("BAR"):
        return "consumer: named barriers (turns, Q, epilogue)"
    if op.startswith(("MUFU", "FMNMX", "FFMA", "FMUL", "FADD", "F2FP", "FSEL", "FSETP")):
        return "consumer: softmax arithmetic"
    return f"{side}: other (address math, control, stores)"


def main(path):
    data = rows(path)
    col = sample_column(data[0].keys())
    src = next(k for k in data[0].keys() if k.strip().lower() in ("source", "sass"))
    ins = [r[src].strip() for r in data]
    ops = [re.sub(r"^@!?U?P\w+\s+", "", x).split(" ")[0] if x else "" for x in ins]
    samples = [float((r[col] or "0").replace(",", "")) for r in data]
    total = sum(samples) or 1.0
    addr_col = next((k for k in data[0].keys() if "address" in k.strip().lower()), None)
    addr_index = {}  # what BRA targets name -> instruction index
    if addr_col:
        base = None
        for i, r in enumerate(data):
            try:
                a = int(r[addr_col].strip(), 16)
            except ValueError:
                continue
            base = a if base is None else base
            addr_index[a - base] = i  # branch targets print as offsets or as absolute addresses
            addr_index[a] = i
    # the code each role runs: reachable from its setmaxnreg (the producer gives registers up)
    entry = {k: next((i for i, x in enumerate(ins) if k in x), None)
             for k in ("USETMAXREG.DEALLOC", "USETMAXREG.TRY_ALLOC")}
    prod = reach(entry["USETMAXREG.DEALLOC"], ins, ops, addr_index) \
        if entry["USETMAXREG.DEALLOC"] is not None else set()
    cons = reach(entry["USETMAXREG.TRY_ALLOC"], ins, ops, addr_index) \
        if entry["USETMAXREG.TRY_ALLOC"] is not None else set()
    # the consumers' path also reaches the producer's branch (the role test follows their
    # setmaxnreg), so what the producer reaches is the producer's and the rest the consumers'
    side = ["producer" if i in prod else "consumer" if i in cons else "setup or shared"
            for i in range(len(ins))]
    roles = [role(i, ins, ops, side[i]) for i in range(len(ins))]
    # a failed try-wait's samples land on the branch that reads its predicate: the wait's role
    for i in range(1, len(ins)):
        if ops[i] == "BRA" and ops[i - 1].startswith("SYNCS.PHASECHK"):
            roles[i] = None
    first_wait = {}
    for i, op in enumerate(ops):
        if op.startswith("SYNCS.PHASECHK"):
            operands = ins[i].split(" ", 1)[-1] if not ins[i].startswith("@") else ins[i]
            operands = re.sub(r"^@!?U?P\w+\s+", "", operands).split(" ", 1)[-1]
            roles[i] = first_wait.setdefault(operands, roles[i])
    for i in range(1, len(ins)):
        if roles[i] is None:
            roles[i] = roles[i - 1]
    by_role, by_op = defaultdict(float), defaultdict(float)
    for i, s in enumerate(samples):
        by_role[roles[i]] += s
        by_op[ops[i]] += s
    print(f"stall samples: {int(total)} over {len(ins)} instructions ({col})")
    for k, v in sorted(by_role.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * v / total:5.1f}%  {k}")
    print("by opcode (top 12):")
    for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {100 * v / total:5.1f}%  {k}")
    print("instructions (top 25):")
    for i in sorted(range(len(ins)), key=lambda i: -samples[i])[:25]:
        print(f"  {100 * samples[i] / total:5.1f}%  [{i:5d}] {ins[i]}")


if __name__ == "__main__":
    main(sys.argv[1])
