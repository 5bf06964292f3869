#!/usr/bin/env python3
"""dump_sass.py CACHE_DB PATTERN OUT_PREFIX: write the image of the first
cached kernel whose name contains PATTERN, and its SASS (cuobjdump), plus a
count of the instruction kinds inside the main loop."""
import collections
import re
import sqlite3
import subprocess
import sys

db, pat, out = sys.argv[1:4]
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
rows = con.execute("SELECT kernel_name, image FROM kernels WHERE kind='cubin'").fetchall()
rows = [r for r in rows if pat in r[0]]
if not rows:
    sys.exit(f"no kernel matches {pat}")
name, image = rows[0]
with open(out + ".cubin", "wb") as f:
    f.write(image)
sass = subprocess.run(["cuobjdump", "-sass", out + ".cubin"], capture_output=True, text=True).stdout
with open(out + ".sass", "w") as f:
    f.write(sass)
ops = collections.Counter()
for line in sass.splitlines():
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if m:
        ops[m.group(2).split(".")[0]] += 1
print(name)
print(" ".join(f"{k}:{v}" for k, v in ops.most_common(40)))
