//! Data-driven parser tests over the shared fixtures and over one message per error class.

use std::path::{Path, PathBuf};

use isir::source::model::{Address, CaseBlock, CodeListEntry, Detail, Person};
use isir::source::parse::{parse_data_response, parse_last_id_response, parse_note};
use isir::source::{Flag, Note, SourceError};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/isir")
            .join(name),
    )
    .unwrap()
}

/// The repository keeps a copy of `../shared/isir/fixtures`; where the shared folder is
/// present, the copy must not have drifted from it.
#[test]
fn fixture_copies_match_shared() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/isir/fixtures");
    let Ok(dir) = std::fs::read_dir(&shared) else {
        // CI lays shared/ beside the clone: there it must be compared, not skipped.
        assert!(
            std::env::var("CI").is_err(),
            "{} is absent in CI: the fixtures cannot be compared with the protocol's",
            shared.display()
        );
        eprintln!(
            "note: {} absent; the repository copy is used",
            shared.display()
        );
        return;
    };
    let mut n = 0;
    for e in dir {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            fixture(&name),
            "fixture {name} differs from the shared copy"
        );
        n += 1;
    }
    assert!(n >= 7);
}

#[test]
fn mixed_page_parses_every_field() {
    let page = parse_data_response(&fixture("page-mixed.xml"), 79500000).unwrap();
    let ids: Vec<i64> = page.actions().map(|a| a.id).collect();
    assert_eq!(
        ids,
        [
            79500007, 79500009, 79500010, 79500012, 79500015, 79500016, 79500019, 79500020
        ]
    );
    let a = &page.records[0].action;
    assert_eq!(a.created, "2026-03-02T09:14:05.000+01:00");
    assert_eq!(a.published, "2026-03-02T09:20:11.000+01:00");
    assert_eq!(
        a.document_url.as_deref(),
        Some("https://isir.justice.cz:8443/isir_public_ws/doc/Document?idDokument=90000123")
    );
    assert_eq!(a.case_number, "INS 4711/2026");
    assert_eq!(a.type_code, "6");
    assert_eq!(
        a.type_name,
        "Insolvenční návrh spojený s návrhem na povolení oddlužení"
    );
    assert_eq!(a.section.as_deref(), Some("A"));
    assert_eq!(a.number_in_section, Some(1));
    assert!(
        a.note.as_deref().unwrap().starts_with(
            "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><ns2:udalost"
        )
    );
    let Note::Parsed(d) = &page.records[0].detail else {
        panic!("detail not parsed")
    };
    assert_eq!(d.schema_version.as_deref(), Some("1_10"));
    assert_eq!(d.origin.as_deref(), Some("KSSTCAB"));
    assert_eq!(
        d.case.as_ref().unwrap().state.as_deref(),
        Some("NEVYRIZENA")
    );
    assert_eq!(d.secondary_action, Some(Flag::F));
    assert_eq!(d.secondary_document, Some(Flag::F));

    // Natural-person debtor: idOsoby byte-exact, diacritics preserved.
    let b = &page.records[1];
    assert_eq!(b.action.document_url, None);
    assert_eq!(b.action.section, None);
    let Note::Parsed(d) = &b.detail else { panic!() };
    let p = d.person.as_ref().unwrap();
    assert_eq!(p.id, "ZKUŠEBNÁJANA010185 1");
    assert_eq!(p.role.as_deref(), Some("DLUŽNÍK"));
    assert_eq!(p.name.as_deref(), Some("Zkušebná"));
    assert_eq!(p.first_name.as_deref(), Some("Jana"));
    assert_eq!(p.kind.as_deref(), Some("F"));
    assert_eq!(p.birth_number.as_deref(), Some("855101/0000"));
    assert_eq!(p.birth_date.as_deref(), Some("1985-01-01+01:00"));
    assert_eq!(p.addresses.len(), 1);
    let ad = &p.addresses[0];
    assert_eq!(ad.kind.as_deref(), Some("TRVALÁ"));
    assert_eq!(ad.valid_from.as_deref(), Some("2026-03-02+01:00"));
    assert_eq!(ad.city.as_deref(), Some("Kladno"));
    assert_eq!(ad.street.as_deref(), Some("Zkušební"));
    assert_eq!(ad.house_number.as_deref(), Some("12"));
    assert_eq!(ad.district.as_deref(), Some("Kladno"));
    assert_eq!(ad.country.as_deref(), Some("CZE"));
    assert_eq!(ad.postcode.as_deref(), Some("272 01"));
    assert_eq!(ad.id.as_deref(), Some("9900001"));

    // Company debtor.
    let Note::Parsed(d) = &page.records[3].detail else {
        panic!()
    };
    let p = d.person.as_ref().unwrap();
    assert_eq!(p.id, "VZOREK S.R.O.12345678 1");
    assert_eq!(p.kind.as_deref(), Some("P"));
    assert_eq!(p.legal_form.as_deref(), Some("s.r.o."));
    assert_eq!(p.ico.as_deref(), Some("12345678"));
    assert_eq!(p.addresses[0].kind.as_deref(), Some("SÍDLO FY"));
    assert_eq!(p.addresses[0].street.as_deref(), Some("Údolní"));

    // Konkurs decision with the claims deadline; created later than published is kept.
    let e = &page.records[4];
    assert_eq!(e.action.created, "2026-02-27T14:02:00.000+01:00");
    let Note::Parsed(d) = &e.detail else { panic!() };
    let c = d.case.as_ref().unwrap();
    assert_eq!(c.state.as_deref(), Some("KONKURS"));
    assert_eq!(c.claims_deadline.as_deref(), Some("2026-04-02+02:00"));

    // Claim in P1.
    assert_eq!(page.records[5].action.section.as_deref(), Some("P1"));

    // § 425 erasure.
    let Note::Parsed(d) = &page.records[6].detail else {
        panic!()
    };
    assert_eq!(d.struck_out.as_deref(), Some("2026-03-02+01:00"));
    assert_eq!(d.origin.as_deref(), Some("KSVYCHKP1"));
    assert_eq!(
        d.case.as_ref().unwrap().state.as_deref(),
        Some("ODSKRTNUTA")
    );

    // Code-list action, schema 1_8.
    let h = &page.records[7];
    assert_eq!(h.action.case_number, "INS -1/-1");
    let Note::Parsed(d) = &h.detail else { panic!() };
    assert_eq!(d.schema_version.as_deref(), Some("1_8"));
    let cl = d.code_list.as_ref().unwrap();
    assert_eq!(cl.id.as_deref(), Some("1081"));
    assert_eq!(cl.name.as_deref(), Some("Vyhláška o zpeněžení majetku"));
    assert_eq!(cl.created.as_deref(), Some("2026-03-02+01:00"));
    assert_eq!(cl.internal, Some(Flag::F));
}

#[test]
fn caught_up_page_is_empty() {
    let page = parse_data_response(&fixture("page-caught-up.xml"), 79500020).unwrap();
    assert!(page.is_empty());
}

#[test]
fn chyba_page_is_refused_with_code_and_text() {
    match parse_data_response(&fixture("page-chyba.xml"), 1) {
        Err(SourceError::Refused { code, text }) => {
            assert_eq!(code.as_deref(), Some("SERVER1"));
            assert_eq!(text.as_deref(), Some("Překročen denní limit požadavků"));
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[test]
fn soap_fault_is_a_fault() {
    match parse_data_response(&fixture("soap-fault.xml"), 1) {
        Err(SourceError::Fault { code, text }) => {
            assert_eq!(code.as_deref(), Some("S:Server"));
            assert_eq!(text.as_deref(), Some("Internal error"));
        }
        other => panic!("expected Fault, got {other:?}"),
    }
    assert!(matches!(
        parse_last_id_response(&fixture("soap-fault.xml")),
        Err(SourceError::Fault { .. })
    ));
}

#[test]
fn last_id_takes_the_maximum() {
    assert_eq!(
        parse_last_id_response(&fixture("last-id.xml")).unwrap(),
        79512345
    );
    let two = String::from_utf8(fixture("last-id.xml")).unwrap().replace(
        "<cisloPosledniId>79512345</cisloPosledniId>",
        "<cisloPosledniId>5</cisloPosledniId><cisloPosledniId>79512399</cisloPosledniId>",
    );
    assert_eq!(parse_last_id_response(two.as_bytes()).unwrap(), 79512399);
    // A data answer is not a newest-ID answer.
    assert!(matches!(
        parse_last_id_response(&fixture("page-caught-up.xml")),
        Err(SourceError::Invalid(_))
    ));
}

#[test]
fn requests_we_send_match_the_fixtures() {
    let strip = |b: Vec<u8>| String::from_utf8(b).unwrap().trim().to_string();
    assert_eq!(
        isir::source::write::request_after_id(79500000),
        strip(fixture("request-after-id.xml"))
    );
    assert_eq!(
        isir::source::write::request_last_id(),
        strip(fixture("request-last-id.xml"))
    );
}

fn error_cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/errors");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Each file's name starts with the class the parser must give it.
#[test]
fn every_error_class_by_fixture() {
    let cases = error_cases();
    assert!(cases.len() >= 20);
    for p in cases {
        let name = p.file_name().unwrap().to_str().unwrap();
        let class = name.split('-').next().unwrap();
        let body = std::fs::read(&p).unwrap();
        let got = parse_data_response(&body, 79500000);
        // A record that fails alone is held back (issue 40), the rest of the page
        // stands; the strict rule (`source.bad_records = "stop"`) still refuses it.
        let strict = isir::source::parse::parse_data_response_strict(&body, 79500000);
        let held_back = matches!(&got, Ok(p) if p.held().count() > 0);
        let ok = matches!(
            (class, &got),
            ("ok", Ok(_)) | ("invalid", Err(SourceError::Invalid(_)))
        ) || (class == "invalid"
            && held_back
            && matches!(strict, Err(SourceError::Invalid(_))))
            || matches!(
                (class, &got),
                ("retryable", Err(SourceError::Retryable(_)))
                    | ("refused", Err(SourceError::Refused { .. }))
                    | ("fault", Err(SourceError::Fault { .. }))
            );
        assert!(ok, "{name}: expected {class}, got {got:?}");
        if let Err(e) = &got {
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn unknown_elements_codes_and_cdata_are_kept() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/errors/ok-prefixes-whitespace-cdata-unknown.xml");
    let page = parse_data_response(&std::fs::read(p).unwrap(), 79500000).unwrap();
    assert_eq!(page.len(), 2);
    let r = &page.records[1];
    assert_eq!(r.action.type_code, "9999");
    assert_eq!(r.action.type_name, "");
    let Note::Parsed(d) = &r.detail else {
        panic!("{:?}", r.detail)
    };
    assert_eq!(d.origin.as_deref(), Some("NEWCOURT"));
    assert_eq!(d.schema_version.as_deref(), Some("2_0"));
    assert_eq!(d.case.as_ref().unwrap().state.as_deref(), Some("NOVÝ STAV"));
}

#[test]
fn broken_poznamka_keeps_the_raw_text() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/errors/ok-broken-poznamka-kept-raw.xml");
    let page = parse_data_response(&std::fs::read(p).unwrap(), 79500000).unwrap();
    let r = &page.records[1];
    assert_eq!(r.action.note.as_deref(), Some("<udalost><osoba>broken"));
    assert!(matches!(&r.detail, Note::Unparsed { error } if !error.is_empty()));
}

#[test]
fn note_parser_rejects_hostile_documents() {
    assert!(parse_note("<!DOCTYPE x [<!ENTITY a \"b\">]><udalost>&a;</udalost>").is_err());
    assert!(parse_note("<other/>").is_err());
    assert!(
        parse_note("<udalost><osoba><jmeno>x</jmeno></osoba></udalost>").is_err(),
        "osoba without idOsoby"
    );
    let deep = format!(
        "<udalost>{}{}</udalost>",
        "<x>".repeat(10_000),
        "</x>".repeat(10_000)
    );
    assert!(
        parse_note(&deep).is_ok(),
        "deep unknown nesting is skipped without recursion"
    );
    assert!(parse_note("<udalost></udalost><udalost/>").is_err());
}

#[test]
fn invalid_utf8_is_invalid_not_a_panic() {
    let mut b = fixture("page-mixed.xml");
    let i = b.windows(5).position(|w| w == b"Kladn").unwrap();
    b[i] = 0xff;
    // 0xff is `˙` in windows-1250: no letter, so neither encoding fits; the record
    // holding it is held back whole (issue 40), and the strict rule refuses the page.
    let r = isir::source::parse::parse_data_response_strict(&b, 79500000);
    assert!(matches!(r, Err(SourceError::Invalid(_))), "{r:?}");
    let p = parse_data_response(&b, 79500000).unwrap();
    let held: Vec<_> = p.held().collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].reason, isir::source::SpoilReason::Encoding);
    assert!(held[0].raw.contains(&0xff));
    assert!(p.records.iter().all(|r| r.action.id != held[0].id.unwrap()));
    assert!(!format!("{p:?}").contains('\u{fffd}'));
}

#[test]
fn a_body_cut_inside_a_character_is_truncated_not_invalid() {
    let b = fixture("page-mixed.xml");
    // Cut after the first byte of the first two-byte character (a Czech letter).
    let i = b.iter().position(|&c| c >= 0xc0).unwrap();
    let r = parse_data_response(&b[..=i], 79500000);
    assert!(
        matches!(&r, Err(SourceError::Retryable(m)) if m.contains("truncated")),
        "{r:?}"
    );
}

/// The newest-ID answer is read as strictly as a page: cut inside a character it is
/// truncated (to retry), a byte that is not UTF-8 inside it is named.
#[test]
fn a_newest_id_answer_cut_or_not_utf8_says_which() {
    let b = fixture("last-id.xml");
    let i = b.windows(6).position(|w| w == b"<stav>").unwrap() + 6;
    // Cut after the first byte of a `Č` (C4 8C) where the status would begin.
    let mut cut = b[..i].to_vec();
    cut.push(0xc4);
    let r = parse_last_id_response(&cut);
    assert!(
        matches!(&r, Err(SourceError::Retryable(m)) if m.contains("truncated")),
        "{r:?}"
    );
    let mut bad = b.clone();
    let j = bad.windows(8).position(|w| w == b"Envelope").unwrap();
    bad[j + 1] = 0xfe;
    let r = parse_last_id_response(&bad);
    assert!(
        matches!(&r, Err(SourceError::Invalid(m)) if m == &format!("the body is not UTF-8 at byte {}", j + 1)),
        "{r:?}"
    );
}

#[test]
fn invalid_utf8_anywhere_in_the_body_is_named_with_its_byte() {
    let mut b = fixture("page-mixed.xml");
    // Inside markup the parser never keeps (the envelope's namespace declaration).
    let i = b.windows(8).position(|w| w == b"Envelope").unwrap();
    b[i + 1] = 0xfe;
    let r = parse_data_response(&b, 79500000);
    assert!(
        matches!(&r, Err(SourceError::Invalid(m)) if m == &format!("the body is not UTF-8 at byte {}", i + 1)),
        "{r:?}"
    );
}

/// A detail document is its root element `udalost`, with blank text (a line break)
/// before it and nothing else: text before it, or no root at all, is an error.
#[test]
fn a_note_is_its_root_element_alone() {
    let root = r#"<ns2:udalost xmlns:ns2="http://www.cca.cz/isir/poznamka" verzeXsd="1_8"><idOsobyPuvodce>KSBRNO</idOsobyPuvodce></ns2:udalost>"#;
    let decl = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>"#;
    let d = parse_note(&format!("{decl}\n  {root}")).unwrap();
    assert_eq!(d.origin.as_deref(), Some("KSBRNO"));
    assert_eq!(d.schema_version.as_deref(), Some("1_8"));
    let e = parse_note(&format!("{decl}x{root}")).unwrap_err();
    assert!(e.contains("text before the root element"), "{e}");
    assert!(parse_note(decl).is_err(), "a declaration alone");
    // After it, blank text only.
    assert!(parse_note(&format!("{decl}{root}\n")).is_ok());
    let e = parse_note(&format!("{decl}{root}x")).unwrap_err();
    assert!(e.contains("text after the root element"), "{e}");
    let cut = root.strip_suffix("</ns2:udalost>").unwrap();
    assert!(
        parse_note(&format!("{decl}{cut}")).is_err(),
        "cut before its root closes"
    );
    assert!(parse_note("").is_err(), "nothing");
}

/// A newest-ID answer holding a `data` block (which belongs to the other answer) is
/// read for its ID alone: the block is skipped whatever it holds.
#[test]
fn a_newest_id_answer_skips_what_belongs_to_a_data_answer() {
    let b = String::from_utf8(fixture("last-id.xml")).unwrap().replace(
        "<cisloPosledniId>",
        "<data><id>7</id><cisloVOddilu><b>1</b></cisloVOddilu><x>&amp;</x></data><cisloPosledniId>",
    );
    assert_eq!(parse_last_id_response(b.as_bytes()).unwrap(), 79512345);
    // An element inside a value is skipped, its text with it.
    let nested = String::from_utf8(fixture("last-id.xml")).unwrap().replace(
        "<cisloPosledniId>79512345</cisloPosledniId>",
        "<cisloPosledniId>795<x>9</x>12345</cisloPosledniId>",
    );
    assert_eq!(parse_last_id_response(nested.as_bytes()).unwrap(), 79512345);
}

/// An envelope refused for an element it should not hold names that element.
#[test]
fn errors_name_the_element_they_found() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/errors");
    for (file, says) in [
        (
            "invalid-element-before-the-body.xml",
            "unexpected <x> in the SOAP envelope",
        ),
        (
            "invalid-element-around-the-answer.xml",
            "unexpected <x> in the SOAP Body, expected getIsirWsPublicDataResponse",
        ),
    ] {
        let body = std::fs::read(dir.join(file)).unwrap();
        match parse_data_response(&body, 79500000) {
            Err(SourceError::Invalid(m)) => assert_eq!(m, says, "{file}"),
            other => panic!("{file}: {other:?}"),
        }
    }
}

/// A detail document of `tests/fixtures/notes`, written by hand from the protocol.
fn note_fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/notes")
            .join(name),
    )
    .unwrap()
}

/// The hand-written detail documents, each with the [`Detail`] typed out from the same
/// page of the protocol: the parser reads every element the protocol names, and the
/// simulator's note writer writes exactly that document (so the simulated register is
/// not checked only against itself).
fn hand_written_notes() -> Vec<(&'static str, Detail)> {
    let s = |v: &str| Some(v.to_string());
    vec![
        (
            "case-every-element.xml",
            Detail {
                schema_version: s("1_10"),
                origin: s("KSBRPBR"),
                case: Some(CaseBlock {
                    state: s("ZRUŠENO VS"),
                    annulled: s("2026-05-04+02:00"),
                    claims_deadline: s("2026-04-02+02:00"),
                    ended: s("2026-06-30+02:00"),
                }),
                legal_force_date: s("2026-03-20+01:00"),
                secondary_action: Some(Flag::T),
                secondary_document: Some(Flag::F),
                claim_section_kind: s("P"),
                claim_section_number: s("7"),
                creditor: s("STAVBY & SPOL S.R.O.27654321 2"),
                valid_creditor: Some(Flag::T),
                erroneous_claim_entry: Some(Flag::Other("X".into())),
                administrator_appointed: s("2026-03-05+01:00"),
                corrected_published: s("2026-03-01+01:00"),
                struck_out: s("2026-07-01+02:00"),
                person_id1: s("DVOŘÁKPETR  120377  1"),
                person_id2: s("DVOŘÁKOVÁEVA140580  2"),
                joined: s("2026-03-10+01:00"),
                separated: s("2026-03-11+01:00"),
                annulled: s("2026-03-12+01:00"),
                incidental_number: s("415"),
                incidental_kind: s("ICm"),
                incidental_year: s("2026"),
                incidental_senate: s("26"),
                ..Default::default()
            },
        ),
        (
            "person-every-element.xml",
            Detail {
                schema_version: s("1_9"),
                origin: s("KSOSCOS"),
                person: Some(Person {
                    id: "ŘEHOŘOVÁ ŽOFIE 2103  1".into(),
                    role: s("DLUŽNÍK"),
                    administrator_kind: s("INSOLV. SP"),
                    name: s("Řehořová"),
                    trade_name: s("Kadeřnictví Žofie <U Lípy>"),
                    kind: s("PODNIKATEL"),
                    legal_form: s("FO podnik."),
                    first_name: s("Žofie"),
                    title_before: s("Ing."),
                    title_after: s("Ph.D."),
                    ico: s("0123456789"),
                    dic: s("CZ7551034567"),
                    birth_number: s("755103/456"),
                    addresses: vec![
                        Address {
                            kind: s("TRVALÁ"),
                            valid_from: s("2001-09-01+02:00"),
                            valid_to: s("2026-02-28+01:00"),
                            city: s("Frýdek-Místek"),
                            street: s("Třída T. G. Masaryka"),
                            house_number: s("1142/7a"),
                            district: s("Frýdek-Místek"),
                            country: s("CZE"),
                            postcode: s("738 01"),
                            phone: s("+420 558 000 111"),
                            fax: s("558 000 112"),
                            text: s("vchod ze dvora"),
                            id: s("31337"),
                        },
                        Address {
                            kind: s("E-MAIL"),
                            text: s("zofie@example.cz"),
                            ..Default::default()
                        },
                    ],
                    birth_date: s("1975-01-03+01:00"),
                    left_case: s("2026-08-14+02:00"),
                }),
                secondary_action: Some(Flag::F),
                ..Default::default()
            },
        ),
        (
            "code-list-entry.xml",
            Detail {
                schema_version: s("1_8"),
                origin: s("CCA"),
                code_list: Some(CodeListEntry {
                    id: s("1081"),
                    name: s("Vyhláška o zpeněžení majetku"),
                    created: s("2014-01-01+01:00"),
                    cancelled: s("2026-03-02+01:00"),
                    internal: Some(Flag::T),
                }),
                ..Default::default()
            },
        ),
    ]
}

#[test]
fn hand_written_notes_parse_to_every_field() {
    for (name, want) in hand_written_notes() {
        assert_eq!(parse_note(&note_fixture(name)).unwrap(), want, "{name}");
    }
}

#[test]
fn the_note_writer_writes_the_hand_written_documents() {
    // The simulator publishes its notes through `source::write::note_xml`; what it
    // writes for each typed-out detail is the hand-written document, element for
    // element (only the layout between elements differs).
    for (name, detail) in hand_written_notes() {
        let text = note_fixture(name);
        let mut flat = String::new();
        for line in text.lines() {
            flat.push_str(line.trim());
        }
        assert_eq!(isir::source::write::note_xml(&detail), flat, "{name}");
    }
}
