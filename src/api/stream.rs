//! Whole-result streams (`?stream=all`, as Datasette's `_stream`): every row of a list
//! as one CSV or NDJSON answer, read page after page in one read snapshot and written
//! as it is read, with flat memory (a bounded channel between the reader and the
//! connection: a slow client slows the reader, it never piles rows up). A client that
//! stops reading holds its stream (the rows read before the answer, a few pages in the
//! channel, its read transaction) for `api.write_timeout_secs` at most: then the
//! connection is closed ([`crate::http::conn`]), the body dropped and the reader ends.
//!
//! A key with the `stream` scope streams any number of rows; anyone else up to
//! `api.stream_max_rows`, and a larger result is refused before its first row with a
//! 403 that says so (never a silently cut file). A failure after the first row aborts
//! the answer, so a client sees a broken transfer, not a short file. Never writes.

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::format::Format;
use crate::read::{Caller, Problem, ReadState, Watermark};
use crate::readmodel::columns;
use crate::store::sql::Tx;

/// A list read in keyset pages within one snapshot.
#[async_trait::async_trait]
pub(crate) trait Pages: Send + 'static {
    /// The next rows (JSON documents as stored), at most `n`, and moves past them;
    /// none when the list is done.
    async fn next(&mut self, tx: &mut Tx, n: i64) -> Result<Vec<String>, Problem>;
}

/// Whether the request asks for a whole-result stream (`stream=all`), checked.
pub(crate) fn asked(q: &super::params::Params, format: Format) -> Result<bool, Problem> {
    match q.get("stream").map(String::as_str) {
        None => Ok(false),
        Some("all") if format == Format::Json => Err(Problem::bad(
            "stream=all streams CSV or NDJSON (format=csv or format=ndjson); JSON lists are paged",
        )),
        Some("all") if q.contains_key("cursor") || q.contains_key("limit") => Err(Problem::bad(
            "stream=all answers the whole result: it takes no cursor or limit",
        )),
        Some("all") => Ok(true),
        Some(other) => Err(Problem::bad(format!("stream {other:?}: only stream=all"))),
    }
}

/// Renders rows in `format` (documents through the caller's view).
fn render(
    rows: &[String],
    format: Format,
    cols: &[&str],
    mask: Option<&crate::privacy::Privacy>,
) -> Result<Vec<u8>, Problem> {
    let mut out = Vec::with_capacity(rows.len() * 256);
    let mut w = (format == Format::Csv).then(|| csv::Writer::from_writer(Vec::new()));
    for r in rows {
        let v: Value = serde_json::from_str(r).map_err(Problem::internal)?;
        let v = match mask {
            Some(p) => p.mask(v),
            None => v,
        };
        match &mut w {
            Some(w) => w
                .write_record(
                    cols.iter()
                        .map(|c| crate::privacy::csv_cell(&columns::cell(&v, c)).into_owned()),
                )
                .map_err(Problem::internal)?,
            None => {
                out.extend_from_slice(v.to_string().as_bytes());
                out.push(b'\n');
            }
        }
    }
    if let Some(w) = w {
        out = w.into_inner().map_err(Problem::internal)?;
    }
    Ok(out)
}

/// A stream answer in flight (the gauge `isir_api_streams_open`): until its reader has
/// ended and the connection has taken or dropped its body.
struct Open;

impl Open {
    fn start() -> Self {
        metrics::gauge!("isir_api_streams_open").increment(1.0);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        metrics::gauge!("isir_api_streams_open").decrement(1.0);
    }
}

/// The whole result of `pages` as a streamed answer, from `tx`'s snapshot.
pub(crate) async fn respond(
    state: &ReadState,
    caller: Option<&Caller>,
    format: Format,
    wm: &Watermark,
    mut tx: Tx,
    mut pages: impl Pages,
    cols: &'static [&'static str],
) -> Result<Response, Problem> {
    let pii = caller.is_some_and(|c| c.pii);
    let mask = (!pii)
        .then(|| state.privacy())
        .map(|f| async { f.await.cloned() });
    let mask = match mask {
        Some(f) => Some(f.await?),
        None => None,
    };
    let batch = state.opts.stream_page.max(1);
    let cap = if caller.is_some_and(|c| c.scopes.iter().any(|s| s == "stream")) {
        None
    } else {
        Some(state.opts.stream_max_rows)
    };
    // Without the scope, read up to the cap and one row more before answering: a
    // result over the cap is refused whole (at most the cap's rows are held).
    let mut head: Vec<String> = Vec::new();
    let mut done = false;
    if let Some(cap) = cap {
        while !done && (head.len() as i64) <= cap {
            let n = batch.min(cap + 1 - head.len() as i64);
            crate::read::limit::rearm(state, &mut tx).await?;
            let rows = pages.next(&mut tx, n).await?;
            done = (rows.len() as i64) < n;
            head.extend(rows);
        }
        if head.len() as i64 > cap {
            return Err(Problem::new(
                axum::http::StatusCode::FORBIDDEN,
                "stream-scope",
                format!(
                    "this result has more than {cap} rows (api.stream_max_rows): a whole-result stream of it \
                     needs a key with the `stream` scope; or read it page by page (the `next` links)"
                ),
            ));
        }
    }
    let (send, recv) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    let mut first = Vec::new();
    if format == Format::Csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(cols).map_err(Problem::internal)?;
        first = w.into_inner().map_err(Problem::internal)?;
    }
    // The rows read before answering go out a page at a time like the rest, each
    // rendered when the channel has room for it (the first before answering, so that
    // a row that cannot be rendered is a 500, not a broken transfer).
    let mut head = head.into_iter();
    let page = move |head: &mut std::vec::IntoIter<String>| {
        head.by_ref().take(batch as usize).collect::<Vec<_>>()
    };
    first.extend(render(&page(&mut head), format, cols, mask.as_ref())?);
    let open = std::sync::Arc::new(Open::start());
    let body_open = open.clone();
    let state2 = state.clone();
    tokio::spawn(async move {
        let _open = open;
        // A result read whole before answering needs its snapshot no longer.
        let mut tx = Some(tx);
        if done && let Some(t) = tx.take() {
            let _ = t.commit().await;
        }
        if send.send(Ok(first.into())).await.is_err() {
            return;
        }
        loop {
            let rows = page(&mut head);
            let chunk = if !rows.is_empty() {
                render(&rows, format, cols, mask.as_ref())
            } else if let Some(tx) = tx.as_mut().filter(|_| !done) {
                if let Err(e) = crate::read::limit::rearm(&state2, tx).await {
                    let _ = send.send(Err(std::io::Error::other(e.detail))).await;
                    return;
                }
                match pages.next(tx, batch).await {
                    Ok(rows) => {
                        done = (rows.len() as i64) < batch;
                        render(&rows, format, cols, mask.as_ref())
                    }
                    Err(e) => Err(e),
                }
            } else {
                break;
            };
            let item = chunk
                .map(bytes::Bytes::from)
                .map_err(|e| std::io::Error::other(e.detail));
            let failed = item.is_err();
            // The client went away, or the stream broke: stop reading.
            if send.send(item).await.is_err() || failed {
                return;
            }
        }
        if let Some(tx) = tx {
            let _ = tx.commit().await;
        }
    });
    let mut recv = recv;
    // The body holds the stream open too: it counts until the connection has taken
    // the last chunk or dropped it.
    let body = Body::from_stream(futures::stream::poll_fn(move |cx| {
        let _ = &body_open;
        recv.poll_recv(cx)
    }));
    let ctype = match format {
        Format::Csv => "text/csv; charset=utf-8",
        _ => "application/x-ndjson",
    };
    let mut resp = ([(header::CONTENT_TYPE, ctype)], body).into_response();
    super::format::watermark_headers(resp.headers_mut(), wm);
    Ok(resp)
}
