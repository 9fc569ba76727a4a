//! The XML reading both parsers share: a quick-xml reader over a document known to be
//! UTF-8 ([`Doc`]), unescaping, and the leaf and child helpers. Owns no document's shape:
//! the envelope is `parse/mod.rs`'s, the `poznamka` document `parse/note.rs`'s.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::QName;
use quick_xml::reader::Reader;

/// A quick-xml reader over a document already known to be UTF-8: every text slice is
/// taken from `src` by its offset instead of being validated again.
pub(super) struct Doc<'i> {
    pub(super) r: Reader<&'i [u8]>,
    pub(super) src: &'i str,
}

impl<'i> Doc<'i> {
    pub(super) fn new(src: &'i str) -> Self {
        let mut r = Reader::from_reader(src.as_bytes());
        r.config_mut().expand_empty_elements = true;
        Doc { r, src }
    }
    pub(super) fn read_event(&mut self) -> quick_xml::Result<Event<'i>> {
        self.r.read_event()
    }
    pub(super) fn read_to_end(&mut self, name: QName) -> quick_xml::Result<()> {
        self.r.read_to_end(name).map(|_| ())
    }
    pub(super) fn buffer_position(&self) -> u64 {
        self.r.buffer_position()
    }
    /// The text of `raw`, a slice the reader borrowed from `src` (quick-xml cuts only at
    /// ASCII delimiters, so it lies on character boundaries): no second UTF-8 check.
    pub(super) fn text(&self, raw: &[u8]) -> Result<Cow<'i, str>, XmlError> {
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
pub(super) fn unescape(s: Cow<'_, str>) -> Result<Cow<'_, str>, XmlError> {
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
pub(super) fn unescape_predefined(s: &str) -> Option<String> {
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
pub(super) enum XmlError {
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

pub(super) fn is_blank(t: &[u8]) -> bool {
    t.iter().all(|b| b.is_ascii_whitespace())
}

/// Reads the text of a leaf element whose start tag was just read, up to its end tag,
/// borrowing from the document when it can. Nested elements are skipped.
pub(super) fn leaf_text<'i>(r: &mut Doc<'i>) -> Result<Cow<'i, str>, XmlError> {
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
pub(super) fn leaf(r: &mut Doc) -> Result<String, XmlError> {
    leaf_text(r).map(Cow::into_owned)
}

pub(super) fn opt_leaf(r: &mut Doc, slot: &mut Option<String>) -> Result<(), XmlError> {
    *slot = Some(leaf(r)?);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The envelope

pub(super) fn local(e: &BytesStart) -> String {
    String::from_utf8_lossy(e.local_name().as_ref()).into_owned()
}

/// Runs `f` for each child element of the element just opened, skipping text.
pub(super) fn children<'i, F>(r: &mut Doc<'i>, mut f: F) -> Result<(), XmlError>
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

    /// The one-pass path itself resolves the five entities XML predefines (XML 1.0,
    /// section 4.6), each in any place, and leaves everything else to quick-xml: it is
    /// the path a `poznamka` takes, not a fallback.
    #[test]
    fn the_fast_path_resolves_the_predefined_entities() {
        assert_eq!(
            unescape_predefined("&lt;a&gt;b&quot;c&amp;d&apos;").as_deref(),
            Some("<a>b\"c&d'")
        );
        assert_eq!(unescape_predefined("x&amp;&amp;y").as_deref(), Some("x&&y"));
        assert_eq!(unescape_predefined("plain").as_deref(), Some("plain"));
        for other in ["&#65;", "&nbsp;", "&lt", "a & b"] {
            assert_eq!(unescape_predefined(other), None, "{other}");
        }
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
