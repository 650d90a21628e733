"""SASS of the warp-specialized kernel with the PTX wrappers against the CuTe MMAs (compare.sh):
per kernel, the static instruction count (NOPs left out), whether the HGMMA instructions are the
same (opcode, accumulator and A registers, order; the uniform register that holds a
descriptor may be numbered differently), and the instructions between the first
and the last HGMMA (the consumer rounds)."""
import re
import sys


def functions(path):
    out, cur = {}, None
    for line in open(path):
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and cur is not None and not m.group(1).startswith("NOP"):
            cur.append(m.group(1))
    return out


def main(a_path, b_path):
    a, b = functions(a_path), functions(b_path)
    print("| kernel | instructions (PTX / CuTe) | HGMMA | same HGMMA stream | first..last HGMMA |")
    print("|---|---|---|---|---|")
    for name in a:
        ia, ib = a[name], b[name]
        ha = [i for i, x in enumerate(ia) if x.startswith("HGMMA")]
        hb = [i for i, x in enumerate(ib) if x.startswith("HGMMA")]
        def hgmma(ins, idx):
            return [re.sub(r"\bUR\d+", "UR", ins[i]) for i in idx]

        same = hgmma(ia, ha) == hgmma(ib, hb)
        m = re.search(r"DTypeE(\d)ELi(\d+)ELi(\d)", name)
        label = f"{'bf16' if m.group(1) == '1' else 'fp16'} hd{m.group(2)} " + \
            ("kM128" if m.group(3) == "2" else "kM64")
        print(f"| {label} | {len(ia)} / {len(ib)} ({len(ib) - len(ia):+d}) | {len(ha)} / {len(hb)} "
              f"| {'yes' if same else 'no'} | {ha[-1] - ha[0]} / {hb[-1] - hb[0]} "
              f"({(hb[-1] - hb[0]) - (ha[-1] - ha[0]):+d}) |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
