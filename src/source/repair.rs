//! Repair of a page body that is not UTF-8: every byte sequence that is not UTF-8 is
//! decoded as windows-1250 (the register's legacy encoding) when that gives a letter or
//! a common Czech typographic sign, and otherwise cut out and marked as undecodable.
//!
//! Owns the rule of what "decodes as windows-1250" means and the map from positions in
//! the repaired text back to the bytes received. It works on the raw bytes, before any
//! XML unescaping (so a letter inside the escaped `poznamka` is repaired where it sits),
//! and never produces U+FFFD: a byte it cannot decode is dropped from the text and
//! reported as a [`Run`] with `ok == false`, so the record holding it is held back.
//! It never decides what happens to a record; `parse` does.

/// A byte sequence of the body that was not UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// Where it starts in the body as received, and its length there.
    pub orig: usize,
    pub orig_len: usize,
    /// Where its replacement starts in the repaired text, and its length there (0 when
    /// it could not be decoded).
    pub new: usize,
    pub new_len: usize,
    /// Decoded as windows-1250 (`false`: neither UTF-8 nor windows-1250 text).
    pub ok: bool,
}

/// The body as text, with the runs that were repaired or cut out.
#[derive(Debug, Default)]
pub(crate) struct Repaired {
    pub text: String,
    pub runs: Vec<Run>,
}

impl Repaired {
    /// The position in the body as received of position `pos` of the repaired text
    /// (a position outside every run, as record boundaries are).
    pub fn to_orig(&self, pos: usize) -> usize {
        let mut shift: isize = 0;
        for r in &self.runs {
            if r.new >= pos {
                break;
            }
            shift += r.orig_len as isize - r.new_len as isize;
        }
        (pos as isize + shift) as usize
    }
}

/// Signs other than letters that a windows-1250 byte of Czech text plausibly is:
/// quotes, dashes, the ellipsis, the section and degree signs, the no-break space,
/// the multiplication sign.
const SIGNS: &[char] = &[
    '\u{201a}', '\u{201e}', '\u{201c}', '\u{201d}', '\u{2018}', '\u{2019}', '\u{2013}', '\u{2014}',
    '\u{2026}', '\u{a7}', '\u{b0}', '\u{a0}', '\u{d7}',
];

/// The windows-1250 character of byte `b` (at or above 0x80), if it is one a Czech text
/// plausibly holds. Bytes undefined in windows-1250 (0x81, 0x83, 0x88, 0x90, 0x98),
/// controls and rare symbols give `None`: neither encoding fits.
pub(crate) fn cp1250_char(b: u8) -> Option<char> {
    let bytes = [b];
    let text =
        encoding_rs::WINDOWS_1250.decode_without_bom_handling_and_without_replacement(&bytes)?;
    let c = text.chars().next()?;
    (c.is_alphabetic() || SIGNS.contains(&c)).then_some(c)
}

/// The windows-1250 reading of `c` when `c` is windows-1250 text misread as UTF-8: a
/// character of two or more bytes that windows-1250 cannot hold (no Czech text in
/// UTF-8 has it) whose bytes each read as a letter or sign ([`cp1250_char`]). `ŮŽ` in
/// windows-1250 is the bytes D9 8E, which UTF-8 reads as U+064E, an Arabic vowel sign.
/// Only asked of the words that hold bytes which are not UTF-8 (see [`repair`]): in
/// other words a character windows-1250 cannot hold is the text's own (a foreign name).
fn misread(c: char) -> Option<Vec<char>> {
    let mut buf = [0u8; 4];
    let s = c.encode_utf8(&mut buf);
    if s.len() == 1 {
        return None;
    }
    let (_, _, unmappable) = encoding_rs::WINDOWS_1250.encode(s);
    if !unmappable {
        return None;
    }
    s.bytes().map(cp1250_char).collect()
}

/// Whether `c` continues a word: a letter or digit, or any character beyond ASCII (a
/// misread one need not be a letter).
fn word_char(c: char) -> bool {
    !c.is_ascii() || c.is_ascii_alphanumeric()
}

/// Appends the UTF-8 text `s`, which starts at `orig` in the body; the characters of its
/// first word (`lead`: a repaired windows-1250 sequence ends right before it) and of its
/// last (`trail`: one starts right after it) that are windows-1250 text misread
/// ([`misread`]) are decoded as windows-1250, each a [`Run`] of its own.
fn push_utf8(out: &mut Repaired, s: &str, orig: usize, lead: bool, trail: bool) {
    if !lead && !trail {
        out.text.push_str(s);
        return;
    }
    let first_end = s
        .char_indices()
        .find(|(_, c)| !word_char(*c))
        .map_or(s.len(), |(i, _)| i);
    let last_start = s
        .char_indices()
        .rev()
        .find(|(_, c)| !word_char(*c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    for (i, c) in s.char_indices() {
        let in_word = (lead && i < first_end) || (trail && i >= last_start);
        match misread(c).filter(|_| in_word) {
            Some(cs) => {
                let new = out.text.len();
                out.text.extend(cs);
                out.runs.push(Run {
                    orig: orig + i,
                    orig_len: c.len_utf8(),
                    new,
                    new_len: out.text.len() - new,
                    ok: true,
                });
            }
            None => out.text.push(c),
        }
    }
}

/// Decodes `body`: UTF-8 as it is, every sequence that is not UTF-8 byte by byte as
/// windows-1250 where [`cp1250_char`] accepts all its bytes, else cut out; in a word
/// holding such a windows-1250 sequence, a character that is windows-1250 text misread
/// as UTF-8 is decoded as windows-1250 too ([`misread`]). A sequence cut off by the end
/// of the body ends the text there (a truncated body stays truncated, as the strict
/// path treats it).
pub(crate) fn repair(body: &[u8]) -> Repaired {
    let mut out = Repaired {
        text: String::with_capacity(body.len() + 64),
        runs: Vec::new(),
    };
    let mut at = 0;
    // Whether a windows-1250 sequence was repaired right before `at`.
    let mut after_cp1250 = false;
    while at < body.len() {
        match std::str::from_utf8(&body[at..]) {
            Ok(s) => {
                push_utf8(&mut out, s, at, after_cp1250, false);
                break;
            }
            Err(e) => {
                let valid = e.valid_up_to();
                let good = std::str::from_utf8(&body[at..at + valid]).unwrap_or_default();
                let Some(len) = e.error_len() else {
                    // Cut inside a character at the very end.
                    push_utf8(&mut out, good, at, after_cp1250, false);
                    break;
                };
                let bad = &body[at + valid..at + valid + len];
                let chars: Option<Vec<char>> = bad.iter().map(|b| cp1250_char(*b)).collect();
                let ok = chars.is_some();
                push_utf8(&mut out, good, at, after_cp1250, ok);
                let new = out.text.len();
                if let Some(cs) = chars {
                    out.text.extend(cs);
                }
                out.runs.push(Run {
                    orig: at + valid,
                    orig_len: len,
                    new,
                    new_len: out.text.len() - new,
                    ok,
                });
                after_cp1250 = ok;
                at += valid + len;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn czech_letters_decode_and_foreign_bytes_do_not() {
        // The letters of "Příliš žluťoučký kůň úpěl ďábelské ódy" in windows-1250.
        let (cp, _, bad) =
            encoding_rs::WINDOWS_1250.encode("Příliš žluťoučký kůň úpěl ďábelské ódy");
        assert!(!bad);
        let r = repair(&cp);
        assert_eq!(r.text, "Příliš žluťoučký kůň úpěl ďábelské ódy");
        assert!(r.runs.iter().all(|r| r.ok));
        for b in [0x81u8, 0x83, 0x88, 0x90, 0x98] {
            assert_eq!(cp1250_char(b), None, "{b:#x} is undefined in windows-1250");
        }
        let r = repair(b"a\x98b");
        assert_eq!(r.text, "ab");
        assert_eq!(
            r.runs,
            vec![Run {
                orig: 1,
                orig_len: 1,
                new: 1,
                new_len: 0,
                ok: false
            }]
        );
        assert!(!r.text.contains('\u{fffd}'));
    }

    /// Windows-1250 bytes that happen to be UTF-8 (`ŮŽ` is D9 8E, UTF-8's U+064E) are
    /// read as windows-1250 in a word that holds bytes which are not UTF-8, before or
    /// after them; a UTF-8 word of the text's own (Cyrillic, in another word) stays; the
    /// positions after the word still map back to the bytes received.
    #[test]
    fn windows_1250_read_as_utf8_inside_a_repaired_word_is_repaired() {
        for name in ["RŮŽIČKOVÁ", "ČERNÝŮŽ", "ŮŽ Dvořák"] {
            let (cp, _, bad) = encoding_rs::WINDOWS_1250.encode(name);
            assert!(!bad);
            let mut body = b"<n>".to_vec();
            body.extend_from_slice(&cp);
            body.extend_from_slice(" Дмитрий</n><x/>".as_bytes());
            let r = repair(&body);
            let want = format!("<n>{name} Дмитрий</n><x/>");
            if name.starts_with("ŮŽ ") {
                // `ŮŽ` alone in its word is valid UTF-8 there: nothing says it is not.
                assert_eq!(r.text, want.replacen("ŮŽ", "\u{64e}", 1), "{name}");
            } else {
                assert_eq!(r.text, want, "{name}");
            }
            assert!(r.runs.iter().all(|x| x.ok), "{name}");
            let x = r.text.find("<x/>").unwrap();
            assert_eq!(&body[r.to_orig(x)..r.to_orig(x) + 4], b"<x/>", "{name}");
        }
        assert_eq!(misread('\u{64e}'), Some(vec!['Ů', 'Ž']));
        assert_eq!(misread('ř'), None, "windows-1250 holds it");
        assert_eq!(misread('a'), None);
    }

    #[test]
    fn positions_map_back_to_the_bytes_received() {
        let body = b"<a>n\xe1vrh</a><b>\x98</b><c>x</c>";
        let r = repair(body);
        assert_eq!(r.text, "<a>návrh</a><b></b><c>x</c>");
        let c = r.text.find("<c>").unwrap();
        assert_eq!(&body[r.to_orig(c)..r.to_orig(c) + 3], b"<c>");
        let b = r.text.find("<b>").unwrap();
        assert_eq!(&body[r.to_orig(b)..r.to_orig(b) + 3], b"<b>");
        let end = r.text.len();
        assert_eq!(r.to_orig(end), body.len());
    }

    #[test]
    fn a_truncated_character_ends_the_text() {
        let r = repair("ná".as_bytes().split_at(2).0);
        assert_eq!(r.text, "n");
    }
}
