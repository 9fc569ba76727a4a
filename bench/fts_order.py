#!/usr/bin/env python3
"""FTS5 walked newest-first (rowid DESC) against the same index walked forward.

The SQLite name index (`names_vN`) keys each person by their latest action ID and a
search reads it `ORDER BY rowid DESC`. This measures, on a synthetic index of N
persons (two words each, Czech-like given names and surnames; prefixes 2-4 indexed and
merged to one segment, as `projection::optimize` leaves it), what the same searches
cost when the rowid is the negated ID and the walk runs forward (`ORDER BY rowid ASC`).
It uses the system's SQLite through Python, not the bundled one, and times the
statements alone, not the API.
    bench/fts_order.py [N]   (default 3 000 000; files in a temporary directory)
"""
import os, random, sqlite3, sys, tempfile, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3_000_000
SYL = ["no", "va", "ko", "pro", "cha", "dvo", "ra", "ne", "me", "cek", "ka", "ma", "li",
       "be", "ze", "so", "ho", "ja", "ku", "vo", "ri", "sta", "pe", "tr", "hu", "ba"]
GIVEN = ["jan", "jana", "jaroslav", "jakub", "petr", "petra", "pavel", "pavla", "martin",
         "martina", "tomas", "lucie", "eva", "josef", "marie", "jiri", "jitka", "karel",
         "lenka", "zdenek", "ondrej", "hana", "vaclav", "milan", "michal", "alena",
         "david", "anna", "lukas", "monika"]
SURN = [a + b + c for a in SYL for b in SYL for c in ["k", "kova", "ova", "a", "", "ek", "al"]]
ORDER = {"desc": 1, "asc": -1}

def build(path, sign):
    random.seed(7)
    c = sqlite3.connect(path)
    c.execute("CREATE VIRTUAL TABLE n USING fts5(words, prefix = '2 3 4', "
              "tokenize = 'unicode61 remove_diacritics 2')")
    rows = ((sign * i, random.choice(GIVEN) + " " + random.choice(SURN)) for i in range(1, N + 1))
    c.executemany("INSERT INTO n(rowid, words) VALUES (?, ?)", rows)
    c.commit()
    c.execute("INSERT INTO n(n) VALUES ('optimize')")
    c.commit()
    return c

def main():
    print(f"SQLite {sqlite3.sqlite_version}, {N} persons")
    random.seed(3)
    # What people type: four letters of a surname, two of a given name.
    texts = [((random.choice(SYL) + random.choice(SYL))[:4], random.choice(GIVEN)[:2]) for _ in range(300)]
    with tempfile.TemporaryDirectory() as d:
        dbs = {o: build(os.path.join(d, o + ".db"), s) for o, s in ORDER.items()}
        # The same persons in the same order, whichever way the index is walked.
        for a, b in texts:
            got = [[abs(r) for r, _ in c.execute(
                f"SELECT rowid, words FROM n WHERE n MATCH ? ORDER BY rowid {o} LIMIT 51",
                (f'words : "{a}"* AND words : "{b}"*',)).fetchall()] for o, c in dbs.items()]
            assert got[0] == got[1], (a, b)
        for rnd in (1, 2):
            for o, c in dbs.items():
                sql = f"SELECT rowid, words FROM n WHERE n MATCH ? ORDER BY rowid {o} LIMIT 51"
                q = lambda a, b: c.execute(sql, (f'words : "{a}"* AND words : "{b}"*',)).fetchall()
                for a, b in texts[:20]:
                    q(a, b)
                t = time.time()
                rows = sum(len(q(a, b)) for a, b in texts)
                print(f"round {rnd} rowid {o:4}: {len(texts) / (time.time() - t):7.0f} searches/s ({rows} rows)")

main()
