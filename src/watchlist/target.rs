//! Where a webhook may go: the target check of `isir watch add`/`set`, of the admin
//! routes and of every delivery attempt.
//!
//! A URL is parsed once, with the parser the HTTP client itself uses (`reqwest::Url`,
//! the WHATWG URL standard: `\` is `/`, a host's percent-escapes are decoded, full-width
//! digits and `0x7f.1` are IPv4), and exactly that parsed host is checked and then
//! connected to. Unless `watch.allow_private_targets` is set:
//! - an address host is checked against the IANA special-purpose registries
//!   ([`internal`]), including the IPv4 address inside IPv4-mapped, IPv4-compatible,
//!   NAT64, 6to4 and Teredo addresses;
//! - a name is refused when it is `localhost` or under it (RFC 6761), whatever a
//!   resolver says; otherwise every address it resolves to is checked, at `add`/`set`
//!   and again by the client's own resolver ([`Guarded`]) at every connection, so a name
//!   that later resolves elsewhere (DNS rebinding) reaches nothing internal.
//!
//! With `watch.proxy` set the proxy resolves names and connects: the address check of
//! names is then the proxy's job (address hosts and `localhost` names are still refused
//! here). Owns the checks only: it never sends a request and never reads the store.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::LazyLock;

use ipnet::IpNet;
use reqwest::Url;

/// How webhook targets are checked (from `watch.*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Loopback, private, link-local and other internal targets are allowed
    /// (`watch.allow_private_targets`).
    pub allow_private: bool,
    /// A list with birth numbers may deliver over plain `http`
    /// (`watch.allow_http_with_birth_numbers`).
    pub allow_http_with_birth_numbers: bool,
    /// The operator's egress proxy for every webhook (`watch.proxy`).
    pub proxy: Option<String>,
}

impl Policy {
    pub fn from_settings(w: &crate::config::WatchSettings) -> Self {
        Policy {
            allow_private: w.allow_private_targets,
            allow_http_with_birth_numbers: w.allow_http_with_birth_numbers,
            proxy: w.proxy.clone(),
        }
    }

    /// Refuses a plain-`http` target for a list that holds birth numbers, unless the
    /// setting allows it.
    pub fn check_birth_numbers(&self, url: &Url, has_rc: bool) -> Result<(), String> {
        if has_rc && url.scheme() != "https" && !self.allow_http_with_birth_numbers {
            return Err("the list holds birth numbers: its webhook must be https \
                 (watch.allow_http_with_birth_numbers allows http)"
                .into());
        }
        Ok(())
    }
}

/// What the registries say of a network: a refusal (why), an IPv4 address embedded in
/// it to check instead, or nothing (globally reachable).
#[derive(Debug, Clone, Copy)]
enum Rule {
    Refuse(&'static str),
    Global,
    /// The last 32 bits are an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64).
    Low32(&'static str),
    /// 6to4 (RFC 3056): bits 16-47.
    SixToFour,
    /// Teredo (RFC 4380): the server's address in bits 32-63, the client's in the last
    /// 32 bits, inverted.
    Teredo,
}

/// IANA IPv4 Special-Purpose Address Registry (RFC 6890 and its updates) and the
/// multicast and reserved blocks of the IPv4 address space; the longest match wins.
const V4: &[(&str, Rule)] = &[
    ("0.0.0.0/0", Rule::Global),
    (
        "0.0.0.0/8",
        Rule::Refuse("an unspecified ('this network') address"),
    ),
    ("10.0.0.0/8", Rule::Refuse("a private address")),
    (
        "100.64.0.0/10",
        Rule::Refuse("a shared (carrier-grade NAT) address"),
    ),
    ("127.0.0.0/8", Rule::Refuse("a loopback address")),
    ("169.254.0.0/16", Rule::Refuse("a link-local address")),
    ("172.16.0.0/12", Rule::Refuse("a private address")),
    ("192.0.0.0/24", Rule::Refuse("an IETF protocol address")),
    ("192.0.2.0/24", Rule::Refuse("a documentation address")),
    (
        "192.88.99.0/24",
        Rule::Refuse("a 6to4 relay anycast address"),
    ),
    ("192.168.0.0/16", Rule::Refuse("a private address")),
    ("198.18.0.0/15", Rule::Refuse("a benchmarking address")),
    ("198.51.100.0/24", Rule::Refuse("a documentation address")),
    ("203.0.113.0/24", Rule::Refuse("a documentation address")),
    ("224.0.0.0/4", Rule::Refuse("a multicast address")),
    ("240.0.0.0/4", Rule::Refuse("a reserved address")),
    ("255.255.255.255/32", Rule::Refuse("the broadcast address")),
];

/// IANA IPv6 Special-Purpose Address Registry (RFC 6890 and its updates), the
/// deprecated site-local and IPv4-compatible blocks, multicast; only the global unicast
/// space 2000::/3 is reachable at all. The longest match wins.
const V6: &[(&str, Rule)] = &[
    ("::/0", Rule::Refuse("outside the global unicast space")),
    ("2000::/3", Rule::Global),
    ("::/128", Rule::Refuse("an unspecified address")),
    ("::1/128", Rule::Refuse("a loopback address")),
    ("::/96", Rule::Low32("an IPv4-compatible address")),
    ("::ffff:0:0/96", Rule::Low32("an IPv4-mapped address")),
    ("64:ff9b::/96", Rule::Low32("a NAT64 address")),
    (
        "64:ff9b:1::/48",
        Rule::Refuse("a local-use IPv4/IPv6 translation address"),
    ),
    ("100::/64", Rule::Refuse("a discard-only address")),
    ("2001::/23", Rule::Refuse("an IETF protocol address")),
    ("2001::/32", Rule::Teredo),
    ("2001:2::/48", Rule::Refuse("a benchmarking address")),
    ("2001:db8::/32", Rule::Refuse("a documentation address")),
    ("2002::/16", Rule::SixToFour),
    ("3fff::/20", Rule::Refuse("a documentation address")),
    (
        "5f00::/16",
        Rule::Refuse("a segment-routing (SRv6) address"),
    ),
    ("fc00::/7", Rule::Refuse("a unique local (private) address")),
    ("fe80::/10", Rule::Refuse("a link-local address")),
    ("fec0::/10", Rule::Refuse("a site-local address")),
    ("ff00::/8", Rule::Refuse("a multicast address")),
];

static TABLE: LazyLock<Vec<(IpNet, Rule)>> = LazyLock::new(|| {
    V4.iter()
        .chain(V6)
        .map(|(n, r)| (n.parse().expect("a network of the table"), *r))
        .collect()
});

/// The rule of the most specific network holding `ip`.
fn rule(ip: IpAddr) -> Rule {
    TABLE
        .iter()
        .filter(|(n, _)| n.contains(&ip))
        .max_by_key(|(n, _)| n.prefix_len())
        .map(|(_, r)| *r)
        .unwrap_or(Rule::Global)
}

/// Why an address is refused as a webhook target, if it is.
pub fn internal(ip: IpAddr) -> Option<String> {
    let inner = |what: &str, v4: Ipv4Addr| {
        internal(IpAddr::V4(v4)).map(|why| format!("{what} of {v4}, {why}"))
    };
    match (rule(ip), ip) {
        (Rule::Global, _) => None,
        (Rule::Refuse(why), _) => Some(why.to_string()),
        (Rule::Low32(what), IpAddr::V6(v)) => inner(what, low32(v)),
        (Rule::SixToFour, IpAddr::V6(v)) => {
            let s = v.segments();
            inner("a 6to4 address", v4_of(s[1], s[2]))
        }
        (Rule::Teredo, IpAddr::V6(v)) => {
            let s = v.segments();
            inner("a Teredo address (server)", v4_of(s[2], s[3]))
                .or_else(|| inner("a Teredo address (client)", v4_of(!s[6], !s[7])))
        }
        (_, IpAddr::V4(_)) => unreachable!("the IPv4 table holds no IPv6 rule"),
    }
}

fn low32(v: Ipv6Addr) -> Ipv4Addr {
    let s = v.segments();
    v4_of(s[6], s[7])
}

fn v4_of(hi: u16, lo: u16) -> Ipv4Addr {
    Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))
}

/// `localhost` and every name under it (RFC 6761 §6.3: resolvers answer loopback for
/// them, or should), with or without the final dot, in any case.
pub fn local_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

fn refused(host: &str, why: &str) -> String {
    format!("webhook host {host} is {why}; set watch.allow_private_targets to allow it")
}

/// Parses a webhook URL as the client will (WHATWG) and checks its scheme, that it has
/// no user information, and its host as written (an address, or a `localhost` name).
/// The request is then sent to exactly this [`Url`].
pub fn parse(raw: &str, policy: &Policy) -> Result<Url, String> {
    let url = Url::parse(raw.trim()).map_err(|e| format!("the webhook is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the webhook must be an http:// or https:// URL".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the webhook URL must carry no user information".into());
    }
    let host = url
        .host()
        .ok_or_else(|| "the webhook URL has no host".to_string())?;
    if !policy.allow_private {
        let why = match host {
            url::Host::Domain(d) => local_name(d).then(|| "a localhost name".to_string()),
            url::Host::Ipv4(v) => internal(IpAddr::V4(v)),
            url::Host::Ipv6(v) => internal(IpAddr::V6(v)),
        };
        if let Some(why) = why {
            return Err(refused(&host.to_string(), &why));
        }
    }
    Ok(url)
}

/// Resolves a name and checks every address it has: all of them, or an error. `port` 0
/// leaves the port to the caller.
pub async fn lookup(host: &str, port: u16, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    if !allow_private && local_name(host) {
        return Err(refused(host, "a localhost name"));
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("webhook host {host} does not resolve: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("webhook host {host} has no address"));
    }
    if !allow_private {
        for a in &addrs {
            if let Some(why) = internal(a.ip()) {
                return Err(refused(host, &format!("{why} ({})", a.ip())));
            }
        }
    }
    Ok(addrs)
}

/// Checks a webhook URL as an operator gives it (`watch add`, `watch set`, the admin
/// routes): the URL and its host as written, then, without a proxy, every address its
/// name resolves to now. Returns the parsed URL.
pub async fn check(raw: &str, policy: &Policy) -> Result<Url, String> {
    let url = parse(raw, policy)?;
    if policy.proxy.is_none()
        && let Some(url::Host::Domain(d)) = url.host()
    {
        lookup(d, 0, policy.allow_private).await?;
    }
    Ok(url)
}

/// The webhook client's resolver: every address of every name it connects to is
/// checked at connection time ([`lookup`]). Address hosts never reach a resolver: they
/// are checked by [`parse`] before each attempt.
#[derive(Debug, Clone, Copy)]
pub struct Guarded {
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let allow = self.allow_private;
        Box::pin(async move {
            let addrs = lookup(&host, 0, allow).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses at the edges of the blocks of the IANA IPv4 and IPv6 Special-Purpose
    /// Address Registries (and of the address-space registries' multicast, reserved and
    /// global unicast blocks), with what the registry says: refused (not globally
    /// reachable) or allowed. The expectations are the RFCs', not the table's.
    const ADDRESSES: &[(&str, bool, &str)] = &[
        ("0.0.0.0", true, "RFC 791: this host on this network"),
        ("0.255.255.255", true, "RFC 791: 0.0.0.0/8"),
        ("1.0.0.0", false, "first address after 0.0.0.0/8"),
        ("9.255.255.255", false, "before 10.0.0.0/8"),
        ("10.0.0.0", true, "RFC 1918"),
        ("10.255.255.255", true, "RFC 1918"),
        ("11.0.0.0", false, "after 10.0.0.0/8"),
        ("100.63.255.255", false, "before 100.64.0.0/10"),
        ("100.64.0.0", true, "RFC 6598 shared address space"),
        ("100.127.255.255", true, "RFC 6598"),
        ("100.128.0.0", false, "after 100.64.0.0/10"),
        ("127.0.0.1", true, "RFC 1122 loopback"),
        ("127.255.255.254", true, "RFC 1122 loopback"),
        ("169.254.169.254", true, "RFC 3927 link local"),
        ("169.255.0.1", false, "after 169.254.0.0/16"),
        ("172.15.255.255", false, "before 172.16.0.0/12"),
        ("172.16.0.0", true, "RFC 1918"),
        ("172.31.255.255", true, "RFC 1918"),
        ("172.32.0.0", false, "after 172.16.0.0/12"),
        ("192.0.0.8", true, "RFC 6890 IETF protocol assignments"),
        ("192.0.1.1", false, "between 192.0.0.0/24 and 192.0.2.0/24"),
        ("192.0.2.1", true, "RFC 5737 TEST-NET-1"),
        (
            "192.88.99.1",
            true,
            "RFC 7526 deprecated 6to4 relay anycast",
        ),
        ("192.168.1.1", true, "RFC 1918"),
        ("198.17.255.255", false, "before 198.18.0.0/15"),
        ("198.18.0.0", true, "RFC 2544 benchmarking"),
        ("198.19.255.255", true, "RFC 2544 benchmarking"),
        ("198.20.0.0", false, "after 198.18.0.0/15"),
        ("198.51.100.7", true, "RFC 5737 TEST-NET-2"),
        ("203.0.113.5", true, "RFC 5737 TEST-NET-3"),
        ("223.255.255.255", false, "last unicast before multicast"),
        ("224.0.0.1", true, "RFC 5771 multicast"),
        ("239.255.255.255", true, "RFC 5771 multicast"),
        ("240.0.0.1", true, "RFC 1112 reserved"),
        ("254.255.255.255", true, "RFC 1112 reserved"),
        ("255.255.255.255", true, "RFC 919 limited broadcast"),
        ("8.8.8.8", false, "a public resolver"),
        ("193.86.1.1", false, "a Czech public address"),
        ("::", true, "RFC 4291 unspecified"),
        ("::1", true, "RFC 4291 loopback"),
        ("::7f00:1", true, "RFC 4291 IPv4-compatible ::127.0.0.1"),
        ("::a00:1", true, "RFC 4291 IPv4-compatible ::10.0.0.1"),
        ("::808:808", false, "RFC 4291 IPv4-compatible ::8.8.8.8"),
        ("::ffff:127.0.0.1", true, "RFC 4291 IPv4-mapped loopback"),
        (
            "::ffff:169.254.169.254",
            true,
            "RFC 4291 IPv4-mapped link local",
        ),
        ("::ffff:8.8.8.8", false, "RFC 4291 IPv4-mapped public"),
        ("64:ff9b::7f00:1", true, "RFC 6052 NAT64 of 127.0.0.1"),
        ("64:ff9b::c0a8:101", true, "RFC 6052 NAT64 of 192.168.1.1"),
        ("64:ff9b::808:808", false, "RFC 6052 NAT64 of 8.8.8.8"),
        ("64:ff9b:1::808:808", true, "RFC 8215 local-use translation"),
        ("100::1", true, "RFC 6666 discard-only"),
        (
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            true,
            "RFC 4380 Teredo, client 127.0.0.1",
        ),
        (
            "2001:0:7f00:1:8000:63bf:f7f7:f7f7",
            true,
            "RFC 4380 Teredo, server 127.0.0.1",
        ),
        (
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
            false,
            "RFC 4380 Teredo, server 65.54.227.120, client 8.8.8.8",
        ),
        ("2001:2::1", true, "RFC 5180 benchmarking"),
        (
            "2001:10::1",
            true,
            "RFC 4843 deprecated ORCHID, in 2001::/23",
        ),
        (
            "2001:1ff::1",
            true,
            "RFC 2928 IETF protocol assignments 2001::/23",
        ),
        ("2001:200::1", false, "after 2001::/23 (an RIR allocation)"),
        ("2001:db8::1", true, "RFC 3849 documentation"),
        ("2002:7f00:1::1", true, "RFC 3056 6to4 of 127.0.0.1"),
        ("2002:a00:1::1", true, "RFC 3056 6to4 of 10.0.0.1"),
        ("2002:808:808::1", false, "RFC 3056 6to4 of 8.8.8.8"),
        ("3fff::1", true, "RFC 9637 documentation"),
        ("5f00::1", true, "RFC 9602 SRv6 SIDs"),
        (
            "4000::1",
            true,
            "IANA IPv6 address space: reserved, not 2000::/3",
        ),
        ("fc00::1", true, "RFC 4193 unique local"),
        ("fdff:ffff::1", true, "RFC 4193 unique local"),
        ("fe80::1", true, "RFC 4291 link local"),
        ("febf::1", true, "RFC 4291 link local"),
        ("fec0::1", true, "RFC 3879 deprecated site local"),
        ("feff::1", true, "RFC 3879 deprecated site local"),
        ("ff02::1", true, "RFC 4291 multicast"),
        ("2001:4860:4860::8888", false, "a public resolver"),
        ("2a00:1450:4001::1", false, "a RIPE allocation"),
    ];

    #[test]
    fn refuses_what_the_registries_say_is_not_global() {
        let mut wrong = Vec::new();
        for (ip, refused, why) in ADDRESSES {
            let got = internal(ip.parse().unwrap());
            if got.is_some() != *refused {
                wrong.push(format!("{ip} ({why}): {got:?}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        let why = internal("2002:7f00:1::1".parse().unwrap()).unwrap();
        assert!(
            why.contains("6to4") && why.contains("127.0.0.1") && why.contains("loopback"),
            "{why}"
        );
    }

    #[test]
    fn localhost_names_whatever_the_resolver() {
        for n in [
            "localhost",
            "LOCALHOST",
            "localhost.",
            "foo.localhost",
            "a.b.LocalHost.",
        ] {
            assert!(local_name(n), "{n}");
        }
        for n in [
            "localhost.example.com",
            "notlocalhost",
            "localhostx",
            "example.cz",
        ] {
            assert!(!local_name(n), "{n}");
        }
    }

    /// Spellings of internal hosts, as the WHATWG URL standard reads them (the
    /// expectation: the address a browser or the HTTP client would connect to).
    const SPELLINGS: &[(&str, &str)] = &[
        ("http://127.0.0.1\\.x.example/hook", "127.0.0.1"),
        ("http://%31%32%37.0.0.1/hook", "127.0.0.1"),
        ("http://\u{ff11}\u{ff12}\u{ff17}.0.0.1/hook", "127.0.0.1"),
        ("http://0x7f.1/hook", "127.0.0.1"),
        ("http://2130706433/hook", "127.0.0.1"),
        ("http://0177.0.0.1/hook", "127.0.0.1"),
        ("http://127.1/hook", "127.0.0.1"),
        ("http://127.0.0.1./hook", "127.0.0.1"),
        ("http://0/hook", "0.0.0.0"),
        ("http://[::7f00:1]:9/hook", "::127.0.0.1"),
        ("http://[::ffff:7f00:1]/hook", "::ffff:127.0.0.1"),
        ("http://[64:ff9b::7f00:1]/hook", "64:ff9b::7f00:1"),
        ("http://[fec0::1]/hook", "fec0::1"),
        ("http://[2002:7f00:1::1]/hook", "2002:7f00:1::1"),
        (
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
        ),
    ];

    #[test]
    fn checks_the_host_the_client_connects_to() {
        let open = Policy {
            allow_private: true,
            ..Default::default()
        };
        let closed = Policy::default();
        for (raw, ip) in SPELLINGS {
            let url = parse(raw, &open).unwrap_or_else(|e| panic!("{raw}: {e}"));
            let host: IpAddr = match url.host().unwrap() {
                url::Host::Ipv4(v) => v.into(),
                url::Host::Ipv6(v) => v.into(),
                url::Host::Domain(d) => panic!("{raw} read as the name {d}"),
            };
            assert_eq!(host, ip.parse::<IpAddr>().unwrap(), "{raw}");
            let e = parse(raw, &closed).expect_err(raw);
            assert!(e.contains("allow_private_targets"), "{raw}: {e}");
        }
        for raw in [
            "http://localhost./hook",
            "http://foo.localhost/hook",
            "http://LocalHost:8080/hook",
        ] {
            assert!(parse(raw, &open).is_ok(), "{raw}");
            let e = parse(raw, &closed).expect_err(raw);
            assert!(e.contains("localhost name"), "{raw}: {e}");
        }
        for (raw, what) in [
            ("ftp://example.com/x", "http"),
            ("http://user@8.8.8.8/", "user information"),
            ("http://:pw@8.8.8.8/", "user information"),
            ("http://[::1/x", "URL"),
            ("not a url", "URL"),
        ] {
            let e = parse(raw, &open).expect_err(raw);
            assert!(e.contains(what), "{raw}: {e}");
        }
        assert!(parse("https://8.8.8.8/hook", &closed).is_ok());
        assert!(parse("https://hooks.example.cz/isir", &closed).is_ok());
    }

    #[tokio::test]
    async fn names_are_checked_on_every_address() {
        // `localhost` resolves here, and is refused before any resolver is asked.
        let e = lookup("localhost", 9, false).await.unwrap_err();
        assert!(e.contains("localhost name"), "{e}");
        let ok = lookup("localhost", 9, true).await.unwrap();
        assert!(ok.iter().all(|a| a.ip().is_loopback() && a.port() == 9));
        let e = check("http://localhost:9/hook", &Policy::default())
            .await
            .unwrap_err();
        assert!(e.contains("allow_private_targets"), "{e}");
        // With a proxy, names are the proxy's to resolve; addresses are still refused.
        let proxied = Policy {
            proxy: Some("http://127.0.0.1:3128".into()),
            ..Default::default()
        };
        assert!(
            check("https://no-such-host.invalid/x", &proxied)
                .await
                .is_ok()
        );
        assert!(check("http://[::1]/x", &proxied).await.is_err());
        assert!(
            check("http://127.0.0.1:9/hook", &Policy::default())
                .await
                .is_err()
        );
        assert!(
            check("https://8.8.8.8/hook", &Policy::default())
                .await
                .is_ok()
        );
    }

    #[test]
    fn birth_numbers_only_over_https() {
        let p = Policy::default();
        let http = Url::parse("http://8.8.8.8/h").unwrap();
        let https = Url::parse("https://8.8.8.8/h").unwrap();
        assert!(p.check_birth_numbers(&http, true).is_err());
        assert!(p.check_birth_numbers(&http, false).is_ok());
        assert!(p.check_birth_numbers(&https, true).is_ok());
        let allowing = Policy {
            allow_http_with_birth_numbers: true,
            ..Default::default()
        };
        assert!(allowing.check_birth_numbers(&http, true).is_ok());
    }
}
