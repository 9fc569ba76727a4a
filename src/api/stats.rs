//! Counts (`/v1/stats`): cases by state, court and month opened, from the `stats`
//! projection. Never writes.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::json;

use super::format::respond;
use super::params::{NoParams, Params, only};
use crate::read::{Problem, ReadState, watermark};

/// Cases by state, court and month opened.
#[utoipa::path(get, path = "/v1/stats", tag = "cases",
    params(crate::api::params::NoParams),
    responses(
        (status = 200, description = "Counts", body = crate::api::schema::Stats, headers(("ISIR-Watermark" = i64, description = "Last action ID applied by every projection builder"),
                ("ISIR-Lag-Seconds" = i64, description = "Seconds the projection is behind the replica"))),
        (status = 304, description = "Not modified (`If-None-Match`)"),
        crate::api::schema::V1Errors,
    ))]
pub(crate) async fn stats(
    State(state): State<ReadState>,
    q: Params,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    only::<NoParams>(&q, &[])?;
    let (mut tx, wm) = watermark::open(&state).await?;
    let rows = tx.texts("SELECT dim || '|' || key || '|' || CAST(count AS TEXT) FROM stats WHERE count <> 0 ORDER BY dim, key", &[]).await?;
    tx.commit().await?;
    let mut out = json!({"by_state": {}, "by_court": {}, "by_month": {}});
    for r in rows {
        let mut f = r.splitn(3, '|');
        let (Some(dim), Some(key), Some(n)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let n: i64 = n.parse().unwrap_or(0);
        out[format!("by_{dim}")][key] = json!(n);
    }
    Ok(respond(&wm, &headers, out))
}
