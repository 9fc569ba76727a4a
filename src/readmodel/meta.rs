//! The builders' records as `proj_meta` holds them (cursor, version, counts, error),
//! and the projection watermark they give: what the read side, the status and the CLI
//! read of the projections' state. The builders write these records
//! ([`crate::projection`]); everyone else only reads them, from here.
//!
//! Owns the record's shape and its reading; never writes.

use serde::Serialize;

use crate::store::Store;
use crate::store::sql::Tx;

/// The builders, by name.
pub const NAMES: [&str; 3] = ["cases", "parties", "timeline"];

/// What a step found beside the normal.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub applied: i64,
    pub unknown_codes: i64,
    pub unknown_other: i64,
    pub unparsed: i64,
    pub erased: i64,
}

impl Counts {
    pub(crate) fn add(&mut self, o: &Counts) {
        self.applied += o.applied;
        self.unknown_codes += o.unknown_codes;
        self.unknown_other += o.unknown_other;
        self.unparsed += o.unparsed;
        self.erased += o.erased;
    }
}

/// A builder's state as `proj_meta` holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub name: String,
    pub cursor: i64,
    pub version: i64,
    pub counts: Counts,
    #[serde(serialize_with = "crate::store::rfc3339::ms")]
    pub updated_at: i64,
    pub error: Option<String>,
}

/// A builder's record (`for_update`: locked for the step that will move it).
pub async fn read_meta_with(
    tx: &mut Tx,
    key: &str,
    for_update: bool,
) -> Result<Option<Meta>, sqlx::Error> {
    let lock = if for_update { tx.lock() } else { "" };
    let rows = tx
        .texts(
            &format!(
                "SELECT CAST(cursor AS TEXT) || '|' || CAST(version AS TEXT) || '|' || CAST(applied AS TEXT) || '|' || \
                 CAST(unknown_codes AS TEXT) || '|' || CAST(unknown_other AS TEXT) || '|' || CAST(unparsed AS TEXT) || '|' || \
                 CAST(erased AS TEXT) || '|' || CAST(updated_at AS TEXT) || '|' || COALESCE(error, '') FROM proj_meta WHERE name = $1{lock}"
            ),
            &[key.into()],
        )
        .await?;
    Ok(rows.first().map(|r| {
        let f: Vec<&str> = r.splitn(9, '|').collect();
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
        Meta {
            name: key.to_string(),
            cursor: n(0),
            version: n(1),
            counts: Counts {
                applied: n(2),
                unknown_codes: n(3),
                unknown_other: n(4),
                unparsed: n(5),
                erased: n(6),
            },
            updated_at: n(7),
            error: f.get(8).filter(|s| !s.is_empty()).map(|s| s.to_string()),
        }
    }))
}

/// The projection watermark: the lowest cursor of the live builders (a rebuild's next
/// version, `name#next`, does not count).
pub fn watermark(metas: &[Meta]) -> Option<i64> {
    metas
        .iter()
        .filter(|m| !m.name.contains('#'))
        .map(|m| m.cursor)
        .min()
}

/// Every builder's state (and any rebuild in progress), in one read snapshot.
pub async fn metas(store: &Store) -> Result<Vec<Meta>, sqlx::Error> {
    let mut tx = Tx::begin_read(store).await?;
    let keys = tx
        .texts("SELECT name FROM proj_meta ORDER BY name", &[])
        .await?;
    let mut out = Vec::new();
    for k in keys {
        if let Some(m) = read_meta_with(&mut tx, &k, false).await? {
            out.push(m);
        }
    }
    tx.commit().await?;
    Ok(out)
}
