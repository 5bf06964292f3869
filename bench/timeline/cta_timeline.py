#!/usr/bin/env python3
"""cta_timeline.py -- the per-CTA timeline of the wgmma attention kernel.

Run with SAGEJIT_TEMPLATE_DIR naming templates made by make_templates.py
(and SAGEJIT_LIBRARY, PYTHONPATH=python as for the package), on a GPU:

  python3 bench/timeline/make_templates.py kernel_templates /tmp/tl
  SAGEJIT_TEMPLATE_DIR=/tmp/tl SAGEJIT_PDL=0 python3 bench/timeline/cta_timeline.py \
      --shapes 128:1024:0,128:4096:0 [--csv OUTDIR]
  python3 bench/timeline/cta_timeline.py --from-csv OUTDIR/timeline_D128_N1024_c0.csv

SAGEJIT_PDL=0 times the attention kernel alone (with programmatic dependent
launch its CTAs start under the quantizer and wait).  Per shape it prints one
JSON line: the span from the first CTA's entry to the last CTA's store, the
fraction of CTA-slots busy over it, and how the slots' time splits into
loops, prologues and epilogues, and idle (slot_frac); CTA durations (p10 /
p50 / p90, µs) split into prologue (entry to the first Q.K^T done), loop and
epilogue; each CTA's loop time against how many of its multiprocessor's
other CTAs were in their loops meanwhile (loop_by_neighbours: a
multiprocessor far from saturated shows one loop time throughout); the
prologue's steps (medians since entry), and the first wave against the rest.
It reads every 64th output row: solo CTAs (64 rows; the default at D = 64,
and at D = 128 up to 16K keys); two-consumer CTAs stamp every 128th row.
summarize() takes the words alone, so tests run it without a GPU.
"""
import argparse
import json
import sys

STEPS = ["sync", "pdl", "copies", "fused_q", "ones_sync", "q_full", "k0_wait"]
MASK = 0xFFFFFFFF


def _q(xs):
    """p10, p50, p90 of a list (rounded to 0.01)."""
    s = sorted(xs)
    if not s:
        return [None, None, None]
    return [round(s[len(s) // 10], 2), round(s[len(s) // 2], 2), round(s[(9 * len(s)) // 10], 2)]


def _loop_by_neighbours(entry, pro, loop, sm, groups=5):
    """Each CTA's loop (first Q.K^T done to the loop's end) against how many
    other CTAs of its multiprocessor were in their loops meanwhile, on
    average: CTAs sorted by that number, in `groups` equal slices, each
    [mean number, median loop us].  A loop whose speed did not depend on
    its neighbours gives one loop time in every slice."""
    by_sm = {}
    for i, s in enumerate(sm):
        by_sm.setdefault(s, []).append(i)
    pairs = []
    for idx in by_sm.values():
        for i in idx:
            a, b = pro[i], loop[i]
            if b <= a:
                continue
            over = sum(max(0.0, min(b, loop[j]) - max(a, pro[j])) for j in idx if j != i)
            pairs.append((over / (b - a), b - a))
    pairs.sort()
    n, out = len(pairs), []
    g = min(groups, n)
    for k in range(g):
        part = pairs[k * n // g:(k + 1) * n // g]
        out.append([round(sum(p[0] for p in part) / len(part), 2),
                    round(sorted(p[1] for p in part)[len(part) // 2], 2)])
    return out


def summarize(words, slots):
    """words: one list of 16 u32 per CTA (make_templates.py's layout);
    slots: CTAs resident at once (e.g. 3 x multiprocessors for the solo
    D = 128 kernel).  Times are ns modulo 2^32 from one clock: they are
    taken relative to the earliest entry, found through signed differences
    from the first CTA's (every stamp lies within 2 s of it), so a wrap in
    between is harmless."""
    r0 = words[0][0]
    signed = lambda v: ((v - r0 + (1 << 31)) & MASK) - (1 << 31)
    e0 = (r0 + min(signed(w[0]) for w in words)) & MASK
    rel = lambda v: ((v - e0) & MASK) / 1e3  # µs since the first entry
    entry = [rel(w[0]) for w in words]
    pro = [rel(w[1]) for w in words]
    loop = [rel(w[2]) for w in words]
    end = [rel(w[3]) for w in words]
    span = max(end)
    busy = sum(x - e for x, e in zip(end, entry))
    order = sorted(range(len(words)), key=lambda i: entry[i])
    first, rest = order[:slots], order[slots:]
    out = {
        "ctas": len(words),
        "sms": len({w[4] for w in words}),
        "span_us": round(span, 2),
        "busy_frac": round(busy / (span * slots), 3) if span > 0 else None,
        "cta_us": _q([x - e for x, e in zip(end, entry)]),
        "prologue_us": _q([p - e for p, e in zip(pro, entry)]),
        "loop_us": _q([l - p for l, p in zip(loop, pro)]),
        "epilogue_us": _q([x - l for x, l in zip(end, loop)]),
        # the slots' time (span x slots): a CTA in its loop, in its
        # prologue or epilogue, or none (bench/NOTES.md, the slots row)
        "slot_frac": {
            "loop": round(sum(l - p for l, p in zip(loop, pro)) / (span * slots), 3),
            "prologue_epilogue": round(
                sum((p - e) + (x - l) for e, p, l, x in zip(entry, pro, loop, end))
                / (span * slots), 3),
            "idle": round(1 - busy / (span * slots), 3),
        } if span > 0 else None,
        "loop_by_neighbours": _loop_by_neighbours(entry, pro, loop, [w[4] for w in words]),
        "first_wave_cta_us": _q([end[i] - entry[i] for i in first]),
        "rest_cta_us": _q([end[i] - entry[i] for i in rest]),
        "steps_since_entry_us": {
            name: _q([((w[8 + k] - w[0]) & MASK) / 1e3 for w in words])[1]
            for k, name in enumerate(STEPS)
        },
    }
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:1024:0,128:4096:0,64:1024:0",
                    help="D:N:causal,... (B and H from --batch, --heads)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--slots", type=int, default=0,
                    help="CTAs resident at once (default 3 per multiprocessor)")
    ap.add_argument("--csv", default="", help="a folder for one CSV per shape")
    ap.add_argument("--from-csv", default="", metavar="FILE",
                    help="summarize a CSV written by --csv (no GPU; --slots defaults "
                         "to 3 per multiprocessor seen in it)")
    args = ap.parse_args()
    if args.from_csv:
        with open(args.from_csv) as f:
            rows = [line.strip().split(",") for line in f][1:]
        words = [[int(x) for x in r] + [0] * (16 - len(r)) for r in rows if r and r[0]]
        slots = args.slots or 3 * len({w[4] for w in words})
        print(json.dumps(summarize(words, slots)), flush=True)
        return 0
    import torch
    import sagejit
    slots = args.slots or 3 * torch.cuda.get_device_properties(0).multi_processor_count
    for shape in args.shapes.split(","):
        d, n, c = (int(x) for x in shape.split(":"))
        torch.manual_seed(0)
        q, k, v = (torch.randn(args.batch, args.heads, n, d, device="cuda",
                               dtype=torch.float16) for _ in range(3))
        for _ in range(5):
            o = sagejit.sageattn(q, k, v, is_causal=bool(c))
        torch.cuda.synchronize()
        o = sagejit.sageattn(q, k, v, is_causal=bool(c))
        torch.cuda.synchronize()
        # each CTA's first row: rows 0, 64, 128, ... of every (batch, head)
        w = o[:, :, ::64, :32].contiguous().view(torch.int32)[..., :16]
        words = [[x & MASK for x in row] for row in w.reshape(-1, 16).tolist()]
        r = summarize(words, slots)
        r.update(D=d, N=n, causal=c)
        print(json.dumps(r), flush=True)
        if args.csv:
            with open(f"{args.csv}/timeline_D{d}_N{n}_c{c}.csv", "w") as f:
                f.write("entry,first_qk,loop_end,pre_store,smid,bx,by,bz," + ",".join(STEPS) + "\n")
                for row in words:
                    f.write(",".join(str(x) for x in row[:15]) + "\n")


if __name__ == "__main__":
    sys.exit(main())
