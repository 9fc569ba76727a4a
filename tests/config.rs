//! The settings tree: defaults, then `isir.toml`, then `ISIR_` variables; validation names
//! the key.
// figment::Jail's closures return figment::Error, whose size is figment's to choose.
#![allow(clippy::result_large_err)]

use isir::config::Settings;

#[test]
fn defaults_file_then_environment() {
    figment::Jail::expect_with(|jail| {
        let d = Settings::load(None).unwrap();
        assert_eq!(d.lease.ttl_secs, 900);
        assert_eq!(d.poll.period_secs, 600);
        assert_eq!(d.poll.max_batches_per_tick, 20);
        assert_eq!(d.budget.daily, 3000);
        assert_eq!(d.budget.per_minute, 50);
        assert_eq!(d.database.url, "sqlite://isir.db");
        assert_eq!(d.redis.url, None);
        assert_eq!(d.source.max_body_bytes, 32 * 1024 * 1024);
        jail.create_file(
            "isir.toml",
            "[poll]\nperiod_secs = 300\n[database]\nurl = \"postgres://x@h/db\"\n",
        )?;
        jail.set_env("ISIR_POLL__PERIOD_SECS", "120");
        jail.set_env("ISIR_REDIS__URL", "redis://127.0.0.1:6379");
        jail.set_env("ISIR_SOURCE__URL", "http://127.0.0.1:1/x");
        jail.set_env("ISIR_LOG", "debug");
        jail.set_env("ISIR_TEST_PG", "postgres://ignored");
        let s = Settings::load(None).unwrap();
        assert_eq!(s.poll.period_secs, 120, "environment wins over the file");
        assert_eq!(
            s.database.url, "postgres://x@h/db",
            "file wins over defaults"
        );
        assert_eq!(s.redis.url.as_deref(), Some("redis://127.0.0.1:6379"));
        assert_eq!(s.source.url, "http://127.0.0.1:1/x");
        Ok(())
    });
}

#[test]
fn errors_name_the_key() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("ISIR_POLL__PERIOD_SECS", "soon");
        let e = Settings::load(None).unwrap_err().to_string();
        assert!(e.contains("poll.period_secs"), "{e}");
        Ok(())
    });
    figment::Jail::expect_with(|jail| {
        jail.set_env("ISIR_DATABASE__URL", "mysql://x");
        jail.set_env("ISIR_LEASE__TTL_SECS", "1");
        let e = Settings::load(None).unwrap_err().to_string();
        assert!(
            e.contains("database.url") && e.contains("lease.ttl_secs"),
            "{e}"
        );
        Ok(())
    });
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "isir.toml",
            "[api]\ntrusted_proxies = [\"10.0.0.0/8\", \"proxy.local\"]\nstatement_timeout_ms = 0\nstream_max_rows = 0\nsqlite_mmap_mib = 2000000\n\n[projection]\nanalyze_every_secs = 0\nrebuild_wal_limit_mib = 0\n",
        )?;
        let e = Settings::load(None).unwrap_err().to_string();
        for key in [
            "api.trusted_proxies",
            "api.statement_timeout_ms",
            "api.stream_max_rows",
            "api.sqlite_mmap_mib",
            "projection.analyze_every_secs",
            "projection.rebuild_wal_limit_mib",
        ] {
            assert!(e.contains(key), "{key}: {e}");
        }
        Ok(())
    });
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "isir.toml",
            "[api]\nipv6_client_prefix = 16\nheader_read_timeout_secs = 0\nkeep_alive_idle_secs = 0\nwrite_timeout_secs = 0\nrequest_timeout_secs = 0\nmax_open_connections = 10\nmax_connections_per_client = 11\n",
        )?;
        let e = Settings::load(None).unwrap_err().to_string();
        for key in [
            "api.ipv6_client_prefix",
            "api.header_read_timeout_secs",
            "api.keep_alive_idle_secs",
            "api.write_timeout_secs",
            "api.request_timeout_secs",
            "api.max_connections_per_client",
        ] {
            assert!(e.contains(key), "{key}: {e}");
        }
        jail.create_file("isir.toml", "[api]\nmax_open_connections = 0\n")?;
        let e = Settings::load(None).unwrap_err().to_string();
        assert!(e.contains("api.max_open_connections"), "{e}");
        jail.create_file("isir.toml", "[api]\nipv6_client_prefix = 48\nmax_open_connections = 10\nmax_connections_per_client = 10\n")?;
        Settings::load(None).expect("valid connection settings load");
        Ok(())
    });
    figment::Jail::expect_with(|jail| {
        jail.create_file("isir.toml", "[poll]\nperiod = 5\n")?;
        let e = Settings::load(None).unwrap_err().to_string();
        assert!(e.contains("period"), "unknown keys are refused: {e}");
        Ok(())
    });
}
