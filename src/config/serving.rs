//! The read side's settings: the API (`api`: listener, keys, limits, timeouts, the read
//! pools) and the operator surfaces (`admin`), each tunable with its default and the
//! reason for it. Part of the one settings tree of `config/mod.rs`.
//!
//! Owns those sections' shape and defaults; validation is in `load.rs` with the rest.
//! Like the whole of `config`, it imports no feature.

use serde::{Deserialize, Serialize};

/// The operator surfaces: the status page `/` and `/metrics`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// A separate address for the status page and `/metrics` (with `/healthz`); they
    /// then leave `api.bind`. Unset: they are served on `api.bind`.
    pub bind: Option<String>,
    /// SHA-256 (hex) of the admin key. Set: the status page and `/metrics` answer only
    /// to `X-Admin-Key: <key>` (or `?admin_key=` for a browser), wherever they are bound;
    /// the watchlist routes that change something take it from the header only (a key
    /// in a URL ends up in logs and browser history).
    pub key_sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Address of the read API. Loopback by default: exposing it is a decision.
    /// Port 0 picks a free port and logs it.
    pub bind: String,
    /// Largest page a list answers. 1000.
    pub max_limit: i64,
    /// Page size without `limit`. 50.
    pub default_limit: i64,
    /// `/readyz` is ready only while the projections are at most this many IDs behind
    /// the replica. 10000: about half a day of the register's growth.
    pub max_lag_ids: i64,
    /// Requests a second per API key, or per client address without a key. 20, with
    /// bursts of `burst`: enough for an analyst's scripts, not for scraping.
    pub rate_per_second: u32,
    pub burst: u32,
    /// API keys: only their SHA-256 (hex) is configured. Scope `pii` sees birth numbers
    /// and birth dates of natural persons.
    pub keys: Vec<ApiKey>,
    /// Milliseconds the phase and the watermark are reused between requests. 200: a
    /// phase change or a new watermark shows within a fifth of a second, and a lookup
    /// costs one query instead of two.
    pub meta_cache_ms: u64,
    /// Milliseconds a read's statement may run before it is stopped (PostgreSQL
    /// `statement_timeout`, a SQLite progress handler) and the answer is a 503 with
    /// `Retry-After`. 5000: every list is an index walk in milliseconds; a query that
    /// takes seconds is one the API should not run for one caller.
    pub statement_timeout_ms: u64,
    /// Database connections of the read side, apart from the writer's
    /// (`database.max_connections`). 16. On PostgreSQL a quarter of them (at least one)
    /// carry transactions (streams, counts, bulk lookups) and the rest one-statement
    /// answers (cases, list and search pages).
    pub max_connections: u32,
    /// Milliseconds a read waits for a free connection before it answers 503 with
    /// `Retry-After`. 2000.
    pub acquire_timeout_ms: u64,
    /// Rows a whole-result stream (`?stream=all`) gives a caller without the `stream`
    /// scope; a larger result is refused with a 403 before its first row. 10000.
    pub stream_max_rows: i64,
    /// Addresses or networks (`10.0.0.0/8`, `127.0.0.1`) of reverse proxies whose
    /// `X-Forwarded-For` names the client: the rate limit of an anonymous request keys
    /// on the nearest address in that header that is not itself a trusted proxy. From
    /// any other peer the header is ignored. Empty: the peer is the client.
    pub trusted_proxies: Vec<String>,
    /// IPv6 clients count as one client per network of this many leading bits: for the
    /// rate limit and for `max_connections_per_client`. 64: one host or home line is
    /// usually given a whole /64, so counting single addresses would give it 2^64 buckets
    /// (and one caller as many rate limits as it likes). 32-128; 128 counts addresses.
    /// IPv4 clients (also IPv4-mapped IPv6 addresses) count per address.
    pub ipv6_client_prefix: u8,
    /// Seconds a connection has to send a whole request head (request line and
    /// headers): from its opening for the first request, from the first byte for each
    /// later one. 10: a real client sends its head in one packet; a client that trickles
    /// one is holding a socket (slowloris), and is closed.
    pub header_read_timeout_secs: u64,
    /// Seconds a kept-alive connection may sit idle between an answer and the next
    /// request before the server closes it. 60: longer than a proxy's pool keeps an idle
    /// upstream connection (deploy/nginx.conf's upstream keeps them 50 s, so the proxy
    /// closes first and never sends on a socket we are closing), short enough that idle
    /// sockets do not pile up.
    pub keep_alive_idle_secs: u64,
    /// Seconds an answer may wait for the client to take a byte: a connection whose
    /// socket accepts nothing for this long is closed and its answer dropped (a stream's
    /// read transaction ends with it). 30: a client that reads slowly but reads keeps its
    /// download however long it takes; one that stopped reading cannot pin the memory of
    /// its answer or a read connection.
    pub write_timeout_secs: u64,
    /// Seconds a request may take from its head to its answer's head (the answer's
    /// body is then under `write_timeout_secs`); beyond it the request is answered 408
    /// and logged so. 30: above the longest a read can wait on the database
    /// (`acquire_timeout_ms` plus `statement_timeout_ms`, at most 25 s each, usually
    /// 2 s and 5 s), so a slow database shows as its own 503 first, and a reader
    /// stops within it on SIGTERM (systemd's `TimeoutStopSec=30`).
    pub request_timeout_secs: u64,
    /// Connections served at once on a listener, all clients together; beyond it a new
    /// connection is closed at once, unread. 512: it keeps the process under the usual
    /// soft limit of 1024 open files with room for the database pools and files.
    pub max_open_connections: usize,
    /// Connections served at once from one client address (an IPv6 client: its
    /// `ipv6_client_prefix` network); beyond it a new one is closed at once, unread. 32:
    /// a browser opens 6, a script a few more. Connections from `trusted_proxies` are not
    /// counted per client (each carries many clients), only in `max_open_connections`.
    pub max_connections_per_client: usize,
    /// On SQLite, MiB of the file that the API's page reads (lists, lookups, the feed,
    /// search) map into memory (`PRAGMA mmap_size`) instead of copying each page from the
    /// OS's file cache into each connection's own cache. 1048576 (1 TiB: the whole file);
    /// 0: off. A list of a million cases went from 2 650 to 5 330 req/s. The mapped pages
    /// are the OS's file cache (shared, clean, given back under memory pressure), but they
    /// count in the process's RSS. A read error of a mapped page stops the process instead
    /// of failing one request: set 0 on storage that may fail so.
    pub sqlite_mmap_mib: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub name: String,
    pub sha256: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            max_limit: 1000,
            default_limit: 50,
            max_lag_ids: 10_000,
            rate_per_second: 20,
            burst: 100,
            keys: Vec::new(),
            meta_cache_ms: 200,
            statement_timeout_ms: 5_000,
            max_connections: 16,
            acquire_timeout_ms: 2_000,
            stream_max_rows: 10_000,
            trusted_proxies: Vec::new(),
            sqlite_mmap_mib: 1 << 20,
            ipv6_client_prefix: 64,
            header_read_timeout_secs: 10,
            keep_alive_idle_secs: 60,
            write_timeout_secs: 30,
            request_timeout_secs: 30,
            max_open_connections: 512,
            max_connections_per_client: 32,
        }
    }
}
