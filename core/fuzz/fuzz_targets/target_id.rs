//! Target IDs and selections: parsing never panics, and what parses prints
//! back to a string that parses to the same value.
#![no_main]
use kpackfs_core::formats::target::{compatible_targets, Selection, TargetId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(t) = TargetId::parse(s) {
        let again = TargetId::parse(&t.to_string()).expect("display of a parsed target parses");
        assert_eq!(again, t);
        let c = compatible_targets(&t.to_string());
        assert_eq!(c.len(), 1 << t.features.len().min(16));
        let sel = Selection { targets: vec![t.clone()] };
        assert!(sel.selects(&t) || t.is_generic());
        let _ = t.accepts(&t);
    }
    let _ = Selection::parse(s);
    let _ = compatible_targets(s);
});
