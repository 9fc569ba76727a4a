"""Parses the parse bench's page with Python's lxml, the same work as the typed parser:
every field of every record, and every poznamka (unescaped) parsed into elements with
their text. Prints MiB/s.
    python bench/parse_lxml.py PAGE.xml"""
import sys
import time

from lxml import etree

body = open(sys.argv[1], "rb").read()


def parse(body):
    root = etree.fromstring(body)
    out = []
    for rec in root.iter("{*}data"):
        a = {}
        for f in rec:
            tag = etree.QName(f).localname
            if tag == "poznamka":
                note = etree.fromstring(f.text.encode("utf-8"))
                a[tag] = {etree.QName(e).localname: e.text for e in note.iter()}
            else:
                a[tag] = f.text
        out.append(a)
    return out


n = len(parse(body))
assert n == 1000, n
best = None
for _ in range(5):
    t = time.perf_counter()
    for _ in range(10):
        parse(body)
    dt = (time.perf_counter() - t) / 10
    best = dt if best is None else min(best, dt)
print(f"lxml {etree.__version__}: {len(body) / best / 2**20:.1f} MiB/s ({best * 1000:.2f} ms a page of {n} records)")
