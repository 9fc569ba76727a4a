//! The database forms of the writer's coordination: the lease kept in a row (the
//! embedded default, without Redis), the request budget (the one count of every
//! process, with Redis or without), and the settings table (the phase, the privacy key).
//!
//! Every statement runs on both back ends; every change is one transaction.

use sqlx::Row;

use super::*;

impl Store {
    // -----------------------------------------------------------------------------------
    // The lease kept in the database (no Redis)

    async fn ensure_lease_row(&self, name: &str) -> Result<(), StoreError> {
        both!(self, |p| {
            sqlx::query("INSERT INTO lease (name, holder, expires_at, epoch) VALUES ($1, NULL, 0, 0) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .execute(p)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    /// Takes (or keeps, when `holder` already has it) the lease named `name` until
    /// `now + ttl_ms`. A new grant takes an epoch above both the lease's and the store's.
    pub async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<DbLease, StoreError> {
        self.ensure_lease_row(name).await?;
        let now = now_ms();
        write_tx!(self, |tx, lock| {
            let sql = format!("SELECT holder, expires_at, epoch FROM lease WHERE name = $1{lock}");
            let r = sqlx::query(&sql).bind(name).fetch_one(&mut *tx).await?;
            let cur: Option<String> = r.try_get(0)?;
            let expires: i64 = r.try_get(1)?;
            let lease_epoch: i64 = r.try_get(2)?;
            // Read once: it decides whether a holder is kept and bounds a new grant.
            let sql = format!("SELECT epoch FROM writer_state WHERE singleton = 1{lock}");
            let store_epoch: i64 = sqlx::query(&sql).fetch_one(&mut *tx).await?.try_get(0)?;
            if let Some(h) = &cur {
                if h != holder && expires > now {
                    return Ok(DbLease::HeldBy {
                        holder: h.clone(),
                        expires_at: expires,
                    });
                }
                // Kept only while its epoch is still the store's: a holder overtaken (a
                // restore, another lease back end) takes a new grant below.
                if h == holder && expires > now && lease_epoch == store_epoch {
                    sqlx::query("UPDATE lease SET expires_at = $1 WHERE name = $2")
                        .bind(now + ttl_ms)
                        .bind(name)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    return Ok(DbLease::Granted {
                        epoch: lease_epoch,
                        expires_at: now + ttl_ms,
                    });
                }
            }
            let epoch = lease_epoch.max(store_epoch) + 1;
            sqlx::query(
                "UPDATE lease SET holder = $1, expires_at = $2, epoch = $3 WHERE name = $4",
            )
            .bind(holder)
            .bind(now + ttl_ms)
            .bind(epoch)
            .bind(name)
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE writer_state SET epoch = $1 WHERE singleton = 1")
                .bind(epoch)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(DbLease::Granted {
                epoch,
                expires_at: now + ttl_ms,
            })
        })
    }

    /// Extends the lease if `holder` still holds it with `epoch` and it has not expired.
    pub async fn lease_renew(
        &self,
        name: &str,
        holder: &str,
        epoch: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let n = both!(self, |p| {
            sqlx::query(
            "UPDATE lease SET expires_at = $1 WHERE name = $2 AND holder = $3 AND epoch = $4 AND expires_at > $5 \
             AND epoch = (SELECT epoch FROM writer_state WHERE singleton = 1)"
        )
        .bind(now + ttl_ms)
        .bind(name)
        .bind(holder)
        .bind(epoch)
        .bind(now)
        .execute(p)
        .await?
        .rows_affected()
        });
        Ok(n == 1)
    }

    /// Releases the lease if `holder` holds it with `epoch`.
    pub async fn lease_release(
        &self,
        name: &str,
        holder: &str,
        epoch: i64,
    ) -> Result<bool, StoreError> {
        let n = both!(self, |p| {
            sqlx::query(
            "UPDATE lease SET holder = NULL, expires_at = 0 WHERE name = $1 AND holder = $2 AND epoch = $3"
        )
        .bind(name)
        .bind(holder)
        .bind(epoch)
        .execute(p)
        .await?
        .rows_affected()
        });
        Ok(n == 1)
    }

    /// Releases the lease whoever holds it (operators, `--force`).
    /// Removes the lease's holder; whether one held it (an expired holder does not, as
    /// with Redis, whose key has expired by then).
    pub async fn lease_force_release(&self, name: &str) -> Result<bool, StoreError> {
        let n = both!(self, |p| sqlx::query(
            "UPDATE lease SET holder = NULL, expires_at = 0 \
             WHERE name = $1 AND holder IS NOT NULL AND expires_at > $2"
        )
        .bind(name)
        .bind(now_ms())
        .execute(p)
        .await?
        .rows_affected());
        Ok(n == 1)
    }

    pub async fn lease_show(&self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let r = both!(self, |p| sqlx::query(
            "SELECT holder, expires_at, epoch FROM lease WHERE name = $1"
        )
        .bind(name)
        .fetch_optional(p)
        .await?
        .map(|r| Ok::<_, sqlx::Error>(LeaseRow {
            holder: r.try_get(0)?,
            expires_at: r.try_get(1)?,
            epoch: r.try_get(2)?
        }))
        .transpose()?);
        Ok(r)
    }

    // -----------------------------------------------------------------------------------
    // The budget kept in the database (no Redis)

    /// Counts one request for `day` if the day's limit and the minute's (at most
    /// `per_minute` grants in any `window_ms`) allow it.
    pub async fn budget_take(
        &self,
        day: &str,
        daily: u64,
        per_minute: u32,
        window_ms: i64,
    ) -> Result<DbTake, StoreError> {
        both!(self, |p| sqlx::query(
            "INSERT INTO budget_day (day, used) VALUES ($1, 0) ON CONFLICT (day) DO NOTHING"
        )
        .bind(day)
        .execute(p)
        .await?
        .rows_affected());
        let now = now_ms();
        write_tx!(self, |tx, lock| {
            let sql = format!("SELECT used FROM budget_day WHERE day = $1{lock}");
            let used: i64 = sqlx::query(&sql)
                .bind(day)
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            if used as u64 >= daily {
                return Ok(DbTake::DayExhausted { used: used as u64 });
            }
            sqlx::query("DELETE FROM budget_log WHERE at <= $1")
                .bind(now - window_ms)
                .execute(&mut *tx)
                .await?;
            let r = sqlx::query("SELECT COUNT(*), MIN(at) FROM budget_log")
                .fetch_one(&mut *tx)
                .await?;
            let in_minute: i64 = r.try_get(0)?;
            let oldest: Option<i64> = r.try_get(1)?;
            if in_minute >= per_minute as i64 {
                tx.commit().await?;
                return Ok(DbTake::MinuteFull {
                    retry_after_ms: (oldest.unwrap_or(now) + window_ms + 1 - now).max(1),
                });
            }
            sqlx::query("UPDATE budget_day SET used = used + 1 WHERE day = $1")
                .bind(day)
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO budget_log (at) VALUES ($1)")
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM budget_day WHERE day < $1")
                .bind(prune_before(day))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(DbTake::Granted {
                used: used as u64 + 1,
            })
        })
    }

    pub async fn budget_used(&self, day: &str) -> Result<u64, StoreError> {
        let used: Option<i64> = both!(self, |p| sqlx::query(
            "SELECT used FROM budget_day WHERE day = $1"
        )
        .bind(day)
        .fetch_optional(p)
        .await?
        .map(|r| r.try_get(0))
        .transpose()?);
        Ok(used.unwrap_or(0) as u64)
    }

    // -----------------------------------------------------------------------------------
    // Settings (the phase)

    pub async fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.value_in("settings", key).await
    }

    /// A secret of the replica (the privacy key): the table `secrets`, which a reader
    /// role on PostgreSQL may not read (`isir db grant-reader`).
    pub async fn secret(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.value_in("secrets", key).await
    }

    /// The value of `key` in `table` (`settings` or `secrets`, both key and value).
    async fn value_in(&self, table: &str, key: &str) -> Result<Option<String>, StoreError> {
        let sql = format!("SELECT value FROM {table} WHERE key = $1");
        Ok(both!(self, |p| sqlx::query(&sql)
            .bind(key)
            .fetch_optional(p)
            .await?
            .map(|r| r.try_get(0))
            .transpose()?))
    }

    pub async fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        both!(self, |p| {
            sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        .bind(key)
        .bind(value)
        .execute(p)
        .await?
        .rows_affected()
        });
        Ok(())
    }

    /// Sets `key` only if it is absent; returns the value in force.
    pub async fn init_setting(&self, key: &str, value: &str) -> Result<String, StoreError> {
        self.init_in("settings", key, value).await
    }

    /// Sets the secret `key` only if it is absent; returns the value in force.
    pub async fn init_secret(&self, key: &str, value: &str) -> Result<String, StoreError> {
        self.init_in("secrets", key, value).await
    }

    async fn init_in(&self, table: &str, key: &str, value: &str) -> Result<String, StoreError> {
        let sql = format!(
            "INSERT INTO {table} (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING"
        );
        both!(self, |p| sqlx::query(&sql)
            .bind(key)
            .bind(value)
            .execute(p)
            .await?
            .rows_affected());
        Ok(self
            .value_in(table, key)
            .await?
            .unwrap_or_else(|| value.to_string()))
    }
}

/// Days older than a week before `day` are pruned (ISO dates compare as text).
fn prune_before(day: &str) -> String {
    chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d")
        .map(|d| {
            (d - chrono::Duration::days(7))
                .format("%Y-%m-%d")
                .to_string()
        })
        .unwrap_or_default()
}
