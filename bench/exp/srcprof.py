#!/usr/bin/env python3
"""srcprof.py SOURCE.csv [TOP]: read an ncu source page (CSV, SASS) that
bench/exp/srcprof_device.sh (or mma_vs_sa2_device.sh) wrote: stall samples
by reason over the whole kernel, by region (runs of instructions executed
equally often), executed warp-instructions and samples by opcode (the
instruction mix of two kernels side by side), and the TOP instructions by
samples with their stall reasons."""
import csv
import sys

path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
with open(path, newline="") as f:
    rows = list(csv.reader(f))
hdr_i = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
hdr = rows[hdr_i]
col = {h: i for i, h in enumerate(hdr)}
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
ins = []
for r in rows[hdr_i + 1:]:
    if len(r) < len(hdr) or not r[0].startswith("0x"):
        continue
    d = {"addr": int(r[0], 16), "src": r[1].strip(), "samples": int(r[col["# Samples"]] or 0),
         "exec": int(r[col["Instructions Executed"]] or 0)}
    d["st"] = {k: int(r[col[k]] or 0) for k in reasons}
    ins.append(d)
base = ins[0]["addr"]
total = sum(i["samples"] for i in ins)
print(f"{len(ins)} instructions, {total} samples, {sum(i['exec'] for i in ins)} warp-instructions")
agg = {k: sum(i["st"][k] for i in ins) for k in reasons}
print("by reason:", ", ".join(f"{k[6:]} {v / total:.1%}" for k, v in sorted(agg.items(), key=lambda x: -x[1]) if v))
# regions: consecutive instructions with the same execution count
regs = []
for i in ins:
    if regs and regs[-1]["exec"] == i["exec"]:
        regs[-1]["n"] += 1
        regs[-1]["samples"] += i["samples"]
        regs[-1]["end"] = i["addr"]
        for k in reasons:
            regs[-1]["st"][k] += i["st"][k]
    else:
        regs.append({"exec": i["exec"], "n": 1, "samples": i["samples"], "start": i["addr"],
                     "end": i["addr"], "st": dict(i["st"])})
print("\nregions with >= 0.5 % of the samples (offset, instructions, executions, share, top reasons):")
for g in regs:
    if g["samples"] >= 0.005 * total:
        tr = sorted(g["st"].items(), key=lambda x: -x[1])[:4]
        print(f"  {g['start'] - base:6x}-{g['end'] - base:6x} n={g['n']:4d} exec={g['exec']:9d} "
              f"{g['samples'] / total:6.1%}  " + ", ".join(f"{k[6:]} {v / max(g['samples'], 1):.0%}" for k, v in tr if v))
# by opcode (the SASS mnemonic up to its first dot, predicate stripped)
ops = {}
for i in ins:
    toks = i["src"].split()
    if toks and toks[0].startswith("@"):
        toks = toks[1:]
    op = toks[0].split(".")[0] if toks else "?"
    e = ops.setdefault(op, [0, 0])
    e[0] += i["exec"]
    e[1] += i["samples"]
nexec = max(sum(e[0] for e in ops.values()), 1)
print("\nby opcode (executed warp-instructions, share of them, share of the samples):")
for op, (ex, sm) in sorted(ops.items(), key=lambda x: -x[1][0])[:30]:
    print(f"  {op:12s} {ex:12d} {ex / nexec:6.1%} {sm / max(total, 1):6.1%}")
print(f"\ntop {top} instructions:")
for i in sorted(ins, key=lambda x: -x["samples"])[:top]:
    tr = sorted(i["st"].items(), key=lambda x: -x[1])[:3]
    print(f"  {i['addr'] - base:6x} {i['samples'] / total:6.2%} exec={i['exec']:8d} {i['src'][:60]:60s} "
          + ", ".join(f"{k[6:]} {v}" for k, v in tr if v))
