//! Parsing speed: a 1000-record page decoded into typed actions with every `poznamka`
//! parsed, beside the floor any parser pays (a bare quick-xml event scan that also
//! unescapes each `poznamka` and scans its events without building anything).
//!
//! Beside them (issue 40): the same clean page through the parser as it was before
//! per-record handling (`support/old_parse.rs`, a frozen copy), and a page of the same
//! records with five spoiled ones (two windows-1250 letters, a missing field, a wrong
//! type, an undecodable byte) through the current parser's repair path.
//!
//! `cargo bench --bench parse`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quick_xml::events::Event;
use quick_xml::reader::Reader;

#[path = "support/old_parse.rs"]
#[allow(dead_code)]
mod old_parse;

use isir::sim::spoil::{RecordDefect, render_page};
use isir::sim::{SimOptions, Simulator};
use isir::source::parse::parse_data_response;
use isir::source::write::data_response;

fn page() -> (Vec<u8>, i64, Vec<u8>) {
    // A page from the middle of a long stream: all kinds of actions.
    let sim = Simulator::new(SimOptions {
        seed: 42,
        actions: 21_000,
        ..Default::default()
    });
    let all = sim.truth_all();
    let slice = &all[20_000..21_000];
    let defects = [
        (10, RecordDefect::Cp1250),
        (200, RecordDefect::Cp1250Note),
        (400, RecordDefect::NoCase),
        (600, RecordDefect::BadNumber),
        (800, RecordDefect::Undecodable),
    ];
    let (spoiled, _) = render_page(slice, 0, |i| {
        defects.iter().find(|(at, _)| *at == i).map(|(_, d)| *d)
    });
    (data_response(slice).into_bytes(), all[19_999].id, spoiled)
}

/// The floor: every event of the page, and every event of every unescaped `poznamka`.
fn bare_scan(body: &[u8]) -> usize {
    let mut r = Reader::from_reader(body);
    let mut n = 0usize;
    let mut in_note = false;
    loop {
        match r.read_event().unwrap() {
            Event::Start(e) => {
                in_note = e.local_name().as_ref() == b"poznamka";
                n += 1;
            }
            Event::Text(t) if in_note => {
                let inner = t.unescape().unwrap();
                let mut ir = Reader::from_str(&inner);
                loop {
                    match ir.read_event().unwrap() {
                        Event::Eof => break,
                        _ => n += 1,
                    }
                }
            }
            Event::End(_) => in_note = false,
            Event::Eof => break,
            _ => n += 1,
        }
    }
    n
}

fn bench(c: &mut Criterion) {
    let (body, after, spoiled) = page();
    let parsed = parse_data_response(&body, after).unwrap();
    assert_eq!(parsed.len(), 1000);
    assert_eq!(
        old_parse::parse_data_response(&body, after).unwrap(),
        parsed
    );
    let defective = parse_data_response(&spoiled, after).unwrap();
    // Three held back; the windows-1250 letters are repaired where the field has any.
    assert_eq!(defective.held().count(), 3);
    assert_eq!(defective.len(), 1000);
    eprintln!(
        "defective page: {} spoiled records ({} repaired)",
        defective.spoiled.len(),
        defective.repaired().count()
    );
    eprintln!("page: {} bytes, 1000 records", body.len());
    // bench/parse_lxml.py parses the very same page with Python's lxml.
    if let Ok(path) = std::env::var("ISIR_DUMP_PAGE") {
        std::fs::write(&path, &body).unwrap();
        std::fs::write(format!("{path}.after"), after.to_string()).unwrap();
    }
    let mut g = c.benchmark_group("page_1000");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("typed_parse_with_details", |b| {
        b.iter(|| parse_data_response(std::hint::black_box(&body), after).unwrap())
    });
    g.bench_function("old_parser_clean", |b| {
        b.iter(|| old_parse::parse_data_response(std::hint::black_box(&body), after).unwrap())
    });
    g.bench_function("typed_parse_five_spoiled", |b| {
        b.iter(|| parse_data_response(std::hint::black_box(&spoiled), after).unwrap())
    });
    g.bench_function("bare_quick_xml_scan", |b| {
        b.iter(|| bare_scan(std::hint::black_box(&body)))
    });
    g.finish();
    // Under `--profile-time` (perf) only the chosen benchmark runs.
    if std::env::args().all(|a| a != "--profile-time") {
        interleaved_ratio(&body, after);
        interleaved_old_new(&body, &spoiled, after);
    }
}

/// The ratio again, robust to a noisy machine: the two alternate 1000 times and the
/// fastest run of each is kept (criterion measures them minutes apart).
fn interleaved_ratio(body: &[u8], after: i64) {
    use std::time::Instant;
    let (mut typed, mut bare) = (f64::MAX, f64::MAX);
    for _ in 0..1000 {
        let t = Instant::now();
        std::hint::black_box(parse_data_response(std::hint::black_box(body), after).unwrap());
        typed = typed.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        std::hint::black_box(bare_scan(std::hint::black_box(body)));
        bare = bare.min(t.elapsed().as_secs_f64());
    }
    let mib = body.len() as f64 / 1_048_576.0;
    println!(
        "page_1000/interleaved: typed {:.0} MiB/s, bare scan {:.0} MiB/s, ratio {:.3} (fastest of 1000 alternating runs each)",
        mib / typed,
        mib / bare,
        bare / typed
    );
}

/// The clean path before and after per-record handling, and the repair path, alternating
/// 1000 times (fastest run of each kept).
fn interleaved_old_new(body: &[u8], spoiled: &[u8], after: i64) {
    use std::time::Instant;
    let (mut old, mut new, mut bad) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..1000 {
        let t = Instant::now();
        std::hint::black_box(
            old_parse::parse_data_response(std::hint::black_box(body), after).unwrap(),
        );
        old = old.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        std::hint::black_box(parse_data_response(std::hint::black_box(body), after).unwrap());
        new = new.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        std::hint::black_box(parse_data_response(std::hint::black_box(spoiled), after).unwrap());
        bad = bad.min(t.elapsed().as_secs_f64());
    }
    let mib = body.len() as f64 / 1_048_576.0;
    println!(
        "page_1000/interleaved: old parser clean {:.0} MiB/s, new parser clean {:.0} MiB/s (new/old time {:.3}), \
         five spoiled records {:.0} MiB/s (spoiled/clean time {:.3}) (fastest of 1000 alternating runs each)",
        mib / old,
        mib / new,
        new / old,
        mib / bad,
        bad / new
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
