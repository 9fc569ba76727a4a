//! A lazily (re)connected Redis connection with short timeouts, shared by the lease and
//! the budget.
//!
//! Owns the connection only; a failure drops it so the next call reconnects. It never
//! retries a command by itself: callers decide what a Redis outage means.
//!
//! Why not `redis::aio::ConnectionManager` (read in redis 1.8.1, the version we use; it
//! can now connect lazily, which was a third reason with 0.27):
//! - it replaces its connection only after an error it deems unrecoverable (a dropped,
//!   reset or refused connection); a response timeout is an I/O `TimedOut`, which it
//!   retries on the same connection (`RetryMethod::RetryImmediately`), so a paused or
//!   partitioned Redis leaves every later command going down the hung connection and
//!   each waiting out its timeout, while this drops the connection after any error;
//! - its reconnection retries with exponential backoff, and a command waits for it, so a
//!   lease attempt could wait through the backoff; the lease must never wait.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

pub struct RedisConn {
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    timeout: Duration,
}

impl RedisConn {
    pub fn new(url: &str) -> anyhow::Result<Self> {
        Ok(Self {
            client: redis::Client::open(url)?,
            conn: Mutex::new(None),
            timeout: Duration::from_secs(3),
        })
    }

    /// A connection, connecting if needed.
    pub async fn get(&self) -> redis::RedisResult<MultiplexedConnection> {
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        *g = Some(c.clone());
        Ok(c)
    }

    /// Forgets the connection after an error.
    pub async fn reset(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs a script, dropping the connection on failure.
    pub async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
    ) -> redis::RedisResult<T> {
        let mut c = self.get().await?;
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(a);
        }
        let r = inv.invoke_async(&mut c).await;
        if r.is_err() {
            self.reset().await;
        }
        r
    }
}
