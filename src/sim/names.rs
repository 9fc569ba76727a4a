//! The simulator's vocabulary: courts, Czech given names and surnames, company words
//! and legal forms, towns and streets, and the identifiers made from them (IČO with its
//! check digit, birth numbers, the register's time formats).
//!
//! Pure data and pure functions of a hash; never random by itself.

use chrono::{DateTime, Utc};
use chrono_tz::Europe::Prague;

pub(super) const COURTS: &[&str] = &[
    "MSPHAAB",
    "KSSTCAB",
    "KSJICCB",
    "KSZPCPM",
    "KSSCEUL",
    "KSSECULP1",
    "KSVYCHK",
    "KSVYCHKP1",
    "KSJIMBM",
    "KSSEMOS",
    "KSSEMOSP1",
    "VSSTCAB",
    "VSSEMOC",
];
pub(super) const COURT_WEIGHTS: &[u32] = &[14, 12, 6, 6, 9, 4, 6, 4, 13, 14, 6, 1, 1];

pub(super) const MALE_FIRST: &[&str] = &[
    "Jan",
    "Petr",
    "Josef",
    "Pavel",
    "Martin",
    "Tomáš",
    "Jiří",
    "Lukáš",
    "Zdeněk",
    "Miroslav",
    "Václav",
    "Michal",
    "František",
    "Jaroslav",
    "Radek",
    "Ondřej",
];
pub(super) const FEMALE_FIRST: &[&str] = &[
    "Jana",
    "Marie",
    "Eva",
    "Hana",
    "Anna",
    "Lenka",
    "Kateřina",
    "Věra",
    "Lucie",
    "Alena",
    "Petra",
    "Zuzana",
    "Jitka",
    "Markéta",
    "Šárka",
    "Ivana",
];
pub(super) const MALE_SUR: &[&str] = &[
    "Novák",
    "Svoboda",
    "Novotný",
    "Dvořák",
    "Černý",
    "Procházka",
    "Kučera",
    "Veselý",
    "Horák",
    "Němec",
    "Pokorný",
    "Marek",
    "Pospíšil",
    "Hájek",
    "Jelínek",
    "Růžička",
    "Beneš",
    "Fiala",
    "Sedláček",
    "Doležal",
    "Zeman",
    "Kolář",
    "Navrátil",
    "Čermák",
    "Šťastný",
    "Kříž",
    "Vaněk",
    "Urban",
    "Blažek",
    "Kříž",
];
pub(super) const FEMALE_SUR: &[&str] = &[
    "Nováková",
    "Svobodová",
    "Novotná",
    "Dvořáková",
    "Černá",
    "Procházková",
    "Kučerová",
    "Veselá",
    "Horáková",
    "Němcová",
    "Pokorná",
    "Marková",
    "Pospíšilová",
    "Hájková",
    "Jelínková",
    "Růžičková",
    "Benešová",
    "Fialová",
    "Sedláčková",
    "Doležalová",
    "Zemanová",
    "Kolářová",
    "Navrátilová",
    "Čermáková",
    "Šťastná",
    "Křížová",
    "Vaňková",
    "Urbanová",
    "Blažková",
    "Žáková",
];
pub(super) const COMPANY_WORDS: &[&str] = &[
    "Stavby",
    "Doprava",
    "Agro",
    "Řemesla",
    "Obchod",
    "Elektro",
    "Dřevo",
    "Kovo",
    "Textil",
    "Pekárna",
    "Služby",
    "Reality",
    "Technik",
    "Zámečnictví",
    "Úklid",
    "Gastro",
];
pub(super) const COMPANY_PLACES: &[&str] = &[
    "Morava",
    "Čechy",
    "Vysočina",
    "Šumava",
    "Krkonoše",
    "Haná",
    "Slezsko",
    "Polabí",
    "Praha",
    "Brno",
];
pub(super) const LEGAL_FORMS: &[&str] = &["s.r.o.", "a.s.", "v.o.s.", "družstvo", "k.s."];
/// (city, district, postcode)
pub(super) const CITIES: &[(&str, &str, &str)] = &[
    ("Praha", "Hlavní město Praha", "110 00"),
    ("Brno", "Brno-město", "602 00"),
    ("Ostrava", "Ostrava-město", "702 00"),
    ("Plzeň", "Plzeň-město", "301 00"),
    ("Liberec", "Liberec", "460 01"),
    ("Olomouc", "Olomouc", "779 00"),
    ("České Budějovice", "České Budějovice", "370 01"),
    ("Hradec Králové", "Hradec Králové", "500 02"),
    ("Ústí nad Labem", "Ústí nad Labem", "400 01"),
    ("Pardubice", "Pardubice", "530 02"),
    ("Zlín", "Zlín", "760 01"),
    ("Kladno", "Kladno", "272 01"),
    ("Most", "Most", "434 01"),
    ("Opava", "Opava", "746 01"),
    ("Frýdek-Místek", "Frýdek-Místek", "738 01"),
    ("Karviná", "Karviná", "733 01"),
    ("Jihlava", "Jihlava", "586 01"),
    ("Děčín", "Děčín", "405 02"),
    ("Třebíč", "Třebíč", "674 01"),
    ("Šumperk", "Šumperk", "787 01"),
];
pub(super) const STREETS: &[&str] = &[
    "Hlavní",
    "Nádražní",
    "Školní",
    "Zahradní",
    "Komenského",
    "Masarykova",
    "Husova",
    "Palackého",
    "Údolní",
    "Jiráskova",
    "Lesní",
    "Polní",
    "Tyršova",
    "Žižkova",
    "Čechova",
];

pub(super) fn upper(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '.')
        .flat_map(|c| c.to_uppercase())
        .collect()
}

/// A valid 8-digit IČO (weighted mod-11 check digit).
pub fn ico_from(h: u64) -> String {
    let base = 1_000_000 + h % 9_000_000; // 7 digits
    let sum: u64 = format!("{base:07}")
        .bytes()
        .enumerate()
        .map(|(i, d)| (d - b'0') as u64 * (8 - i as u64))
        .sum();
    let check = match sum % 11 {
        0 => 1,
        1 => 0,
        r => 11 - r,
    } % 10;
    format!("{base:07}{check}")
}

/// A birth number `YYMMDD/XXXX` divisible by 11 (women: month + 50).
pub fn birth_number(year: i32, month: u32, day: u32, female: bool, h: u64) -> String {
    let mm = if female { month + 50 } else { month };
    let head = format!("{:02}{:02}{:02}", year % 100, mm, day);
    let prefix: u64 = head.parse::<u64>().unwrap() * 1000 + h % 1000;
    let check = (prefix % 11) % 10;
    format!("{head}/{:03}{check}", h % 1000)
}

/// `2015-01-05T10:23:08.000+01:00` in Prague time.
pub fn time_str(t: DateTime<Utc>) -> String {
    t.with_timezone(&Prague)
        .format("%Y-%m-%dT%H:%M:%S%.3f%:z")
        .to_string()
}

/// `2015-08-21+02:00` in Prague time.
pub fn date_str(t: DateTime<Utc>) -> String {
    t.with_timezone(&Prague).format("%Y-%m-%d%:z").to_string()
}
