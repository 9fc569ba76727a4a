//! The connections of a listener: the accept loop that serves a router over HTTP/1.1
//! (hyper), with the limits that keep a silent or greedy client from holding sockets
//! and memory: a deadline for each request head, an idle deadline between requests on
//! a kept-alive connection, a write deadline for answers, and caps on the connections
//! open per client and in all. On the shutdown signal it stops accepting, lets the
//! requests in flight finish and closes idle connections.
//!
//! Owns sockets and their deadlines only: it never reads what a request asks (routes,
//! keys and rate limits are the router's and the guard's), and it never logs a client's
//! address.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::read::ReadOptions;

pub use crate::read::ConnLimits;

/// The connections a listener has open, in all and per client.
#[derive(Default)]
struct Open(Mutex<Counts>);

#[derive(Default)]
struct Counts {
    total: usize,
    per_client: HashMap<ipnet::IpNet, usize>,
}

/// One admitted connection's place in [`Open`], given back when dropped.
struct Slot {
    open: Arc<Open>,
    client: Option<ipnet::IpNet>,
}

impl Open {
    /// A place for a connection from `peer`, or the cap that refuses it. A trusted
    /// proxy carries many clients: it is counted in all only.
    fn admit(self: &Arc<Self>, peer: IpAddr, opts: &ReadOptions) -> Result<Slot, &'static str> {
        let peer = peer.to_canonical();
        let client = (!opts.trusted_proxies.iter().any(|n| n.contains(&peer)))
            .then(|| super::guard::client_group(peer, opts.ipv6_client_prefix));
        let mut c = self.0.lock().expect("connection counts");
        if c.total >= opts.conn.max_open {
            return Err("total");
        }
        if let Some(g) = client {
            let n = c.per_client.entry(g).or_default();
            if *n >= opts.conn.max_per_client {
                return Err("per_client");
            }
            *n += 1;
        }
        c.total += 1;
        metrics::gauge!("isir_http_connections_open").increment(1.0);
        Ok(Slot {
            open: self.clone(),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.open.0.lock().expect("connection counts");
        c.total -= 1;
        if let Some(g) = self.client
            && let std::collections::hash_map::Entry::Occupied(mut e) = c.per_client.entry(g)
        {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        metrics::gauge!("isir_http_connections_open").decrement(1.0);
    }
}

/// Whether a connection has a request in flight, and how many answers it has finished:
/// shared by its service (which starts and ends requests) and its socket (whose read
/// deadline depends on it). Both live on the connection's one task.
#[derive(Default)]
struct Activity {
    busy: AtomicUsize,
    answers: AtomicU64,
}

/// A request in flight, from its head until its answer's body is done (or dropped).
struct Busy(Arc<Activity>);

impl Busy {
    fn start(a: &Arc<Activity>) -> Self {
        a.busy.fetch_add(1, Ordering::SeqCst);
        Busy(a.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.answers.fetch_add(1, Ordering::SeqCst);
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body, holding its request's [`Busy`] until hyper has taken the last of
/// it.
struct Answer {
    body: axum::body::Body,
    _busy: Busy,
}

impl http_body::Body for Answer {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// What a connection's read deadline waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wait {
    /// The rest of a request head.
    Head,
    /// The first byte of the next request.
    Idle,
}

/// A client's socket with the read and write deadlines of [`ConnLimits`].
struct Guarded {
    io: TcpStream,
    limits: ConnLimits,
    activity: Arc<Activity>,
    answers_seen: u64,
    read_wait: Option<Wait>,
    read_sleep: Pin<Box<Sleep>>,
    write_armed: bool,
    write_sleep: Pin<Box<Sleep>>,
}

fn timed_out(what: &'static str, why: &str) -> io::Error {
    metrics::counter!("isir_http_connections_timed_out_total", "wait" => what).increment(1);
    io::Error::new(io::ErrorKind::TimedOut, why.to_string())
}

impl Guarded {
    /// A new connection: its first head is due within the header read timeout.
    fn new(io: TcpStream, limits: ConnLimits, activity: Arc<Activity>) -> Self {
        let head = Box::pin(tokio::time::sleep(limits.header_read_timeout));
        Guarded {
            io,
            activity,
            answers_seen: 0,
            read_wait: Some(Wait::Head),
            read_sleep: head,
            write_armed: false,
            write_sleep: Box::pin(tokio::time::sleep(limits.write_timeout)),
            limits,
        }
    }

    fn arm_read(&mut self, wait: Wait) {
        let d = match wait {
            Wait::Head => self.limits.header_read_timeout,
            Wait::Idle => self.limits.keep_alive_idle,
        };
        self.read_wait = Some(wait);
        self.read_sleep.as_mut().reset(Instant::now() + d);
    }

    /// A write's outcome: a write that cannot proceed arms the write deadline, which,
    /// once passed, fails the connection; one that proceeds disarms it.
    fn written(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if !r.is_pending() {
            self.write_armed = false;
            return r;
        }
        if !self.write_armed {
            self.write_armed = true;
            let at = Instant::now() + self.limits.write_timeout;
            self.write_sleep.as_mut().reset(at);
        }
        if self.write_sleep.as_mut().poll(cx).is_ready() {
            self.write_armed = false;
            return Poll::Ready(Err(timed_out(
                "write",
                "the client took no byte of the answer within api.write_timeout_secs",
            )));
        }
        Poll::Pending
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        // No read deadline while a request is in flight: reading its body, or the
        // early bytes of the next one, is the answer's business.
        let busy = me.activity.busy.load(Ordering::SeqCst) > 0;
        if busy {
            me.read_wait = None;
        } else {
            let answers = me.activity.answers.load(Ordering::SeqCst);
            if answers != me.answers_seen {
                me.answers_seen = answers;
                me.arm_read(Wait::Idle);
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut me.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if !busy && buf.filled().len() > before && me.read_wait == Some(Wait::Idle) {
                    me.arm_read(Wait::Head);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match me.read_wait {
                Some(wait) if me.read_sleep.as_mut().poll(cx).is_ready() => {
                    me.read_wait = None;
                    Poll::Ready(Err(match wait {
                        Wait::Head => timed_out(
                            "head",
                            "no whole request head within api.header_read_timeout_secs",
                        ),
                        Wait::Idle => {
                            timed_out("idle", "no request within api.keep_alive_idle_secs")
                        }
                    }))
                }
                _ => Poll::Pending,
            },
            r => r,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write(cx, data);
        me.written(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        me.written(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Serves `router` on `listener` with the connection limits of `opts` until
/// `shutdown` completes; then waits for the requests in flight.
///
/// A connection beyond a cap is closed at once, before a byte of it is read: answering
/// it a 503 would mean reading its request first (what the cap is there to spare), and
/// an answer written over an unread request is often lost to the reset that closing
/// such a socket sends.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    opts: &ReadOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let open = Arc::new(Open::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // A connection that failed before it was accepted is its client's
                // problem; anything else (out of file descriptors) passes with time.
                if !is_connection_error(&e) {
                    tracing::warn!(error = %e, "accepting a connection failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                continue;
            }
        };
        let slot = match open.admit(peer.ip(), opts) {
            Ok(s) => s,
            Err(cap) => {
                metrics::counter!("isir_http_connections_refused_total", "cap" => cap).increment(1);
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            peer,
            router.clone(),
            opts.conn.clone(),
            slot,
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(stop_rx);
    stop_tx.closed().await;
    Ok(())
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One connection, until it closes or, after the shutdown signal, its request in
/// flight is answered.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ConnLimits,
    slot: Slot,
    mut stop: watch::Receiver<bool>,
) {
    let _slot = slot;
    let activity = Arc::new(Activity::default());
    let io = TokioIo::new(Guarded::new(stream, limits.clone(), activity.clone()));
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let busy = Busy::start(&activity);
        req.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move {
            let resp = tower::ServiceExt::oneshot(router, req)
                .await
                .unwrap_or_else(|e: Infallible| match e {});
            Ok::<_, Infallible>(resp.map(|body| Answer { body, _busy: busy }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper's own head timeout runs from the moment it waits for a head, idle or not:
    // set to the longer of the two waits, it only backs up `Guarded`'s deadlines.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.max(limits.keep_alive_idle))
        .keep_alive(true);
    let mut conn = std::pin::pin!(builder.serve_connection(io, svc));
    // Held until the connection ends: `serve` waits for every clone to go.
    let _alive = stop.clone();
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let r = tokio::select! {
        r = conn.as_mut() => r,
        () = stopped => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-client cap counts an IPv6 client per `ipv6_client_prefix` network, an
    /// IPv4 client per address, and a trusted proxy only in all.
    #[test]
    fn clients_are_counted_by_their_group() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut opts = ReadOptions::default();
        opts.conn.max_per_client = 1;
        opts.conn.max_open = 6;
        opts.trusted_proxies = vec!["10.0.0.1/32".parse().unwrap()];
        let open = Arc::new(Open::default());
        let a = open.admit(ip("2001:db8:1:2::1"), &opts).unwrap();
        assert_eq!(
            open.admit(ip("2001:db8:1:2:ffff::2"), &opts).err(),
            Some("per_client"),
            "the same /64 is the same client"
        );
        let _b = open.admit(ip("2001:db8:1:3::1"), &opts).unwrap();
        let _c = open.admit(ip("192.0.2.1"), &opts).unwrap();
        assert_eq!(
            open.admit(ip("::ffff:192.0.2.1"), &opts).err(),
            Some("per_client"),
            "an IPv4-mapped address is its IPv4 client"
        );
        let _d = open.admit(ip("192.0.2.2"), &opts).unwrap();
        let _p1 = open.admit(ip("10.0.0.1"), &opts).unwrap();
        let _p2 = open.admit(ip("10.0.0.1"), &opts).unwrap();
        assert_eq!(
            open.admit(ip("10.0.0.1"), &opts).err(),
            Some("total"),
            "a trusted proxy is held to the cap of all"
        );
        drop(a);
        let _a = open.admit(ip("2001:db8:1:2::7"), &opts).unwrap();
    }
}
