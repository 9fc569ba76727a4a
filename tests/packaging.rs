//! The packaging files cannot run here (no Docker engine, no systemd), so they are kept
//! right by parsing them: the Dockerfile's stages, copies and command; the compose
//! file's services, commands and settings; the systemd unit's command line. Every
//! command they run must parse with the real CLI, and every setting they give must load
//! and validate as the binary would load it.

use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser;
use figment::Figment;
use figment::providers::Serialized;
use isir::cli::Cli;
use isir::config::Settings;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Instructions of a Dockerfile: (INSTRUCTION, arguments), continuations joined.
fn dockerfile(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(s) = t.strip_suffix('\\') {
            cur.push_str(s);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        let (i, a) = cur.split_once(' ').unwrap_or((&cur, ""));
        out.push((i.to_uppercase(), a.trim().to_string()));
        cur.clear();
    }
    assert!(cur.is_empty(), "a dangling continuation");
    out
}

fn parses(args: &[String]) {
    let mut argv = vec!["isir".to_string()];
    argv.extend(args.iter().cloned());
    if let Err(e) = Cli::try_parse_from(&argv) {
        panic!("`{}` does not parse: {e}", argv.join(" "));
    }
}

/// Settings as `ISIR_SECTION__KEY` variables give them (values as text, as the
/// environment would), over the defaults.
fn settings_from(env: &BTreeMap<String, String>) -> Settings {
    let mut f = Figment::from(Serialized::defaults(Settings::default()));
    let vars: Vec<(String, String)> = env
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("ISIR_")?.to_string(), v.clone())))
        .collect();
    for (k, v) in vars {
        let path = k.to_lowercase().replace("__", ".");
        // Read as the environment provider reads a value (`[a, b]` is a list).
        let v: figment::value::Value = v.parse().unwrap();
        f = f.merge(Serialized::default(&path, v));
    }
    Settings::from_figment(f).unwrap_or_else(|e| panic!("settings {env:?}: {e:#}"))
}

#[test]
fn dockerfile_is_sound() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let ins = dockerfile(&text);
    let known = [
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "ENV",
        "EXPOSE",
        "USER",
        "ENTRYPOINT",
        "CMD",
        "HEALTHCHECK",
        "ARG",
        "LABEL",
        "VOLUME",
    ];
    let mut stages = Vec::new();
    let mut env = BTreeMap::new();
    let mut entry = None;
    let mut cmd = None;
    let mut expose = Vec::new();
    for (i, a) in &ins {
        assert!(known.contains(&i.as_str()), "unknown instruction {i}");
        match i.as_str() {
            "FROM" => {
                let parts: Vec<&str> = a.split_whitespace().collect();
                if parts.len() == 3 {
                    assert_eq!(parts[1].to_uppercase(), "AS");
                    stages.push(parts[2].to_string());
                }
                env.clear();
            }
            "COPY" => {
                if let Some(rest) = a.strip_prefix("--from=") {
                    let stage = rest.split_whitespace().next().unwrap();
                    assert!(
                        stages.contains(&stage.to_string()),
                        "COPY from unknown stage {stage}"
                    );
                } else {
                    let parts: Vec<&str> = a.split_whitespace().collect();
                    for src in &parts[..parts.len() - 1] {
                        assert!(root().join(src).exists(), "COPY of a missing {src}");
                    }
                }
            }
            "ENV" => {
                let (k, v) = a.split_once('=').unwrap();
                env.insert(k.to_string(), v.to_string());
            }
            "EXPOSE" => expose.push(a.parse::<u16>().unwrap()),
            "ENTRYPOINT" => entry = Some(serde_json::from_str::<Vec<String>>(a).unwrap()),
            "CMD" => cmd = Some(serde_json::from_str::<Vec<String>>(a).unwrap()),
            _ => {}
        }
    }
    assert_eq!(stages, ["build", "runtime"]);
    // The dependencies are built in a layer before the sources are copied, so a change
    // to src/ does not rebuild them.
    let first_build = ins
        .iter()
        .position(|(i, a)| i == "RUN" && a.contains("cargo build"))
        .unwrap();
    let copy_src = ins
        .iter()
        .position(|(i, a)| i == "COPY" && a.starts_with("src "))
        .unwrap();
    let copy_manifest = ins
        .iter()
        .position(|(i, a)| i == "COPY" && a.starts_with("Cargo.toml Cargo.lock"))
        .unwrap();
    assert!(copy_manifest < first_build && first_build < copy_src);
    // The data directory is a volume, and it is where the process works.
    let workdir = ins
        .iter()
        .rev()
        .find(|(i, _)| i == "WORKDIR")
        .unwrap()
        .1
        .clone();
    let volumes = ins.iter().find(|(i, _)| i == "VOLUME").unwrap().1.clone();
    assert!(
        volumes.contains(&workdir),
        "VOLUME {volumes} holds WORKDIR {workdir}"
    );
    // What the build copies is not ignored; what must not reach the context is.
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for must in ["target/", ".git/"] {
        assert!(ignored.contains(&must), ".dockerignore leaves out {must}");
    }
    for (i, a) in &ins {
        if i == "COPY" && !a.starts_with("--from=") {
            let parts: Vec<&str> = a.split_whitespace().collect();
            for src in &parts[..parts.len() - 1] {
                assert!(
                    !ignored
                        .iter()
                        .any(|g| g.trim_end_matches('/') == src.trim_end_matches('/')),
                    "{src} is copied but ignored"
                );
            }
        }
    }
    assert_eq!(entry.unwrap(), ["/usr/local/bin/isir"]);
    parses(&cmd.unwrap());
    // Every Cargo target the manifest names is copied in, or `cargo build` fails.
    assert!(text.contains("COPY benches"));
    let s = settings_from(&env);
    let port: u16 = s.api.bind.rsplit_once(':').unwrap().1.parse().unwrap();
    assert_eq!(expose, [port], "EXPOSE matches api.bind");
}

/// The value the packaging tests give a variable the compose file requires.
const TEST_ADMIN_HASH: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

/// The compose file as compose reads it: `${NAME:?message}` variables (which compose
/// refuses to start without) given test values, merge keys (`<<`) applied. Also the
/// names of the variables it requires.
fn compose() -> (serde_yaml::Value, Vec<String>) {
    let mut text = std::fs::read_to_string(root().join("docker-compose.yml")).unwrap();
    let mut required = Vec::new();
    while let Some(i) = text.find("${") {
        let end = i + text[i..].find('}').expect("a closed ${");
        let inner = &text[i + 2..end];
        let (name, rest) = inner
            .split_once(":?")
            .unwrap_or_else(|| panic!("${{{inner}}}: a variable must be required (`:?`)"));
        assert!(!rest.trim().is_empty(), "{name}: say what to set");
        let value = match name {
            "ISIR_ADMIN_KEY_SHA256" => TEST_ADMIN_HASH,
            other => panic!("an unknown variable {other}"),
        };
        required.push(name.to_string());
        text.replace_range(i..=end, value);
    }
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    doc.apply_merge().unwrap();
    (doc, required)
}

#[test]
fn compose_file_is_sound() {
    let (doc, _) = compose();
    let services = doc["services"].as_mapping().unwrap();
    let names: Vec<&str> = services.keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["postgres", "redis", "writer", "api1", "api2", "proxy"]
    );
    let volumes = doc["volumes"].as_mapping().unwrap();
    // The proxy spreads over the API replicas, each of which it waits for.
    let proxy = &services["proxy"];
    let mounts: Vec<String> = serde_yaml::from_value(proxy["volumes"].clone()).unwrap();
    let conf = mounts
        .iter()
        .find_map(|m| m.strip_prefix("./").and_then(|m| m.split(':').next()))
        .unwrap();
    let conf = std::fs::read_to_string(root().join(conf)).unwrap();
    for api in ["api1", "api2"] {
        assert!(
            conf.contains(&format!("server {api}:8080")),
            "the proxy reaches {api}"
        );
        assert_eq!(
            proxy["depends_on"][api]["condition"].as_str(),
            Some("service_healthy")
        );
    }
    let mut writers = 0;
    for (name, svc) in services {
        let name = name.as_str().unwrap();
        if !name.starts_with("api") && name != "writer" {
            continue;
        }
        let cmd: Vec<String> = serde_yaml::from_value(svc["command"].clone()).unwrap();
        parses(&cmd);
        let env: BTreeMap<String, String> =
            serde_yaml::from_value(svc["environment"].clone()).unwrap();
        let s = settings_from(&env);
        if cmd[0] == "run" {
            writers += 1;
            // The writer is healthy once it migrated and listens; its exports and data
            // are volumes.
            let hc: Vec<String> =
                serde_yaml::from_value(svc["healthcheck"]["test"].clone()).unwrap();
            let port = s.api.bind.rsplit_once(':').unwrap().1;
            assert!(
                hc.iter().any(|a| a.contains(&format!(":{port}/healthz"))),
                "{hc:?}"
            );
            let mounts: Vec<String> = serde_yaml::from_value(svc["volumes"].clone()).unwrap();
            assert!(
                s.export.schedule.is_some(),
                "the writer writes the nightly export"
            );
            let export_mount = mounts
                .iter()
                .find(|m| m.ends_with(&format!(":{}", s.export.dir)))
                .unwrap_or_else(|| panic!("no volume on export.dir {}", s.export.dir));
            let vol = export_mount.split(':').next().unwrap();
            assert!(volumes.contains_key(vol), "{vol} is a named volume");
        } else {
            assert_eq!(cmd, ["serve"], "{name}: the API replicas only serve");
            assert_eq!(
                svc["depends_on"]["writer"]["condition"].as_str(),
                Some("service_healthy"),
                "{name} waits for a healthy writer (which migrates)"
            );
        }
        assert!(
            s.database.url.starts_with("postgres://"),
            "{name}: on PostgreSQL"
        );
        assert!(
            s.redis
                .url
                .as_deref()
                .is_some_and(|u| u.starts_with("redis://")),
            "{name}: lease in Redis"
        );
        assert!(
            s.database.url.contains("@postgres:"),
            "{name}: the postgres service"
        );
        assert!(
            s.redis.url.unwrap().contains("//redis:"),
            "{name}: the redis service"
        );
        for dep in svc["depends_on"].as_mapping().unwrap().keys() {
            assert!(
                services.contains_key(dep),
                "{name} depends on a missing {dep:?}"
            );
        }
    }
    assert_eq!(writers, 1, "exactly one writer");
}

fn unit(path: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    let mut sections: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut cur = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            cur = s.to_string();
            sections.entry(cur.clone()).or_default();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{path}: not a key=value: {line}"));
        assert!(!cur.is_empty(), "{k} outside a section");
        sections
            .get_mut(&cur)
            .unwrap()
            .entry(k.to_string())
            .or_default()
            .push(v.to_string());
    }
    sections
}

#[test]
fn systemd_units_are_sound() {
    for (path, command) in [
        ("deploy/isir.service", "run"),
        ("deploy/isir-serve.service", "serve"),
    ] {
        let sections = unit(path);
        assert_eq!(
            sections.keys().collect::<Vec<_>>(),
            ["Install", "Service", "Unit"],
            "{path}"
        );
        let svc = &sections["Service"];
        let one = |k: &str| -> &str {
            let v = svc.get(k).unwrap_or_else(|| panic!("{path}: no {k}"));
            v.last().unwrap()
        };
        let exec: Vec<String> = one("ExecStart")
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(exec[0], "/usr/local/bin/isir");
        parses(&exec[1..]);
        assert_eq!(exec.last().unwrap(), command, "{path}");
        assert_eq!(
            one("KillSignal"),
            "SIGTERM",
            "{path}: stops cleanly on SIGTERM"
        );
        // The stop time: the daemon exits within seconds of SIGTERM (processes.rs), a
        // reader once its requests end (each bounded by the default request timeout,
        // `api.request_timeout_secs`).
        let stop: u64 = one("TimeoutStopSec").parse().unwrap();
        assert!(
            stop >= isir::config::ApiSettings::default().request_timeout_secs,
            "{path}: TimeoutStopSec {stop}"
        );
        assert!(
            one("EnvironmentFile").ends_with("/etc/isir/isir.env"),
            "{path}"
        );
        for k in [
            "NoNewPrivileges",
            "ProtectSystem",
            "ProtectHome",
            "PrivateTmp",
            "PrivateDevices",
            "RestrictAddressFamilies",
            "CapabilityBoundingSet",
            "SystemCallFilter",
        ] {
            assert!(svc.contains_key(k), "{path}: no {k}");
        }
        assert_eq!(one("User"), "isir", "{path}: not root");
        for v in svc.values().flatten() {
            assert!(!v.contains("example"), "{path}: a placeholder in {v}");
        }
        assert_eq!(sections["Install"]["WantedBy"], ["multi-user.target"]);
    }
}

/// The alert rules parse, name only catalogued metrics (each has HELP text and is
/// recorded), and point at runbooks that exist.
#[test]
fn alert_rules_name_real_metrics_and_runbooks() {
    let text = std::fs::read_to_string(root().join("deploy/alerts.yml")).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let known: Vec<&str> = isir::telemetry::CATALOGUE.iter().map(|c| c.0).collect();
    let mut alerts = Vec::new();
    for g in doc["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let name = r["alert"].as_str().unwrap().to_string();
            let expr = r["expr"].as_str().unwrap();
            let mut seen = 0;
            for (i, _) in expr.match_indices("isir_") {
                let m: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    known.contains(&m.as_str()),
                    "{name}: {m} is not a metric of ours"
                );
                seen += 1;
            }
            assert!(seen > 0, "{name} names no metric");
            if let Some(rb) = r["annotations"]["runbook"].as_str() {
                assert!(root().join(rb).exists(), "{name}: no runbook {rb}");
            }
            alerts.push(name);
        }
    }
    // The conditions the runbooks describe: lag, budget, lease, a stopped builder.
    for a in [
        "IsirReplicaLagging",
        "IsirBudgetNearlySpent",
        "IsirNoLeaseHolder",
        "IsirProjectionStopped",
        "IsirNoSuccessfulTick",
    ] {
        assert!(alerts.iter().any(|x| x == a), "no alert {a}");
    }
}

/// nginx's directives: (the blocks they are in, name, arguments without quotes).
fn nginx_directives(text: &str) -> Vec<(Vec<String>, String, Vec<String>)> {
    let mut out = Vec::new();
    let mut blocks: Vec<String> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut comment = false;
    for c in text.chars() {
        if comment {
            comment = c != '\n';
            continue;
        }
        if let Some(q) = quote {
            if c == q {
                quote = None;
                words.push(std::mem::take(&mut cur));
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            '#' => comment = true,
            '\'' | '"' => quote = Some(c),
            ';' | '{' | '}' | ' ' | '\t' | '\n' | '\r' => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                match c {
                    ';' => {
                        let name = words.remove(0);
                        out.push((blocks.clone(), name, std::mem::take(&mut words)));
                    }
                    '{' => {
                        blocks.push(words[0].clone());
                        words.clear();
                    }
                    '}' => {
                        assert!(words.is_empty(), "a directive without `;`: {words:?}");
                        blocks.pop().expect("a `}` too many");
                    }
                    _ => {}
                }
            }
            _ => cur.push(c),
        }
    }
    assert!(
        blocks.is_empty() && words.is_empty(),
        "nginx.conf ends inside a block"
    );
    out
}

/// The variables a text of nginx's uses (`$name`, `${name}`).
fn nginx_variables(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in s.match_indices('$') {
        let rest = s[i + 1..].trim_start_matches('{');
        out.push(
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect(),
        );
    }
    out
}

fn nginx_conf() -> Vec<(Vec<String>, String, Vec<String>)> {
    nginx_directives(&std::fs::read_to_string(root().join("deploy/nginx.conf")).unwrap())
}

/// The proxy logs no query string (a lookup's carries birth numbers): every access log
/// is written in a format of ours that logs the path (`$uri`) and none of the variables
/// that hold the query (`$request`, `$request_uri`, `$args`, `$arg_*`, `$query_string`),
/// nor the referer (a page's address with its query); the error log, whose lines quote
/// the request line, is kept to `crit`.
#[test]
fn nginx_logs_no_query_strings() {
    let conf = nginx_conf();
    let mut formats = BTreeMap::new();
    for (_, name, args) in conf.iter().filter(|d| d.1 == "log_format") {
        assert!(!args.is_empty(), "{name} without a name");
        formats.insert(args[0].clone(), args[1..].concat());
    }
    assert!(
        !formats.is_empty(),
        "no log_format: nginx would log `combined`, whole request lines"
    );
    for (name, format) in &formats {
        let vars = nginx_variables(format);
        for v in &vars {
            assert!(
                ![
                    "request",
                    "request_uri",
                    "args",
                    "query_string",
                    "http_referer",
                    "request_body"
                ]
                .contains(&v.as_str())
                    && !v.starts_with("arg_"),
                "log_format {name} logs ${v}, which holds the query string"
            );
        }
        assert!(
            vars.iter().any(|v| v == "uri"),
            "log_format {name} logs no path ($uri)"
        );
    }
    let logs: Vec<_> = conf.iter().filter(|d| d.1 == "access_log").collect();
    assert!(
        logs.iter().any(|(b, _, _)| b == &["http"]),
        "no access_log for the whole http block: nginx would log `combined` there"
    );
    for (_, _, args) in &logs {
        if args.first().map(String::as_str) == Some("off") {
            continue;
        }
        let format = args.get(1).map(String::as_str).unwrap_or("combined");
        assert!(
            formats.contains_key(format),
            "access_log {args:?} writes the format {format}, not one of ours"
        );
    }
    let errors: Vec<_> = conf.iter().filter(|d| d.1 == "error_log").collect();
    assert!(
        !errors.is_empty(),
        "no error_log: nginx logs errors, request lines included"
    );
    for (_, _, args) in errors {
        assert!(
            ["crit", "alert", "emerg"]
                .contains(&args.get(1).map(String::as_str).unwrap_or("error")),
            "error_log {args:?}: error lines quote whole request lines"
        );
    }
}

/// No operator surface of the bundled deployment is open without a key, and the
/// replicas behind the proxy see each client's own address: every listener of the
/// status page, `/metrics` and the watchlist management that is not on loopback
/// requires the admin key, which comes from a variable compose will not start without;
/// the proxy has a fixed address on a network with a fixed subnet, every replica it
/// reaches shares that network and trusts exactly that address; the header nginx sends
/// gives the guard the client's address, whatever the client wrote into it.
#[test]
fn compose_guards_admin_and_trusts_the_proxy() {
    let (doc, required) = compose();
    let services = doc["services"].as_mapping().unwrap();
    let settings_of = |name: &str| -> Settings {
        let env: BTreeMap<String, String> =
            serde_yaml::from_value(services[name]["environment"].clone()).unwrap();
        settings_from(&env)
    };
    for (name, svc) in services {
        let name = name.as_str().unwrap();
        if svc["build"].is_null() {
            continue;
        }
        let s = settings_of(name);
        let ops = s.admin.bind.clone().unwrap_or_else(|| s.api.bind.clone());
        let ops: std::net::SocketAddr = ops.parse().unwrap();
        if !ops.ip().is_loopback() {
            assert_eq!(
                s.admin.key_sha256.as_deref(),
                Some(TEST_ADMIN_HASH),
                "{name}: the operator surfaces on {ops} need the admin key, from ISIR_ADMIN_KEY_SHA256"
            );
            assert!(required.iter().any(|r| r == "ISIR_ADMIN_KEY_SHA256"));
        }
    }
    // The proxy's fixed address, inside its network's fixed subnet.
    let proxy = &services["proxy"];
    let nets = proxy["networks"]
        .as_mapping()
        .expect("the proxy's networks, with its address");
    assert_eq!(nets.len(), 1, "the proxy is on one network");
    let (net, cfg) = nets.iter().next().unwrap();
    let net = net.as_str().unwrap();
    let proxy_ip: std::net::IpAddr = cfg["ipv4_address"].as_str().unwrap().parse().unwrap();
    let subnets: Vec<ipnet::IpNet> = doc["networks"][net]["ipam"]["config"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["subnet"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        subnets.iter().any(|n| n.contains(&proxy_ip)),
        "{proxy_ip} in {net}'s subnet"
    );
    // What nginx sends as X-Forwarded-For for a client that forged one.
    let conf = nginx_conf();
    let xff = conf
        .iter()
        .find(|(_, n, a)| n == "proxy_set_header" && a[0].eq_ignore_ascii_case("x-forwarded-for"))
        .map(|(_, _, a)| a[1].clone())
        .expect("the proxy forwards the client's address");
    let (client, forged) = ("203.0.113.9", "6.6.6.6");
    let sent = match xff.as_str() {
        "$proxy_add_x_forwarded_for" => format!("{forged}, {client}"),
        "$remote_addr" => client.to_string(),
        other => panic!("X-Forwarded-For {other}: the client could write it"),
    };
    let upstreams: Vec<&String> = conf
        .iter()
        .filter(|(b, n, _)| n == "server" && b.last().is_some_and(|b| b == "upstream"))
        .map(|(_, _, a)| &a[0])
        .collect();
    assert!(!upstreams.is_empty());
    for up in upstreams {
        let (name, port) = up.split_once(':').unwrap();
        let svc = &services[name];
        let on: Vec<String> = serde_yaml::from_value(svc["networks"].clone())
            .unwrap_or_else(|_| panic!("{name}: no networks"));
        assert!(
            on.iter().any(|n| n == net),
            "{name} is not on the proxy's network {net}"
        );
        let s = settings_of(name);
        assert!(
            s.api.bind.ends_with(&format!(":{port}")),
            "{name} listens on {port}"
        );
        let trusted = isir::read::ReadOptions::from_settings(&s.api).trusted_proxies;
        assert!(
            trusted.iter().any(|t| t.contains(&proxy_ip)),
            "{name} is behind the proxy but does not trust {proxy_ip}: every client would share its rate limit"
        );
        assert!(
            trusted.iter().all(|t| t.prefix_len() == t.max_prefix_len()),
            "{name} trusts whole networks {trusted:?}; only the proxy"
        );
        assert_eq!(
            isir::http::guard::client(proxy_ip, &[sent.as_str()], &trusted),
            client.parse::<std::net::IpAddr>().unwrap(),
            "{name} sees the client's address"
        );
    }
}

/// The README's DuckDB recipe works as written on a fresh DuckDB: it loads httpfs (not
/// built in), makes plain GETs (`force_download`, else a refused answer shows as
/// "HTTP 0"), and its offline recipe reads a file the export writes under that name
/// (docs/EXPORTS.md: `cases.csv`, `.gz` with `--gzip`).
#[test]
fn readme_duckdb_recipe_loads_httpfs_and_shows_refusals() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let sql = readme
        .split("```sql")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a DuckDB recipe in the README");
    let lines: Vec<&str> = sql
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("--"))
        .collect();
    let first_read = lines
        .iter()
        .position(|l| l.contains("read_csv('http") || l.contains("read_json('http"))
        .expect("the recipe reads over HTTP");
    for needed in ["INSTALL httpfs", "LOAD httpfs", "SET force_download = true"] {
        let at = lines
            .iter()
            .position(|l| l.contains(needed))
            .unwrap_or_else(|| panic!("the recipe lacks {needed:?}"));
        assert!(at < first_read, "{needed:?} comes before the first read");
    }
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/EXPORTS.md")).unwrap();
    assert!(
        docs.contains("### cases.csv"),
        "docs/EXPORTS.md names cases.csv"
    );
    assert!(
        readme.contains("isir export --out exports/today --gzip")
            && readme.contains("read_csv('exports/today/cases.csv.gz')"),
        "the offline recipe reads the export it writes"
    );
}

/// The README leads with what the project is and its two commands, then a table of
/// contents that links every document of the repository (each under docs/ and its
/// runbooks, and ARCHITECTURE.md), each link to a file that exists, and each README
/// section it names by anchor to a heading that exists.
#[test]
fn readme_leads_with_the_two_commands_then_links_every_document() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let headings: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    assert_eq!(
        &headings[..2],
        &["The two commands", "Contents"],
        "the README's first sections"
    );
    let contents = readme
        .split("## Contents\n")
        .nth(1)
        .and_then(|r| r.split("\n## ").next())
        .unwrap();
    let mut documents = vec!["ARCHITECTURE.md".to_string()];
    for dir in ["docs", "docs/runbooks"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            if name.ends_with(".md") {
                documents.push(if dir == "docs" {
                    format!("docs/{name}")
                } else {
                    "docs/runbooks/".to_string()
                });
            }
        }
    }
    for d in &documents {
        assert!(
            contents.contains(&format!("]({d})")),
            "the README's contents do not link {d}"
        );
    }
    // Every link in the contents leads somewhere.
    let anchor = |h: &str| {
        h.to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect::<String>()
    };
    let anchors: Vec<String> = headings.iter().map(|h| anchor(h)).collect();
    for link in contents.split("](").skip(1) {
        let target = &link[..link.find(')').unwrap()];
        if let Some(a) = target.strip_prefix('#') {
            assert!(anchors.iter().any(|x| x == a), "no README section #{a}");
        } else {
            assert!(root.join(target).exists(), "{target} does not exist");
        }
    }
}
