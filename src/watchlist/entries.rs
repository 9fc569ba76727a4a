//! A watchlist's entries: what a watched subject is (an IČO, a birth number or a case
//! number), how each is validated (the IČO's check digit, the birth number's form and
//! check digit, the case number's form), and the CSV import that reports every bad line
//! by number and imports nothing when any line is bad.
//!
//! Owns validation and normalisation only: it never touches the store.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::readmodel::fold::{ico_key, rc_key};

/// What kind of subject an entry watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ico,
    Rc,
    Case,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ico => "ico",
            Kind::Rc => "rc",
            Kind::Case => "case",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "ico" => Some(Kind::Ico),
            "rc" => Some(Kind::Rc),
            "case" => Some(Kind::Case),
            _ => None,
        }
    }
}

/// One watched subject, normalised as the parties projection keys it (`ico`: 8 digits;
/// `rc`: `NNNNNN/NNNN`; `case`: `INS n/yyyy`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Entry {
    pub kind: Kind,
    pub key: String,
}

/// An IČO with a valid check digit: 8 digits (shorter ones are zero-padded, as the
/// register writes them), weights 8..2 over the first seven, `(11 - sum % 11) % 10`.
pub fn ico(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.is_empty() || t.len() > 8 || !t.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("IČO {t:?} is not up to 8 digits"));
    }
    let d = format!("{t:0>8}");
    let b = d.as_bytes();
    let sum: u32 = (0..7)
        .map(|i| u32::from(b[i] - b'0') * (8 - i as u32))
        .sum();
    let check = (11 - sum % 11) % 10;
    if u32::from(b[7] - b'0') != check {
        return Err(format!("IČO {t:?} has a wrong check digit"));
    }
    Ok(ico_key(&d))
}

/// A birth number (rodné číslo) in its form: `YYMMDD/XXXX` (since 1954) or `YYMMDD/XXX`
/// (before), slash optional; month 1–12, +50 for women, +20 or +70 when the day's numbers
/// ran out (since 2004); a day of that month in that year (nine digits: 19YY; ten:
/// 1954–2053); ten digits divisible by 11 (or the first nine giving 10 with a last digit
/// of 0).
pub fn rc(s: &str) -> Result<String, String> {
    let t = s.trim();
    let digits: String = t.chars().filter(|c| *c != '/').collect();
    let slash_ok = match t.find('/') {
        None => true,
        Some(i) => i == 6 && t.matches('/').count() == 1,
    };
    if !slash_ok || !(9..=10).contains(&digits.len()) || !digits.chars().all(|c| c.is_ascii_digit())
    {
        return Err(format!(
            "birth number {t:?} is not in the form YYMMDD/XXXX (or YYMMDD/XXX before 1954)"
        ));
    }
    let n = |a: usize| digits[a..a + 2].parse::<u32>().unwrap_or(0);
    let (yy, mm, dd) = (n(0), n(2), n(4));
    let month = match mm {
        1..=12 => mm,
        21..=32 => mm - 20,
        51..=62 => mm - 50,
        71..=82 => mm - 70,
        _ => 0,
    };
    // Nine digits: born before 1954; ten: 1954 to 2053.
    let year = if digits.len() == 9 || yy >= 54 {
        1900 + yy
    } else {
        2000 + yy
    };
    if month == 0 || chrono::NaiveDate::from_ymd_opt(year as i32, month, dd).is_none() {
        return Err(format!("birth number {t:?} has no valid date"));
    }
    if mm > 20 && !(51..=62).contains(&mm) && year < 2004 {
        return Err(format!(
            "birth number {t:?} has a month raised by 20 or 70, which only numbers since 2004 have"
        ));
    }
    if digits.len() == 9 {
        if yy >= 54 {
            return Err(format!(
                "birth number {t:?} has nine digits, which only numbers before 1954 have"
            ));
        }
    } else {
        let all: u64 = digits.parse().unwrap_or(1);
        let head = all / 10;
        let ok = all.is_multiple_of(11) || (head % 11 == 10 && all.is_multiple_of(10));
        if !ok {
            return Err(format!("birth number {t:?} has a wrong check digit"));
        }
    }
    Ok(rc_key(&digits))
}

/// A case number `INS n/yyyy` (the feed's nationwide numbering), also given as the
/// register writes a file mark with its court and senate (`KSPH 36 INS 4711/2026`).
pub fn case(s: &str) -> Result<String, String> {
    let t = s.trim();
    let t = match t.find(" INS ") {
        // A court's short name (letters) and a senate (digits) before it.
        Some(i) => {
            let mut head = t[..i].split_whitespace();
            let court = head.next().unwrap_or("");
            let senate = head.next().unwrap_or("");
            if head.next().is_none()
                && !court.is_empty()
                && court.chars().all(|c| c.is_ascii_uppercase())
                && !senate.is_empty()
                && senate.chars().all(|c| c.is_ascii_digit())
            {
                &t[i + 1..]
            } else {
                t
            }
        }
        None => t,
    };
    let ok = t
        .strip_prefix("INS ")
        .and_then(|r| r.split_once('/'))
        .is_some_and(|(n, y)| {
            // Digits only (no sign), no leading zero; a year of the register (2008 on).
            (1..=9).contains(&n.len())
                && n.bytes().all(|b| b.is_ascii_digit())
                && !n.starts_with('0')
                && y.len() == 4
                && y.bytes().all(|b| b.is_ascii_digit())
                && y.parse::<u32>().is_ok_and(|y| (2008..=2100).contains(&y))
        });
    if !ok {
        return Err(format!(
            "case {t:?} is not a case number such as `INS 4711/2026`"
        ));
    }
    Ok(t.to_string())
}

/// One entry of `kind` from text.
pub fn entry(kind: Kind, value: &str) -> Result<Entry, String> {
    let key = match kind {
        Kind::Ico => ico(value)?,
        Kind::Rc => rc(value)?,
        Kind::Case => case(value)?,
    };
    Ok(Entry { kind, key })
}

/// A bad line of an import (1-based, the header being line 1) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadLine {
    pub line: u64,
    pub error: String,
}

/// The text of an imported file: UTF-8 (a byte-order mark dropped), UTF-16 with its
/// byte-order mark (Excel's "Unicode text"), and otherwise Windows-1250, in which a
/// Czech Excel saves its CSV. Gives the text and the encoding read.
fn decode(bytes: &[u8]) -> (std::borrow::Cow<'_, str>, &'static encoding_rs::Encoding) {
    if let Some((enc, bom)) = encoding_rs::Encoding::for_bom(bytes) {
        let (text, _) = enc.decode_without_bom_handling(&bytes[bom..]);
        return (text, enc);
    }
    match std::str::from_utf8(bytes) {
        Ok(t) => (std::borrow::Cow::Borrowed(t), encoding_rs::UTF_8),
        Err(_) => {
            let (text, _) = encoding_rs::WINDOWS_1250.decode_without_bom_handling(bytes);
            (text, encoding_rs::WINDOWS_1250)
        }
    }
}

/// The delimiter of a CSV file from its first line: the most frequent of `,`, `;` (a
/// Czech Excel's) and a tab outside quotes; `,` when none is there.
fn delimiter(text: &str) -> u8 {
    let first = text.lines().next().unwrap_or("");
    let mut quoted = false;
    let mut n = [0usize; 3];
    for c in first.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => n[0] += 1,
            ';' if !quoted => n[1] += 1,
            '\t' if !quoted => n[2] += 1,
            _ => {}
        }
    }
    let best = (0..3)
        .max_by_key(|&i| (n[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    if n[best] == 0 {
        b','
    } else {
        [b',', b';', b'\t'][best]
    }
}

/// The kind of entry a column holds, by its header as people write it: case, accents,
/// spaces, dots, dashes and underscores ignored (`IČO`, `IČ`, `RČ`, `Rodné číslo`,
/// `Spisová značka`, `sp. zn.`, `case_number`).
fn column_kind(header: &str) -> Option<Kind> {
    let k: String = crate::readmodel::fold::name_key(header)
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect();
    match k.as_str() {
        "ico" | "ic" | "identifikacnicislo" => Some(Kind::Ico),
        "rc" | "rodnecislo" | "birthnumber" => Some(Kind::Rc),
        "case" | "casenumber" | "spisovaznacka" | "spzn" | "znacka" => Some(Kind::Case),
        _ => None,
    }
}

/// Reads a CSV file of entries, as a spreadsheet saves it: UTF-8 (with or without a
/// byte-order mark), UTF-16 with one, or Windows-1250; separated by `,`, `;` or tabs
/// (found from the header line). The header names its columns: an IČO (`ico`, `IČO`,
/// `IČ`), a birth number (`rc`, `RČ`, `rodné číslo`, `birth_number`) or a case
/// (`case`, `case_number`, `spisová značka`, `sp. zn.`), in any case and with or
/// without accents; other columns are ignored, and an empty cell is skipped. Every bad
/// line is reported (all of them, not the first); with any bad line nothing is
/// returned.
pub fn from_csv(bytes: &[u8]) -> Result<BTreeSet<Entry>, Vec<BadLine>> {
    let (text, _) = decode(bytes);
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .delimiter(delimiter(&text))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header = match r.headers() {
        Ok(h) => h.clone(),
        Err(e) => {
            return Err(vec![BadLine {
                line: 1,
                error: format!("the header is not CSV: {e}"),
            }]);
        }
    };
    let cols: Vec<(usize, Kind)> = header
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some((i, column_kind(h)?)))
        .collect();
    if cols.is_empty() {
        let seen: Vec<&str> = header.iter().take(8).collect();
        return Err(vec![BadLine {
            line: 1,
            error: format!(
                "the header names no column of an IČO (ico, IČO, IČ), a birth number (rc, RČ, \
                 rodné číslo) or a case (case, spisová značka); it has {seen:?}"
            ),
        }]);
    }
    let mut out = BTreeSet::new();
    let mut bad = Vec::new();
    for rec in r.records() {
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                bad.push(BadLine {
                    line,
                    error: format!("not CSV: {e}"),
                });
                continue;
            }
        };
        let line = rec.position().map_or(0, |p| p.line());
        let mut errors = Vec::new();
        for (i, kind) in &cols {
            match rec.get(*i).filter(|v| !v.is_empty()) {
                None => {}
                Some(v) => match entry(*kind, v) {
                    Ok(e) => {
                        out.insert(e);
                    }
                    Err(e) => errors.push(e),
                },
            }
        }
        if !errors.is_empty() {
            bad.push(BadLine {
                line,
                error: errors.join("; "),
            });
        }
    }
    if bad.is_empty() { Ok(out) } else { Err(bad) }
}

#[cfg(test)]
mod tests {
    use super::*;

    // IČOs of real registered companies (public register), and their check digits
    // worked by hand: 25596641 (8*2+7*5+6*5+5*9+4*6+3*6+2*4 = 176, 176 % 11 = 0,
    // (11 - 0) % 10 = 1).
    #[test]
    fn ico_check_digit() {
        assert_eq!(ico("25596641").unwrap(), "25596641");
        assert_eq!(ico("00027383").unwrap(), "00027383");
        assert_eq!(ico("27383").unwrap(), "00027383");
        assert_eq!(ico("45274649").unwrap(), "45274649");
        assert!(ico("25596642").unwrap_err().contains("check digit"));
        assert!(ico("2559664A").is_err());
        assert!(ico("255966411").is_err());
        assert!(ico("").is_err());
    }

    #[test]
    fn birth_number_form() {
        // 736028/5163: 7360285163 = 11 * 669116833, month 60 = 10 + 50: a woman born
        // 28 October 1973.
        assert_eq!(rc("736028/5163").unwrap(), "736028/5163");
        assert_eq!(rc("7360285163").unwrap(), "736028/5163");
        assert!(rc("736028/5164").unwrap_err().contains("check digit"));
        // Before 1954: nine digits, no check digit.
        assert_eq!(rc("450101/123").unwrap(), "450101/123");
        assert!(rc("650101/123").unwrap_err().contains("nine digits"));
        // Month 13 and day 0 are no dates.
        assert!(rc("731328/5163").unwrap_err().contains("date"));
        assert!(rc("736000/0000").unwrap_err().contains("date"));
        assert!(rc("73602/85163").is_err());
        assert!(rc("abc").is_err());
        // Only digits, also in the nine of before 1954.
        assert!(rc("450101/12A").unwrap_err().contains("form"));
        assert!(rc("736028/516A").unwrap_err().contains("form"));
        // Since 2004, +20 (men) and +70 (women) when a day's numbers ran out; the ten
        // digits divisible by 11 worked by hand: 0421010007 = 11 * 38273637.
        assert_eq!(rc("042101/0007").unwrap(), "042101/0007");
        assert_eq!(rc("047101/0001").unwrap(), "047101/0001");
        assert_eq!(rc("040229/0009").unwrap(), "040229/0009"); // 2004 is a leap year
        // A day its month does not have, in any form of the month.
        assert!(rc("050229/0008").unwrap_err().contains("date")); // 2005 is not
        assert!(rc("730231/0004").unwrap_err().contains("date"));
        assert!(rc("042230/0010").unwrap_err().contains("date"));
        assert!(rc("047230/0004").unwrap_err().contains("date"));
        assert!(rc("735230/0010").unwrap_err().contains("date")); // a woman's 30 February
        // Until 1985 a number whose first nine digits leave 10 by 11 ended in 0, and is
        // not divisible by 11: 600101006 = 11 * 54554636 + 10.
        assert_eq!(rc("600101/0060").unwrap(), "600101/0060");
        assert!(rc("600101/0061").unwrap_err().contains("check digit"));
        // +20 before 2004 was never given.
        assert!(rc("902101/0009").unwrap_err().contains("since 2004"));
    }

    #[test]
    fn case_numbers() {
        assert_eq!(case(" INS 4711/2026 ").unwrap(), "INS 4711/2026");
        assert!(case("INS 4711/26").is_err());
        assert!(case("4711/2026").is_err());
        assert!(case("INS 0/2026").is_err());
        // The file mark with its court and senate, as the register's pages show it.
        assert_eq!(case("KSPH 36 INS 4711/2026").unwrap(), "INS 4711/2026");
        assert_eq!(case(" MSPH  89 INS 1/2020").unwrap(), "INS 1/2020");
        assert!(case("ksph 36 INS 4711/2026").is_err());
        assert!(case("KSPH INS 4711/2026").is_err());
        assert!(case("KSPH 36 X INS 4711/2026").is_err());
        // Digits only, and years of the register.
        assert!(case("INS +5/2026").is_err());
        assert!(case("INS +0/2026").is_err());
        assert!(case("INS 5/+202").is_err());
        assert_eq!(case("INS 1/2008").unwrap(), "INS 1/2008");
        assert_eq!(case("INS 999999999/2100").unwrap(), "INS 999999999/2100");
        assert!(case("INS 4711/2007").is_err());
        assert!(case("INS 4711/2101").is_err());
        assert!(case("INS 4711/").is_err());
        assert!(case("INS /2026").is_err());
    }

    /// A file as a Czech Excel saves it: Windows-1250, `;` between cells, headers in
    /// Czech, a column of names to ignore; the same with a UTF-8 byte-order mark, and as
    /// UTF-16 "Unicode text" with tabs. Bytes written by hand (0xC8 is `Č` and 0xE1 `á`
    /// in Windows-1250).
    #[test]
    fn csv_as_spreadsheets_save_it() {
        let want: BTreeSet<Entry> = [
            Entry {
                kind: Kind::Ico,
                key: "25596641".into(),
            },
            Entry {
                kind: Kind::Rc,
                key: "736028/5163".into(),
            },
            Entry {
                kind: Kind::Case,
                key: "INS 4711/2026".into(),
            },
            Entry {
                kind: Kind::Ico,
                key: "00027383".into(),
            },
        ]
        .into();
        // "Název;IČO;RČ;Spisová značka" in Windows-1250.
        let mut cp1250: Vec<u8> = b"N\xe1zev;I\xc8O;R\xc8;Spisov\xe1 zna\xe8ka\r\n".to_vec();
        cp1250.extend_from_slice(b"Banka, a.s.;25596641;;\r\nNov\xe1k;;736028/5163;KSPH 36 INS 4711/2026\r\n;27383;;\r\n");
        assert_eq!(from_csv(&cp1250).unwrap(), want);
        let utf8 = "\u{feff}Název;IČO;RČ;Spisová značka\r\n\"Banka; a.s.\";25596641;;\r\nNovák;;7360285163;INS 4711/2026\r\n;00027383;;\r\n";
        assert_eq!(from_csv(utf8.as_bytes()).unwrap(), want);
        let tabs = "ič\trodné číslo\tsp. zn.\tpoznámka\n25596641\t736028/5163\tINS 4711/2026\tx, y; z\n27383\t\t\t\n";
        let mut utf16 = vec![0xFF, 0xFE];
        for u in tabs.encode_utf16() {
            utf16.extend_from_slice(&u.to_le_bytes());
        }
        assert_eq!(from_csv(&utf16).unwrap(), want);
        // A `;` file's bad lines are reported by number, as any other's.
        let bad = "IČO;Název\n25596641;a, b\n25596642;c\n";
        let e = from_csv(bad.as_bytes()).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].line, 3);
        assert!(e[0].error.contains("check digit"), "{e:?}");
        // A `,` or `;` inside a quoted header cell does not count towards the delimiter.
        let quoted = "\"Firma, s.r.o., Praha\";IČO\nx;25596641\n";
        let one: BTreeSet<Entry> = [Entry {
            kind: Kind::Ico,
            key: "25596641".into(),
        }]
        .into();
        assert_eq!(from_csv(quoted.as_bytes()).unwrap(), one);
        for text in [
            "IČO,\"Firma; a; b\"\n25596641,x\n",
            "IČO,\"Firma\ta\tb\"\n25596641,x\n",
            // The most frequent outside quotes wins: two `,` over one `;`.
            "IČO,Název,Pozn. a;b\n25596641,x,y\n",
        ] {
            assert_eq!(from_csv(text.as_bytes()).unwrap(), one, "{text:?}");
        }
        // A header of none of them says what it found.
        let e = from_csv("Název;Město\nx;y\n".as_bytes()).unwrap_err();
        assert!(e[0].error.contains("\"Název\""), "{e:?}");
    }

    #[test]
    fn csv_reports_every_bad_line_and_imports_nothing() {
        let good = b"ico,rc,case,note\n25596641,,,bank\n,736028/5163,,client\n,,INS 1/2020,x\n";
        let got = from_csv(good).unwrap();
        assert_eq!(got.len(), 3);
        let bad = b"ico,name\n25596641,a\n25596642,b\n45274649,c\nxyz,d\n";
        let e = from_csv(bad).unwrap_err();
        assert_eq!(
            e.iter().map(|b| b.line).collect::<Vec<_>>(),
            vec![3, 5],
            "{e:?}"
        );
        assert!(
            from_csv(b"name\nx\n").unwrap_err()[0]
                .error
                .contains("no column")
        );
    }
}
