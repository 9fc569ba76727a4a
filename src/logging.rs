//! Log output and progress bars: the tracing subscriber of a process (human text for a
//! terminal, one JSON object a line for machines: `log.format`), and progress bars that
//! never tangle with log lines (a line is written while the bar is hidden, then the bar
//! is drawn again).
//!
//! Owns stderr. Never logs personal data itself; what goes into a line is the caller's
//! field list. The one process-wide item is the bar being drawn, which the log writer
//! must know; everything else is passed in.

use std::io::Write;
use std::sync::Mutex;

pub use crate::config::LogFormat;

/// The bars being drawn now; a log line is written with them hidden.
static BARS: Mutex<Vec<(u64, indicatif::ProgressBar)>> = Mutex::new(Vec::new());
static NEXT_BAR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes to stderr with every visible progress bar hidden for the line.
#[derive(Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = BARS
            .lock()
            .ok()
            .and_then(|b| b.first().map(|(_, b)| b.clone()));
        match bar {
            Some(b) => b.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Stderr;
    fn make_writer(&'a self) -> Stderr {
        Stderr
    }
}

/// Installs the process's subscriber: the filter from `ISIR_LOG` (else `RUST_LOG`, else
/// `info,sqlx=error`), lines in `format` on stderr. A second call changes nothing.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ISIR_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=error"));
    // Colours only on a terminal (and not under NO_COLOR): a log written to a file or a
    // pipe carries no escape codes.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(Stderr);
    let _ = match format {
        LogFormat::Text => b.try_init(),
        LogFormat::Json => b
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
}

/// A progress bar on stderr, hidden from log lines while it is drawn; removed from the
/// terminal when dropped. `None` when stderr is not a terminal (or `show` is false), so
/// that logs of a service stay plain lines.
pub struct Bar(indicatif::ProgressBar, u64);

impl Bar {
    pub fn new(show: bool, len: u64, template: &str) -> Option<Bar> {
        use std::io::IsTerminal;
        if !show || !std::io::stderr().is_terminal() {
            return None;
        }
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let id = NEXT_BAR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut bars) = BARS.lock() {
            bars.push((id, b.clone()));
        }
        Some(Bar(b, id))
    }
}

impl std::ops::Deref for Bar {
    type Target = indicatif::ProgressBar;
    fn deref(&self) -> &indicatif::ProgressBar {
        &self.0
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
        if let Ok(mut bars) = BARS.lock() {
            bars.retain(|(id, _)| *id != self.1);
        }
    }
}
