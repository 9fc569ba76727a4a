//! One webhook delivery attempt: the target check (only `http`/`https`, and no loopback,
//! private, link-local or otherwise internal address unless `watch.allow_private_targets`
//! is set), the Standard Webhooks signature, the POST with a per-attempt timeout, and
//! what the answer means (done, retry after how long, or failed).
//!
//! Owns the outbound request only: it never reads or writes the store. The address is
//! resolved and checked for every attempt and the request goes to that checked address
//! (no redirects followed), so a name that later resolves elsewhere cannot reach an
//! internal service.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why an address is refused as a webhook target, if it is.
pub fn internal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v) => {
            let o = v.octets();
            if v.is_loopback() {
                Some("a loopback address")
            } else if v.is_private() {
                Some("a private address")
            } else if v.is_link_local() {
                Some("a link-local address")
            } else if v.is_unspecified() || o[0] == 0 {
                Some("an unspecified address")
            } else if v.is_broadcast() || v.is_multicast() || o[0] >= 240 {
                Some("a broadcast, multicast or reserved address")
            } else if o[0] == 100 && (64..128).contains(&o[1]) {
                Some("a shared (carrier-grade NAT) address")
            } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
                Some("an IETF protocol address")
            } else if o[0] == 198 && (o[1] == 18 || o[1] == 19) {
                Some("a benchmarking address")
            } else {
                None
            }
        }
        IpAddr::V6(v) => {
            if let Some(m) = v.to_ipv4_mapped() {
                return internal(IpAddr::V4(m));
            }
            let s = v.segments();
            if v.is_loopback() {
                Some("a loopback address")
            } else if v.is_unspecified() {
                Some("an unspecified address")
            } else if (s[0] & 0xfe00) == 0xfc00 {
                Some("a unique local (private) address")
            } else if (s[0] & 0xffc0) == 0xfe80 {
                Some("a link-local address")
            } else if v.is_multicast() {
                Some("a multicast address")
            } else {
                None
            }
        }
    }
}

/// The URL's scheme, host and port, when it is an `http` or `https` URL.
fn parse(url: &str) -> Result<(bool, String, u16), String> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("webhook {url:?}: only http:// and https:// URLs"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!("webhook {url:?}: no user information in the URL"));
    }
    let (host, port) = if let Some(r) = authority.strip_prefix('[') {
        let (h, tail) = r
            .split_once(']')
            .ok_or_else(|| format!("webhook {url:?}: a bad IPv6 address"))?;
        (h.to_string(), tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(format!("webhook {url:?}: no host"));
    }
    let port = match port {
        None => {
            if https {
                443
            } else {
                80
            }
        }
        Some(p) => p
            .parse()
            .map_err(|_| format!("webhook {url:?}: a bad port"))?,
    };
    Ok((https, host, port))
}

/// Resolves the URL's host and checks every address: the addresses to connect to.
pub async fn resolve(url: &str, allow_private: bool) -> Result<(String, Vec<SocketAddr>), String> {
    let (_, host, port) = parse(url)?;
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| format!("webhook host {host:?} does not resolve: {e}"))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(format!("webhook host {host:?} has no address"));
    }
    if !allow_private {
        for a in &addrs {
            if let Some(why) = internal(a.ip()) {
                return Err(format!(
                    "webhook host {host:?} is {why} ({}); set watch.allow_private_targets to allow it",
                    a.ip()
                ));
            }
        }
    }
    Ok((host, addrs))
}

/// Checks a webhook URL as an operator gives it.
pub async fn check_target(url: &str, allow_private: bool) -> Result<(), String> {
    resolve(url, allow_private).await.map(|_| ())
}

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

/// POSTs `body` to `url` signed as message `id`, at most `timeout` for the attempt.
pub async fn attempt(
    url: &str,
    secrets: &[String],
    id: &str,
    body: &[u8],
    timeout: Duration,
    allow_private: bool,
) -> Attempt {
    let failed = |error: String| Attempt::Failed {
        error,
        retry_after: None,
    };
    let (host, addrs) = match resolve(url, allow_private).await {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    // A client for this attempt, pinned to the checked addresses.
    let client = match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .resolve_to_addrs(&host, &addrs)
        .user_agent(concat!("isir/", env!("CARGO_PKG_VERSION"), " (webhook)"))
        .build()
    {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot build the HTTP client: {e}")),
    };
    let ts = chrono::Utc::now().timestamp();
    let sig = sign(secrets, id, ts, body);
    let resp = client
        .post(url)
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
        Err(e) if e.is_timeout() => failed(format!("no answer within {} s", timeout.as_secs_f64())),
        Err(e) => failed(format!("cannot reach the receiver: {}", without_url(&e))),
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
    fn refuses_internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(internal(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["8.8.8.8", "193.86.1.1", "2001:4860:4860::8888"] {
            assert!(internal(ip.parse().unwrap()).is_none(), "{ip}");
        }
    }

    #[tokio::test]
    async fn checks_targets() {
        assert!(check_target("ftp://example.com/x", true).await.is_err());
        assert!(check_target("http://user@8.8.8.8/", true).await.is_err());
        let e = check_target("http://127.0.0.1:9/hook", false)
            .await
            .unwrap_err();
        assert!(
            e.contains("loopback") && e.contains("allow_private_targets"),
            "{e}"
        );
        assert!(check_target("http://[::1]:9/hook", false).await.is_err());
        assert!(
            check_target("http://localhost:9/hook", false)
                .await
                .is_err()
        );
        assert!(check_target("http://127.0.0.1:9/hook", true).await.is_ok());
        assert!(check_target("https://8.8.8.8/hook", false).await.is_ok());
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }
}
