//! Search keys: a name key that ignores case and diacritics (`Novák`, `NOVAK` and `novák`
//! give `novak`), and normalised IČO and birth numbers.
//!
//! Owns the normalisation only; the same functions serve the builders and the queries.

use unicode_normalization::UnicodeNormalization;

/// Lower case, without diacritics, single spaces.
pub fn name_key(s: &str) -> String {
    let folded: String = s
        .nfd()
        .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
        .flat_map(|c| c.to_lowercase())
        .collect();
    folded.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An IČO as digits only (the feed has 8 digits, sometimes more).
pub fn ico_key(s: &str) -> String {
    s.chars().filter(|c| c.is_ascii_digit()).collect()
}

/// A birth number as `NNNNNN/NNNN` (or `/NNN`), with or without the slash given.
pub fn rc_key(s: &str) -> String {
    let d: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
    if d.len() >= 9 {
        format!("{}/{}", &d[..6], &d[6..])
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn folds() {
        assert_eq!(name_key("Novák"), "novak");
        assert_eq!(name_key("NOVAK"), "novak");
        assert_eq!(name_key(" Šťastná  Růžena "), "stastna ruzena");
        assert_eq!(name_key("Žluťoučký kůň"), "zlutoucky kun");
        assert_eq!(rc_key("8551010000"), "855101/0000");
        assert_eq!(rc_key("855101/000"), "855101/000");
        assert_eq!(ico_key("123 456 78"), "12345678");
    }
}
