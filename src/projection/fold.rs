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

/// Legal-form suffixes (and the liquidation mark) a name search ignores, with dots,
/// commas and spaces removed: `s.r.o.`, `spol. s r.o.`, `a. s.`, `v likvidaci`...
const LEGAL_FORMS: &[&str] = &[
    "sro",
    "spolsro",
    "spolsrucenimomezenym",
    "srucenimomezenym",
    "as",
    "akciovaspolecnost",
    "vos",
    "verejnaobchodnispolecnost",
    "ks",
    "komanditnispolecnost",
    "zs",
    "ops",
    "sp",
    "se",
    "druzstvo",
    "ud",
    "zu",
    "vlikvidaci",
    "vkonkursu",
    "ltd",
    "limited",
    "gmbh",
    "ag",
    "inc",
    "llc",
    "plc",
    "bv",
    "nv",
    "sa",
    "sarl",
    "spzoo",
    "kft",
    "srl",
    "spa",
];

/// The words a name search matches (lower case, without diacritics, legal-form
/// suffixes dropped, split at every character that is not a letter or a digit), in
/// the order given. The same function folds the stored names and the searched text.
pub fn search_words(s: &str) -> Vec<String> {
    let folded = name_key(s);
    let mut tokens: Vec<&str> = folded.split_whitespace().collect();
    let bare = |t: &[&str]| -> String {
        t.iter()
            .flat_map(|w| w.chars())
            .filter(|c| c.is_alphanumeric())
            .collect()
    };
    // Drop legal forms from the end, longest first (`spol. s r.o.` before `r.o.`), and
    // again (`s.r.o. v likvidaci`); a name is never dropped whole.
    'strip: loop {
        for n in (1..=5.min(tokens.len().saturating_sub(1))).rev() {
            let tail = bare(&tokens[tokens.len() - n..]);
            if LEGAL_FORMS.contains(&tail.as_str()) {
                tokens.truncate(tokens.len() - n);
                continue 'strip;
            }
        }
        break;
    }
    // A legal form glued to the name by a comma (`Alza.cz,a.s.`) is one token: cut it.
    if let Some(last) = tokens.last_mut()
        && let Some((head, tail)) = last.rsplit_once(',')
        && LEGAL_FORMS.contains(&bare(&[tail]).as_str())
        && !bare(&[head]).is_empty()
    {
        *last = head;
    }
    tokens
        .iter()
        .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The exact-match key of a word list: its distinct words, sorted, joined by spaces
/// (`Novák Jan` and `Jan Novák` have the same key).
pub fn exact_key(words: &[String]) -> String {
    let mut w: Vec<&str> = words.iter().map(String::as_str).collect();
    w.sort_unstable();
    w.dedup();
    w.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_words_fold_and_drop_legal_forms() {
        let w = |s: &str| search_words(s).join(" ");
        assert_eq!(w("Jan NOVÁK"), "jan novak");
        assert_eq!(w("Alza.cz a.s."), "alza cz");
        assert_eq!(w("ALZA.CZ, a. s."), "alza cz");
        assert_eq!(w("Stavby Brno, spol. s r.o."), "stavby brno");
        assert_eq!(w("Stavby Brno s.r.o. v likvidaci"), "stavby brno");
        assert_eq!(w("Družstvo Práce, družstvo"), "druzstvo prace");
        assert_eq!(w("Alza.cz,a.s."), "alza cz");
        // A name that is only a legal form stays whole; an inner word is never dropped.
        assert_eq!(w("s.r.o."), "s r o");
        assert_eq!(w("AS Trading s.r.o."), "as trading");
        assert_eq!(w("Müller GmbH"), "muller");
        assert_eq!(w("  "), "");
        assert_eq!(
            exact_key(&search_words("Nováková Jana Jana")),
            "jana novakova"
        );
    }
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
