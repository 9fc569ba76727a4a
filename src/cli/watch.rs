//! `isir watch`: operators' management of watchlists (add, list, show, set, remove).
//! The rules (validation, all-or-nothing import, secrets, replay) are
//! [`crate::watchlist`]'s; this file parses and prints.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use super::{Exit, Output};
use crate::app::App;
use crate::watchlist::{self, Change, NewList, Roles, WatchError};

#[derive(Subcommand, Debug)]
pub enum WatchCmd {
    /// Create a watchlist from entries given here and/or a CSV file; every entry is
    /// checked (IČO check digit, birth number form, case number) and nothing is stored
    /// when one is bad. The list's feed starts at the projection watermark now.
    Add {
        /// The list's name: a-z, 0-9, - and _ (an API key reads it with the scope
        /// `watch:NAME`).
        name: String,
        /// An IČO to watch (repeatable).
        #[arg(long = "ico", value_name = "ICO")]
        ico: Vec<String>,
        /// A birth number to watch, YYMMDD/XXXX (repeatable).
        #[arg(long = "rc", value_name = "RC")]
        rc: Vec<String>,
        /// A case to watch, "INS n/yyyy" (repeatable).
        #[arg(long = "case", value_name = "CASE")]
        case: Vec<String>,
        /// A CSV file with a header naming columns ico, rc and/or case (or IČO, RČ,
        /// spisová značka); `,`, `;` or tabs; UTF-8, UTF-16 or Windows-1250.
        #[arg(long, value_name = "FILE.csv")]
        from_file: Option<PathBuf>,
        /// The parties to watch: the debtor (a case against a watched subject) or any.
        #[arg(long, value_enum, default_value = "debtor")]
        roles: Roles,
        /// Deliver the list's feed to this http(s) URL (signed, Standard Webhooks).
        #[arg(long, value_name = "URL")]
        webhook: Option<String>,
        /// Take the signing secret (whsec_...) from this environment variable; without
        /// it a secret is generated and printed once.
        #[arg(long, value_name = "VAR")]
        secret_env: Option<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Every watchlist with its delivery state.
    List(Output),
    /// One watchlist: entries by kind, cursor, lag, failing state, last error.
    Show {
        /// The list's name.
        name: String,
        /// Print every entry too.
        #[arg(long)]
        entries: bool,
        #[command(flatten)]
        out: Output,
    },
    /// Change a list's delivery: its webhook, its secret (rotation), or replay its feed
    /// from a position.
    Set {
        /// The list's name.
        name: String,
        /// A new webhook URL.
        #[arg(long, value_name = "URL", conflicts_with = "no_webhook")]
        webhook: Option<String>,
        /// Stop delivering (the feed stays readable through the API).
        #[arg(long)]
        no_webhook: bool,
        /// A new secret from this environment variable.
        #[arg(long, value_name = "VAR", conflicts_with = "new_secret")]
        secret_env: Option<String>,
        /// Generate a new secret and print it once.
        #[arg(long)]
        new_secret: bool,
        /// Seconds the previous secret keeps signing beside the new one (receivers
        /// switch meanwhile).
        #[arg(long, value_name = "SECS", default_value_t = 0)]
        keep_previous_secs: i64,
        /// Deliver again everything after this feed position (an action ID).
        #[arg(long, value_name = "POSITION", allow_hyphen_values = true)]
        replay_from: Option<i64>,
        #[command(flatten)]
        out: Output,
    },
    /// Remove a watchlist and its entries (its feed and deliveries stop).
    Remove {
        /// The list's name.
        name: String,
        #[command(flatten)]
        out: Output,
    },
}

fn secret_from(var: &str) -> anyhow::Result<String> {
    std::env::var(var).with_context(|| format!("--secret-env {var}: the variable is not set"))
}

/// A refusal the operator must fix: printed, exit 1.
fn refused(out: Output, e: &WatchError) -> anyhow::Result<Exit> {
    out.refused(
        &serde_json::json!({ "error": e.to_string() }),
        &e.to_string(),
    )?;
    Ok(Exit::Error)
}

pub async fn run(app: &App, cmd: WatchCmd) -> anyhow::Result<Exit> {
    let store = &app.store;
    let policy = watchlist::Policy::from_settings(&app.settings.watch);
    match cmd {
        WatchCmd::Add {
            name,
            ico,
            rc,
            case,
            from_file,
            roles,
            webhook,
            secret_env,
            out,
        } => {
            let csv = match &from_file {
                Some(f) => {
                    Some(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?)
                }
                None => None,
            };
            let entries = match watchlist::admin::collect(&ico, &rc, &case, csv.as_deref()) {
                Ok(e) => e,
                Err(e) => return refused(out, &e),
            };
            let secret = secret_env.as_deref().map(secret_from).transpose()?;
            match watchlist::create(
                store,
                NewList {
                    name,
                    roles,
                    webhook_url: webhook,
                    secret: secret.clone(),
                    entries,
                },
                &policy,
            )
            .await
            {
                Ok((list, secret_made)) => {
                    // A generated secret is shown once; one from the environment never.
                    let shown = if secret.is_none() { secret_made } else { None };
                    out.print(
                        &serde_json::json!({ "watchlist": list, "secret": shown }),
                        || {
                            let mut t = format!(
                                "watchlist {} created: {} entries, roles {}, feed after action {}",
                                list.name, list.entries, list.roles, list.created_watermark
                            );
                            if let Some(s) = &shown {
                                t.push_str(&format!(
                                    "\nsigning secret (shown once; give it to the receiver): {s}"
                                ));
                            }
                            t
                        },
                    )?;
                    Ok(Exit::Ok)
                }
                Err(WatchError::Db(e)) => Err(e.into()),
                Err(e) => refused(out, &e),
            }
        }
        WatchCmd::List(out) => {
            let lists = watchlist::list(store).await?;
            out.print(&serde_json::json!({ "watchlists": lists }), || {
                if lists.is_empty() {
                    return "no watchlists".into();
                }
                let mut t = format!(
                    "{:<24} {:>8} {:<6} {:>12} {:<8} webhook\n",
                    "name", "entries", "roles", "cursor", "state"
                );
                for l in &lists {
                    t.push_str(&format!(
                        "{:<24} {:>8} {:<6} {:>12} {:<8} {}\n",
                        l.name,
                        l.entries,
                        l.roles,
                        l.cursor,
                        state(l),
                        l.webhook_url.as_deref().unwrap_or("-")
                    ));
                }
                t
            })?;
            Ok(Exit::Ok)
        }
        WatchCmd::Show { name, entries, out } => {
            let list = match watchlist::get(store, &name).await {
                Ok(l) => l,
                Err(WatchError::Db(e)) => return Err(e.into()),
                Err(e) => return refused(out, &e),
            };
            let es = watchlist::entries(store, &name).await?;
            let by = watchlist::ByKind::of(&es);
            let shown: Vec<_> = if entries { es.clone() } else { Vec::new() };
            out.print(
                &serde_json::json!({
                    "watchlist": list,
                    "entries_by_kind": by,
                    "entries": shown,
                }),
                || {
                    let mut t = format!(
                        "watchlist {}\n  roles        {}\n  entries      {} ({} IČO, {} birth numbers, {} cases)\n  created      {} at watermark {}\n  webhook      {}\n  cursor       {}\n  delivered    {} events in {} batches, last {}\n  state        {}\n",
                        list.name,
                        list.roles,
                        list.entries,
                        by.ico,
                        by.rc,
                        by.case,
                        crate::store::fmt_ms(list.created_at),
                        list.created_watermark,
                        list.webhook_url.as_deref().unwrap_or("none (API only)"),
                        list.cursor,
                        list.delivered_events,
                        list.delivered_batches,
                        list.last_delivered_at.map(crate::store::fmt_ms).unwrap_or_else(|| "never".into()),
                        state(&list),
                    );
                    if let Some(e) = &list.last_error {
                        t.push_str(&format!("  last error   {e}\n"));
                    }
                    if list.rotating {
                        t.push_str("  secret       rotating (the previous one still signs)\n");
                    }
                    for e in &shown {
                        t.push_str(&format!("  {} {}\n", e.kind.as_str(), e.key));
                    }
                    t
                },
            )?;
            Ok(Exit::Ok)
        }
        WatchCmd::Set {
            name,
            webhook,
            no_webhook,
            secret_env,
            new_secret,
            keep_previous_secs,
            replay_from,
            out,
        } => {
            let secret = match (&secret_env, new_secret) {
                (Some(v), _) => Some(secret_from(v)?),
                (None, true) => Some(watchlist::new_secret()),
                (None, false) => None,
            };
            let change = Change {
                webhook_url: if no_webhook {
                    Some(None)
                } else {
                    webhook.map(Some)
                },
                secret: secret.clone(),
                keep_previous_ms: keep_previous_secs.saturating_mul(1000),
                cursor: replay_from,
            };
            match watchlist::change(store, &name, change, &policy).await {
                Ok((list, made)) => {
                    let shown = if new_secret { secret } else { made };
                    out.print(
                        &serde_json::json!({ "watchlist": list, "secret": shown }),
                        || {
                            let mut t = format!(
                                "watchlist {} changed: webhook {}, cursor {}",
                                list.name,
                                list.webhook_url.as_deref().unwrap_or("none"),
                                list.cursor
                            );
                            if let Some(s) = &shown {
                                t.push_str(&format!("\nnew signing secret (shown once): {s}"));
                            }
                            t
                        },
                    )?;
                    Ok(Exit::Ok)
                }
                Err(WatchError::Db(e)) => Err(e.into()),
                Err(e) => refused(out, &e),
            }
        }
        WatchCmd::Remove { name, out } => {
            if watchlist::remove(store, &name).await? {
                out.print(&serde_json::json!({ "removed": name }), || {
                    format!("watchlist {name} removed")
                })?;
                Ok(Exit::Ok)
            } else {
                refused(out, &WatchError::NotFound(name))
            }
        }
    }
}

fn state(l: &watchlist::Watchlist) -> &'static str {
    if l.webhook_url.is_none() {
        "api-only"
    } else if l.failing == 1 {
        "failing"
    } else if l.failing_since.is_some() {
        "retrying"
    } else {
        "ok"
    }
}
