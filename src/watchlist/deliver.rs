//! One webhook delivery attempt: the Standard Webhooks signature, the POST with a
//! per-attempt timeout, and what the answer means (done, retry after how long, or
//! failed).
//!
//! Owns the outbound request only: it never reads or writes the store. The webhook
//! client ([`Sender`]) is built once per notifier: it never uses the environment's
//! proxies (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`: a proxy would resolve and connect
//! past the target check), only `watch.proxy` when the operator sets one; it resolves
//! through [`target::Guarded`], which checks every address at connection time; it
//! follows no redirect. Every attempt parses and checks the URL again
//! ([`target::parse`]) and sends to exactly that parsed URL.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::target::{self, Policy};

/// The Standard Webhooks signature of `body` sent as message `id` at `timestamp`, with
/// each of `secrets` (`whsec_` + base64): `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
/// space-separated.
pub fn sign(secrets: &[String], id: &str, timestamp: i64, body: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    secrets
        .iter()
        .filter_map(|s| {
            let key = b64.decode(s.strip_prefix("whsec_").unwrap_or(s)).ok()?;
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            Some(format!("v1,{}", b64.encode(mac.finalize().into_bytes())))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A 2xx.
    Delivered,
    /// Anything else; `retry_after` when the receiver said when to come back.
    Failed {
        error: String,
        retry_after: Option<Duration>,
    },
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(v: &str) -> Option<Duration> {
    if let Ok(s) = v.trim().parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let t = chrono::DateTime::parse_from_rfc2822(v.trim()).ok()?;
    let secs = (t.timestamp() - chrono::Utc::now().timestamp()).max(0);
    Some(Duration::from_secs(secs as u64))
}

/// The webhook client of a notifier, with the target policy it checks against.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    policy: Arc<Policy>,
}

impl Sender {
    /// A client that connects within `connect_timeout`: without proxies, or through
    /// `policy.proxy` only; without one, through the checking resolver.
    pub fn new(policy: &Policy, connect_timeout: Duration) -> Result<Sender, String> {
        let b = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect_timeout)
            .user_agent(concat!("isir/", env!("CARGO_PKG_VERSION"), " (webhook)"));
        let b = match &policy.proxy {
            // The proxy resolves and connects: the address check is its job.
            Some(p) => b.proxy(
                reqwest::Proxy::all(p).map_err(|e| format!("watch.proxy is not usable: {e}"))?,
            ),
            None => b.no_proxy().dns_resolver(Arc::new(target::Guarded {
                allow_private: policy.allow_private,
            })),
        };
        let client = b
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Sender {
            client,
            policy: Arc::new(policy.clone()),
        })
    }

    /// POSTs `body` to `url` signed as message `id`, at most `timeout` for the attempt.
    /// `has_rc`: the list holds birth numbers (then only `https`, unless allowed).
    pub async fn attempt(
        &self,
        url: &str,
        has_rc: bool,
        secrets: &[String],
        id: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Attempt {
        let failed = |error: String| Attempt::Failed {
            error,
            retry_after: None,
        };
        let url = match target::parse(url, &self.policy) {
            Ok(u) => u,
            Err(e) => return failed(e),
        };
        if let Err(e) = self.policy.check_birth_numbers(&url, has_rc) {
            return failed(e);
        }
        let ts = chrono::Utc::now().timestamp();
        let sig = sign(secrets, id, ts, body);
        let resp = self
            .client
            .post(url)
            .timeout(timeout)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(body.to_vec())
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => Attempt::Delivered,
            Ok(r) => {
                let status = r.status();
                let ra = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(retry_after);
                Attempt::Failed {
                    error: format!("the receiver answered {status}"),
                    retry_after: ra,
                }
            }
            Err(e) if e.is_timeout() => {
                failed(format!("no answer within {} s", timeout.as_secs_f64()))
            }
            Err(e) => failed(format!("cannot reach the receiver: {}", without_url(&e))),
        }
    }
}

/// A reqwest error's text without the URL (which may carry a token).
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "<webhook>");
    }
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification (and of its reference
    // libraries' tests): this secret, id, timestamp and payload sign to this value.
    #[test]
    fn signs_as_the_specification_example() {
        let sig = sign(
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_rotation_signs_with_both_secrets() {
        let (a, b) = (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string(),
            super::super::new_secret(),
        );
        let both = sign(&[a.clone(), b.clone()], "msg_1", 5, b"{}");
        assert_eq!(
            both,
            format!(
                "{} {}",
                sign(&[a], "msg_1", 5, b"{}"),
                sign(&[b], "msg_1", 5, b"{}")
            )
        );
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
        // An HTTP date two minutes ahead (RFC 9110's IMF-fixdate) is two minutes.
        let later = (chrono::Utc::now() + chrono::Duration::seconds(120))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let d = retry_after(&later).unwrap();
        assert!(
            d >= Duration::from_secs(118) && d <= Duration::from_secs(120),
            "{later}: {d:?}"
        );
    }

    /// A receiver that cannot be reached and one that never answers are told apart
    /// (the list's last error says which, for the operator): a closed port is "cannot
    /// reach", a listener that accepts and stays silent is "no answer within".
    #[tokio::test]
    async fn a_refused_connection_and_a_silent_receiver_say_what_happened() {
        let policy = Policy {
            allow_private: true,
            allow_http_with_birth_numbers: false,
            proxy: None,
        };
        let sender = Sender::new(&policy, Duration::from_secs(2)).unwrap();
        let secrets = [super::super::new_secret()];
        // A port nobody listens on: bound, then closed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let url = format!("http://127.0.0.1:{port}/hook");
        let a = sender
            .attempt(
                &url,
                false,
                &secrets,
                "msg_1",
                b"{}",
                Duration::from_secs(2),
            )
            .await;
        let Attempt::Failed { error, .. } = a else {
            panic!("{a:?}")
        };
        assert!(error.starts_with("cannot reach the receiver: "), "{error}");
        // The cause, from the error's whole chain (the OS's "Connection refused").
        assert!(error.to_lowercase().contains("refused"), "{error}");
        assert!(
            !error.contains(&url),
            "the URL stays out of the error: {error}"
        );
        // A listener that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", silent.local_addr().unwrap());
        let keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = silent.accept().await {
                held.push(c);
            }
        });
        let a = sender
            .attempt(
                &url,
                false,
                &secrets,
                "msg_2",
                b"{}",
                Duration::from_millis(300),
            )
            .await;
        keep.abort();
        let Attempt::Failed { error, .. } = a else {
            panic!("{a:?}")
        };
        assert_eq!(error, "no answer within 0.3 s");
    }
}
