//! The read side that the JSON API (`api`) and the HTML pages (`web`) both stand on: the
//! shared state of a serving process, the watermark and phase gate, the projection
//! queries, shared parameter parsing and problem details.
//!
//! Owns nothing HTTP-specific beyond the problem type: no routes, no middleware. It
//! reads the projection views only (never `actions`, never the source client) and has
//! no function that writes. `api` and `web` import this module and never each other;
//! `http` mounts both.

pub mod limit;
pub mod lists;
pub mod params;
mod problem;
pub mod queries;
pub mod search;
pub mod watermark;

use std::sync::Arc;
use std::time::Duration;

use crate::store::Store;
pub use problem::Problem;
pub use watermark::Watermark;

/// What a serving process is configured with (from `api.*`).
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Largest `limit` a list accepts.
    pub max_limit: i64,
    /// Default `limit`.
    pub default_limit: i64,
    /// `/readyz` says ready only within this lag of the projections behind the replica.
    pub max_lag_ids: i64,
    /// Requests a second per key or client address (the guard's limit).
    pub rate_per_second: u32,
    pub burst: u32,
    /// Configured keys (hashes and scopes).
    pub keys: Vec<crate::config::ApiKey>,
    /// How long the phase and the watermark are reused between requests (0: read for
    /// every request).
    pub meta_cache: Duration,
    /// How long one statement of a read may run ([`limit`]).
    pub statement_timeout: Duration,
    /// The read side's own connections, and how long a read waits for one.
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// Rows of a whole-result stream without the `stream` scope.
    pub stream_max_rows: i64,
    /// Rows a whole-result stream reads a statement (1 000; not a setting: tests make
    /// it small to stream small results in many pages).
    pub stream_page: i64,
    /// Reverse proxies whose `X-Forwarded-For` is believed (`api.trusted_proxies`).
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Bytes of a SQLite file the page reads map into memory (`api.sqlite_mmap_mib`).
    pub sqlite_mmap: u64,
    /// Leading bits of an IPv6 address that name one client (`api.ipv6_client_prefix`).
    pub ipv6_client_prefix: u8,
    /// The listeners' limits on connections (timeouts and caps), which the HTTP layer
    /// applies.
    pub conn: ConnLimits,
}

impl Default for ReadOptions {
    /// The options of the default settings, but read the watermark for every request
    /// (no meta cache), so that a change of phase shows at once.
    fn default() -> Self {
        Self {
            meta_cache: Duration::ZERO,
            ..Self::from_settings(&crate::config::ApiSettings::default())
        }
    }
}

impl ReadOptions {
    /// The options of `settings.api`.
    pub fn from_settings(a: &crate::config::ApiSettings) -> Self {
        ReadOptions {
            max_limit: a.max_limit,
            default_limit: a.default_limit,
            max_lag_ids: a.max_lag_ids,
            rate_per_second: a.rate_per_second,
            burst: a.burst,
            keys: a.keys.clone(),
            meta_cache: Duration::from_millis(a.meta_cache_ms),
            statement_timeout: Duration::from_millis(a.statement_timeout_ms),
            max_connections: a.max_connections,
            acquire_timeout: Duration::from_millis(a.acquire_timeout_ms),
            stream_max_rows: a.stream_max_rows,
            stream_page: 1_000,
            sqlite_mmap: a.sqlite_mmap_mib << 20,
            ipv6_client_prefix: a.ipv6_client_prefix,
            conn: ConnLimits::from_settings(a),
            trusted_proxies: a
                .trusted_proxies
                .iter()
                .filter_map(|p| {
                    p.parse::<ipnet::IpNet>()
                        .ok()
                        .or_else(|| p.parse::<std::net::IpAddr>().ok().map(ipnet::IpNet::from))
                })
                .collect(),
        }
    }
}

/// `api.max_connections` on PostgreSQL: (one-statement reads, transactions), a quarter
/// (at least one) for the transactions, the rest (at least one) for the rest.
pub fn split_connections(max: u32) -> (u32, u32) {
    let many = (max / 4).max(1);
    (max.saturating_sub(many).max(1), many)
}

/// Where the operator surfaces (status page, `/metrics`) are served and who may see them.
#[derive(Clone, Debug, Default)]
pub struct AdminOptions {
    /// Served on their own listener (`admin.bind`), not with the public routes.
    pub separate: bool,
    /// SHA-256 (hex) of the admin key they require.
    pub key_sha256: Option<String>,
    /// Where webhooks of watchlists made on the admin listener may go (`watch.*`).
    pub targets: crate::watchlist::Policy,
    /// The store is read-only (`isir serve`): the routes that change watchlists answer
    /// 409 with the command that can, instead of failing on the write.
    pub read_only: bool,
}

/// Who is asking, as the HTTP guard established it (put into the request's
/// extensions): the key's name, whether it has the `pii` scope, and its other scopes
/// (`watch:NAME` reads watchlist NAME, `watch:*` every list).
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub key: Option<String>,
    pub pii: bool,
    pub scopes: Vec<String>,
}

impl Caller {
    /// Whether the key may read watchlist `name`.
    pub fn reads_list(&self, name: &str) -> bool {
        self.scopes
            .iter()
            .any(|s| s == "watch:*" || s.strip_prefix("watch:") == Some(name))
    }
}

/// What every handler reads, shared behind one `Arc`: a request clones the state a few
/// times (router, middleware), and one reference count is cheaper than one per field.
#[derive(Clone)]
pub struct ReadState(Arc<Shared>);

pub struct Shared {
    pub store: Store,
    pub opts: ReadOptions,
    pub(crate) meta: std::sync::Mutex<Option<(std::time::Instant, (Watermark, bool))>>,
    /// What the status page reads; without it the page says so.
    pub status: Option<crate::status::StatusSource>,
    pub admin: AdminOptions,
    /// Direct read connections for one-statement answers on a SQLite file (see
    /// [`crate::store::direct`]); `None` on PostgreSQL.
    pub(crate) direct: Option<Arc<crate::store::direct::Pool>>,
    /// The one-statement reads' own connections on PostgreSQL (see
    /// [`crate::store::pgread`]); `None` on SQLite.
    pub(crate) pg: Option<Arc<crate::store::pgread::Pool>>,
    /// Whether `store` is the read side's own pool (always, but for an in-memory SQLite
    /// database, which only its one pool sees): only then may a read leave a time
    /// limit on a connection.
    pub(crate) limited: bool,
    /// The replica's privacy key, read once from the store at the first use.
    privacy: tokio::sync::OnceCell<crate::privacy::Privacy>,
    /// The replica's public identifier (`/healthz`), read once it is there.
    replica: tokio::sync::OnceCell<String>,
}

impl std::ops::Deref for ReadState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl ReadState {
    /// The read state over `store`: reads go through a pool of their own
    /// ([`Store::for_readers`], `api.max_connections`), every statement time-limited.
    pub fn new(store: Store, opts: ReadOptions) -> Self {
        crate::telemetry::init();
        let mmap = opts.sqlite_mmap;
        // On PostgreSQL the one-statement reads have a pool of their own (`pgread`) and
        // the transactions (streams, counts, bulk lookups) sqlx's, a quarter of the
        // connections: together `api.max_connections`.
        let (one, many) = split_connections(opts.max_connections);
        let pg = matches!(store, Store::Postgres(_));
        let (store, limited) = store.for_readers(
            if pg { many } else { opts.max_connections },
            opts.acquire_timeout,
            opts.statement_timeout,
        );
        ReadState(Arc::new(Shared {
            limited,
            pg: store.pg_read_pool(one, opts.acquire_timeout),
            opts,
            meta: std::sync::Mutex::new(None),
            status: None,
            admin: AdminOptions::default(),
            direct: crate::store::direct::Pool::for_store(&store, 16, mmap),
            privacy: tokio::sync::OnceCell::new(),
            replica: tokio::sync::OnceCell::new(),
            store,
        }))
    }

    /// The replica's privacy key (person references, cursors), read from the store once.
    pub async fn privacy(&self) -> Result<&crate::privacy::Privacy, Problem> {
        self.privacy
            .get_or_try_init(|| crate::store::key::load(&self.store))
            .await
            .map_err(Problem::internal)
    }

    /// The replica's identifier (made at `migrate`), read from the store once; `None`
    /// while the store cannot say (unreachable, or a replica from before identifiers).
    pub async fn replica_id(&self) -> Option<&str> {
        self.replica
            .get_or_try_init(|| async { self.store.replica_id().await.ok().flatten().ok_or(()) })
            .await
            .ok()
            .map(String::as_str)
    }

    /// The state while it is being configured, before any clone exists.
    fn building(&mut self) -> &mut Shared {
        Arc::get_mut(&mut self.0).expect("the read state is configured before it is shared")
    }

    pub fn with_status(mut self, src: crate::status::StatusSource) -> Self {
        self.building().status = Some(src);
        self
    }

    /// Marks the store read-only for the admin routes (`isir serve`).
    pub fn read_only_admin(&mut self) {
        self.building().admin.read_only = true;
    }

    pub fn with_admin(mut self, admin: AdminOptions) -> Self {
        self.building().admin = admin;
        self
    }

    /// The privacy key given, not read from the store (a reader role's key file,
    /// [`crate::store::key::resolve`]).
    pub fn with_privacy(mut self, privacy: crate::privacy::Privacy) -> Self {
        self.building().privacy = tokio::sync::OnceCell::new_with(Some(privacy));
        self
    }
}

/// A listener's limits on its connections (`api.*`, see [`crate::config::ApiSettings`]),
/// carried with the read side's options for the HTTP layer that enforces them
/// (`http::conn`; the read side itself never looks at them).
#[derive(Clone, Debug, PartialEq)]
pub struct ConnLimits {
    /// A request head must arrive whole within it: from the opening of the connection
    /// for its first request, from the first byte for each later one.
    pub header_read_timeout: Duration,
    /// A kept-alive connection without a request for this long is closed.
    pub keep_alive_idle: Duration,
    /// A connection whose socket takes no byte of an answer for this long is closed.
    pub write_timeout: Duration,
    /// A request without its answer's head after this long is answered 408.
    pub request_timeout: Duration,
    /// Connections open at once on the listener.
    pub max_open: usize,
    /// Connections open at once from one client (trusted proxies are not counted).
    pub max_per_client: usize,
}

impl ConnLimits {
    pub fn from_settings(a: &crate::config::ApiSettings) -> Self {
        ConnLimits {
            header_read_timeout: Duration::from_secs(a.header_read_timeout_secs),
            keep_alive_idle: Duration::from_secs(a.keep_alive_idle_secs),
            write_timeout: Duration::from_secs(a.write_timeout_secs),
            request_timeout: Duration::from_secs(a.request_timeout_secs),
            max_open: a.max_open_connections,
            max_per_client: a.max_connections_per_client,
        }
    }
}
