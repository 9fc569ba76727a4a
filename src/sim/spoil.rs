//! Record-level defects the simulator can inject into a page it serves (issue 40): a
//! record whose bytes are spoiled while the envelope around it stays sound.
//!
//! Owns the kinds of defects and how each spoils one rendered record. The truth is never
//! spoiled: [`super::Simulator::truth_after`] keeps what the register meant, so tests
//! compare what the replica made of a spoiled record with it. It never decides which
//! records to spoil: the fault plan (`faults`) does, by position in the stream.

use crate::source::model::Action;
use crate::source::write;

/// A defect of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordDefect {
    /// The letters of `popisUdalosti` sent as windows-1250 bytes (repairable).
    Cp1250,
    /// The letters of the escaped `poznamka` sent as windows-1250 bytes (repairable).
    Cp1250Note,
    /// `spisovaZnacka` left out.
    NoCase,
    /// `cisloVOddilu` sent as `1a`.
    BadNumber,
    /// The record sent after the record that follows it in the page (its ID then is not
    /// above the one before it). Nothing happens to the last record of a page.
    BackId,
    /// A byte undefined in windows-1250 (0x98) inside `popisUdalosti`: neither UTF-8
    /// nor windows-1250.
    Undecodable,
}

impl RecordDefect {
    pub const ALL: [RecordDefect; 6] = [
        RecordDefect::Cp1250,
        RecordDefect::Cp1250Note,
        RecordDefect::NoCase,
        RecordDefect::BadNumber,
        RecordDefect::BackId,
        RecordDefect::Undecodable,
    ];

    pub fn parse(s: &str) -> Option<RecordDefect> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecordDefect::Cp1250 => "cp1250",
            RecordDefect::Cp1250Note => "cp1250note",
            RecordDefect::NoCase => "nocase",
            RecordDefect::BadNumber => "badnumber",
            RecordDefect::BackId => "backid",
            RecordDefect::Undecodable => "undecodable",
        }
    }
}

/// The content between `<name>` and `</name>` in `rec`, as a byte range.
fn content(rec: &[u8], name: &str) -> Option<std::ops::Range<usize>> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let s = find(rec, open.as_bytes())? + open.len();
    let e = s + find(&rec[s..], close.as_bytes())?;
    Some(s..e)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `rec` with the content of `<name>` replaced by `with`.
fn replace(rec: &[u8], r: std::ops::Range<usize>, with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rec.len() + with.len());
    out.extend_from_slice(&rec[..r.start]);
    out.extend_from_slice(with);
    out.extend_from_slice(&rec[r.end..]);
    out
}

/// The content of `<name>` in `rec` re-encoded as windows-1250.
fn to_cp1250(rec: &[u8], name: &str) -> Vec<u8> {
    let Some(r) = content(rec, name) else {
        return rec.to_vec();
    };
    let text = std::str::from_utf8(&rec[r.clone()]).unwrap_or_default();
    let (bytes, _, _) = encoding_rs::WINDOWS_1250.encode(text);
    replace(rec, r, &bytes)
}

/// One record as sent with `defect` (`BackId` is a matter of order: see [`render_page`]).
pub fn spoil(rec: &[u8], defect: RecordDefect) -> Vec<u8> {
    match defect {
        RecordDefect::Cp1250 => to_cp1250(rec, "popisUdalosti"),
        RecordDefect::Cp1250Note => to_cp1250(rec, "poznamka"),
        RecordDefect::NoCase => {
            let Some(r) = content(rec, "spisovaZnacka") else {
                return rec.to_vec();
            };
            let tag = "<spisovaZnacka>".len();
            replace(rec, r.start - tag..r.end + tag + 1, b"")
        }
        RecordDefect::BadNumber => match content(rec, "cisloVOddilu") {
            Some(r) => replace(rec, r, b"1a"),
            None => {
                let at = find(rec, b"</data>").unwrap_or(rec.len());
                replace(rec, at..at, b"<cisloVOddilu>1a</cisloVOddilu>")
            }
        },
        RecordDefect::BackId => rec.to_vec(),
        RecordDefect::Undecodable => match content(rec, "popisUdalosti") {
            Some(r) => replace(rec, r.start..r.start, b"\x98"),
            None => rec.to_vec(),
        },
    }
}

/// A whole answer with status OK for `page`, whose first action is at `first` (0-based)
/// in the stream, each record spoiled as `defect_at` says for its position. Returns the
/// body and the spoiled records' bytes as sent, by action ID.
pub fn render_page(
    page: &[Action],
    first: usize,
    defect_at: impl Fn(usize) -> Option<RecordDefect>,
) -> (Vec<u8>, Vec<(i64, Vec<u8>)>) {
    let (head, tail) = write::data_response_around();
    let mut recs: Vec<(i64, Vec<u8>, Option<RecordDefect>)> = page
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut s = String::new();
            write::write_action(&mut s, a);
            let d = defect_at(first + i);
            let bytes = match d {
                Some(d) => spoil(s.as_bytes(), d),
                None => s.into_bytes(),
            };
            (a.id, bytes, d)
        })
        .collect();
    if let Some(last) = recs.last_mut()
        && last.2 == Some(RecordDefect::BackId)
    {
        last.2 = None;
    }
    let mut i = 0;
    while i + 1 < recs.len() {
        if recs[i].2 == Some(RecordDefect::BackId) {
            recs.swap(i, i + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
    let mut body =
        Vec::with_capacity(head.len() + tail.len() + recs.iter().map(|r| r.1.len()).sum::<usize>());
    body.extend_from_slice(head.as_bytes());
    let mut sent = Vec::new();
    for (id, bytes, d) in recs {
        body.extend_from_slice(&bytes);
        if d.is_some() {
            sent.push((id, bytes));
        }
    }
    body.extend_from_slice(tail.as_bytes());
    (body, sent)
}
