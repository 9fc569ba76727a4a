//! `isir status`: the replica's state from the store, with whether the read API answers.

use std::time::Duration;

use super::{Exit, Output};
use crate::app::App;

pub async fn run(app: &App, out: Output) -> anyhow::Result<Exit> {
    let mut s = crate::status::collect(&app.status_source()).await?;
    let answer = probe(&app.settings.api.bind).await;
    s.api.reachable = Some(answer.is_some());
    s.api.answering_replica = answer.flatten();
    out.print(&s, || s.render_text())?;
    Ok(Exit::Ok)
}

/// What answers `/healthz` on `bind` within a second: `None` when nothing does, else
/// the replica identifier it gave (`None` inside when it gave none: not our API, or one
/// from before identifiers).
async fn probe(bind: &str) -> Option<Option<String>> {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .ok()?;
    let r = c.get(format!("http://{bind}/healthz")).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    // Bytes, not `Response::json`: that needs reqwest's `json` feature, which only the
    // tests' build has (the binary's build would not compile).
    let body: serde_json::Value = r
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    Some(body["replica"].as_str().map(str::to_owned))
}
