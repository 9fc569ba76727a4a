//! The writer's lease: who may write the replica, with a fencing epoch.
//!
//! With Redis: `SET key value NX PX ttl` (the value is `holder|epoch`, the holder a random
//! owner string), renewal by compare-and-`PEXPIRE`, release by compare-and-`DEL`, and an
//! epoch from `INCR` that only grows. Without Redis: the same contract in a database row.
//! Every grant registers its epoch in the store, which rejects writes with a lower one,
//! so a paused ex-holder cannot write, and a Redis that restarted empty still grants an
//! epoch above the store's. This module never waits for a lease: `acquire` answers at once.

use std::sync::Arc;
use std::time::Duration;

use crate::redis_conn::RedisConn;
/// Who holds the lease, as status shows it.
pub use crate::store::records::LeaseInfo;
use crate::store::{DbLease, Store, StoreError, now_ms};

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Grant {
    pub epoch: i64,
    pub expires_at: i64,
}

/// The answer of [`Lease::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    Granted(Grant),
    /// Someone else holds it until `expires_at` (ms; None when unknown).
    HeldBy {
        holder: String,
        expires_at: Option<i64>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease backend unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<redis::RedisError> for LeaseError {
    fn from(e: redis::RedisError) -> Self {
        LeaseError::Unavailable(format!("redis: {e}"))
    }
}

enum Backend {
    Redis {
        conn: Arc<RedisConn>,
        key: String,
        epoch_key: String,
    },
    Db {
        name: String,
    },
}

/// One process's handle on the lease.
pub struct Lease {
    backend: Backend,
    store: Store,
    holder: String,
    ttl: Duration,
}

/// `holder` identity: host, pid and a random suffix.
pub fn holder_identity() -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let suffix: String = {
        use rand::Rng;
        let mut r = rand::thread_rng();
        (0..8)
            .map(|_| char::from(b'a' + r.gen_range(0..26)))
            .collect()
    };
    format!("{host}:{}:{suffix}", std::process::id())
}

const ACQUIRE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, '|', 1, true)
  local h = cur
  local e = -1
  if sep then
    h = string.sub(cur, 1, sep - 1)
    e = tonumber(string.sub(cur, sep + 1))
  end
  if h == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, h, e, tonumber(ARGV[2])}
  end
  return {0, h, e, redis.call('PTTL', KEYS[1])}
end
local e = redis.call('INCR', KEYS[2])
local floor = tonumber(ARGV[3])
if e <= floor then
  e = floor + 1
  redis.call('SET', KEYS[2], e)
end
local ok = redis.call('SET', KEYS[1], ARGV[1] .. '|' .. e, 'NX', 'PX', ARGV[2])
if not ok then
  return {0, '', -1, redis.call('PTTL', KEYS[1])}
end
return {2, ARGV[1], e, tonumber(ARGV[2])}
"#;

const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

impl Lease {
    pub fn redis(
        conn: Arc<RedisConn>,
        key: &str,
        epoch_key: &str,
        store: Store,
        ttl: Duration,
    ) -> Self {
        Self {
            backend: Backend::Redis {
                conn,
                key: key.into(),
                epoch_key: epoch_key.into(),
            },
            store,
            holder: holder_identity(),
            ttl,
        }
    }

    pub fn database(name: &str, store: Store, ttl: Duration) -> Self {
        Self {
            backend: Backend::Db { name: name.into() },
            store,
            holder: holder_identity(),
            ttl,
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn ttl_ms(&self) -> i64 {
        self.ttl.as_millis() as i64
    }

    /// Takes the lease, or keeps it if this process holds it. Never waits.
    pub async fn acquire(&self) -> Result<Acquire, LeaseError> {
        match &self.backend {
            Backend::Db { name } => Ok(
                match self
                    .store
                    .lease_acquire(name, &self.holder, self.ttl_ms())
                    .await?
                {
                    DbLease::Granted { epoch, expires_at } => {
                        Acquire::Granted(Grant { epoch, expires_at })
                    }
                    DbLease::HeldBy { holder, expires_at } => Acquire::HeldBy {
                        holder,
                        expires_at: Some(expires_at),
                    },
                },
            ),
            Backend::Redis {
                conn,
                key,
                epoch_key,
            } => {
                let mut floor = self.store.writer_state().await?.epoch;
                for _ in 0..3 {
                    let script = redis::Script::new(ACQUIRE);
                    let (kind, holder, epoch, pttl): (i64, String, i64, i64) = conn
                        .eval(
                            &script,
                            &[key, epoch_key],
                            &[
                                self.holder.clone(),
                                self.ttl_ms().to_string(),
                                floor.to_string(),
                            ],
                        )
                        .await?;
                    let expires_at = now_ms() + pttl.max(0);
                    if kind == 0 {
                        return Ok(Acquire::HeldBy {
                            holder,
                            expires_at: (pttl >= 0).then_some(expires_at),
                        });
                    }
                    // A new grant claims its epoch (it must be above every epoch the
                    // store has seen: unique per grant), so that any older holder is
                    // fenced from now on; a kept lease must still hold the store's epoch
                    // (else it was overtaken, by a restore or a grant Redis forgot).
                    let store_epoch = if kind == 2 {
                        let before = self.store.claim_epoch(epoch).await?;
                        if before < epoch {
                            return Ok(Acquire::Granted(Grant { epoch, expires_at }));
                        }
                        before
                    } else {
                        let now = self.store.writer_state().await?.epoch;
                        if now == epoch {
                            return Ok(Acquire::Granted(Grant { epoch, expires_at }));
                        }
                        now.max(epoch)
                    };
                    // The store has seen a newer epoch than Redis gave (Redis lost its
                    // state): give this grant back and take one above the store's.
                    self.release_redis(conn, key, epoch).await?;
                    floor = store_epoch;
                }
                Err(LeaseError::Unavailable(
                    "could not obtain an epoch above the store's".into(),
                ))
            }
        }
    }

    /// Extends the lease; false when it is no longer held with this epoch.
    pub async fn renew(&self, epoch: i64) -> Result<bool, LeaseError> {
        match &self.backend {
            Backend::Db { name } => Ok(self
                .store
                .lease_renew(name, &self.holder, epoch, self.ttl_ms())
                .await?),
            Backend::Redis { conn, key, .. } => {
                let n: i64 = conn
                    .eval(
                        &redis::Script::new(RENEW),
                        &[key],
                        &[
                            format!("{}|{epoch}", self.holder),
                            self.ttl_ms().to_string(),
                        ],
                    )
                    .await?;
                Ok(n == 1)
            }
        }
    }

    /// Gives the lease back if held with this epoch.
    pub async fn release(&self, epoch: i64) -> Result<bool, LeaseError> {
        match &self.backend {
            Backend::Db { name } => Ok(self.store.lease_release(name, &self.holder, epoch).await?),
            Backend::Redis { conn, key, .. } => self.release_redis(conn, key, epoch).await,
        }
    }

    async fn release_redis(
        &self,
        conn: &RedisConn,
        key: &str,
        epoch: i64,
    ) -> Result<bool, LeaseError> {
        let n: i64 = conn
            .eval(
                &redis::Script::new(RELEASE),
                &[key],
                &[format!("{}|{epoch}", self.holder)],
            )
            .await?;
        Ok(n == 1)
    }

    /// Who holds the lease.
    pub async fn show(&self) -> Result<LeaseInfo, LeaseError> {
        match &self.backend {
            Backend::Db { name } => Ok(self.store.lease_info(name).await?),
            Backend::Redis {
                conn,
                key,
                epoch_key,
            } => {
                let mut c = conn.get().await?;
                let (val, pttl, ep): (Option<String>, i64, Option<i64>) = redis::pipe()
                    .get(key)
                    .pttl(key)
                    .get(epoch_key)
                    .query_async(&mut c)
                    .await
                    .map_err(LeaseError::from)?;
                let (holder, epoch) = match val.as_deref().and_then(|v| v.rsplit_once('|')) {
                    Some((h, e)) => (Some(h.to_string()), e.parse().ok()),
                    None => (val, ep),
                };
                Ok(LeaseInfo {
                    backend: "redis",
                    holder,
                    epoch,
                    expires_at: (pttl >= 0).then(|| now_ms() + pttl),
                })
            }
        }
    }

    /// Removes the lease whoever holds it (operators only).
    pub async fn force_release(&self) -> Result<bool, LeaseError> {
        match &self.backend {
            Backend::Db { name } => Ok(self.store.lease_force_release(name).await?),
            Backend::Redis { conn, key, .. } => {
                let mut c = conn.get().await?;
                let n: i64 = redis::cmd("DEL").arg(key).query_async(&mut c).await?;
                Ok(n == 1)
            }
        }
    }
}
