#!/usr/bin/env python3
"""bench/exp/same_json.py OUT BASE VARIANT... -- compares `sagejit check
--json` runs of template variants on the same seeds, case by case: reads
OUT/chk-NAME.json (the JSON object is the last line), prints each run's
counts, then for every VARIANT how many of BASE's cases it reproduced
field for field (relative L2, cosine, max error, LSE error: printed with
seven digits, so a changed output shows) and its first differences."""
import json
import sys


def load(out, name):
    try:
        with open(f"{out}/chk-{name}.json") as f:
            j = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as e:
        print(name, "no json:", e)
        return None
    print(name, "cases", j["cases"], "passed", j["passed"], "failed", j["failed"],
          "skipped", j["skipped"])
    return j["results"]


def main():
    out, base, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
    ref = load(out, base)
    for v in variants:
        got = load(out, v)
        if ref is None or got is None:
            continue
        same = sum(1 for a, c in zip(ref, got) if a == c)
        print(f"{v}: {same} of {len(ref)} cases identical to {base} (every field)")
        for a, c in [(a, c) for a, c in zip(ref, got) if a != c][:5]:
            print("  differs:", {k: (a[k], c.get(k)) for k in a if a[k] != c.get(k)})


if __name__ == "__main__":
    main()
