//! Who is asking and how often: API keys (configured as SHA-256 hashes, compared in
//! constant time) with scopes, and a rate limit per key or per client (governor; an IPv4
//! address, or an IPv6 client's `api.ipv6_client_prefix` network), answered with 429 and
//! `Retry-After`.
//!
//! Also the request log line and the request metrics, and the headers every answer
//! carries. Owns request identity only; it never logs a key, a query string or a
//! client's data.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};

use crate::read::{AdminOptions, Caller, Problem, ReadOptions};

pub type Limiter = DefaultKeyedRateLimiter<String>;

fn limiter(per_second: u32, burst: u32) -> Limiter {
    let q = Quota::per_second(NonZeroU32::new(per_second.max(1)).unwrap())
        .allow_burst(NonZeroU32::new(burst.max(1)).unwrap());
    RateLimiter::keyed(q)
}

/// The guard's state: the configured keys, the rate limiter of one router, the admin
/// key's hash.
#[derive(Clone)]
pub struct Guard(std::sync::Arc<GuardInner>);

pub struct GuardInner {
    keys: Vec<crate::config::ApiKey>,
    limiter: Limiter,
    admin_key_sha256: Option<String>,
    trusted: Vec<ipnet::IpNet>,
    ipv6_prefix: u8,
    /// Requests since the limiter was last pruned.
    checks: std::sync::atomic::AtomicU64,
}

/// Requests between two prunings of the limiter's idle keys.
pub const PRUNE_EVERY: u64 = 4096;

impl Guard {
    pub fn new(opts: &ReadOptions, admin: &AdminOptions) -> Self {
        Guard(std::sync::Arc::new(GuardInner {
            keys: opts.keys.clone(),
            limiter: limiter(opts.rate_per_second, opts.burst),
            admin_key_sha256: admin.key_sha256.clone(),
            trusted: opts.trusted_proxies.clone(),
            ipv6_prefix: opts.ipv6_client_prefix,
            checks: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// Keys the rate limiter holds state for.
    pub fn tracked(&self) -> usize {
        self.0.limiter.len()
    }

    /// Forgets the keys whose limit has fully recovered (their state is that of a new
    /// key): the limiter's memory follows the active clients, not every address ever
    /// seen. Runs every [`PRUNE_EVERY`] requests.
    pub fn prune(&self) {
        self.0.limiter.retain_recent();
        self.0.limiter.shrink_to_fit();
    }
}

/// The client of a request: the peer, or, when the peer is a trusted proxy, the
/// nearest address of `X-Forwarded-For` (read from the right) that is not a trusted
/// proxy itself. A header from any other peer is ignored: it is the client's to forge.
pub fn client(peer: std::net::IpAddr, xff: &[&str], trusted: &[ipnet::IpNet]) -> std::net::IpAddr {
    let is_trusted = |ip: &std::net::IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut hops: Vec<std::net::IpAddr> = Vec::new();
    for h in xff {
        for a in h.split(',') {
            match a.trim().parse::<std::net::IpAddr>() {
                Ok(ip) => hops.push(ip),
                // A hop we cannot read ends what we can believe.
                Err(_) => hops.clear(),
            }
        }
    }
    let mut client = peer;
    for ip in hops.into_iter().rev() {
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    client
}

/// The unit a client is counted in (rate limit, connections per client): an IPv4
/// address (an IPv4-mapped IPv6 address counts as its IPv4 address), or the network of
/// the leading `v6_prefix` bits (`api.ipv6_client_prefix`) of an IPv6 address. One
/// host is usually given a whole /64: counted per address, it would hold 2^64 buckets.
pub fn client_group(ip: std::net::IpAddr, v6_prefix: u8) -> ipnet::IpNet {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => ipnet::IpNet::from(ipnet::Ipv4Net::from(v4)),
        std::net::IpAddr::V6(v6) => ipnet::Ipv6Net::new(v6, v6_prefix.min(128))
            .expect("a prefix of at most 128")
            .trunc()
            .into(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn presented(req: &Request) -> Option<String> {
    if let Some(v) = req.headers().get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(v.trim().to_string());
    }
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_string())
}

/// Marks a response whose request has had its log line.
#[derive(Clone, Copy)]
struct Logged;

/// The log line and the metrics of one request: the route's template, never its values
/// (a path or query can hold a birth number).
fn record(method: &axum::http::Method, route: &str, status: u16, secs: f64) {
    tracing::info!(target: "isir::request", method = %method, route = %route, status, duration_ms = (secs * 1000.0 * 10.0).round() / 10.0, "request");
    metrics::counter!("isir_http_requests_total", "route" => route.to_string(), "method" => method.to_string(), "status" => status.to_string())
        .increment(1);
    metrics::histogram!("isir_http_request_duration_seconds", "route" => route.to_string())
        .record(secs);
}

/// A routed request in flight: logged when it ends, or, if its future is dropped first
/// (the request timeout), logged then as a 408.
struct InFlight {
    method: axum::http::Method,
    route: String,
    started: std::time::Instant,
    done: bool,
}

impl InFlight {
    fn start(req: &Request) -> Self {
        InFlight {
            method: req.method().clone(),
            route: req
                .extensions()
                .get::<axum::extract::MatchedPath>()
                .map(|m| m.as_str().to_string())
                .unwrap_or_else(|| "unmatched".into()),
            started: std::time::Instant::now(),
            done: false,
        }
    }

    fn end(mut self, resp: &mut Response) {
        self.done = true;
        record(
            &self.method,
            &self.route,
            resp.status().as_u16(),
            self.started.elapsed().as_secs_f64(),
        );
        resp.extensions_mut().insert(Logged);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.done {
            record(
                &self.method,
                &self.route,
                StatusCode::REQUEST_TIMEOUT.as_u16(),
                self.started.elapsed().as_secs_f64(),
            );
        }
    }
}

/// Every routed request: identity and rate limit (`admit`), then one log line and the
/// request metrics.
pub async fn guard(State(state): State<Guard>, req: Request, next: Next) -> Response {
    let flight = InFlight::start(&req);
    let mut resp = admit(&state, req, next).await;
    flight.end(&mut resp);
    resp
}

/// The requests no route took (an unknown path): their log line and metrics, with the
/// route `unmatched` (never the path itself).
pub async fn unrouted(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    if resp.extensions().get::<Logged>().is_none() {
        record(
            &method,
            "unmatched",
            resp.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
    }
    resp
}

/// Identity and rate limit: 429 before 401, so that guessing keys is limited too.
async fn admit(state: &Guard, mut req: Request, next: Next) -> Response {
    let mut caller = Caller::default();
    let mut unknown = false;
    if let Some(key) = presented(&req) {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        let mut found = None;
        for k in &state.0.keys {
            // Every configured key is compared, so timing does not tell which matched.
            if constant_time_eq(digest.as_bytes(), k.sha256.to_ascii_lowercase().as_bytes()) {
                found = Some(k);
            }
        }
        match found {
            Some(k) => {
                caller.key = Some(k.name.clone());
                caller.pii = k.scopes.iter().any(|s| s == "pii");
                caller.scopes = k.scopes.clone();
            }
            None => unknown = true,
        }
    }
    // A request with an unknown key counts against its address like any anonymous
    // one: guessing keys is rate-limited too.
    let who = match &caller.key {
        Some(name) => format!("key:{name}"),
        None => match req.extensions().get::<ConnectInfo<SocketAddr>>() {
            Some(c) => {
                let xff: Vec<&str> = req
                    .headers()
                    .get_all("x-forwarded-for")
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect();
                let ip = client(c.0.ip(), &xff, &state.0.trusted);
                format!("ip:{}", client_group(ip, state.0.ipv6_prefix))
            }
            None => "ip:unknown".into(),
        },
    };
    if state
        .0
        .checks
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .is_multiple_of(PRUNE_EVERY)
    {
        state.prune();
    }
    if let Err(not_until) = state.0.limiter.check_key(&who) {
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let mut r = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            format!("too many requests; retry in {secs} s"),
        )
        .into_response();
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&secs.max(1).to_string()).expect("number"),
        );
        return r;
    }
    if unknown {
        return Problem::new(
            StatusCode::UNAUTHORIZED,
            "unknown-key",
            "the API key is not known",
        )
        .into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The operator surfaces: with `admin.key_sha256` set, only for `X-Admin-Key: <key>`.
/// A page a browser reads (`GET`, `HEAD`) also takes `?admin_key=<key>`; a request that
/// changes something (any other method: the watchlist routes) takes the key from the
/// header only, so that a write's key is never in a URL (logs, history, `Referer`).
pub async fn admin(State(state): State<Guard>, req: Request, next: Next) -> Response {
    let flight = InFlight::start(&req);
    let mut resp = admin_check(&state, req, next).await;
    flight.end(&mut resp);
    resp
}

/// The admin key a request presents: the header, or for a read only, the query.
fn admin_key(req: &Request) -> Option<String> {
    if let Some(v) = req
        .headers()
        .get("x-admin-key")
        .and_then(|v| v.to_str().ok())
    {
        return Some(v.trim().to_string());
    }
    if !req.method().is_safe() {
        return None;
    }
    req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("admin_key="))
            .map(String::from)
    })
}

async fn admin_check(state: &Guard, req: Request, next: Next) -> Response {
    if let Some(want) = &state.0.admin_key_sha256 {
        let ok = admin_key(&req).is_some_and(|k| {
            let digest = hex::encode(Sha256::digest(k.as_bytes()));
            constant_time_eq(digest.as_bytes(), want.to_ascii_lowercase().as_bytes())
        });
        if !ok {
            return Problem::new(
                StatusCode::UNAUTHORIZED,
                "admin-key",
                "the operator pages need the admin key (X-Admin-Key; a change takes it from \
                 the header only)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Headers of every answer: answers differ by key (the `pii` scope), so shared caches
/// must not keep them (`Cache-Control: private`, `Vary` on the key headers) unless a
/// route said otherwise; nothing is sniffed; HTML pages run no script and are never
/// framed (`Content-Security-Policy`).
pub async fn headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let hs = resp.headers_mut();
    hs.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !hs.contains_key(header::CACHE_CONTROL) {
        hs.insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    }
    hs.append(
        header::VARY,
        HeaderValue::from_static("Authorization, X-API-Key"),
    );
    let html = hs
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if html {
        hs.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            ),
        );
        hs.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        hs.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(s: &[&str]) -> Vec<ipnet::IpNet> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn the_client_behind_trusted_proxies() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let trusted = nets(&["10.0.0.0/8", "127.0.0.1/32"]);
        // An untrusted peer: its header is its own to forge.
        assert_eq!(
            client(ip("198.51.100.7"), &["203.0.113.5"], &trusted),
            ip("198.51.100.7")
        );
        // A trusted proxy: the nearest untrusted hop, read from the right.
        assert_eq!(
            client(ip("127.0.0.1"), &["203.0.113.5"], &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            client(
                ip("10.1.1.1"),
                &["6.6.6.6, 203.0.113.5, 10.2.2.2"],
                &trusted
            ),
            ip("203.0.113.5"),
            "a forged left part is not believed"
        );
        assert_eq!(
            client(ip("10.1.1.1"), &["6.6.6.6", "203.0.113.5"], &trusted),
            ip("203.0.113.5"),
            "several headers are one list"
        );
        // No header, or nothing readable: the proxy itself.
        assert_eq!(client(ip("10.1.1.1"), &[], &trusted), ip("10.1.1.1"));
        assert_eq!(client(ip("10.1.1.1"), &["junk"], &trusted), ip("10.1.1.1"));
        assert_eq!(client(ip("10.1.1.1"), &["::1"], &nets(&[])), ip("10.1.1.1"));
        assert_eq!(
            client(ip("::1"), &["2001:db8::5"], &nets(&["::1/128"])),
            ip("2001:db8::5")
        );
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap();
        // Hand-written expectations: two hosts of one /64 are one client, the next /64
        // another.
        let a = client_group(ip("2001:db8:1:2:aaaa::1"), 64);
        assert_eq!(a, net("2001:db8:1:2::/64"));
        assert_eq!(client_group(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"), 64), a);
        assert_ne!(client_group(ip("2001:db8:1:3::1"), 64), a);
        assert_eq!(
            client_group(ip("2001:db8:1:2:aaaa::1"), 48),
            net("2001:db8:1::/48")
        );
        assert_eq!(
            client_group(ip("2001:db8::7"), 128),
            net("2001:db8::7/128"),
            "128 counts single addresses"
        );
        // IPv4 counts per address, also mapped into IPv6 (a dual-stack listener).
        assert_eq!(client_group(ip("198.51.100.7"), 64), net("198.51.100.7/32"));
        assert_eq!(
            client_group(ip("::ffff:198.51.100.7"), 64),
            net("198.51.100.7/32")
        );
    }

    #[test]
    fn idle_keys_are_pruned() {
        let opts = ReadOptions {
            rate_per_second: 1000,
            burst: 1,
            ..Default::default()
        };
        let g = Guard::new(&opts, &AdminOptions::default());
        for i in 0..500 {
            let _ = g.0.limiter.check_key(&format!("ip:{i}"));
        }
        assert_eq!(g.tracked(), 500);
        std::thread::sleep(std::time::Duration::from_millis(20));
        g.prune();
        assert_eq!(g.tracked(), 0, "recovered keys are forgotten");
        let _ = g.0.limiter.check_key(&"ip:busy".to_string());
        g.prune();
        assert_eq!(g.tracked(), 1, "a key still limited is kept");
    }
}
