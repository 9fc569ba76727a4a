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

/// Decodes `body`: UTF-8 as it is, every sequence that is not UTF-8 byte by byte as
/// windows-1250 where [`cp1250_char`] accepts all its bytes, else cut out. A sequence
/// cut off by the end of the body ends the text there (a truncated body stays
/// truncated, as the strict path treats it).
pub(crate) fn repair(body: &[u8]) -> Repaired {
    let mut out = Repaired {
        text: String::with_capacity(body.len() + 64),
        runs: Vec::new(),
    };
    let mut at = 0;
    while at < body.len() {
        match std::str::from_utf8(&body[at..]) {
            Ok(s) => {
                out.text.push_str(s);
                break;
            }
            Err(e) => {
                let valid = e.valid_up_to();
                out.text
                    .push_str(std::str::from_utf8(&body[at..at + valid]).unwrap_or_default());
                let Some(len) = e.error_len() else {
                    // Cut inside a character at the very end.
                    break;
                };
                let bad = &body[at + valid..at + valid + len];
                let chars: Option<Vec<char>> = bad.iter().map(|b| cp1250_char(*b)).collect();
                let new = out.text.len();
                let ok = chars.is_some();
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
