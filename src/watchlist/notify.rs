//! The notifier: for every list with a webhook, delivers its feed in batches, each batch
//! a signed POST retried with capped exponential backoff and jitter (honouring
//! `Retry-After`) until a 2xx, and only then moves the list's cursor. Every retry reads
//! the batch again over the same positions, so what an erasure (§ 425) took out of the
//! feed meanwhile is never sent; it keeps its `webhook-id` while its content is the
//! same, and another content is another message with another ID. At least once: a crash
//! between the 2xx and the cursor's move resends that batch; nothing moves the cursor
//! past a batch that was not acknowledged.
//!
//! Runs in the daemon from the `project` phase up, one task per list, so a slow or dead
//! receiver delays only its own list. A list is claimed (`claim_holder`, `claim_until`)
//! by the notifier delivering it, so two daemons never deliver one list at once; the
//! cursor moves by compare-and-set. Never writes the replica or a projection; never
//! holds a transaction across a delivery.

use std::collections::HashMap;
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{Policy, Roles, deliver, feed};
use crate::projector::projects;
use crate::store::sql::Tx;
use crate::store::{Store, now_ms};

/// How the notifier runs (from `watch.*`).
#[derive(Debug, Clone)]
pub struct NotifierOptions {
    /// Looks for new events this often.
    pub every: Duration,
    /// Events a delivery carries at most (a position is never split).
    pub batch: i64,
    /// Time one attempt may take.
    pub timeout: Duration,
    /// The first retry's delay; doubled each time up to `retry_max`.
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// A list whose pending batch has failed this long is marked failing.
    pub failing_after: Duration,
    /// Where webhooks may go (`watch.allow_private_targets`, `watch.proxy`, ...).
    pub targets: Policy,
    /// How long a claim on a list lasts without renewal (a crashed notifier's lists are
    /// free again after it).
    pub claim_ttl: Duration,
    /// Who claims (the daemon's holder name).
    pub holder: String,
}

impl NotifierOptions {
    pub fn from_settings(w: &crate::config::WatchSettings, holder: &str) -> Self {
        NotifierOptions {
            every: Duration::from_millis(w.every_ms),
            batch: w.batch,
            timeout: Duration::from_secs(w.timeout_secs),
            retry_min: Duration::from_millis(w.retry_min_ms),
            retry_max: Duration::from_secs(w.retry_max_secs),
            failing_after: Duration::from_secs(w.failing_after_secs),
            targets: Policy::from_settings(w),
            claim_ttl: Duration::from_secs(w.claim_ttl_secs),
            holder: holder.to_string(),
        }
    }
}

/// The state of a list as a delivery task reads it.
#[derive(Debug, Clone, PartialEq)]
struct Due {
    roles: Roles,
    created_at: i64,
    created_watermark: i64,
    cursor: i64,
    webhook: String,
}

async fn due(store: &Store, name: &str) -> Result<Option<Due>, sqlx::Error> {
    let mut tx = Tx::single(store).await?;
    let row = tx
        .texts(
            "SELECT roles || '|' || created_at || '|' || created_watermark || '|' || cursor || '|' || webhook_url \
             FROM watchlists WHERE name = $1 AND webhook_url IS NOT NULL",
            &[name.into()],
        )
        .await?;
    Ok(row.first().and_then(|r| {
        let f: Vec<&str> = r.splitn(5, '|').collect();
        Some(Due {
            roles: Roles::parse(f.first()?)?,
            created_at: f.get(1)?.parse().ok()?,
            created_watermark: f.get(2)?.parse().ok()?,
            cursor: f.get(3)?.parse().ok()?,
            webhook: f.get(4)?.to_string(),
        })
    }))
}

/// Loops until `shutdown`: every `every`, starts a delivery task for each list with a
/// webhook that has none running. Waits for its tasks before it returns.
pub async fn run(store: Store, opts: NotifierOptions, mut shutdown: watch::Receiver<bool>) {
    crate::telemetry::init();
    let sender = match deliver::Sender::new(&opts.targets, opts.timeout) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "the notifier cannot start: no webhook is delivered");
            return;
        }
    };
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, String> = HashMap::new();
    loop {
        while let Some(done) = tasks.try_join_next_with_id() {
            let id = match done {
                Ok((id, ())) => id,
                Err(e) => e.id(),
            };
            running.remove(&id);
        }
        if projects(&store).await {
            match names(&store).await {
                Ok(names) => {
                    for n in names {
                        if running.values().any(|r| *r == n) {
                            continue;
                        }
                        let h = tasks.spawn(deliver_list(
                            store.clone(),
                            sender.clone(),
                            n.clone(),
                            opts.clone(),
                            shutdown.clone(),
                        ));
                        running.insert(h.id(), n);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the notifier cannot read the watchlists"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(opts.every) => {}
            _ = shutdown.wait_for(|v| *v) => break,
        }
    }
    while tasks.join_next().await.is_some() {}
}

async fn names(store: &Store) -> Result<Vec<String>, sqlx::Error> {
    let mut tx = Tx::single(store).await?;
    tx.texts(
        "SELECT name FROM watchlists WHERE webhook_url IS NOT NULL ORDER BY name",
        &[],
    )
    .await
}

/// Claims `name` for `holder` until `now + ttl`, if it is free or already its own.
async fn claim(store: &Store, name: &str, opts: &NotifierOptions) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let mut tx = Tx::single(store).await?;
    let n = tx
        .exec(
            "UPDATE watchlists SET claim_holder = $2, claim_until = $3 \
             WHERE name = $1 AND (claim_holder IS NULL OR claim_holder = $2 OR claim_until < $4)",
            &[
                name.into(),
                opts.holder.as_str().into(),
                (now + opts.claim_ttl.as_millis() as i64).into(),
                now.into(),
            ],
        )
        .await?;
    Ok(n > 0)
}

async fn unclaim(store: &Store, name: &str, holder: &str) {
    if let Ok(mut tx) = Tx::single(store).await {
        let _ = tx
            .exec(
                "UPDATE watchlists SET claim_holder = NULL, claim_until = NULL WHERE name = $1 AND claim_holder = $2",
                &[name.into(), holder.into()],
            )
            .await;
    }
}

/// The message ID of a batch: the same for every retry of it (and for a resend after a
/// restart) as long as its content is the same, different for every other batch. A
/// batch rebuilt with other events (an erasure under § 425 took a debtor's matches out
/// between two attempts) is another message, with another ID: Standard Webhooks
/// receivers take one ID for one message and may drop a repeated one unread.
pub fn message_id(list: &str, created_at: i64, from: i64, to: i64, events: &[Value]) -> String {
    let mut h = Sha256::new();
    h.update(format!("{list}\n{created_at}\n{from}\n{to}\n").as_bytes());
    h.update(serde_json::to_vec(events).expect("JSON"));
    format!("msg_{}", &hex::encode(h.finalize())[..32])
}

/// A batch as sent: its message ID, body, last position and event count.
struct Batch {
    id: String,
    body: Vec<u8>,
    to: i64,
    n: i64,
    /// The projection watermark it was read up to.
    bound: i64,
}

/// The batch after `d.cursor`, read in one snapshot up to the projection watermark (or
/// up to `bound`, for the retry of a batch): none when the feed has nothing there.
async fn build(
    store: &Store,
    name: &str,
    d: &Due,
    bound: Option<i64>,
    batch: i64,
) -> Result<Option<Batch>, sqlx::Error> {
    let mut tx = Tx::begin_read(store).await?;
    let (wm, _) = crate::read::watermark::meta(&mut tx)
        .await
        .map_err(|p| sqlx::Error::Protocol(p.detail))?;
    let bound = bound.map_or(wm.action_id, |b| b.min(wm.action_id));
    let page = feed::page(
        &mut tx,
        name,
        d.roles,
        d.created_watermark,
        d.cursor,
        bound,
        batch,
        true,
    )
    .await?;
    tx.commit().await?;
    let Some(to) = page.last else {
        return Ok(None);
    };
    let id = message_id(name, d.created_at, d.cursor, to, &page.events);
    let n = page.events.len() as i64;
    let body = serde_json::to_vec(&json!({
        "type": "watchlist.events",
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "data": {
            "list": name,
            "after": d.cursor,
            "through": to,
            "watermark": bound,
            "events": page.events,
        }
    }))
    .expect("JSON");
    Ok(Some(Batch {
        id,
        body,
        to,
        n,
        bound,
    }))
}

/// Delivers `name`'s feed until it is caught up, the list changes hands or shutdown.
async fn deliver_list(
    store: Store,
    sender: deliver::Sender,
    name: String,
    opts: NotifierOptions,
    shutdown: watch::Receiver<bool>,
) {
    match claim(&store, &name, &opts).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(list = %name, error = %e, "cannot claim the watchlist");
            return;
        }
    }
    if let Err(e) = deliver_claimed(&store, &sender, &name, &opts, &shutdown).await {
        tracing::warn!(list = %name, error = %e, "watchlist delivery stopped; retried next round");
    }
    unclaim(&store, &name, &opts.holder).await;
}

async fn deliver_claimed(
    store: &Store,
    sender: &deliver::Sender,
    name: &str,
    opts: &NotifierOptions,
    shutdown: &watch::Receiver<bool>,
) -> Result<(), sqlx::Error> {
    'batch: loop {
        if *shutdown.borrow() || !projects(store).await {
            return Ok(());
        }
        let Some(d) = due(store, name).await? else {
            return Ok(());
        };
        let has_rc = super::has_birth_numbers(store, name).await?;
        let Some(mut batch) = build(store, name, &d, None, opts.batch).await? else {
            return Ok(());
        };
        let mut failures: u32 = 0;
        loop {
            let secrets = super::secrets(store, name)
                .await
                .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
            // A shutdown abandons the attempt: the batch is not acknowledged, so it is
            // sent again by the next notifier.
            let mut sd = shutdown.clone();
            let attempt = sender.attempt(
                &d.webhook,
                has_rc,
                &secrets,
                &batch.id,
                &batch.body,
                opts.timeout,
            );
            let outcome = tokio::select! {
                o = attempt => o,
                _ = sd.wait_for(|v| *v) => return Ok(()),
            };
            match outcome {
                deliver::Attempt::Delivered => {
                    metrics::counter!("isir_watch_deliveries_total", "outcome" => "delivered")
                        .increment(1);
                    metrics::counter!("isir_watch_events_delivered_total")
                        .increment(batch.n as u64);
                    if !advance(store, name, opts, d.cursor, batch.to, batch.n).await? {
                        // Replayed or removed meanwhile: start over from the stored cursor.
                        tracing::info!(list = %name, "the watchlist changed during a delivery");
                    }
                    continue 'batch;
                }
                deliver::Attempt::Failed { error, retry_after } => {
                    metrics::counter!("isir_watch_deliveries_total", "outcome" => "failed")
                        .increment(1);
                    failures += 1;
                    let failing = record_failure(store, name, opts, &error).await?;
                    tracing::warn!(list = %name, attempt = failures, failing, error = %error,
                        "webhook delivery failed; retrying");
                    let wait = backoff(opts, failures, retry_after);
                    let mut sd = shutdown.clone();
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = sd.wait_for(|v| *v) => return Ok(()),
                    }
                    if !claim(store, name, opts).await? {
                        return Ok(());
                    }
                    // A change of the list (replay, new webhook) makes a new batch.
                    if due(store, name).await?.as_ref() != Some(&d) {
                        continue 'batch;
                    }
                    // Every retry is read again over the same range: what an erasure
                    // (§ 425) took out of the feed meanwhile is not sent. The same
                    // content keeps its ID and body; other content is a new message.
                    match build(store, name, &d, Some(batch.bound), opts.batch).await? {
                        None => continue 'batch,
                        Some(b) if b.id != batch.id => batch = b,
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

/// The wait before retry `n` (1-based): `retry_min * 2^(n-1)` capped at `retry_max`,
/// with full jitter over its upper half, and never less than the receiver's
/// `Retry-After` (itself capped at an hour).
pub fn backoff(opts: &NotifierOptions, n: u32, retry_after: Option<Duration>) -> Duration {
    let exp = opts
        .retry_min
        .saturating_mul(1u32 << n.saturating_sub(1).min(20))
        .min(opts.retry_max);
    let jittered = exp / 2 + exp.mul_f64(rand::thread_rng().gen_range(0.0..0.5));
    match retry_after {
        Some(r) => jittered.max(r.min(Duration::from_secs(3600))),
        None => jittered,
    }
}

/// Moves the cursor from `from` to `to` after a 2xx (compare-and-set, by the claim's
/// holder) and clears the failing state. False when the cursor was moved by someone else.
async fn advance(
    store: &Store,
    name: &str,
    opts: &NotifierOptions,
    from: i64,
    to: i64,
    n: i64,
) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let mut tx = Tx::single(store).await?;
    let rows = tx
        .exec(
            "UPDATE watchlists SET cursor = $3, delivered_batches = delivered_batches + 1, \
             delivered_events = delivered_events + $4, last_delivered_at = $5, last_attempt_at = $5, \
             failing = 0, failing_since = NULL, last_error = NULL, claim_until = $6 \
             WHERE name = $1 AND cursor = $2 AND claim_holder = $7",
            &[
                name.into(),
                from.into(),
                to.into(),
                n.into(),
                now.into(),
                (now + opts.claim_ttl.as_millis() as i64).into(),
                opts.holder.as_str().into(),
            ],
        )
        .await?;
    Ok(rows > 0)
}

/// Records a failed attempt; returns whether the list is now failing.
async fn record_failure(
    store: &Store,
    name: &str,
    opts: &NotifierOptions,
    error: &str,
) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let mut tx = Tx::single(store).await?;
    tx.exec(
        "UPDATE watchlists SET last_error = $2, last_attempt_at = $3, \
         failing_since = COALESCE(failing_since, $3), \
         failing = CASE WHEN $3 - COALESCE(failing_since, $3) >= $4 THEN 1 ELSE 0 END \
         WHERE name = $1",
        &[
            name.into(),
            error.into(),
            now.into(),
            (opts.failing_after.as_millis() as i64).into(),
        ],
    )
    .await?;
    Ok(tx
        .int(
            "SELECT failing FROM watchlists WHERE name = $1",
            &[name.into()],
        )
        .await?
        .unwrap_or(0)
        == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> NotifierOptions {
        NotifierOptions {
            every: Duration::from_secs(1),
            batch: 10,
            timeout: Duration::from_secs(1),
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            failing_after: Duration::from_secs(3600),
            targets: Policy {
                allow_private: true,
                ..Default::default()
            },
            claim_ttl: Duration::from_secs(30),
            holder: "t".into(),
        }
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter_and_honours_retry_after() {
        let o = opts();
        for _ in 0..100 {
            let b1 = backoff(&o, 1, None);
            assert!(
                b1 >= Duration::from_millis(500) && b1 <= Duration::from_secs(1),
                "{b1:?}"
            );
            let b4 = backoff(&o, 4, None);
            assert!(
                b4 >= Duration::from_secs(4) && b4 <= Duration::from_secs(8),
                "{b4:?}"
            );
            let b30 = backoff(&o, 30, None);
            assert!(
                b30 >= Duration::from_secs(30) && b30 <= Duration::from_secs(60),
                "{b30:?}"
            );
            let r = backoff(&o, 1, Some(Duration::from_secs(120)));
            assert_eq!(r, Duration::from_secs(120));
            let capped = backoff(&o, 1, Some(Duration::from_secs(86_400)));
            assert_eq!(capped, Duration::from_secs(3600));
        }
    }

    #[test]
    fn message_ids_are_stable_per_batch() {
        let e = [json!({"action_id": 7}), json!({"action_id": 9})];
        let id = |l, c, f, t, ev: &[Value]| message_id(l, c, f, t, ev);
        assert_eq!(id("a", 1, 5, 9, &e), id("a", 1, 5, 9, &e));
        assert_ne!(id("a", 1, 5, 9, &e), id("a", 1, 5, 10, &e));
        assert_ne!(id("a", 1, 5, 9, &e), id("a", 2, 5, 9, &e));
        assert_ne!(
            id("a", 1, 5, 9, &e),
            id("a", 1, 5, 9, &e[1..]),
            "other content"
        );
        assert!(id("a", 1, 5, 9, &e).starts_with("msg_"));
    }
}
