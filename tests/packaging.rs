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
    assert_eq!(entry.unwrap(), ["/usr/local/bin/isir"]);
    parses(&cmd.unwrap());
    // Every Cargo target the manifest names is copied in, or `cargo build` fails.
    assert!(text.contains("COPY benches"));
    let s = settings_from(&env);
    let port: u16 = s.api.bind.rsplit_once(':').unwrap().1.parse().unwrap();
    assert_eq!(expose, [port], "EXPOSE matches api.bind");
}

#[test]
fn compose_file_is_sound() {
    let text = std::fs::read_to_string(root().join("docker-compose.yml")).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let services = doc["services"].as_mapping().unwrap();
    let names: Vec<&str> = services.keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(names, ["postgres", "redis", "writer", "api1", "api2"]);
    let mut writers = 0;
    for (name, svc) in services {
        let name = name.as_str().unwrap();
        if !name.starts_with("api") && name != "writer" {
            continue;
        }
        let cmd: Vec<String> = serde_yaml::from_value(svc["command"].clone()).unwrap();
        parses(&cmd);
        if cmd[0] == "run" {
            writers += 1;
        } else {
            assert_eq!(cmd, ["serve"], "{name}: the API replicas only serve");
        }
        let env: BTreeMap<String, String> =
            serde_yaml::from_value(svc["environment"].clone()).unwrap();
        let s = settings_from(&env);
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

#[test]
fn systemd_unit_is_sound() {
    let text = std::fs::read_to_string(root().join("deploy/isir.service")).unwrap();
    let mut sections: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
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
            .unwrap_or_else(|| panic!("not a key=value: {line}"));
        assert!(!cur.is_empty(), "{k} outside a section");
        sections
            .get_mut(&cur)
            .unwrap()
            .insert(k.to_string(), v.to_string());
    }
    assert_eq!(
        sections.keys().collect::<Vec<_>>(),
        ["Install", "Service", "Unit"]
    );
    let svc = &sections["Service"];
    let exec: Vec<String> = svc["ExecStart"]
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(exec[0], "/usr/local/bin/isir");
    parses(&exec[1..]);
    assert_eq!(exec.last().unwrap(), "run");
    assert_eq!(
        svc["KillSignal"], "SIGTERM",
        "the daemon stops cleanly on SIGTERM"
    );
    assert_eq!(sections["Install"]["WantedBy"], "multi-user.target");
}
