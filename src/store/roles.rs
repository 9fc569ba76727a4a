//! The PostgreSQL reader role (`isir db grant-reader ROLE`): what `isir serve` and
//! exports need to read, and not the replica's secrets.
//!
//! Owns the grants only. A reader role may read every table and view of the schema but
//! `secrets` (the privacy key) and the webhook signing keys of `watchlists` (`secret`,
//! `previous_secret`); it writes nothing. Projection versions made later by the role that
//! runs this (the writer) are readable by default privileges. Must never create a role,
//! set a password, or grant anything on `secrets`: the operator creates the role
//! (`CREATE ROLE … LOGIN PASSWORD …`), and the reader gets the privacy key in a file
//! (`database.privacy_key_file`, see `docs/PRIVACY.md`).

use sqlx::{PgPool, Row};

/// The tables a reader role may not read at all.
pub const SECRET_TABLES: &[&str] = &["secrets"];

/// Columns a reader role may not read, by table: the webhooks' signing keys.
pub const SECRET_COLUMNS: &[(&str, &[&str])] = &[("watchlists", &["secret", "previous_secret"])];

/// `name` quoted as a PostgreSQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Grants `role` (which must exist) read access to this database's schema as a reader
/// needs it, and nothing on the secrets; revokes what it may have had on them. Run as
/// the role that owns the tables (the writer's, which `isir run` and `migrate` use).
/// Idempotent: run it again after an upgrade. Gives the statements it ran.
pub async fn grant_reader(pool: &PgPool, role: &str) -> anyhow::Result<Vec<String>> {
    let exists: Option<i64> =
        sqlx::query_scalar("SELECT 1::BIGINT FROM pg_roles WHERE rolname = $1")
            .bind(role)
            .fetch_optional(pool)
            .await?;
    if exists.is_none() {
        anyhow::bail!(
            "no role {role:?}: create it first (CREATE ROLE {} LOGIN PASSWORD '…')",
            ident(role)
        );
    }
    let row = sqlx::query("SELECT current_database(), current_schema()")
        .fetch_one(pool)
        .await?;
    let (db, schema): (String, String) = (row.try_get(0)?, row.try_get(1)?);
    let (r, s) = (ident(role), ident(&schema));
    let mut sql = vec![
        format!("GRANT CONNECT ON DATABASE {} TO {r}", ident(&db)),
        format!("GRANT USAGE ON SCHEMA {s} TO {r}"),
        format!("GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}"),
        format!("ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO {r}"),
    ];
    for t in SECRET_TABLES {
        sql.push(format!("REVOKE ALL ON {s}.{} FROM {r}", ident(t)));
        sql.push(format!("REVOKE ALL ON {s}.{} FROM PUBLIC", ident(t)));
    }
    for (t, hidden) in SECRET_COLUMNS {
        let cols: Vec<String> = sqlx::query_scalar(
            "SELECT column_name::TEXT FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
        )
        .bind(&schema)
        .bind(t)
        .fetch_all(pool)
        .await?;
        let open: Vec<String> = cols
            .iter()
            .filter(|c| !hidden.contains(&c.as_str()))
            .map(|c| ident(c))
            .collect();
        // A table-wide grant would cover every column: it goes, and the open columns
        // are granted one by one (a column added later needs this run again).
        sql.push(format!("REVOKE ALL ON {s}.{} FROM {r}", ident(t)));
        if !open.is_empty() {
            sql.push(format!(
                "GRANT SELECT ({}) ON {s}.{} TO {r}",
                open.join(", "),
                ident(t)
            ));
        }
    }
    let mut tx = pool.begin().await?;
    for q in &sql {
        sqlx::query(q).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(sql)
}
