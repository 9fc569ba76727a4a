//! The replica's privacy key as the process gets it: from the database's `secrets`
//! table (made by `migrate`), or from `database.privacy_key_file` for a reader role that
//! may not read that table. The mask itself is [`crate::privacy`]'s, a pure function of
//! this key.
//!
//! Owns loading the key; never writes it (`migrate` makes it) and never logs it.

use std::path::Path;

use super::{Store, StoreError};
use crate::privacy::{KEY_SETTING, Privacy, denied_sql};

/// The replica's key from its table `secrets` (made by `migrate`).
pub async fn load(store: &Store) -> anyhow::Result<Privacy> {
    let h = store
        .secret(KEY_SETTING)
        .await
        .map_err(|e| {
            if denied(&e) {
                anyhow::anyhow!(
                    "this database role may not read the privacy key (a reader role, as \
                     `isir db grant-reader` makes): give the process the key in \
                     database.privacy_key_file (`isir privacy export-key --out FILE`, as \
                     the writer)"
                )
            } else {
                e.into()
            }
        })?
        .ok_or_else(|| {
            anyhow::anyhow!("the database has no privacy key yet: run `isir migrate` once")
        })?;
    Privacy::from_hex(&h).map_err(anyhow::Error::msg)
}

/// The key a process uses: from `key_file` when one is given (a reader role's
/// process), else from the database. A file's key must equal the database's when
/// this role can read that one.
pub async fn resolve(key_file: Option<&Path>, store: &Store) -> anyhow::Result<Privacy> {
    let Some(path) = key_file else {
        return load(store).await;
    };
    super::files::warn_if_open_file(path);
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("database.privacy_key_file {}: {e}", path.display()))?;
    let key = Privacy::from_hex(&text)
        .map_err(|e| anyhow::anyhow!("database.privacy_key_file {}: {e}", path.display()))?;
    match store.secret(KEY_SETTING).await {
        Ok(Some(h)) if Privacy::from_hex(&h).map(|k| k.to_hex()) != Ok(key.to_hex()) => {
            anyhow::bail!(
                "database.privacy_key_file {} is not this replica's privacy key",
                path.display()
            )
        }
        Ok(_) => Ok(key),
        Err(e) if denied(&e) => Ok(key),
        Err(e) => Err(e.into()),
    }
}

/// Whether a store error is the database refusing this role a table (PostgreSQL's
/// `insufficient_privilege`, 42501).
pub fn denied(e: &StoreError) -> bool {
    matches!(e, StoreError::Db(e) if denied_sql(e))
}
