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

/// Academic and professional titles, before or after a name (`JUDr. Jan Novák, Ph.D.`),
/// with dots and spaces removed: the register keeps them apart from the name
/// (`titulPred`, `titulZa`), so a name pasted with them finds nothing unless they go.
const TITLES: &[&str] = &[
    "bc", "bca", "mgr", "mga", "ing", "ingarch", "mudr", "mddr", "mvdr", "pharmdr", "judr", "phdr",
    "rndr", "thdr", "thlic", "thmgr", "paeddr", "rsdr", "phmr", "icdr", "icldr", "iclic", "phd",
    "thd", "csc", "drsc", "dsc", "dis", "mba", "mpa", "llm", "llb", "msc", "bsc", "dipl", "diplng",
    "dring", "akadmal", "akadsoch", "akadarch",
];

/// Titles that are also words of names or firms (`Doc`, `Prof`, `Dr`, `Arch`): dropped
/// only when written with their dot (`doc.`), as a title is.
const TITLES_WITH_DOT: &[&str] = &["doc", "prof", "dr", "arch", "akad", "mal", "soch"];

/// The words of a searched text: [`search_words`] without academic and professional
/// titles (`JUDr.`, `Ing. arch.`, `Ph.D.`, `doc.`), which are not part of a name in the
/// register. Never drops every word: a text of titles alone stays as it is.
pub fn query_words(s: &str) -> Vec<String> {
    let folded = name_key(s);
    let tokens: Vec<&str> = folded
        .split_whitespace()
        .flat_map(|t| t.split(','))
        .filter(|t| !t.is_empty())
        .collect();
    let bare = |t: &str| -> String { t.chars().filter(|c| c.is_alphanumeric()).collect() };
    let title = |t: &[&str]| -> bool {
        let b: String = t.iter().map(|w| bare(w)).collect();
        TITLES.contains(&b.as_str())
            || (t.last().is_some_and(|w| w.ends_with('.')) && TITLES_WITH_DOT.contains(&b.as_str()))
    };
    // Titles may be split by spaces (`Ph. D.`, `Ing. arch.`): the longest run first.
    let mut kept: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match (1..=3.min(tokens.len() - i))
            .rev()
            .find(|&n| title(&tokens[i..i + n]))
        {
            Some(n) => i += n,
            None => {
                kept.push(tokens[i]);
                i += 1;
            }
        }
    }
    if kept.iter().all(|t| bare(t).is_empty()) {
        return search_words(s);
    }
    search_words(&kept.join(" "))
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
    fn query_words_drop_titles() {
        let w = |s: &str| query_words(s).join(" ");
        // The names, as the case page shows them.
        assert_eq!(w("JUDr. Jaroslav Novák"), "jaroslav novak");
        assert_eq!(w("Mgr. Alena Sedláčková"), "alena sedlackova");
        assert_eq!(w("Ing. Jana Nováková"), "jana novakova");
        assert_eq!(w("Ing. arch. Petr Malý, Ph.D."), "petr maly");
        assert_eq!(w("prof. MUDr. Jan Dvořák, DrSc."), "jan dvorak");
        assert_eq!(w("doc. Ing. Eva Malá, CSc., MBA"), "eva mala");
        assert_eq!(w("Jan Novák Ph. D."), "jan novak");
        assert_eq!(w("JUDR JAN NOVAK"), "jan novak");
        // A word that is a title only with its dot stays without one.
        assert_eq!(w("Doc Martens s.r.o."), "doc martens");
        assert_eq!(w("Prof Stav a.s."), "prof stav");
        // Titles alone are searched as given; legal forms still go.
        assert_eq!(w("Ing."), "ing");
        assert_eq!(w("Alza.cz a.s."), "alza cz");
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
