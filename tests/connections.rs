//! The listeners' connection limits against the real server on loopback: half-sent
//! request heads and idle kept-alive connections are closed by their deadlines; a client
//! beyond its cap of connections (or beyond the cap of all) is closed at once while
//! another client is served; a trusted proxy is not capped as one client; a client that
//! never reads a stream is dropped after the write timeout, its stream (reader, read
//! transaction, buffered rows) ends and the next stream is whole; IPv6 clients share a rate limit per
//! /64; on the shutdown signal an answer in flight is finished before the server
//! returns. Counts are a few hundred at most and every wait is bounded; the bounds are
//! generous multiples of the configured deadlines, never speed assertions.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::Backend;
use isir::http::conn::ConnLimits;
use isir::read::ReadOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// A server of an empty SQLite replica with `opts`: its address, the database and a
/// sender that stops it when dropped.
async fn start(
    opts: ReadOptions,
) -> (SocketAddr, common::TestDb, tokio::sync::oneshot::Sender<()>) {
    let db = common::fresh_db(Backend::Sqlite).await;
    let store = common::store(&db).await;
    let (base, stop) = common::serve_api(isir::read::ReadState::new(store, opts)).await;
    let addr = base.strip_prefix("http://").unwrap().parse().unwrap();
    (addr, db, stop)
}

fn limits(header: u64, idle: u64, per_client: usize, open: usize) -> ConnLimits {
    ConnLimits {
        header_read_timeout: Duration::from_secs(header),
        keep_alive_idle: Duration::from_secs(idle),
        write_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_secs(30),
        max_open: open,
        max_per_client: per_client,
    }
}

fn opts(conn: ConnLimits) -> ReadOptions {
    ReadOptions {
        rate_per_second: 10_000,
        burst: 10_000,
        conn,
        ..Default::default()
    }
}

/// A connection to `addr` from the loopback address `from` (127.0.0.0/8 is all ours,
/// so each address is another client).
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(addr).await.unwrap()
}

/// Whether the server closes `s` within `within`: a read ends (end of stream or a
/// reset) instead of waiting. Bytes read on the way are skipped.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A connection from `from` that is admitted and answered `200` for `/healthz`, asked
/// for up to 50 times, 100 ms apart (a place the server has not yet seen closed is
/// taken again once it has); `None` when none was given.
async fn admitted(from: &str, addr: SocketAddr) -> Option<TcpStream> {
    for _ in 0..50 {
        let mut s = connect_from(from, addr).await;
        let asked = s
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .await;
        let mut b = [0u8; 12];
        if asked.is_ok() && s.read_exact(&mut b).await.is_ok() {
            assert_eq!(&b[9..12], b"200");
            // The rest of the answer, so the connection is idle and kept.
            let mut rest = vec![0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut rest)).await;
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// One request on a kept-alive connection: its status, the whole answer read (by its
/// `Content-Length`).
async fn roundtrip(s: &mut TcpStream, path: &str) -> u16 {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let (head_end, len) = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before an answer");
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..i]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .expect("a content-length")
                .trim()
                .parse()
                .unwrap();
            break (i + 4, len);
        }
    };
    while got.len() < head_end + len {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed inside an answer");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got[9..12]).parse().unwrap()
}

/// Connections that send half a request head, or nothing, or trickle one byte at a
/// time, are closed within the header read timeout (1 s here; the idle deadline is 30 s,
/// so nothing else closes them within the 10 s allowed); the server keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_request_heads_are_closed_after_the_header_timeout() {
    let (addr, _db, _stop) = start(opts(limits(1, 30, 1000, 1000))).await;
    let started = Instant::now();
    let mut half = Vec::new();
    for i in 0..150 {
        let mut s = connect_from("127.0.0.1", addr).await;
        match i % 3 {
            0 => s.write_all(b"GET /v1/stats HT").await.unwrap(),
            1 => s
                .write_all(b"GET /v1/stats HTTP/1.1\r\nHost: t\r\nX-Slow: ")
                .await
                .unwrap(),
            _ => {} // nothing at all
        }
        half.push(s);
    }
    // One more that trickles its head a byte every 200 ms, never finishing it.
    let mut trickle = connect_from("127.0.0.1", addr).await;
    let trickler = tokio::spawn(async move {
        for b in b"GET /v1/stats HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter().cycle() {
            if trickle.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            if started.elapsed() > Duration::from_secs(12) {
                return false;
            }
        }
        unreachable!()
    });
    // The server answers meanwhile.
    let mut ok = connect_from("127.0.0.1", addr).await;
    assert_eq!(roundtrip(&mut ok, "/healthz").await, 200);
    for (i, s) in half.iter_mut().enumerate() {
        let left = Duration::from_secs(10).saturating_sub(started.elapsed());
        assert!(
            closed_within(s, left).await,
            "half-sent connection {i} still open after 10 s (header timeout 1 s)"
        );
    }
    assert!(
        trickler.await.unwrap(),
        "a trickled head was not cut off within 12 s"
    );
}

/// A kept-alive connection is closed after the idle deadline (1 s here, the header
/// timeout 30 s); a request before it keeps the connection in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let (addr, _db, _stop) = start(opts(limits(30, 1, 1000, 1000))).await;
    let mut s = connect_from("127.0.0.1", addr).await;
    assert_eq!(roundtrip(&mut s, "/healthz").await, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Within the idle time: still served on the same connection.
    assert_eq!(roundtrip(&mut s, "/healthz").await, 200);
    assert!(
        closed_within(&mut s, Duration::from_secs(10)).await,
        "an idle kept-alive connection still open after 10 s (idle deadline 1 s)"
    );
}

/// A client beyond its cap of connections is closed at once, unread, while another
/// client is answered; a freed place is taken again; beyond the cap of all
/// connections anyone is closed at once; a trusted proxy counts in all only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_caps_are_refused_at_once() {
    let mut o = opts(limits(30, 30, 5, 12));
    o.trusted_proxies = vec!["127.0.0.5/32".parse().unwrap()];
    let (addr, _db, _stop) = start(o).await;
    // Five from one client, each answered (so the server holds them).
    let mut five = Vec::new();
    for _ in 0..5 {
        let mut s = connect_from("127.0.0.2", addr).await;
        assert_eq!(roundtrip(&mut s, "/healthz").await, 200);
        five.push(s);
    }
    // The sixth is closed at once, before it sends a byte.
    for _ in 0..3 {
        let mut s = connect_from("127.0.0.2", addr).await;
        assert!(
            closed_within(&mut s, Duration::from_secs(5)).await,
            "a sixth connection of one client was kept"
        );
    }
    // Another client is served meanwhile.
    let mut other = connect_from("127.0.0.3", addr).await;
    assert_eq!(roundtrip(&mut other, "/healthz").await, 200);
    drop(other);
    // A place given back is taken again (once the server has seen the close: it learns
    // of it asynchronously, so the place is asked for until it is given).
    drop(five.pop());
    let again = admitted("127.0.0.2", addr).await;
    assert!(again.is_some(), "a freed place was not given again");
    // The trusted proxy carries many clients: seven connections from it, beyond the
    // per-client cap, all served (5 + 7 = 12, the cap of all).
    // The other client's connection may still hold its place until the server has seen
    // it closed, so each place is asked for until it is given; a proxy counted per
    // client would never get its sixth.
    let mut proxy = Vec::new();
    for i in 0..7 {
        let s = admitted("127.0.0.5", addr).await;
        proxy.push(
            s.unwrap_or_else(|| panic!("proxy connection {} of 7 was never admitted", i + 1)),
        );
    }
    // Twelve open: the cap of all refuses a new client, and the proxy too.
    for from in ["127.0.0.6", "127.0.0.5"] {
        let mut s = connect_from(from, addr).await;
        assert!(
            closed_within(&mut s, Duration::from_secs(5)).await,
            "a connection from {from} beyond the cap of all was kept"
        );
    }
}

/// IPv6 clients share one rate limit per /64: behind a trusted proxy (the loopback
/// carries one IPv6 address), two addresses of one /64 are one bucket, an address of the
/// next /64 another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_clients_share_a_rate_limit_per_64() {
    let mut o = opts(limits(10, 10, 100, 100));
    o.rate_per_second = 1;
    o.burst = 1;
    o.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let (addr, _db, _stop) = start(o).await;
    let http = reqwest::Client::new();
    let get = |xff: &'static str| {
        let http = http.clone();
        async move {
            http.get(format!("http://{addr}/v1/stats"))
                .header("x-forwarded-for", xff)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_ne!(get("2001:db8:1:2::1").await, 429);
    assert_eq!(
        get("2001:db8:1:2:ffff::9").await,
        429,
        "another address of the same /64 shares its bucket"
    );
    assert_ne!(
        get("2001:db8:1:3::1").await,
        429,
        "the next /64 is another client"
    );
    assert_ne!(get("198.51.100.1").await, 429);
    assert_eq!(
        get("198.51.100.1").await,
        429,
        "an IPv4 address is its own bucket"
    );
    assert_ne!(get("198.51.100.2").await, 429);
}

/// `isir_api_streams_open` as `/metrics` shows it.
async fn streams_open(http: &reqwest::Client, base: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("isir_api_streams_open "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// The length of a whole answer read by a client that reads.
async fn whole(http: &reqwest::Client, base: &str, path: &str, key: &str) -> usize {
    let mut r = http.get(format!("{base}{path}"));
    if !key.is_empty() {
        r = r.header("x-api-key", key);
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap().len()
}

/// A client that asks for a large stream and never reads it: after the write timeout
/// (1 s here) the server closes the connection, the answer is cut (no last chunk), and
/// the stream (its reader, holding a read transaction, or the rows it read before
/// answering) is gone: `isir_api_streams_open` is back to 0 and the next stream is
/// whole. With the `stream` scope the rows are read while the answer is written;
/// without it they are read before answering.
async fn non_reading_stream_client(b: Backend) {
    isir::telemetry::init();
    let (_sim, url, _g) = common::sim(20_000, 1000, 71).await;
    let db = common::fresh_db(b).await;
    let app = common::projected(&url, &db).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let mut o = opts(ConnLimits {
        write_timeout: Duration::from_secs(1),
        ..limits(10, 10, 100, 100)
    });
    o.stream_max_rows = 1_000_000;
    o.stream_page = 50;
    o.keys = vec![isir::config::ApiKey {
        name: "bulk".into(),
        sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"k-stream")),
        scopes: vec!["stream".into()],
    }];
    let (base, _stop) = common::serve_api(isir::read::ReadState::new(app.store.clone(), o)).await;
    let addr: SocketAddr = base.strip_prefix("http://").unwrap().parse().unwrap();
    let http = reqwest::Client::new();
    let path = "/v1/events?format=ndjson&stream=all";
    for key in ["k-stream", ""] {
        eprintln!("{b:?}, key {key:?}");
        let len = whole(&http, &base, path, key).await;
        assert!(len > 1 << 20, "the stream is large: {len} bytes");
        assert_eq!(streams_open(&http, &base).await, 0.0);

        // The client's receive buffer is small, so the server's writes stall soon.
        let sock = TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        let key_header = if key.is_empty() {
            String::new()
        } else {
            format!("X-API-Key: {key}\r\n")
        };
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{key_header}\r\n").as_bytes())
            .await
            .unwrap();
        let started = Instant::now();
        let mut seen_open = false;
        let ended = loop {
            let n = streams_open(&http, &base).await;
            seen_open |= n > 0.0;
            if seen_open && n == 0.0 {
                break true;
            }
            if started.elapsed() > Duration::from_secs(20) {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(seen_open, "the stream never started");
        assert!(
            ended,
            "the stream of a client that does not read is still open after 20 s (write timeout 1 s)"
        );
        // What the client can still read: a cut answer, then the end of the connection.
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        assert!(read.is_ok(), "the connection was not closed");
        assert!(
            got.len() < len,
            "the client got the whole answer ({} bytes): the server never stalled",
            got.len()
        );
        assert!(
            !got.ends_with(b"0\r\n\r\n"),
            "a cut answer must not look complete"
        );
        // Nothing of it is left: the next stream is whole.
        assert_eq!(whole(&http, &base, path, key).await, len);
        assert_eq!(streams_open(&http, &base).await, 0.0);
    }
}

/// On the shutdown signal the server stops accepting, and an answer in flight (a large
/// stream, read slowly) is finished whole before `run` returns.
async fn shutdown_finishes_answers_in_flight(b: Backend) {
    let (_sim, url, _g) = common::sim(20_000, 1000, 72).await;
    let db = common::fresh_db(b).await;
    let app = common::projected(&url, &db).await;
    app.store.set_setting("phase", "serve").await.unwrap();
    let mut o = opts(limits(10, 10, 100, 100));
    o.stream_max_rows = 1_000_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(isir::http::run(
        listener,
        isir::read::ReadState::new(app.store.clone(), o),
        async move {
            let _ = stopped.await;
        },
    ));
    let path = "/v1/events?format=ndjson&stream=all";
    let http = reqwest::Client::new();
    let len = whole(&http, &format!("http://{addr}"), path, "").await;
    // A client with a small receive buffer, so that the answer is still being written
    // when the signal comes.
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let n = s.read(&mut buf).await.unwrap();
    got.extend_from_slice(&buf[..n]);
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "a new connection after the shutdown signal"
    );
    assert!(
        !server.is_finished(),
        "run returned with an answer in flight"
    );
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("the answer goes on")
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.len() > len,
        "the whole answer, with its head and chunk sizes"
    );
    assert!(
        got.ends_with(b"0\r\n\r\n"),
        "the answer in flight was finished (its last chunk)"
    );
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("run returns once its answers are done")
        .unwrap()
        .unwrap();
}

/// The tests that stream take turns: `isir_api_streams_open` is the process's.
static STREAMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_answers_in_flight_sqlite() {
    let _turn = STREAMING.lock().await;
    // (The server's part, whatever the back end; SQLite is the quicker to fill.)
    shutdown_finishes_answers_in_flight(Backend::Sqlite).await;
}

/// (One test for both back ends: the gauge is the process's, and the two would see
/// each other's streams.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_a_stream_is_dropped() {
    let _turn = STREAMING.lock().await;
    for b in common::BOTH {
        non_reading_stream_client(b).await;
    }
}
