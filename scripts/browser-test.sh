#!/usr/bin/env bash
# The HTML pages in headless Chromium (Debian's `chromium`, installed when missing):
# starts `isir demo` on free loopback ports with simulator data, renders the status
# page, a search page and a case page, and checks that they show the right numbers
# (read from the demo's own database) and Czech diacritics intact.
#   scripts/browser-test.sh            (run by scripts/test.sh)
#   SCREENSHOT=1 scripts/browser-test.sh   also refreshes docs/status-page.png
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if ! command -v chromium >/dev/null; then
    echo "browser-test.sh: installing chromium"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
command -v sqlite3 >/dev/null || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq sqlite3; }
BIN="${ISIR_BIN:-target/debug/isir}"
[ -x "$BIN" ] || cargo build -q --bin isir
WORK="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
DB="$WORK/demo.db"
ISIR_API__RATE_PER_SECOND=10000 ISIR_API__BURST=10000 \
    "$BIN" demo --actions 20000 --period 3600 --live-rate 0 \
    --database "sqlite://$DB" --api-bind "127.0.0.1:$PORT" >"$WORK/demo.log" 2>&1 &
DEMO=$!
trap 'kill $DEMO 2>/dev/null || true; wait $DEMO 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    kill -0 $DEMO 2>/dev/null || { cat "$WORK/demo.log" >&2; exit 1; }
    sleep 0.2
done
curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "browser-test.sh: demo not ready" >&2; exit 1; }
# Ready means within the allowed lag: wait until every projection has caught up with the
# whole stream, so that the pages and the database are read in the same state.
for _ in $(seq 600); do
    [ "$(sqlite3 "$DB" "SELECT (SELECT COUNT(*) FROM actions) = 20000 AND (SELECT COUNT(*) FROM proj_meta WHERE name NOT LIKE '%#next' AND cursor = (SELECT checkpoint FROM writer_state)) = 3" 2>/dev/null)" = 1 ] && break
    sleep 0.2
done

chrome() { # $1: path; prints the DOM after rendering
    timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$WORK/chrome" "$@" 2>>"$WORK/chrome.log"
}
dom() { chrome --dump-dom "http://127.0.0.1:$PORT$1"; }

q() { sqlite3 "$DB" "$1"; }
dom "/" >"$WORK/status.html"
NAME="$(q "SELECT json_extract(doc, '\$.name') AS n FROM parties WHERE role = 'DLUŽNÍK' AND n GLOB '*[ÁČĎÉĚÍŇÓŘŠŤÚŮÝŽáčďéěíňóřšťúůýž]*' ORDER BY case_number LIMIT 1")"
CASE="$(q "SELECT year || '/' || number FROM cases WHERE erased = 0 ORDER BY json_extract(doc, '\$.documents') DESC LIMIT 1")"
CASE_NUMBER="$(q "SELECT case_number FROM cases WHERE year || '/' || number = '$CASE'")"
ENC() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1"; }
dom "/search?q=$(ENC "$NAME")" >"$WORK/search.html"
FOLDED="$(python3 -c 'import sys, unicodedata; print("".join(c for c in unicodedata.normalize("NFD", sys.argv[1]) if not unicodedata.combining(c)).lower())' "$NAME")"
dom "/search?q=$(ENC "$FOLDED")" >"$WORK/search2.html"
dom "/cases/$CASE" >"$WORK/case.html"

python3 - "$WORK" "$DB" "$NAME" "$CASE_NUMBER" <<'PY'
import html.parser, sqlite3, sys
work, db, name, case_number = sys.argv[1:]
con = sqlite3.connect(db)
one = lambda sql, *a: con.execute(sql, a).fetchone()[0]

class Doc(html.parser.HTMLParser):
    def __init__(self, text):
        super().__init__(); self.ids = {}; self.stack = []; self.rects = 0; self.attrs = {}
        self.tables = {}; self.cur_table = None; self.rows = 0; self.links = 0; self.cells = []
        self.feed(text)
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "rect": self.rects += 1
        if "id" in a:
            self.stack.append(a["id"]); self.ids.setdefault(a["id"], ""); self.attrs[a["id"]] = a
            if tag == "table": self.cur_table = a["id"]; self.tables[a["id"]] = {"rows": 0, "links": 0, "text": ""}
        else:
            self.stack.append(None)
        if tag == "tr" and self.cur_table: self.tables[self.cur_table]["rows"] += 1
        if tag == "a" and self.cur_table and (a.get("href") or "").startswith("http"):
            self.tables[self.cur_table]["links"] += 1
    def handle_endtag(self, tag):
        if self.stack: self.stack.pop()
        if tag == "table": self.cur_table = None
    def handle_data(self, d):
        for i in self.stack:
            if i: self.ids[i] += d
        if self.cur_table: self.tables[self.cur_table]["text"] += d

fails = []
def check(what, got, want):
    ok = str(got).strip() == str(want).strip()
    print(f"{'ok ' if ok else 'FAIL'} {what}: {got!r}" + ("" if ok else f" (want {want!r})"))
    if not ok: fails.append(what)

s = Doc(open(f"{work}/status.html", encoding="utf-8").read())
check("status: phase", s.ids.get("phase"), one("SELECT value FROM settings WHERE key = 'phase'"))
check("status: checkpoint", s.ids.get("checkpoint"), one("SELECT checkpoint FROM writer_state"))
check("status: source head", s.ids.get("head"), one("SELECT head_id FROM writer_state"))
check("status: stored actions", s.ids.get("stored"), one("SELECT COUNT(*) FROM actions"))
check("status: budget used", s.ids.get("budget-used"), one("SELECT COALESCE(SUM(used), 0) FROM budget_day WHERE day = (SELECT MAX(day) FROM budget_day)"))
check("status: lease holder", s.ids.get("lease-holder"), one("SELECT holder FROM lease"))
for b in ("cases", "parties", "timeline"):
    check(f"status: {b} cursor", s.ids.get(f"proj-{b}-cursor"), one("SELECT cursor FROM proj_meta WHERE name = ?", b))
check("status: chart total", s.attrs["chart"].get("data-total"), one("SELECT SUM(actions) FROM tick_log"))
check("status: chart bars", s.rects, 72)
check("status: API state", s.ids.get("api-state"), "ready")

r1 = Doc(open(f"{work}/search.html", encoding="utf-8").read())
r2 = Doc(open(f"{work}/search2.html", encoding="utf-8").read())
check("search: name shown with diacritics", name in r1.tables["results"]["text"], True)
# The page's name search: every word of the query a prefix of a word of the person's
# names (given name, surname or company name, trade name), case and diacritics ignored;
# counted here with this script's own folding.
import re, unicodedata
def words(s):
    f = "".join(c for c in unicodedata.normalize("NFD", s) if not unicodedata.combining(c)).lower()
    return [w for w in re.split(r"[^0-9a-z]+", f) if w]
qw = words(name)
want = 0
for row in sqlite3.connect(db).execute("SELECT json_extract(doc, '$.name'), json_extract(doc, '$.first_name'), json_extract(doc, '$.trade_name') FROM parties"):
    ws = words(" ".join(x for x in row if x))
    if all(any(w.startswith(x) for w in ws) for x in qw):
        want += 1
check("search: rows for the name", r1.tables["results"]["rows"] - 1, min(want, 100))
check("search: folded query finds the same", r2.tables["results"]["rows"], r1.tables["results"]["rows"])

c = Doc(open(f"{work}/case.html", encoding="utf-8").read())
check("case: number", c.ids.get("case-number"), case_number)
check("case: state", c.ids.get("state"), one("SELECT state FROM cases WHERE case_number = ?", case_number))
check("case: timeline rows", c.tables["timeline"]["rows"] - 1, min(one("SELECT COUNT(*) FROM timeline WHERE case_number = ?", case_number), 500))
check("case: document links", c.tables["timeline"]["links"], min(one("SELECT COUNT(*) FROM timeline WHERE case_number = ? AND document_url IS NOT NULL", case_number), 500))
check("case: parties rows", c.tables["parties"]["rows"] - 1, one("SELECT COUNT(*) FROM parties WHERE case_number = ?", case_number))
if fails:
    sys.exit(f"browser-test: {len(fails)} checks failed: {', '.join(fails)}")
print("browser-test: all checks passed")
PY

if [ "${SCREENSHOT:-}" = 1 ]; then
    chrome --screenshot="$PWD/docs/status-page.png" --window-size=1100,1500 --hide-scrollbars "http://127.0.0.1:$PORT/" >/dev/null
    chrome --screenshot="$PWD/docs/case-page.png" --window-size=1100,1200 --hide-scrollbars "http://127.0.0.1:$PORT/cases/$CASE" >/dev/null
    echo "screenshots: docs/status-page.png docs/case-page.png"
fi
