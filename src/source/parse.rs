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

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{PrefixDeclaration, QName};
use quick_xml::reader::Reader;

use super::error::SourceError;
use super::model::*;

pub const SOAP_ENV_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
pub const TYPES_NS: &str = "http://isirpublicws.cca.cz/types/";
pub const NOTE_NS: &str = "http://www.cca.cz/isir/poznamka";

/// A quick-xml reader over a document already known to be UTF-8: every text slice is
/// taken from `src` by its offset instead of being validated again.
struct Doc<'i> {
    r: Reader<&'i [u8]>,
    src: &'i str,
}

impl<'i> Doc<'i> {
    fn new(src: &'i str) -> Self {
        let mut r = Reader::from_reader(src.as_bytes());
        r.config_mut().expand_empty_elements = true;
        Doc { r, src }
    }
    fn read_event(&mut self) -> quick_xml::Result<Event<'i>> {
        self.r.read_event()
    }
    fn read_to_end(&mut self, name: QName) -> quick_xml::Result<()> {
        self.r.read_to_end(name).map(|_| ())
    }
    fn buffer_position(&self) -> u64 {
        self.r.buffer_position()
    }
    /// The text of `raw`, a slice the reader borrowed from `src` (quick-xml cuts only at
    /// ASCII delimiters, so it lies on character boundaries): no second UTF-8 check.
    fn text(&self, raw: &[u8]) -> Result<Cow<'i, str>, XmlError> {
        let off = (raw.as_ptr() as usize).wrapping_sub(self.src.as_ptr() as usize);
        match self.src.get(off..off.wrapping_add(raw.len())) {
            Some(s) if s.as_ptr() == raw.as_ptr() => Ok(Cow::Borrowed(s)),
            // Not a slice of the document (a slice reader never does this): validate it.
            _ => std::str::from_utf8(raw)
                .map(|s| Cow::Owned(s.to_owned()))
                .map_err(|e| XmlError::Content(format!("text not UTF-8: {e}"))),
        }
    }
}

/// Resolves the predefined entities and character references of `s`, borrowing when
/// there are none.
fn unescape(s: Cow<'_, str>) -> Result<Cow<'_, str>, XmlError> {
    if memchr::memchr(b'&', s.as_bytes()).is_none() {
        return Ok(s);
    }
    Ok(Cow::Owned(match unescape_predefined(&s) {
        Some(u) => u,
        None => quick_xml::escape::unescape(&s)?.into_owned(),
    }))
}

/// The unescaped form of `s` when every reference in it is one of the five predefined
/// entities; `None` when it holds anything else (a character reference, an unknown or
/// unterminated entity), which [`quick_xml::escape::unescape`] then resolves or refuses.
/// The same result as quick-xml's for the texts it accepts, in one pass that does not
/// stop at every `;`: a `poznamka` is an escaped XML document, two entities a tag, and
/// unescaping it was the largest single cost of parsing a page.
fn unescape_predefined(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut start = 0;
    while let Some(at) = memchr::memchr(b'&', &b[start..]) {
        let amp = start + at;
        out.push_str(&s[start..amp]);
        let (c, len) = match &b[amp + 1..] {
            [b'l', b't', b';', ..] => ('<', 4),
            [b'g', b't', b';', ..] => ('>', 4),
            [b'q', b'u', b'o', b't', b';', ..] => ('"', 6),
            [b'a', b'm', b'p', b';', ..] => ('&', 5),
            [b'a', b'p', b'o', b's', b';', ..] => ('\'', 6),
            _ => return None,
        };
        out.push(c);
        start = amp + len;
    }
    out.push_str(&s[start..]);
    Some(out)
}

/// An error inside the XML, before it is classified as truncated or invalid.
#[derive(Debug)]
enum XmlError {
    /// The input ended while elements were still open.
    Eof,
    Syntax(String),
    Content(String),
}

impl From<quick_xml::Error> for XmlError {
    fn from(e: quick_xml::Error) -> Self {
        match e {
            quick_xml::Error::Syntax(s) => XmlError::Syntax(s.to_string()),
            other => XmlError::Syntax(other.to_string()),
        }
    }
}

impl From<quick_xml::escape::EscapeError> for XmlError {
    fn from(e: quick_xml::escape::EscapeError) -> Self {
        XmlError::Syntax(format!("bad escape: {e}"))
    }
}

fn is_blank(t: &[u8]) -> bool {
    t.iter().all(|b| b.is_ascii_whitespace())
}

/// Reads the text of a leaf element whose start tag was just read, up to its end tag,
/// borrowing from the document when it can. Nested elements are skipped.
fn leaf_text<'i>(r: &mut Doc<'i>) -> Result<Cow<'i, str>, XmlError> {
    let mut out: Option<Cow<'i, str>> = None;
    loop {
        let piece = match r.read_event()? {
            Event::Text(t) => unescape(r.text(&t)?)?,
            Event::CData(c) => r.text(&c)?,
            Event::Start(e) => {
                r.read_to_end(e.name())?;
                continue;
            }
            Event::End(_) => return Ok(out.unwrap_or(Cow::Borrowed(""))),
            Event::Eof => return Err(XmlError::Eof),
            Event::DocType(_) => return Err(XmlError::Content("DOCTYPE is not allowed".into())),
            _ => continue,
        };
        match &mut out {
            None => out = Some(piece),
            Some(o) => o.to_mut().push_str(&piece),
        }
    }
}

/// [`leaf_text`], owned.
fn leaf(r: &mut Doc) -> Result<String, XmlError> {
    leaf_text(r).map(Cow::into_owned)
}

fn opt_leaf(r: &mut Doc, slot: &mut Option<String>) -> Result<(), XmlError> {
    *slot = Some(leaf(r)?);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The envelope

/// Which answer the caller expects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Data,
    LastId,
}

impl Expect {
    fn wrapper(self) -> &'static [u8] {
        match self {
            Expect::Data => b"getIsirWsPublicDataResponse",
            Expect::LastId => b"getIsirWsPublicPosledniDataResponse",
        }
    }
}

/// One `data` record as read: where it lies in the text parsed, and what it gave.
struct RawRecord {
    span: std::ops::Range<usize>,
    parsed: Result<Record, RecordFault>,
}

/// Why one record could not be made an action; the page goes on.
struct RecordFault {
    id: Option<i64>,
    case_number: Option<String>,
    reason: SpoilReason,
    detail: String,
}

enum Answer {
    Data(Vec<RawRecord>),
    LastId(Option<i64>),
}

#[derive(Default)]
struct Status {
    stav: Option<String>,
    code: Option<String>,
    text: Option<String>,
}

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

fn parse_envelope(body: &[u8], expect: Expect) -> Result<Answer, SourceError> {
    // One UTF-8 check of the whole body; every text is then cut from it as it is.
    let src = match simdutf8::compat::from_utf8(body) {
        Ok(s) => s,
        // Cut inside a character: what is whole parses as a truncated document.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&body[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(e) => {
            return Err(SourceError::Invalid(format!(
                "the body is not UTF-8 at byte {}",
                e.valid_up_to()
            )));
        }
    };
    parse_envelope_str(src, body.len(), expect)
}

/// Parses the envelope of `src`, the text of a body of `body_len` bytes.
fn parse_envelope_str(src: &str, body_len: usize, expect: Expect) -> Result<Answer, SourceError> {
    let mut r = Doc::new(src);
    let mut in_envelope = false;
    let mut ns = Bindings::default();
    match envelope(&mut r, &mut ns, expect, &mut in_envelope) {
        Ok(a) => Ok(a),
        Err(Outcome::Source(e)) => Err(e),
        Err(Outcome::Xml(e)) => {
            let at = r.buffer_position();
            let reached_end = at as usize >= src.len();
            Err(match e {
                XmlError::Eof if in_envelope => SourceError::Retryable(format!(
                    "truncated body: the document ends after {body_len} bytes before the envelope closes"
                )),
                XmlError::Syntax(_) if in_envelope && reached_end => {
                    SourceError::Retryable(format!(
                        "truncated body: the document ends after {body_len} bytes inside a tag"
                    ))
                }
                XmlError::Eof => SourceError::Invalid("empty or non-SOAP body".into()),
                XmlError::Syntax(m) => {
                    SourceError::Invalid(format!("not well-formed XML at byte {at}: {m}"))
                }
                XmlError::Content(m) => SourceError::Invalid(format!("{m} (near byte {at})")),
            })
        }
    }
}

enum Outcome {
    Xml(XmlError),
    Source(SourceError),
}

impl From<XmlError> for Outcome {
    fn from(e: XmlError) -> Self {
        Outcome::Xml(e)
    }
}
impl From<quick_xml::Error> for Outcome {
    fn from(e: quick_xml::Error) -> Self {
        Outcome::Xml(e.into())
    }
}

fn invalid(msg: impl Into<String>) -> Outcome {
    Outcome::Source(SourceError::Invalid(msg.into()))
}

/// Namespace bindings declared on the envelope's outer elements (Envelope, Header or
/// Body, the answer's wrapper). Children of the wrapper are unqualified, so only these
/// few levels need resolving; a full namespace-tracking reader would cost every event.
#[derive(Default)]
struct Bindings {
    /// (prefix, URI); the empty prefix is the default namespace. Later ones win.
    decl: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Bindings {
    /// Records the element's declarations and tells whether it is in namespace `uri`.
    fn is_in(&mut self, e: &BytesStart, uri: &str) -> bool {
        for a in e.attributes().flatten() {
            match a.key.as_namespace_binding() {
                Some(PrefixDeclaration::Default) => self.decl.push((Vec::new(), a.value.to_vec())),
                Some(PrefixDeclaration::Named(p)) => self.decl.push((p.to_vec(), a.value.to_vec())),
                None => {}
            }
        }
        let name = e.name();
        let prefix: &[u8] = name.prefix().map(|p| p.into_inner()).unwrap_or(b"");
        self.decl
            .iter()
            .rev()
            .find(|(p, _)| p.as_slice() == prefix)
            .is_some_and(|(_, u)| u.as_slice() == uri.as_bytes())
    }
}

fn local(e: &BytesStart) -> String {
    String::from_utf8_lossy(e.local_name().as_ref()).into_owned()
}

fn envelope(
    r: &mut Doc,
    ns: &mut Bindings,
    expect: Expect,
    in_envelope: &mut bool,
) -> Result<Answer, Outcome> {
    // Prolog, then the Envelope.
    loop {
        match r.read_event()? {
            Event::Start(e) => {
                if e.local_name().as_ref() == b"Envelope" && ns.is_in(&e, SOAP_ENV_NS) {
                    *in_envelope = true;
                    break;
                }
                return Err(invalid(format!(
                    "unexpected root element <{}>, not a SOAP envelope",
                    local(&e)
                )));
            }
            Event::Text(t) if is_blank(&t) => {}
            Event::Text(_) | Event::CData(_) => {
                return Err(invalid("text before the SOAP envelope"));
            }
            Event::DocType(_) => return Err(invalid("DOCTYPE is not allowed")),
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            _ => {}
        }
    }
    // Header (skipped), then Body.
    loop {
        match r.read_event()? {
            Event::Start(e) if e.local_name().as_ref() == b"Body" && ns.is_in(&e, SOAP_ENV_NS) => {
                break;
            }
            Event::Start(e) if e.local_name().as_ref() == b"Header" => r.read_to_end(e.name())?,
            Event::Start(e) => {
                return Err(invalid(format!(
                    "unexpected <{}> in the SOAP envelope",
                    local(&e)
                )));
            }
            Event::End(_) => return Err(invalid("SOAP envelope without a Body")),
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            Event::DocType(_) => return Err(invalid("DOCTYPE is not allowed")),
            _ => {}
        }
    }
    // The one element inside Body.
    let answer = loop {
        match r.read_event()? {
            Event::Start(e) if e.local_name().as_ref() == b"Fault" && ns.is_in(&e, SOAP_ENV_NS) => {
                return Err(fault(r));
            }
            Event::Start(e)
                if e.local_name().as_ref() == expect.wrapper() && ns.is_in(&e, TYPES_NS) =>
            {
                break wrapper(r, expect)?;
            }
            Event::Start(e) => {
                return Err(invalid(format!(
                    "unexpected <{}> in the SOAP Body, expected {}",
                    local(&e),
                    String::from_utf8_lossy(expect.wrapper())
                )));
            }
            Event::End(_) => return Err(invalid("empty SOAP Body")),
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            _ => {}
        }
    };
    // The rest of Body and Envelope must close properly.
    let mut depth = 2usize;
    while depth > 0 {
        match r.read_event()? {
            Event::End(_) => depth -= 1,
            Event::Start(e) => r.read_to_end(e.name())?,
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            _ => {}
        }
    }
    loop {
        match r.read_event()? {
            Event::Eof => break,
            Event::Start(_) => return Err(invalid("content after the SOAP envelope")),
            _ => {}
        }
    }
    Ok(answer)
}

fn fault(r: &mut Doc) -> Outcome {
    let mut code = None;
    let mut text = None;
    let res: Result<(), XmlError> = (|| loop {
        match r.read_event()? {
            Event::Start(e) => match e.local_name().as_ref() {
                b"faultcode" => code = Some(leaf(r)?),
                b"faultstring" => text = Some(leaf(r)?),
                _ => r.read_to_end(e.name())?,
            },
            Event::End(_) => return Ok(()),
            Event::Eof => return Err(XmlError::Eof),
            _ => {}
        }
    })();
    match res {
        // A Fault is the answer even if what follows its code or text is damaged.
        Err(e) if code.is_none() && text.is_none() => Outcome::Xml(e),
        _ => Outcome::Source(SourceError::Fault { code, text }),
    }
}

fn wrapper(r: &mut Doc, expect: Expect) -> Result<Answer, Outcome> {
    let mut records = Vec::with_capacity(if expect == Expect::Data { 1000 } else { 0 });
    let mut last_id: Option<i64> = None;
    let mut status: Option<Status> = None;
    loop {
        let start = r.buffer_position() as usize;
        match r.read_event()? {
            Event::Start(e) => match e.local_name().as_ref() {
                b"data" if expect == Expect::Data => {
                    let parsed = record(r)?;
                    let span = start..r.buffer_position() as usize;
                    records.push(RawRecord { span, parsed });
                }
                b"cisloPosledniId" if expect == Expect::LastId => {
                    let t = leaf(r)?;
                    let v: i64 = t
                        .trim()
                        .parse()
                        .map_err(|_| invalid(format!("cisloPosledniId is not a number: {t:?}")))?;
                    last_id = Some(last_id.map_or(v, |m| m.max(v)));
                }
                b"status" => {
                    if status.is_some() {
                        return Err(invalid("more than one status block"));
                    }
                    status = Some(status_block(r)?);
                }
                _ => r.read_to_end(e.name())?,
            },
            Event::End(_) => break,
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            Event::DocType(_) => return Err(invalid("DOCTYPE is not allowed")),
            _ => {}
        }
    }
    let status = status.ok_or_else(|| invalid("the answer has no status block"))?;
    match status.stav.as_deref() {
        Some("OK") => {}
        None => return Err(invalid("status block without stav")),
        Some(_) => {
            return Err(Outcome::Source(SourceError::Refused {
                code: status.code,
                text: status.text,
            }));
        }
    }
    Ok(match expect {
        Expect::Data => Answer::Data(records),
        Expect::LastId => Answer::LastId(last_id),
    })
}

fn status_block(r: &mut Doc) -> Result<Status, Outcome> {
    let mut s = Status::default();
    loop {
        match r.read_event()? {
            Event::Start(e) => match e.local_name().as_ref() {
                b"stav" => s.stav = Some(leaf(r)?),
                b"kodChyby" => s.code = Some(leaf(r)?),
                b"popisChyby" => s.text = Some(leaf(r)?),
                _ => r.read_to_end(e.name())?,
            },
            Event::End(_) => return Ok(s),
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            _ => {}
        }
    }
}

/// Reads one `data` record. An error of the XML fails the page (the record's end
/// cannot be known); a record that is well-formed but cannot be made an action gives a
/// [`RecordFault`] and the page goes on.
fn record(r: &mut Doc) -> Result<Result<Record, RecordFault>, Outcome> {
    let mut id: Option<Cow<str>> = None;
    let mut created = None;
    let mut published = None;
    let mut document_url = None;
    let mut case_number = None;
    let mut type_code = None;
    let mut type_name = None;
    let mut section = None;
    let mut number: Option<Cow<str>> = None;
    let mut note: Option<String> = None;
    loop {
        match r.read_event()? {
            Event::Start(e) => match e.local_name().as_ref() {
                b"id" => id = Some(leaf_text(r)?),
                b"datumZalozeniUdalosti" => opt_leaf(r, &mut created)?,
                b"datumZverejneniUdalosti" => opt_leaf(r, &mut published)?,
                b"dokumentUrl" => opt_leaf(r, &mut document_url)?,
                b"spisovaZnacka" => opt_leaf(r, &mut case_number)?,
                b"typUdalosti" => opt_leaf(r, &mut type_code)?,
                b"popisUdalosti" => opt_leaf(r, &mut type_name)?,
                b"oddil" => opt_leaf(r, &mut section)?,
                b"cisloVOddilu" => number = Some(leaf_text(r)?),
                b"poznamka" => opt_leaf(r, &mut note)?,
                _ => r.read_to_end(e.name())?,
            },
            Event::End(_) => break,
            Event::Eof => return Err(Outcome::Xml(XmlError::Eof)),
            _ => {}
        }
    }
    let fault = |id: Option<i64>, case_number: &Option<String>, reason, detail: String| {
        Ok(Err(RecordFault {
            id,
            case_number: case_number.clone(),
            reason,
            detail,
        }))
    };
    let Some(id_text) = id else {
        return fault(
            None,
            &case_number,
            SpoilReason::MissingField,
            "required field id missing".into(),
        );
    };
    let Ok(id) = id_text.trim().parse::<i64>() else {
        return fault(
            None,
            &case_number,
            SpoilReason::BadValue,
            "id is not a number".into(),
        );
    };
    let number_in_section = match number.as_deref().map(|t| t.trim().parse::<i64>()) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return fault(
                Some(id),
                &case_number,
                SpoilReason::BadValue,
                "cisloVOddilu is not a number".into(),
            );
        }
    };
    let required = [
        ("datumZalozeniUdalosti", created.is_none()),
        ("datumZverejneniUdalosti", published.is_none()),
        ("spisovaZnacka", case_number.is_none()),
        ("typUdalosti", type_code.is_none()),
        ("popisUdalosti", type_name.is_none()),
    ];
    if let Some((name, _)) = required.iter().find(|(_, missing)| *missing) {
        return fault(
            Some(id),
            &case_number,
            SpoilReason::MissingField,
            format!("required field {name} missing"),
        );
    }
    let (Some(created), Some(published), Some(case_number), Some(type_code), Some(type_name)) =
        (created, published, case_number, type_code, type_name)
    else {
        unreachable!("checked above");
    };
    let action = Action {
        id,
        created,
        published,
        document_url,
        case_number,
        type_code,
        type_name,
        section,
        number_in_section,
        note,
    };
    let detail = note_of(action.note.as_deref());
    Ok(Ok(Record { action, detail }))
}

/// Stored actions with their details parsed again (projections read the replica so).
pub fn records(actions: Vec<Action>) -> Vec<Record> {
    actions
        .into_iter()
        .map(|a| {
            let detail = note_of(a.note.as_deref());
            Record { action: a, detail }
        })
        .collect()
}

/// Parses an optional raw `poznamka` into a [`Note`]; a broken detail never fails the page.
pub fn note_of(raw: Option<&str>) -> Note {
    match raw {
        None => Note::Absent,
        Some(s) => match parse_detail(s) {
            Ok(d) => Note::Parsed(d),
            Err(error) => Note::Unparsed { error },
        },
    }
}

// ---------------------------------------------------------------------------------------
// The detail document

/// Parses an unescaped `poznamka` document. Unknown elements are ignored.
pub fn parse_note(xml: &str) -> Result<Detail, String> {
    parse_detail(xml).map(|d| *d)
}

/// [`parse_note`], built in place on the heap (a [`Detail`] is over a kilobyte).
fn parse_detail(xml: &str) -> Result<Box<Detail>, String> {
    let mut r = Doc::new(xml);
    note_doc(&mut r).map_err(|e| match e {
        XmlError::Eof => "poznamka ends before its document closes".to_string(),
        XmlError::Syntax(m) => format!(
            "poznamka is not well-formed XML at byte {}: {m}",
            r.buffer_position()
        ),
        XmlError::Content(m) => format!("poznamka: {m}"),
    })
}

fn note_doc(r: &mut Doc) -> Result<Box<Detail>, XmlError> {
    let mut d = Box::<Detail>::default();
    loop {
        match r.read_event()? {
            Event::Start(e) => {
                if e.local_name().as_ref() != b"udalost" {
                    return Err(XmlError::Content(format!(
                        "root element <{}> is not udalost",
                        local(&e)
                    )));
                }
                for a in e.attributes().with_checks(false) {
                    let a = a.map_err(|e| XmlError::Syntax(e.to_string()))?;
                    if a.key.as_ref() == b"verzeXsd" {
                        d.schema_version = Some(unescape(r.text(&a.value)?)?.into_owned());
                        break;
                    }
                }
                break;
            }
            Event::DocType(_) => return Err(XmlError::Content("DOCTYPE is not allowed".into())),
            Event::Eof => return Err(XmlError::Eof),
            Event::Text(t) if is_blank(&t) => {}
            Event::Text(_) | Event::CData(_) => {
                return Err(XmlError::Content("text before the root element".into()));
            }
            _ => {}
        }
    }
    loop {
        match r.read_event()? {
            Event::Start(e) => match e.local_name().as_ref() {
                b"idOsobyPuvodce" => opt_leaf(r, &mut d.origin)?,
                b"vec" => d.case = Some(case_block(r)?),
                b"osoba" => person(r, d.person.insert(Person::default()))?,
                b"cisUdalost" => d.code_list = Some(code_list(r)?),
                b"datumPravniMoci" => opt_leaf(r, &mut d.legal_force_date)?,
                b"priznakAnVedlejsiUdalost" => {
                    d.secondary_action = Some(Flag::from_text(&leaf_text(r)?))
                }
                b"priznakAnVedlejsiDokument" => {
                    d.secondary_document = Some(Flag::from_text(&leaf_text(r)?))
                }
                b"druhOddilPrihl" => opt_leaf(r, &mut d.claim_section_kind)?,
                b"cisloOddiluPrihl" => opt_leaf(r, &mut d.claim_section_number)?,
                b"osobaVeritel" => opt_leaf(r, &mut d.creditor)?,
                b"priznakPlatnyVeritel" => d.valid_creditor = Some(Flag::from_text(&leaf_text(r)?)),
                b"priznakMylnyZapisVeritelPohled" => {
                    d.erroneous_claim_entry = Some(Flag::from_text(&leaf_text(r)?))
                }
                b"datumUstanoveniSpravce" => opt_leaf(r, &mut d.administrator_appointed)?,
                b"datumZverejneniOpraveneUdalosti" => opt_leaf(r, &mut d.corrected_published)?,
                b"datumVyskrtnuti" => opt_leaf(r, &mut d.struck_out)?,
                b"idOsoby1" => opt_leaf(r, &mut d.person_id1)?,
                b"idOsoby2" => opt_leaf(r, &mut d.person_id2)?,
                b"datumSpojeni" => opt_leaf(r, &mut d.joined)?,
                b"datumOddeleni" => opt_leaf(r, &mut d.separated)?,
                b"datumUdalostZrusena" => opt_leaf(r, &mut d.annulled)?,
                b"bcVecICm" => opt_leaf(r, &mut d.incidental_number)?,
                b"druhVecICm" => opt_leaf(r, &mut d.incidental_kind)?,
                b"rocnikICm" => opt_leaf(r, &mut d.incidental_year)?,
                b"senatICm" => opt_leaf(r, &mut d.incidental_senate)?,
                _ => r.read_to_end(e.name())?,
            },
            Event::End(_) => break,
            Event::Eof => return Err(XmlError::Eof),
            _ => {}
        }
    }
    // Only whitespace, comments or processing instructions may follow the root.
    loop {
        match r.read_event()? {
            Event::Eof => return Ok(d),
            Event::Start(_) => return Err(XmlError::Content("a second root element".into())),
            Event::Text(t) if !is_blank(&t) => {
                return Err(XmlError::Content("text after the root element".into()));
            }
            _ => {}
        }
    }
}

/// Runs `f` for each child element of the element just opened, skipping text.
fn children<'i, F>(r: &mut Doc<'i>, mut f: F) -> Result<(), XmlError>
where
    F: FnMut(&mut Doc<'i>, &[u8]) -> Result<bool, XmlError>,
{
    loop {
        match r.read_event()? {
            Event::Start(e) => {
                let name = e.local_name();
                if !f(r, name.as_ref())? {
                    r.read_to_end(e.name())?;
                }
            }
            Event::End(_) => return Ok(()),
            Event::Eof => return Err(XmlError::Eof),
            _ => {}
        }
    }
}

fn case_block(r: &mut Doc) -> Result<CaseBlock, XmlError> {
    let mut c = CaseBlock::default();
    children(r, |r, name| {
        let slot = match name {
            b"druhStavRizeni" => &mut c.state,
            b"datumVecZrusena" => &mut c.annulled,
            b"datumKonecLhutyPrihlasek" => &mut c.claims_deadline,
            b"datumSkonceniVeci" => &mut c.ended,
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    Ok(c)
}

fn person(r: &mut Doc, p: &mut Person) -> Result<(), XmlError> {
    let mut id = None;
    children(r, |r, name| {
        let slot = match name {
            b"idOsoby" => &mut id,
            b"druhRoleVRizeni" => &mut p.role,
            b"druhSpravce" => &mut p.administrator_kind,
            b"nazevOsoby" => &mut p.name,
            b"nazevOsobyObchodni" => &mut p.trade_name,
            b"druhOsoby" => &mut p.kind,
            b"druhPravniForma" => &mut p.legal_form,
            b"jmeno" => &mut p.first_name,
            b"titulPred" => &mut p.title_before,
            b"titulZa" => &mut p.title_after,
            b"ic" => &mut p.ico,
            b"dic" => &mut p.dic,
            b"rc" => &mut p.birth_number,
            b"datumNarozeni" => &mut p.birth_date,
            b"datumOsobaVeVeciZrusena" => &mut p.left_case,
            b"adresa" => {
                p.addresses.push(address(r)?);
                return Ok(true);
            }
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    p.id = id.ok_or_else(|| XmlError::Content("osoba without idOsoby".into()))?;
    Ok(())
}

fn address(r: &mut Doc) -> Result<Address, XmlError> {
    let mut a = Address::default();
    children(r, |r, name| {
        let slot = match name {
            b"druhAdresy" => &mut a.kind,
            b"datumPobytOd" => &mut a.valid_from,
            b"datumPobytDo" => &mut a.valid_to,
            b"mesto" => &mut a.city,
            b"ulice" => &mut a.street,
            b"cisloPopisne" => &mut a.house_number,
            b"okres" => &mut a.district,
            b"zeme" => &mut a.country,
            b"psc" => &mut a.postcode,
            b"telefon" => &mut a.phone,
            b"fax" => &mut a.fax,
            b"textAdresy" => &mut a.text,
            b"idAdresy" => &mut a.id,
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    Ok(a)
}

fn code_list(r: &mut Doc) -> Result<CodeListEntry, XmlError> {
    let mut c = CodeListEntry::default();
    let mut internal = None;
    children(r, |r, name| {
        let slot = match name {
            b"idCisUdalostiProWs" => &mut c.id,
            b"popisCisUdalosti" => &mut c.name,
            b"datumZalozeniCisUdalosti" => &mut c.created,
            b"datumZruseniCisUdalosti" => &mut c.cancelled,
            b"priznakAnInterniCisUdalost" => &mut internal,
            _ => return Ok(false),
        };
        opt_leaf(r, slot)?;
        Ok(true)
    })?;
    c.internal = internal.as_deref().map(Flag::from_text);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What quick-xml makes of `s`, as [`unescape`] must: the same text, or an error.
    fn reference(s: &str) -> Option<String> {
        quick_xml::escape::unescape(s).ok().map(Cow::into_owned)
    }

    fn ours(s: &str) -> Option<String> {
        unescape(Cow::Borrowed(s)).ok().map(Cow::into_owned)
    }

    #[test]
    fn unescape_agrees_with_quick_xml() {
        for s in [
            "",
            "plain",
            "&lt;a&gt;Novák &amp; syn&lt;/a&gt;",
            "&quot;&apos;&amp;&lt;&gt;",
            "&amp;lt;",
            "a &#x10D; b &#269;",
            "&lt;x&gt;&#xD;&#10;",
            "&lt",
            "&lt &gt;",
            "&;",
            "&nbsp;",
            "&amp",
            "trailing &",
            "a;b;c &lt;;",
            "&a&lt;",
            "Příliš žluťoučký &lt;kůň&gt;",
        ] {
            assert_eq!(ours(s), reference(s), "{s:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn unescape_agrees_with_quick_xml_on_any_text(
            s in "([a-zá-ž;#x0-9 ]|&(lt|gt|amp|quot|apos|#[0-9]{1,4}|#x[0-9a-f]{1,4}|nbsp)?;?){0,40}"
        ) {
            proptest::prop_assert_eq!(ours(&s), reference(&s));
        }
    }
}
