#![no_main]
//! Any text as a `poznamka`: never a panic; a parsed detail survives writing and
//! parsing again unchanged.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(d) = isir::source::parse::parse_note(s) {
            let again = isir::source::parse::parse_note(&isir::source::write::note_xml(&d)).expect("re-parse");
            assert_eq!(again, d);
        }
    }
});
