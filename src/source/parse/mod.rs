//! Parsing of the service's SOAP answers and of the `poznamka` detail documents.
//!
//! Owns the reading of bytes into [`Page`], the newest ID and [`Detail`]. It matches on
//! local names and namespace URIs, never on prefixes; ignores unknown elements; keeps
//! every value verbatim. It never performs I/O.
//!
//! The envelope is accepted whole or not at all (not XML, truncated, a Fault, a `CHYBA`
//! status fail the page). A `data` record is judged alone: a record missing a required
//! field, holding a value of the wrong type, or out of ID order is kept aside as
//! [`Spoiled`] with its raw bytes, and the page's other records are returned as usual.
//! A body that is UTF-8 takes the fast path (one SIMD check, texts cut from it); only a
//! body that is not is repaired first (`repair`: windows-1250 letters decoded where they
//! sit, undecodable bytes cut out and their record held back).
//!
//! The envelope is read in `envelope.rs` and assembled into a page here; the `poznamka`
//! document's parser is `note.rs`; the XML reading they share is `xml.rs`.

mod envelope;
mod note;
mod xml;

use super::error::SourceError;
use super::model::*;

use envelope::{Answer, Expect, RawRecord, RecordFault, parse_envelope, parse_envelope_str};
pub use note::{note_of, parse_note, records};

pub const SOAP_ENV_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
pub const TYPES_NS: &str = "http://isirpublicws.cca.cz/types/";
pub const NOTE_NS: &str = "http://www.cca.cz/isir/poznamka";

/// Parses an answer of the actions-after-ID operation, validating it against the
/// requested `after`: the records returned strictly ascend, all above `after`. A record
/// that fails alone (a required field missing, a value of the wrong type, its ID out of
/// order, bytes neither UTF-8 nor windows-1250) is returned in [`Page::spoiled`] with
/// its bytes as received, as is a record repaired from windows-1250 (which is also in
/// `records`). Failures of the envelope are errors, as before.
pub fn parse_data_response(body: &[u8], after: i64) -> Result<Page, SourceError> {
    // The fast path: one UTF-8 check of the whole body (SIMD: the body is mostly ASCII
    // with Czech letters in it); every text is then cut from it as it is.
    if let Ok(src) = simdutf8::basic::from_utf8(body) {
        let raws = data_records(parse_envelope_str(src, body.len(), Expect::Data)?);
        return Ok(assemble(raws, after, |span| span, &[], body));
    }
    // Not UTF-8 (or cut inside a character): repair, then parse the repaired text.
    let fixed = super::repair::repair(body);
    let first_bad = fixed.runs.first().map(|r| r.orig);
    let raws = match parse_envelope_str(&fixed.text, body.len(), Expect::Data) {
        Ok(a) => data_records(a),
        // A truncated body stays truncated; any other failure of the envelope is blamed
        // on the first sequence that was not UTF-8, as the strict check did.
        Err(e @ SourceError::Retryable(_)) => return Err(e),
        Err(e) => {
            return Err(match first_bad {
                Some(at) => SourceError::Invalid(format!("the body is not UTF-8 at byte {at}")),
                None => e,
            });
        }
    };
    // A sequence that is not UTF-8 outside every record: the envelope is damaged.
    for run in &fixed.runs {
        if !raws.iter().any(|r| r.span.contains(&run.new)) {
            return Err(SourceError::Invalid(format!(
                "the body is not UTF-8 at byte {}",
                run.orig
            )));
        }
    }
    let map = |span: std::ops::Range<usize>| fixed.to_orig(span.start)..fixed.to_orig(span.end);
    Ok(assemble(raws, after, map, &fixed.runs, body))
}

/// [`parse_data_response`] with today's strict rule (`source.bad_records = "stop"`): any
/// spoiled record, repaired or not, fails the page as invalid, naming the first.
pub fn parse_data_response_strict(body: &[u8], after: i64) -> Result<Page, SourceError> {
    let page = parse_data_response(body, after)?;
    match page.spoiled.first() {
        None => Ok(page),
        Some(s) => Err(SourceError::Invalid(strict_message(s))),
    }
}

/// One kept record's bytes (`<data>` to `</data>`, as the quarantine holds them) parsed
/// again alone, as the poller would parse it in a page: the record, and whether it had
/// to be repaired; `Err` with the spoiled record when it still does not parse.
pub fn parse_record(raw: &[u8]) -> Result<(Record, bool), Box<Spoiled>> {
    let (head, tail) = super::write::data_response_around();
    let mut body = Vec::with_capacity(head.len() + raw.len() + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.extend_from_slice(raw);
    body.extend_from_slice(tail.as_bytes());
    let not_one = |detail: String| Spoiled {
        id: None,
        case_number: None,
        reason: SpoilReason::Encoding,
        detail,
        raw: raw.to_vec(),
    };
    let mut page = match parse_data_response(&body, i64::MIN) {
        Ok(p) => p,
        Err(e) => return Err(Box::new(not_one(e.to_string()))),
    };
    if let Some(held) = page.held().next() {
        return Err(Box::new(held.clone()));
    }
    let repaired = page.repaired().next().is_some();
    match (page.records.pop(), page.records.is_empty()) {
        (Some(r), true) => Ok((r, repaired)),
        _ => Err(Box::new(not_one("not exactly one data record".into()))),
    }
}

/// How the strict rule names a spoiled record.
pub fn strict_message(s: &Spoiled) -> String {
    match s.id {
        Some(id) => format!("record {id}: {} ({})", s.detail, s.reason.as_str()),
        None => format!("a record: {} ({})", s.detail, s.reason.as_str()),
    }
}

fn data_records(a: Answer) -> Vec<RawRecord> {
    match a {
        Answer::Data(r) => r,
        Answer::LastId(_) => unreachable!(),
    }
}

/// The page from its records as read: order checked against `after` and the record
/// before, repaired and undecodable runs (`runs`, in repaired-text positions) assigned
/// to the records holding them, raw bytes cut from `body` through `map`.
fn assemble(
    raws: Vec<RawRecord>,
    after: i64,
    map: impl Fn(std::ops::Range<usize>) -> std::ops::Range<usize>,
    runs: &[super::repair::Run],
    body: &[u8],
) -> Page {
    let mut records = Vec::with_capacity(raws.len());
    let mut spoiled = Vec::new();
    let mut prev = after;
    for raw in raws {
        let (mut repaired, mut undecodable) = (false, false);
        if !runs.is_empty() {
            for run in runs.iter().filter(|r| raw.span.contains(&r.new)) {
                repaired |= run.ok;
                undecodable |= !run.ok;
            }
        }
        let fault = match raw.parsed {
            Ok(rec) if undecodable => RecordFault {
                id: Some(rec.action.id),
                case_number: Some(rec.action.case_number),
                reason: SpoilReason::Encoding,
                detail: "bytes that are neither UTF-8 nor windows-1250 text".into(),
            },
            Ok(rec) if rec.action.id <= prev => RecordFault {
                id: Some(rec.action.id),
                case_number: Some(rec.action.case_number),
                reason: SpoilReason::OutOfOrder,
                detail: if prev == after {
                    format!("id is not above the requested ID {after}")
                } else {
                    format!("id is not above the record before it ({prev})")
                },
            },
            Ok(rec) => {
                prev = rec.action.id;
                if repaired {
                    spoiled.push(Spoiled {
                        id: Some(rec.action.id),
                        case_number: Some(rec.action.case_number.clone()),
                        reason: SpoilReason::Cp1250,
                        detail: "windows-1250 bytes decoded".into(),
                        raw: body[map(raw.span)].to_vec(),
                    });
                }
                records.push(rec);
                continue;
            }
            Err(f) if undecodable => RecordFault {
                reason: SpoilReason::Encoding,
                detail: format!(
                    "bytes that are neither UTF-8 nor windows-1250 text; {}",
                    f.detail
                ),
                ..f
            },
            Err(f) => f,
        };
        spoiled.push(Spoiled {
            id: fault.id,
            case_number: fault.case_number,
            reason: fault.reason,
            detail: fault.detail,
            raw: body[map(raw.span)].to_vec(),
        });
    }
    Page {
        after,
        records,
        spoiled,
    }
}

/// Parses an answer of the newest-ID operation (the maximum of `cisloPosledniId`).
pub fn parse_last_id_response(body: &[u8]) -> Result<i64, SourceError> {
    match parse_envelope(body, Expect::LastId)? {
        Answer::LastId(Some(id)) => Ok(id),
        Answer::LastId(None) => Err(SourceError::Invalid(
            "no cisloPosledniId in the answer".into(),
        )),
        Answer::Data(_) => unreachable!(),
    }
}
