//! Property tests: any action the simulator can emit, and any well-formed detail, survives
//! serialization and parsing unchanged.

use isir::sim::{SimOptions, Simulator};
use isir::source::model::*;
use isir::source::parse::{parse_data_response, parse_note};
use isir::source::write::{data_response, note_xml};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Pages of simulated actions, from any seed and position.
    #[test]
    fn simulated_pages_round_trip(seed in 0u64..1_000_000, skip in 0usize..2000, len in 1usize..200) {
        let sim = Simulator::new(SimOptions { seed, actions: skip + len, ..SimOptions::default() });
        let all = sim.truth_all();
        let slice = &all[skip..];
        let after = if skip == 0 { -1 } else { all[skip - 1].id };
        let xml = data_response(slice);
        let page = parse_data_response(xml.as_bytes(), after).unwrap();
        prop_assert_eq!(page.actions().cloned().collect::<Vec<_>>(), slice.to_vec());
        for r in &page.records {
            // The erasures' notes of an unknown schema or broken on purpose are the
            // simulator's hostile input: kept verbatim (above), not rewritable.
            let hostile = ["636", "637"].contains(&r.action.type_code.as_str())
                && r.action.note.as_deref().is_some_and(|n| !n.contains("verzeXsd=\"1_10\"") || !n.ends_with('>'));
            match (&r.action.note, &r.detail) {
                (None, Note::Absent) => {}
                (Some(_), _) if hostile => {}
                (Some(raw), Note::Parsed(d)) => prop_assert_eq!(&note_xml(d), raw),
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }

    /// Arbitrary text in every field, including characters that must be escaped.
    #[test]
    fn arbitrary_details_round_trip(
        origin in proptest::option::of(text()),
        state in proptest::option::of(text()),
        pid in text(),
        name in proptest::option::of(text()),
        city in proptest::option::of(text()),
        addresses in 0usize..3,
        flag in proptest::option::of(prop_oneof![Just(Flag::T), Just(Flag::F), text().prop_map(Flag::Other)]),
        struck in proptest::option::of(text()),
    ) {
        let flag = flag.map(|f| match f { Flag::Other(s) if s == "T" => Flag::T, Flag::Other(s) if s == "F" => Flag::F, f => f });
        let d = Detail {
            schema_version: Some("1_10".into()),
            origin,
            case: state.map(|s| CaseBlock { state: Some(s), ..Default::default() }),
            person: Some(Person {
                id: pid,
                name,
                addresses: (0..addresses).map(|_| Address { city: city.clone(), ..Default::default() }).collect(),
                ..Default::default()
            }),
            secondary_action: flag,
            struck_out: struck,
            ..Default::default()
        };
        let xml = note_xml(&d);
        prop_assert_eq!(parse_note(&xml).unwrap(), d.clone());
        let a = Action {
            id: 5, created: "c".into(), published: "p".into(), document_url: None,
            case_number: "INS 1/2026".into(), type_code: "1".into(), type_name: "Změna osoby".into(),
            section: None, number_in_section: None, note: Some(xml.clone()),
        };
        let page = parse_data_response(data_response([&a]).as_bytes(), 4).unwrap();
        prop_assert_eq!(&page.records[0].action, &a);
        prop_assert_eq!(&page.records[0].detail, &Note::Parsed(Box::new(d)));
    }
}

/// Text the register may carry: Czech letters, spaces, markup characters, `#` stand-ins.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zA-Z0-9 ÁČĎÉĚÍŇÓŘŠŤÚŮÝŽáčďéěíňóřšťúůýž<>&\"'#./:§-]{0,24}")
        .unwrap()
}
