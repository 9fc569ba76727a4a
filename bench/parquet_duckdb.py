"""DuckDB's side of bench/export.sh, run by the python of `scripts/analysts-env.sh --bench`
(DuckDB with its SQLite scanner from PyPI, loaded from the package's file: no network).

  floor SQLITE_DB MANIFEST OUT_DIR
      DuckDB's own writer, the floor of our Parquet export: for each table our export's
      manifest lists as Parquet, `COPY (SELECT ...) TO ... (FORMAT parquet, zstd)` over
      the SQLite file with the same columns and types (read from the manifest), the
      events partitioned by Prague year like ours. DuckDB gets every PII cell as stored
      (no mask), which only makes its work lighter. Prints, per table,
          FLOOR table seconds bytes rows
  query SQLITE_DB PARQUET_DIR CSV_DIR FLOOR_DIR [RUNS]
      One analytical query, debtors per court and month of opening, in DuckDB over our
      Parquet files, over our CSV files, over the SQLite file through the scanner, and
      over DuckDB's own Parquet files of the same tables (`floor`'s, in FLOOR_DIR); the
      best of RUNS (3) runs each. Prints, per source,
          QUERY form source best_seconds all_seconds groups debtors
      for each of the query's two forms (`date`, `text`: see MONTHS), and fails if any
      two answers differ.
"""

import glob
import json
import os
import sys
import time

import duckdb
import duckdb_extension_sqlite_scanner as scanner

SQL_TYPES = {
    "int64": "BIGINT",
    "boolean": "BOOLEAN",
    "date32": "DATE",
    "string": "VARCHAR",
}
# Where a table's rows are in the SQLite file: a projection's view of documents, or
# columns of its own.
# The parties are read from their cells (`party_cells`, as the export reads them on
# SQLite), or from `doc` where a version made before the cells kept it whole.
SOURCES = {"cases": "cases", "parties": "party_cells", "events": "timeline", "stats": "stats"}
PARTY_EITHER = {"ico": "COALESCE(ico_text, ico)", "birth_number": "COALESCE(birth_number_text, rc)"}


def connect():
    ext = glob.glob(os.path.join(os.path.dirname(scanner.__file__), "extensions", "*", "*.duckdb_extension"))
    if len(ext) != 1:
        sys.exit(f"parquet_duckdb.py: the sqlite scanner's extension file is not where expected: {ext}")
    con = duckdb.connect()
    con.execute(f"LOAD '{ext[0]}'")
    # Our export reads a zone-less date-time as Prague time; so does DuckDB's cast then.
    con.execute("SET TimeZone = 'Europe/Prague'")
    return con


def typed(expr, arrow_type):
    if arrow_type.startswith("timestamp"):
        return f"TRY_CAST({expr} AS TIMESTAMPTZ)"
    if arrow_type == "date32":
        # Dates come as `2024-01-02` or with an offset (`2024-01-02+01:00`).
        return f"TRY_CAST(left(CAST({expr} AS VARCHAR), 10) AS DATE)"
    return f"TRY_CAST({expr} AS {SQL_TYPES.get(arrow_type, 'VARCHAR')})"


def doc_path(column):
    if column == "debtor_count":
        return None
    if column.startswith("debtor."):
        return "$.debtors[0]." + column[len("debtor."):]
    return "$." + column


def select(db, table, columns):
    src = f"sqlite_scan('{db}', '{SOURCES[table]}')"
    exprs = []
    for c in columns:
        name, t = c["name"], c["type"]
        if table == "parties":
            cell = PARTY_EITHER.get(name, f'"{name}"')
            raw = f"CASE WHEN doc IS NULL THEN {cell} ELSE json_extract_string(doc, '{doc_path(name)}') END"
        elif table == "cases":
            p = doc_path(name)
            raw = "json_array_length(doc, '$.debtors')" if p is None else f"json_extract_string(doc, '{p}')"
        else:
            raw = f'"{name}"'
        exprs.append(f'{typed(raw, t)} AS "{name}"')
    where = " WHERE count <> 0" if table == "stats" else ""
    return f"SELECT {', '.join(exprs)} FROM {src}{where}"


def floor(db, manifest_path, out):
    manifest = json.load(open(manifest_path))
    tables = {}
    for f in manifest["files"]:
        if f.get("format") == "parquet":
            tables.setdefault(f["table"], f["columns"])
    con = connect()
    os.makedirs(out, exist_ok=True)
    opts = "FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3, ROW_GROUP_SIZE 131072"
    for table, columns in tables.items():
        q = select(db, table, columns)
        start = time.perf_counter()
        if table == "events":
            target = os.path.join(out, "events")
            year = "year(TRY_CAST(published AS TIMESTAMPTZ))"
            con.execute(
                f"COPY (SELECT *, {year} AS year FROM ({q})) TO '{target}' ({opts}, PARTITION_BY (year))"
            )
            files = glob.glob(os.path.join(target, "*", "*.parquet"))
        else:
            target = os.path.join(out, f"{table}.parquet")
            con.execute(f"COPY ({q}) TO '{target}' ({opts})")
            files = [target]
        secs = time.perf_counter() - start
        size = sum(os.path.getsize(f) for f in files)
        rows = con.execute(f"SELECT count(*) FROM read_parquet({files!r})").fetchone()[0]
        print(f"FLOOR {table} {secs:.3f} {size} {rows}", flush=True)


# Debtors per court and month of opening, over each source, in two forms with the same
# answer (the month as text, `2024-03`):
# - `date`: the month from the date, `strftime(CAST(opened AS DATE), '%Y-%m')`, as an
#   analyst writes it over typed data (the CAST is a no-op on our Parquet's and the CSV's
#   DATE column and parses the SQLite scanner's text). The headline figure.
# - `text`: `left(CAST(opened AS VARCHAR), 7)`, the form of the runs before 2026-12-07's
#   second: it turns every date into a string first, which costs the typed sources most
#   (about a fifth of a Parquet run), so it is kept for comparison.
MONTHS = {
    "date": "strftime(CAST(c.opened AS DATE), '%Y-%m')",
    "text": "left(CAST(c.opened AS VARCHAR), 7)",
}
QUERY = """
SELECT c.court_short AS court, {month} AS month, count(*) AS debtors
FROM {parties} p JOIN {cases} c ON p.case_number = c.case_number
WHERE p.role = 'DLUŽNÍK'
GROUP BY ALL ORDER BY ALL
"""


def query(db, parquet, csv, floor_dir, runs):
    con = connect()
    sources = {
        "parquet": (f"'{parquet}/parties.parquet'", f"'{parquet}/cases.parquet'"),
        "duckdb-parquet": (f"'{floor_dir}/parties.parquet'", f"'{floor_dir}/cases.parquet'"),
        "csv": (f"read_csv('{csv}/parties.csv')", f"read_csv('{csv}/cases.csv')"),
        "sqlite": (f"sqlite_scan('{db}', 'parties')", f"sqlite_scan('{db}', 'cases')"),
    }
    answers = {}
    for form, month in MONTHS.items():
        for name, (p, c) in sources.items():
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                rows = con.execute(QUERY.format(month=month, parties=p, cases=c)).fetchall()
                times.append(time.perf_counter() - start)
            answers[(form, name)] = rows
            print(
                f"QUERY {form} {name} {min(times):.4f} {','.join(f'{t:.4f}' for t in times)} "
                f"{len(rows)} {sum(r[2] for r in rows)}",
                flush=True,
            )
    first = answers[("text", "sqlite")]
    for (form, name), rows in answers.items():
        if rows != first:
            sys.exit(f"parquet_duckdb.py: the query ({form}) over {name} answers differently from the SQLite file")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "floor":
        floor(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) in (6, 7) and sys.argv[1] == "query":
        query(*sys.argv[2:6], int(sys.argv[6]) if len(sys.argv) == 7 else 3)
    else:
        sys.exit(__doc__)
