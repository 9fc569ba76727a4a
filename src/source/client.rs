//! The SOAP client of the ISIR public web service: both operations, over reqwest with
//! rustls, timeouts, gzip and a response size limit.
//!
//! Owns the HTTP exchange and the classification of its failures. Every request first
//! passes the [`Gate`] (the budget); the client never sends a request that was not
//! granted, and never retries by itself: retrying is the poller's decision, because each
//! retry costs budget.

use std::sync::Arc;
use std::time::Duration;

use super::error::{GateError, SourceError};
use super::model::Page;
use super::{parse, write};

/// The two operations of the public service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `getIsirWsPublicIdData`: actions after an ID.
    AfterId,
    /// `getIsirWsPublicPosledniIdData`: the newest action ID.
    LastId,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::AfterId => "after_id",
            Operation::LastId => "last_id",
        }
    }
}

/// The one door every request goes through. The budget implements it; a request is
/// counted when granted, before it is sent.
#[async_trait::async_trait]
pub trait Gate: Send + Sync {
    async fn acquire(&self, op: Operation) -> Result<(), GateError>;
}

/// Settings of the client (a part of the configuration tree).
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub url: String,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub max_body_bytes: usize,
}

/// The ISIR SOAP client.
#[derive(Clone)]
pub struct SourceClient {
    http: reqwest::Client,
    opts: ClientOptions,
    gate: Arc<dyn Gate>,
}

impl SourceClient {
    pub fn new(opts: ClientOptions, gate: Arc<dyn Gate>) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(opts.connect_timeout)
            .timeout(opts.timeout)
            .gzip(true)
            .user_agent(concat!("isir-replica/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { http, opts, gate })
    }

    pub fn url(&self) -> &str {
        &self.opts.url
    }

    /// The actions with an ID strictly greater than `after`, validated. One request.
    pub async fn fetch_after(&self, after: i64) -> Result<Page, SourceError> {
        let body = self
            .call(Operation::AfterId, write::request_after_id(after))
            .await?;
        parse::parse_data_response(&body, after)
    }

    /// The newest action ID the service knows. One request.
    pub async fn last_id(&self) -> Result<i64, SourceError> {
        let body = self
            .call(Operation::LastId, write::request_last_id())
            .await?;
        parse::parse_last_id_response(&body)
    }

    async fn call(&self, op: Operation, body: String) -> Result<Vec<u8>, SourceError> {
        self.gate.acquire(op).await?;
        let resp = self
            .http
            .post(&self.opts.url)
            .header(reqwest::header::CONTENT_TYPE, "text/xml; charset=utf-8")
            .header("SOAPAction", "\"\"")
            .body(body)
            .send()
            .await
            .map_err(|e| SourceError::Retryable(describe(op, &e)))?;
        let status = resp.status();
        let body = self.read_limited(op, resp).await?;
        if status.is_success() {
            return Ok(body);
        }
        // SOAP 1.1 sends a Fault with HTTP 500: prefer what the body says.
        if let Err(e @ (SourceError::Fault { .. } | SourceError::Refused { .. })) =
            parse::parse_data_response(&body, i64::MIN).map(|_| ())
        {
            return Err(e);
        }
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            Err(SourceError::Retryable(format!(
                "{}: HTTP {status}",
                op.as_str()
            )))
        } else {
            Err(SourceError::Refused {
                code: Some(format!("HTTP {}", status.as_u16())),
                text: None,
            })
        }
    }

    async fn read_limited(
        &self,
        op: Operation,
        mut resp: reqwest::Response,
    ) -> Result<Vec<u8>, SourceError> {
        let limit = self.opts.max_body_bytes;
        if let Some(len) = resp.content_length()
            && len as usize > limit
        {
            return Err(too_large(op, limit));
        }
        let mut buf = Vec::with_capacity(
            resp.content_length().unwrap_or(64 * 1024).min(limit as u64) as usize,
        );
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > limit {
                        return Err(too_large(op, limit));
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(buf),
                Err(e) => {
                    return Err(SourceError::Retryable(format!(
                        "{}: connection lost after {} body bytes: {}",
                        op.as_str(),
                        buf.len(),
                        describe(op, &e)
                    )));
                }
            }
        }
    }
}

fn too_large(op: Operation, limit: usize) -> SourceError {
    SourceError::Invalid(format!(
        "{}: response larger than the limit of {limit} bytes (source.max_body_bytes)",
        op.as_str()
    ))
}

fn describe(op: Operation, e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "body interrupted"
    } else {
        "request failed"
    };
    let mut msg = format!("{}: {what}", op.as_str());
    let mut src: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}
