# Peers table of two results calls (bench/device_final.sh with PEERS=ft, then PEERS=fi): per line
# the floor, treeattn `auto`, the best FastTree/DeFT and FlashInfer variants, and the best peer's
# time over treeattn's, each ratio taken within one call; geometric means per set. Both peer
# families may come from one call: then pass its folder twice (the A and B columns are one run).
# usage: python3 bench/peers_table.py DIR_FT_CALL DIR_FI_CALL OUT.md DATE
import json, math, sys, collections


def gm(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float('nan')


A, B, out, date = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def bench(d):
    j = json.load(open(d + '/bench.json'))
    return j, {(r['set'], r['workload']): r for r in j['results'] if r['planner'] == 'auto'}
def peers(files):
    best = {}
    for f in files:
        try: d = json.load(open(f))
        except Exception: continue
        recs = d if isinstance(d, list) else d.get('records', d.get('results', []))
        for r in recs:
            if not r.get('ok') or r.get('median_ms') is None: continue
            k = r['workload']; name = r['peer'] + (':' + r['variant'] if r.get('variant') else '')
            if k not in best or r['median_ms'] < best[k][0]: best[k] = (r['median_ms'], name)
    return best
ja, ta = bench(A); jb, tb = bench(B)
ft = peers([A + '/ft.json', A + '/ft_pat.json']); fi = peers([B + '/fi.json'])
qa = {}  # the query planner's floor fractions, when call A ran it (bench_query.json)
try:
    qa = {r['workload']: r for r in json.load(open(A + '/bench_query.json'))['results']}
except FileNotFoundError:
    pass
L = []
L.append(f"# treeattn vs peers on the H100 ({ja['device']}, {date})\n")
L.append("One device call: the A and B columns below are the same treeattn run.\n" if A == B else "")
L.append(f"Two device calls, each with treeattn and one peer family on the same card (or one call that ran both: then A = B): call A (treeattn `auto`, FastTree/DeFT artifact kernels; ceilings HBM {ja['ceilings']['hbm_read_GBps']} GB/s, tensor {ja['ceilings']['tc_TFLOPs']} TFLOP/s) and call B (treeattn `auto`, FlashInfer 0.7.2 decode tc/cc, cascade auto/fa2, prefill fa2; ceilings HBM {jb['ceilings']['hbm_read_GBps']} GB/s). Every ratio compares treeattn with a peer from the same call. Floor = max(bytes_min / HBM, flops_min / tensor) from the treeattn JSON of call A. treeattn: `treeattn bench` (CUDA events, L2 flushed, median of 50); peers: triton do_bench median with its L2 flush. FlashInfer ran under its time budget: lines without a FlashInfer time use the FastTree/DeFT peer alone. All outputs checked (treeattn against the float64 oracle, peers against a float32 reference).\n")
summary = collections.defaultdict(lambda: collections.defaultdict(list))
for s in ['fasttree', 'pat']:
    L.append(f"\n## {s} set\n")
    L.append("| workload | floor us | treeattn A us | FastTree/DeFT best us | treeattn B us | FlashInfer best us | best peer / treeattn |")
    L.append("|---|---|---|---|---|---|---|")
    for k in [k for k in ta if k[0] == s]:
        w = k[1]; a = ta[k]; b = tb.get(k)
        floor = a['floor_ms']
        r_ft = ft[w][0] / a['median_ms'] if w in ft else None
        r_fi = fi[w][0] / b['median_ms'] if (w in fi and b) else None
        rs = [r for r in (r_ft, r_fi) if r is not None]
        best = min(rs) if rs else None
        g = summary[s]
        g['tA'].append(floor / a['median_ms'])
        if b: g['tB'].append(b['floor_ms'] / b['median_ms'])
        if w in ft: g['ft'].append(floor / ft[w][0])
        if w in fi and b: g['fi'].append(b['floor_ms'] / fi[w][0])
        if best is not None:
            g['best'].append(floor / a['median_ms'] / best)  # floor fraction of the best peer, in call-A units
            g['ratio'].append(best)
        if w in qa: g['query'].append(qa[w]['floor_fraction'])
        fmt = lambda x: f"{x*1e3:.1f}"
        L.append(f"| `{w}` | {floor*1e3:.1f} | {fmt(a['median_ms'])} | " +
                 (f"{fmt(ft[w][0])} ({ft[w][1]})" if w in ft else "-") + " | " +
                 (fmt(b['median_ms']) if b else "-") + " | " +
                 (f"{fmt(fi[w][0])} ({fi[w][1]})" if w in fi else "-") + " | " +
                 (f"{best:.2f}" if best is not None else "-") + " |")
    g = summary[s]
    q = f"; treeattn `query` planner {gm(g['query'])*100:.1f}%" if g['query'] else ""
    L.append(f"\nGeometric mean of floor/time: treeattn {gm(g['tA'])*100:.1f}% (call A), {gm(g['tB'])*100:.1f}% (call B); "
             f"FastTree/DeFT best {gm(g['ft'])*100:.1f}% ({len(g['ft'])} lines); FlashInfer best {gm(g['fi'])*100:.1f}% ({len(g['fi'])} lines); "
             f"best peer per line {gm(g['best'])*100:.1f}%{q}.")
    L.append(f"treeattn faster than the best peer on {sum(r > 1 for r in g['ratio'])} of {len(g['ratio'])} lines; "
             f"at least 0.95x of it on {sum(r >= 0.95 for r in g['ratio'])}; best peer / treeattn geomean {gm(g['ratio']):.2f}.\n")
open(out, 'w').write('\n'.join(L) + '\n')
for s in summary:
    g = summary[s]
    print(s, 'treeattn A %.1f%% B %.1f%% ft %.1f%% fi %.1f%% best %.1f%% faster %d/%d ratio %.2f query %.1f%%' % (gm(g['tA'])*100, gm(g['tB'])*100, gm(g['ft'])*100, gm(g['fi'])*100, gm(g['best'])*100, sum(r>1 for r in g['ratio']), len(g['ratio']), gm(g['ratio']), gm(g['query'])*100 if g['query'] else float('nan')))
