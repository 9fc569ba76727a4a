//! The SOAP envelope of an answer, read once: the namespaces bound on its outer
//! elements, a Fault, the answer's wrapper and status, and each `data` record judged
//! alone. Gives an [`Answer`] (records as read, with where each lies) for `parse/mod.rs`
//! to assemble into a page. Never performs I/O.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::PrefixDeclaration;

use super::note::note_of;
use super::xml::{Doc, XmlError, is_blank, leaf, leaf_text, local, opt_leaf};
use super::{SOAP_ENV_NS, TYPES_NS};
use crate::source::error::SourceError;
use crate::source::model::*;

/// Which answer the caller expects.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
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
pub(super) struct RawRecord {
    pub(super) span: std::ops::Range<usize>,
    pub(super) parsed: Result<Record, RecordFault>,
}

/// Why one record could not be made an action; the page goes on.
pub(super) struct RecordFault {
    pub(super) id: Option<i64>,
    pub(super) case_number: Option<String>,
    pub(super) reason: SpoilReason,
    pub(super) detail: String,
}

pub(super) enum Answer {
    Data(Vec<RawRecord>),
    LastId(Option<i64>),
}

#[derive(Default)]
pub(super) struct Status {
    stav: Option<String>,
    code: Option<String>,
    text: Option<String>,
}

pub(super) fn parse_envelope(body: &[u8], expect: Expect) -> Result<Answer, SourceError> {
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
pub(super) fn parse_envelope_str(
    src: &str,
    body_len: usize,
    expect: Expect,
) -> Result<Answer, SourceError> {
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
