//! The operator's status page: phase, lease, checkpoint and head with lag, today's
//! budget as a bar, backfill progress with ETA, each projection's lag, the API's
//! state, recent ticks, and actions stored per hour over three days as inline SVG.
//! Answers in every phase. Reads only.

use std::fmt::Write;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::html::{error_page, escape, page};
use crate::read::ReadState;
use crate::status::{Status, human};
use crate::store::fmt_ms;

pub async fn status(State(state): State<ReadState>) -> Response {
    let Some(src) = state.status.as_ref() else {
        return error_page(
            StatusCode::NOT_FOUND,
            "this server has no status source configured",
        );
    };
    match crate::status::collect(src).await {
        Ok(s) => page(StatusCode::OK, "isir status", &render(&s)),
        Err(e) => {
            tracing::warn!(error = %e, "status page: status could not be read");
            error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "the status could not be read from the database; try again",
            )
        }
    }
}

fn opt(v: Option<i64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "–".into())
}

fn row(o: &mut String, label: &str, id: &str, value: &str) {
    let _ = write!(
        o,
        "<tr><th>{label}</th><td id=\"{id}\" class=\"num\">{}</td></tr>",
        escape(value)
    );
}

/// The page body.
pub fn render(s: &Status) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<h1>isir status</h1><p class=\"muted\">{} back end, read {}</p>",
        s.backend,
        escape(&fmt_ms(crate::store::now_ms()))
    );
    if let (Some(_), Some(h), Some(c)) = (s.source_behind_ids, s.head_id, s.checkpoint) {
        let _ = write!(
            o,
            "<p id=\"source-behind\" class=\"bad\"><strong>Source behind the replica:</strong> {}. \
             Check <code>source.url</code> (docs/runbooks/source-outage.md).</p>",
            escape(&crate::store::behind_text(h, c))
        );
    }
    o.push_str("<table class=\"kv\">");
    row(&mut o, "Phase", "phase", s.phase.as_deref().unwrap_or("–"));
    match &s.lease {
        Ok(l) => {
            row(
                &mut o,
                "Lease holder",
                "lease-holder",
                l.holder.as_deref().unwrap_or("free"),
            );
            row(&mut o, "Lease epoch", "lease-epoch", &opt(l.epoch));
            row(
                &mut o,
                "Lease until",
                "lease-until",
                &l.expires_at.map(fmt_ms).unwrap_or_else(|| "–".into()),
            );
        }
        Err(e) => row(
            &mut o,
            "Lease",
            "lease-holder",
            &format!("unavailable: {e}"),
        ),
    }
    row(&mut o, "Checkpoint", "checkpoint", &opt(s.checkpoint));
    row(&mut o, "Source head", "head", &opt(s.head_id));
    row(
        &mut o,
        "Head checked",
        "head-checked",
        s.head_checked_at.as_deref().unwrap_or("never"),
    );
    row(&mut o, "Lag (IDs)", "lag-ids", &opt(s.lag_ids));
    row(
        &mut o,
        "Lag (time)",
        "lag-time",
        &s.lag_seconds.map(human).unwrap_or_else(|| "–".into()),
    );
    row(
        &mut o,
        "Stored actions",
        "stored",
        &s.stored_actions.to_string(),
    );
    o.push_str("</table>");

    o.push_str("<h2>Budget today</h2>");
    match &s.budget {
        Ok(b) => {
            let pct = if b.limit == 0 {
                0.0
            } else {
                b.used as f64 * 100.0 / b.limit as f64
            };
            let _ = write!(
                o,
                "<p><span id=\"budget-used\">{}</span> of <span id=\"budget-limit\">{}</span> requests used on {} \
                 ({pct:.1} %), <span id=\"budget-left\">{}</span> left, resets {}</p>\
                 <div class=\"bar\" role=\"img\" aria-label=\"budget used {pct:.1} %\"><div style=\"width:{pct:.1}%\"></div></div>",
                b.used,
                b.limit,
                escape(&b.day),
                b.left,
                escape(&b.resets_at)
            );
        }
        Err(e) => {
            let _ = write!(
                o,
                "<p id=\"budget-used\" class=\"bad\">unavailable: {}</p>",
                escape(e)
            );
        }
    }

    o.push_str("<h2>Backfill</h2>");
    match s.progress {
        Some(p) => {
            let _ = write!(
                o,
                "<p><span id=\"progress\">{:.1}</span> % of the source, <span id=\"eta\">{}</span></p>\
                 <div class=\"bar\"><div style=\"width:{:.1}%\"></div></div>",
                p * 100.0,
                escape(s.backfill_eta.as_deref().unwrap_or("–")),
                p * 100.0
            );
        }
        None if s.source_behind_ids.is_some() => o.push_str(
            "<p id=\"progress\" class=\"bad\">not caught up: the source is behind the replica</p>",
        ),
        None => o.push_str("<p id=\"progress\">the source head is not known yet</p>"),
    }

    o.push_str("<h2>Projections</h2><table><tr><th>Builder</th><th>Version</th><th class=\"num\">Cursor</th><th class=\"num\">Lag (IDs)</th><th>State</th></tr>");
    for m in &s.projections {
        let lag = s.checkpoint.map(|c| (c - m.cursor).max(0));
        let id = m.name.replace('#', "-");
        let _ = write!(
            o,
            "<tr><td>{}</td><td>v{}</td><td class=\"num\" id=\"proj-{id}-cursor\">{}</td>\
             <td class=\"num\" id=\"proj-{id}-lag\">{}</td><td>{}</td></tr>",
            escape(&m.name),
            m.version,
            m.cursor,
            opt(lag),
            match &m.error {
                Some(e) => format!("<span class=\"bad\">stopped: {}</span>", escape(e)),
                None => "<span class=\"ok\">ok</span>".into(),
            }
        );
    }
    o.push_str("</table>");

    o.push_str("<h2>Watchlists</h2>");
    if s.watchlists.is_empty() {
        o.push_str("<p id=\"watchlists\">none (<code>isir watch add</code>)</p>");
    } else {
        o.push_str("<table id=\"watchlists\"><tr><th>List</th><th class=\"num\">Entries</th><th class=\"num\">Cursor</th><th class=\"num\">Lag (IDs)</th><th class=\"num\">Delivered</th><th>State</th></tr>");
        for w in &s.watchlists {
            let l = &w.list;
            let state = if l.webhook_url.is_none() {
                "<span>API only</span>".to_string()
            } else if l.failing == 1 {
                format!(
                    "<span class=\"bad\">failing since {}: {}</span>",
                    escape(&l.failing_since.map(fmt_ms).unwrap_or_default()),
                    escape(l.last_error.as_deref().unwrap_or(""))
                )
            } else if let Some(e) = &l.last_error {
                format!("<span class=\"bad\">retrying: {}</span>", escape(e))
            } else {
                "<span class=\"ok\">ok</span>".into()
            };
            let _ = write!(
                o,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\" id=\"watch-{}-lag\">{}</td><td class=\"num\">{}</td><td>{state}</td></tr>",
                escape(&l.name),
                l.entries,
                l.cursor,
                escape(&l.name),
                opt(w.lag_ids),
                l.delivered_events,
            );
        }
        o.push_str("</table>");
    }

    let a = &s.api;
    let _ = write!(
        o,
        "<h2>Read API</h2><p id=\"api-state\">{}</p><p>watermark {} ({} IDs behind the replica)</p>",
        if a.ready {
            "ready"
        } else if a.serving {
            "serving, not ready"
        } else {
            "off: the phase is before serve"
        },
        opt(a.watermark),
        opt(a.lag_ids)
    );

    o.push_str("<h2>Actions stored per hour, last 3 days</h2>");
    o.push_str(&chart(&s.stored_per_hour, crate::store::now_ms()));

    o.push_str("<h2>Recent ticks</h2><table id=\"ticks\"><tr><th>At</th><th>Outcome</th><th class=\"num\">Pages</th><th class=\"num\">Actions</th><th class=\"num\">Requests</th><th class=\"num\">Checkpoint</th><th>Detail</th></tr>");
    for t in &s.recent_ticks {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"{}\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&fmt_ms(t.at)),
            if matches!(
                t.outcome.as_str(),
                "progressed" | "caught_up" | "batch_limit"
            ) {
                "ok"
            } else {
                "bad"
            },
            escape(&t.outcome),
            t.pages,
            t.actions,
            t.requests,
            opt(t.checkpoint),
            escape(t.detail.as_deref().unwrap_or(""))
        );
    }
    o.push_str("</table>");
    o
}

/// 72 hourly bars ending at the current hour, as inline SVG.
pub fn chart(per_hour: &[(i64, i64)], now_ms: i64) -> String {
    const H: i64 = 3_600_000;
    let end = now_ms / H * H;
    let start = end - 71 * H;
    let mut bars = [0i64; 72];
    for (h, n) in per_hour {
        if *h >= start && *h <= end {
            bars[((h - start) / H) as usize] += n;
        }
    }
    let max = bars.iter().copied().max().unwrap_or(0).max(1);
    let total: i64 = bars.iter().sum();
    let (w, ht, bw) = (720.0, 160.0, 10.0);
    let mut o = format!(
        "<svg id=\"chart\" data-total=\"{total}\" data-max=\"{max}\" xmlns=\"http://www.w3.org/2000/svg\" \
         viewBox=\"0 0 {w} {}\" width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"actions stored per hour\">",
        ht + 20.0,
        ht + 20.0
    );
    let _ = write!(
        o,
        "<line x1=\"0\" y1=\"{ht}\" x2=\"{w}\" y2=\"{ht}\" stroke=\"#999\"/>"
    );
    for (i, n) in bars.iter().enumerate() {
        let h = (*n as f64 / max as f64) * (ht - 10.0);
        let hour = chrono::DateTime::from_timestamp_millis(start + i as i64 * H)
            .map(|t| t.format("%Y-%m-%d %H:00 UTC").to_string())
            .unwrap_or_default();
        let _ = write!(
            o,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"#3a7\" data-n=\"{n}\"><title>{hour}: {n} actions</title></rect>",
            i as f64 * bw,
            ht - h,
            bw - 1.0
        );
        if i % 24 == 0 {
            let _ = write!(
                o,
                "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" fill=\"#555\">{}</text>",
                i as f64 * bw,
                ht + 14.0,
                escape(hour.get(..10).unwrap_or(""))
            );
        }
    }
    let _ = write!(
        o,
        "<text x=\"{w}\" y=\"10\" font-size=\"10\" text-anchor=\"end\" fill=\"#555\">max {max}/h</text></svg>"
    );
    o
}
