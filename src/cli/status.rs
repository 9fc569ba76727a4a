//! `isir status`: the replica's state from the store, with whether the read API answers.

use std::time::Duration;

use super::{Exit, Output};
use crate::app::App;

pub async fn run(app: &App, out: Output) -> anyhow::Result<Exit> {
    let mut s = crate::status::collect(&app.status_source()).await?;
    s.api.reachable = Some(probe(&app.settings.api.bind).await);
    out.print(&s, || s.render_text())?;
    Ok(Exit::Ok)
}

/// Whether something answers `/healthz` on `bind` within a second.
async fn probe(bind: &str) -> bool {
    let Ok(c) = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
    else {
        return false;
    };
    c.get(format!("http://{bind}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}
