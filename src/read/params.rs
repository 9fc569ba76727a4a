//! Parameters the API and the pages share: a case number from its path, a search value
//! validated and folded to the key it is looked up by, and URL escaping for links.
//!
//! Pure functions: no I/O, no state.

use super::Problem;
use crate::readmodel::fold::{ico_key, name_key, rc_key};

pub fn case_number(year: &str, number: &str) -> Result<String, Problem> {
    let y: i64 = year
        .parse()
        .map_err(|_| Problem::bad(format!("year {year:?} is not a number")))?;
    if !(2008..=2100).contains(&y) {
        return Err(Problem::bad(format!(
            "year {y} is outside 2008-2100 (the register starts in 2008)"
        )));
    }
    let n: i64 = number
        .parse()
        .map_err(|_| Problem::bad(format!("case number {number:?} is not a number")))?;
    if n < 1 {
        return Err(Problem::bad(format!("case number {n} must be positive")));
    }
    Ok(format!("INS {n}/{y}"))
}

/// What a search text is: a case number (`INS 1476/2008`, `1476/2008`), or a key of
/// the subjects: `rc` (a birth number), `ico` (digits) or `name`, with the key's name
/// for people. Shared by the search page and `/v1/search`.
#[derive(Debug, PartialEq, Eq)]
pub enum SearchText {
    Case { year: String, number: String },
    Key(&'static str, &'static str),
}

impl SearchText {
    pub fn of(q: &str) -> Self {
        // A case number is `INS n/yyyy` or `n/yyyy` with n of 1 to 5 digits (a year has
        // at most some tens of thousands of cases); a birth number has 6 digits before
        // the slash.
        let t = q.trim();
        let bare = t
            .strip_prefix("INS")
            .or_else(|| t.strip_prefix("ins"))
            .or_else(|| t.strip_prefix("Ins"))
            .unwrap_or(t)
            .trim();
        if let Some((n, y)) = bare.split_once('/') {
            let (n, y) = (n.trim(), y.trim());
            if y.len() == 4
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_digit())
                && y.parse::<u32>().is_ok_and(|y| (2008..=2100).contains(&y))
                && (n.len() <= 5 || bare.len() < t.len())
            {
                return SearchText::Case {
                    year: y.to_string(),
                    number: n.to_string(),
                };
            }
        }
        let digits = t.chars().filter(|c| *c != '/').count();
        let numeric = !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '/');
        if numeric && (t.contains('/') || digits >= 9) {
            SearchText::Key("rc", "birth number")
        } else if numeric {
            SearchText::Key("ico", "IČO")
        } else {
            SearchText::Key("name", "name")
        }
    }
}

/// Validates a search value and gives the `parties` column and key to look it up by:
/// `kind` is `ico`, `rc` or `name`; `param` names the parameter in messages.
pub fn search_key(param: &str, kind: &str, v: &str) -> Result<(&'static str, String), Problem> {
    match kind {
        "ico" => {
            if !(v.len() >= 6 && v.len() <= 12 && v.chars().all(|c| c.is_ascii_digit())) {
                return Err(Problem::bad(format!(
                    "{param} {v:?} is not an IČO (6 to 12 digits)"
                )));
            }
            Ok(("ico", ico_key(v)))
        }
        "rc" => {
            let digits: String = v.chars().filter(|c| *c != '/').collect();
            if !(digits.len() == 9 || digits.len() == 10)
                || !digits.chars().all(|c| c.is_ascii_digit())
                || v.matches('/').count() > 1
            {
                return Err(Problem::bad(format!(
                    "{param} {v:?} is not a birth number (NNNNNN/NNNN or NNNNNN/NNN)"
                )));
            }
            Ok(("rc", rc_key(v)))
        }
        _ => {
            let k = name_key(v);
            if k.is_empty() || v.chars().count() > 200 {
                return Err(Problem::bad(format!(
                    "{param} must have 1 to 200 characters"
                )));
            }
            Ok(("name_key", k))
        }
    }
}

pub fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
