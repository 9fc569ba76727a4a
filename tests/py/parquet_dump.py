"""Reads every Parquet file an isir export's manifest lists, with pyarrow and DuckDB
(readers independent of the Rust code that wrote them), and prints one JSON document:

  {"files": {name: {"schema": [[column, arrow type], ...], "rows": [[cell, ...], ...],
                    "num_rows": n, "row_groups": g, "compression": [codec, ...]}},
   "events_by_duckdb": {"rows": n, "misplaced": m, "years": [...]}}

Cells: text and numbers as JSON, nulls as null, booleans as JSON booleans, timestamps as
integer microseconds since the epoch (UTC), dates as ISO `YYYY-MM-DD`.
`misplaced` counts events whose `year=` directory (DuckDB's Hive partitioning) is not
the Prague year of their `published`.

  python parquet_dump.py EXPORT_DIR
"""

import datetime
import json
import os
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq


def cell(v, t):
    if v is None:
        return None
    if pa.types.is_timestamp(t):
        # Exact: the stored integer, not a float of seconds.
        return v
    if pa.types.is_date(t):
        return v.isoformat()
    return v


def dump(path):
    f = pq.ParquetFile(path)
    table = f.read()
    schema = [[field.name, str(field.type)] for field in table.schema]
    cols = []
    for field, col in zip(table.schema, table.columns):
        if pa.types.is_timestamp(field.type):
            # The instants as stored (UTC microseconds).
            col = col.cast(pa.int64())
        cols.append(col.to_pylist())
    rows = [list(r) for r in zip(*cols)] if cols else []
    types = list(table.schema.types)
    rows = [[cell(v, t) for v, t in zip(r, types)] for r in rows]
    md = f.metadata
    codecs = sorted(
        {
            md.row_group(g).column(c).compression
            for g in range(md.num_row_groups)
            for c in range(md.num_columns)
        }
    )
    return {
        "schema": schema,
        "rows": rows,
        "num_rows": md.num_rows,
        "row_groups": md.num_row_groups,
        "compression": codecs,
    }


def main():
    root = sys.argv[1]
    with open(os.path.join(root, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    out = {"files": {}}
    for f in manifest["files"]:
        if f.get("format") == "parquet":
            out["files"][f["name"]] = dump(os.path.join(root, f["name"]))
    events = os.path.join(root, "events")
    if os.path.isdir(events):
        con = duckdb.connect()
        glob = os.path.join(events, "*", "*.parquet")
        n, misplaced = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE year IS DISTINCT FROM "
            "CAST(date_part('year', timezone('Europe/Prague', published)) AS VARCHAR)) "
            "FROM read_parquet(?, hive_partitioning = true, hive_types_autocast = false)",
            [glob],
        ).fetchone()
        years = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT year FROM read_parquet(?, hive_partitioning = true, "
                "hive_types_autocast = false) ORDER BY 1",
                [glob],
            ).fetchall()
        ]
        out["events_by_duckdb"] = {"rows": n, "misplaced": misplaced, "years": years}
    json.dump(out, sys.stdout, ensure_ascii=False, default=str)


if __name__ == "__main__":
    main()
