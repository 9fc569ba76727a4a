#![no_main]
//! Any bytes as an answer of either operation: never a panic; an accepted page is
//! strictly ascending above the requested ID.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(page) = isir::source::parse::parse_data_response(data, 100) {
        let mut prev = 100;
        for a in page.actions() {
            assert!(a.id > prev);
            prev = a.id;
        }
    }
    let _ = isir::source::parse::parse_last_id_response(data);
});
