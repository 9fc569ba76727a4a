//! Watchlist management over HTTP, for the admin listener only (`admin.bind`, with the
//! admin key): list, create (entries inline or as a CSV text), show, change (webhook,
//! secret rotation, replay from a position) and remove. The public listener never
//! mounts these routes.
//!
//! Owns the routes' parsing and answers; the rules are the module's ([`super::create`],
//! [`super::change`]), the same `isir watch` applies.

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::{Change, Entry, Kind, NewList, Roles, WatchError, entries};
use crate::read::{Problem, ReadState};

/// The largest body these routes take: a list of 100 000 entries as JSON or CSV.
pub const MAX_ADMIN_BODY: usize = 8 * 1024 * 1024;

/// `/admin/watchlists` and `/admin/watchlists/{name}`.
pub fn router(w: ReadState) -> Router {
    Router::new()
        .route("/admin/watchlists", get(list).post(create))
        .route(
            "/admin/watchlists/{name}",
            get(show).patch(change).delete(remove),
        )
        .with_state(w)
}

impl From<WatchError> for Problem {
    fn from(e: WatchError) -> Self {
        match e {
            WatchError::Db(e) => Problem::internal(e),
            WatchError::NotFound(_) => Problem::not_found(e.to_string()),
            WatchError::Exists(_) => Problem::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            WatchError::Invalid(_) | WatchError::BadLines(_) => Problem::bad(e.to_string()),
        }
    }
}

/// Writes need the admin key to be configured: an admin listener without one is for
/// reading the status page on a trusted network, not for changing lists.
/// A read-only store (`isir serve`) cannot change them at all: 409 (the server's state,
/// not the request, is what refuses), naming the commands that can.
fn writable(w: &ReadState) -> Result<(), Problem> {
    if w.admin.read_only {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "read-only",
            "this `isir serve` reads the replica read-only and cannot change watchlists: \
             use `isir watch add|set|remove` on the writer's database, or the admin \
             listener of `isir run`",
        ));
    }
    if w.admin.key_sha256.is_none() {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "admin-key",
            "changing watchlists over HTTP needs admin.key_sha256 to be set",
        ));
    }
    Ok(())
}

async fn list(State(w): State<ReadState>) -> Result<Response, Problem> {
    let lists = super::list(&w.store).await?;
    Ok(Json(json!({ "watchlists": lists })).into_response())
}

async fn show(State(w): State<ReadState>, Path(name): Path<String>) -> Result<Response, Problem> {
    let l = super::get(&w.store, &name).await?;
    let es = super::entries(&w.store, &name).await?;
    Ok(Json(json!({
        "watchlist": l,
        "entries_by_kind": super::ByKind::of(&es),
    }))
    .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    #[serde(default)]
    roles: Option<String>,
    #[serde(default)]
    ico: Vec<String>,
    #[serde(default)]
    rc: Vec<String>,
    #[serde(default)]
    case: Vec<String>,
    /// A CSV file's text, as `isir watch add --from-file` reads it.
    #[serde(default)]
    csv: Option<String>,
    #[serde(default)]
    webhook: Option<String>,
    #[serde(default)]
    secret: Option<String>,
}

/// Entries from the given values and an optional CSV text: every bad one reported.
pub fn collect(
    ico: &[String],
    rc: &[String],
    case: &[String],
    csv: Option<&[u8]>,
) -> Result<BTreeSet<Entry>, WatchError> {
    let mut out = BTreeSet::new();
    let mut bad = Vec::new();
    for (kind, flag, vals) in [
        (Kind::Ico, "ico", ico),
        (Kind::Rc, "rc", rc),
        (Kind::Case, "case", case),
    ] {
        for v in vals {
            match entries::entry(kind, v) {
                Ok(e) => {
                    out.insert(e);
                }
                Err(e) => bad.push(entries::BadLine {
                    line: 0,
                    error: format!("{flag} {v:?}: {e}"),
                }),
            }
        }
    }
    if let Some(text) = csv {
        match entries::from_csv(text) {
            Ok(es) => out.extend(es),
            Err(b) => bad.extend(b),
        }
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(WatchError::BadLines(bad))
    }
}

fn roles_of(r: Option<&str>) -> Result<Roles, Problem> {
    match r {
        None => Ok(Roles::Debtor),
        Some(r) => {
            Roles::parse(r).ok_or_else(|| Problem::bad(format!("roles {r:?}: debtor or all")))
        }
    }
}

async fn create(
    State(w): State<ReadState>,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    writable(&w)?;
    let Json(b) = body.map_err(|e| Problem::bad(format!("the body is not a watchlist: {e}")))?;
    let roles = roles_of(b.roles.as_deref())?;
    let es = collect(&b.ico, &b.rc, &b.case, b.csv.as_deref().map(str::as_bytes))?;
    let (list, secret) = super::create(
        &w.store,
        NewList {
            name: b.name,
            roles,
            webhook_url: b.webhook,
            secret: b.secret,
            entries: es,
        },
        &w.admin.targets,
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"watchlist": list, "secret": secret})),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeBody {
    /// A new webhook URL, or `null` to stop deliveries.
    #[serde(default, deserialize_with = "serde_with_double_option::deserialize")]
    webhook: Option<Option<String>>,
    /// A new secret (`whsec_...`), or `"generate"`.
    #[serde(default)]
    secret: Option<String>,
    /// Seconds the previous secret keeps signing beside the new one. 0.
    #[serde(default)]
    keep_previous_secs: i64,
    /// Replay: the next delivery starts after this feed position.
    #[serde(default)]
    cursor: Option<i64>,
}

mod serde_with_double_option {
    use serde::{Deserialize, Deserializer};
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

async fn change(
    State(w): State<ReadState>,
    Path(name): Path<String>,
    body: Result<Json<ChangeBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    writable(&w)?;
    let Json(b) = body.map_err(|e| Problem::bad(format!("the body is not a change: {e}")))?;
    let generated = b.secret.as_deref() == Some("generate");
    let secret = if generated {
        Some(super::new_secret())
    } else {
        b.secret
    };
    let (list, shown) = super::change(
        &w.store,
        &name,
        Change {
            webhook_url: b.webhook,
            secret: secret.clone(),
            keep_previous_ms: b.keep_previous_secs.saturating_mul(1000),
            cursor: b.cursor,
        },
        &w.admin.targets,
    )
    .await?;
    let secret = if generated { secret } else { shown };
    Ok(Json(json!({"watchlist": list, "secret": secret})).into_response())
}

async fn remove(State(w): State<ReadState>, Path(name): Path<String>) -> Result<Response, Problem> {
    writable(&w)?;
    if super::remove(&w.store, &name).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(Problem::not_found(format!("no watchlist named {name:?}")))
    }
}
