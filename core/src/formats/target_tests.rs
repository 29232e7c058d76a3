//! Unit tests of target IDs, compatibility, probe order, families and
//! selections (tables written by hand from docs/offload-bundles.md).

use super::*;

#[test]
fn parse_and_display() {
    let t = TargetId::parse("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-").unwrap();
    assert_eq!(t.processor, "gfx942");
    assert_eq!(t.features, vec![("sramecc".into(), true), ("xnack".into(), false)]);
    assert_eq!(t.to_string(), "gfx942:sramecc+:xnack-");
    assert_eq!(TargetId::parse("gfx9-4-generic").unwrap().to_string(), "gfx9-4-generic");
    for bad in ["", "gfx", "sm_80", "gfx90a:xnack", "gfx90a:xnack+:xnack-", "gfx90a::", "GFX90A"] {
        assert!(TargetId::parse(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn entry_arch() {
    assert_eq!(arch_of_entry_id("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+"), Some("gfx90a:xnack+"));
    assert_eq!(arch_of_entry_id("host-x86_64-unknown-linux"), None);
    assert!(is_host_entry("host-x86_64-unknown-linux-gnu"));
}

/// SPIR-V entry spellings, hand-written from clang's driver test and
/// the runtime's two query names (docs/research/spirv.md §1).
#[test]
fn spirv_entries() {
    for id in [
        "hip-spirv64-amd-amdhsa--amdgcnspirv",
        "hipv4-spirv64-amd-amdhsa--amdgcnspirv",
        "hcc-spirv64-amd-amdhsa--amdgcnspirv",
        "hip-spirv64-amd-amdhsa-unknown-amdgcnspirv",
        "hipv4-spirv64-amd-amdhsa-unknown-amdgcnspirv",
    ] {
        assert!(is_spirv_entry(id), "{id}");
    }
    for id in [
        "hip-amdgcn-amd-amdhsa--amdgcnspirv",
        "openmp-spirv64-amd-amdhsa--amdgcnspirv",
        "host-spirv64-amd-amdhsa--amdgcnspirv",
        "hip-spirv64-amd-amdhsa--amdgcnspirv:xnack+",
        "hip-spirv64-amd-amdhsa--gfx90a",
        "hip-spirv64-amd-amdhsa-gnu-amdgcnspirv",
        "hipv4-amdgcn-amd-amdhsa--gfx90a",
        "amdgcnspirv",
    ] {
        assert!(!is_spirv_entry(id), "{id}");
    }
    assert!(TargetId::parse(SPIRV_ARCH).is_err(), "amdgcnspirv must not parse as a device");
    assert_eq!(TargetId::spirv().to_string(), "amdgcnspirv");
}

#[test]
fn loader_probe_order() {
    assert_eq!(compatible_targets("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"), vec!["gfx942:sramecc+:xnack-", "gfx942:sramecc+", "gfx942:xnack-", "gfx942"]);
    assert_eq!(compatible_targets("gfx1030"), vec!["gfx1030"]);
}

#[test]
fn accepts_any_semantics() {
    let dev = TargetId::parse("gfx90a:sramecc+:xnack-").unwrap();
    let p = |s| TargetId::parse(s).unwrap();
    assert!(dev.accepts(&p("gfx90a")).is_some());
    assert!(dev.accepts(&p("gfx90a:xnack-")).is_some());
    assert!(dev.accepts(&p("gfx90a:xnack+")).is_none());
    assert!(dev.accepts(&p("gfx908")).is_none());
    assert!(dev.accepts(&p("gfx90a:xnack-")) > dev.accepts(&p("gfx90a")));
    let d2 = p("gfx1031");
    assert!(d2.accepts(&p("gfx10-3-generic")).is_some());
    assert!(d2.accepts(&p("gfx1031")) > d2.accepts(&p("gfx10-3-generic")));
}

/// Hand-written from LLVM's AMDGPU processor table (docs/offload-bundles.md
/// §2): every family member, and processors with no family.
#[test]
fn generic_families() {
    let families: [(&str, &[&str]); 7] = [
        ("gfx9-generic", &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"]),
        ("gfx9-4-generic", &["gfx940", "gfx941", "gfx942", "gfx950"]),
        ("gfx10-1-generic", &["gfx1010", "gfx1011", "gfx1012", "gfx1013"]),
        ("gfx10-3-generic", &["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"]),
        ("gfx11-generic", &["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"]),
        ("gfx12-generic", &["gfx1200", "gfx1201"]),
        ("gfx12-5-generic", &["gfx1250", "gfx1251"]),
    ];
    for (g, members) in families {
        for m in members {
            assert_eq!(generic_of(m), Some(g), "{m}");
        }
    }
    for p in ["gfx908", "gfx90a", "gfx1250-strict", "gfx9-generic", "gfx803"] {
        assert_eq!(generic_of(p), None, "{p}");
    }
    assert!(TargetId::parse("gfx9-4-generic").unwrap().is_generic() && !TargetId::parse("gfx942").unwrap().is_generic());
    let list = |s: &str| device_arch_list(&TargetId::parse(s).unwrap()).iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(list("gfx942:sramecc+:xnack-"), ["gfx942:sramecc+:xnack-", "gfx9-4-generic:sramecc+:xnack-", "amdgcnspirv"]);
    assert_eq!(list("gfx90a:xnack-"), ["gfx90a:xnack-", "amdgcnspirv"]);
    // The runtime's own table has no generic for these (spirv.md §2).
    assert_eq!(list("gfx1250"), ["gfx1250", "amdgcnspirv"]);
    assert_eq!(list("gfx940:sramecc+:xnack-"), ["gfx940:sramecc+:xnack-", "amdgcnspirv"]);
    for p in ["gfx940", "gfx941", "gfx1250", "gfx1251", "gfx908"] {
        assert_eq!(runtime_generic_of(p), None, "{p}");
    }
    for (p, g) in [("gfx942", "gfx9-4-generic"), ("gfx950", "gfx9-4-generic"), ("gfx1201", "gfx12-generic"), ("gfx906", "gfx9-generic")] {
        assert_eq!(runtime_generic_of(p), Some(g), "{p}");
    }
}

#[test]
fn device_features_registry() {
    for p in ["gfx906", "gfx908", "gfx90a", "gfx942"] {
        assert!(has_sramecc(p) && has_xnack(p), "{p}");
    }
    for p in ["gfx900", "gfx1010"] {
        assert!(!has_sramecc(p) && has_xnack(p), "{p}");
    }
    for p in ["gfx1030", "gfx1100", "gfx803"] {
        assert!(!has_sramecc(p) && !has_xnack(p), "{p}");
    }
}

#[test]
fn parse_details() {
    let t = TargetId::parse("gfx90a:sramecc+:xnack-").unwrap();
    assert_eq!((t.feature("sramecc"), t.feature("xnack"), t.feature("tgsplit")), (Some(true), Some(false), None));
    assert_eq!(TargetId::bare("gfx90a"), TargetId::parse("gfx90a").unwrap());
    assert_eq!("gfx90a:xnack+".parse::<TargetId>().unwrap(), TargetId::parse("gfx90a:xnack+").unwrap());
    assert_eq!("gfx90a:xnack".parse::<TargetId>(), Err(TargetError::BadFeature("gfx90a:xnack".into(), "xnack".into())));
    assert_eq!(TargetId::parse(""), Err(TargetError::Empty));
    assert_eq!(TargetId::parse("gfx90a:xnack+:xnack-"), Err(TargetError::DuplicateFeature("gfx90a:xnack+:xnack-".into(), "xnack".into())));
    for good in ["gfx1250-strict", "gfx9-4-generic", "gfx90c", "gfx1100:sramecc-"] {
        assert!(TargetId::parse(good).is_ok(), "{good} refused");
    }
    for bad in ["gfxa90", "gfx90A", "gfx_90a", "gfx90a:+", "gfx90a:-", "gfx90a:xn@ck+", "xgfx90a", "gfx90a:xnack*"] {
        assert!(TargetId::parse(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(arch_of_entry_id("hipv4-amdgcn-amd-amdhsa--gfx90a"), Some("gfx90a"));
    assert_eq!(arch_of_entry_id("a--b--gfx1030"), Some("gfx1030"));
    assert!(!is_host_entry("hipv4-amdgcn-amd-amdhsa--gfx90a"));
}

/// Ranks: native 1000 + features, generic 0 + features.
#[test]
fn accepts_ranks() {
    let p = |s| TargetId::parse(s).unwrap();
    let dev = p("gfx90a:sramecc+:xnack-");
    assert_eq!(dev.accepts(&p("gfx90a")), Some(1000));
    assert_eq!(dev.accepts(&p("gfx90a:sramecc+:xnack-")), Some(1002));
    assert_eq!(dev.accepts(&p("gfx90a:sramecc-")), None);
    let d = p("gfx1031:xnack-");
    assert_eq!(d.accepts(&p("gfx10-3-generic")), Some(0));
    assert_eq!(d.accepts(&p("gfx10-3-generic:xnack-")), Some(1));
    assert_eq!(d.accepts(&p("gfx10-3-generic:xnack+")), None);
    assert_eq!(d.accepts(&p("gfx1030")), None);
    // An xnack+ device never runs an xnack- object, nor the reverse.
    assert_eq!(p("gfx90a:xnack+").accepts(&p("gfx90a:xnack-")), None);
    assert_eq!(p("gfx90a:sramecc+:xnack-").accepts(&p("gfx90a:xnack+")), None);
    // A device that does not say its xnack setting accepts no object
    // that requires one.
    assert_eq!(p("gfx90a").accepts(&p("gfx90a:xnack-")), None);
}

#[test]
fn probe_order_with_three_and_one_feature() {
    assert_eq!(compatible_targets("gfx1:a+:b-:c+"), ["gfx1:a+:b-:c+", "gfx1:a+:b-", "gfx1:a+:c+", "gfx1:a+", "gfx1:b-:c+", "gfx1:b-", "gfx1:c+", "gfx1"]);
    assert_eq!(compatible_targets("gfx90a:xnack+"), ["gfx90a:xnack+", "gfx90a"]);
    assert_eq!(compatible_targets("gfx90a::xnack-:"), ["gfx90a:xnack-", "gfx90a"]);
}

#[test]
fn selection_details() {
    let s = Selection::parse("gfx90a:xnack-, gfx1030,gfx90a:xnack-").unwrap();
    assert_eq!(s.targets.len(), 2, "duplicates kept");
    assert_eq!(s.to_string(), "gfx90a:xnack-,gfx1030");
    assert_eq!(Selection::parse("gfx942").unwrap().to_string(), "gfx942");
    assert!(Selection::parse("gfx90a,sm_80").is_err());
    let p = |s| TargetId::parse(s).unwrap();
    let s = Selection::parse("gfx9-4-generic").unwrap();
    assert!(s.selects(&p("gfx9-4-generic")) && !s.selects(&p("gfx942")));
    let s = Selection::parse("gfx942").unwrap();
    assert!(s.selects(&p("gfx9-4-generic:xnack-")) && !s.selects(&p("gfx10-3-generic")));
    let s = Selection::parse("gfx90a:xnack+").unwrap();
    assert!(s.selects_db("gfx90a", Some(true)) && !s.selects_db("gfx90a", Some(false)) && s.selects_db("gfx90a", None));
    assert!(!s.selects_db("gfx942", None) && !s.selects_db("gfx942", Some(true)));
    let s = Selection::parse("gfx90a").unwrap();
    assert!(s.selects_db("gfx90a", Some(true)) && s.selects_db("gfx90a", Some(false)));
}

#[test]
fn selection() {
    let p = |s| TargetId::parse(s).unwrap();
    let s = Selection::parse("gfx90a").unwrap();
    assert!(s.selects(&p("gfx90a:xnack+")) && s.selects(&p("gfx90a:xnack-")) && s.selects(&p("gfx90a")));
    assert!(!s.selects(&p("gfx1030")));
    let s = Selection::parse("gfx90a:xnack-").unwrap();
    assert!(s.selects(&p("gfx90a:xnack-")) && s.selects(&p("gfx90a")));
    assert!(!s.selects(&p("gfx90a:xnack+")) && !s.selects(&p("gfx90a:sramecc+")));
    let s = Selection::parse("gfx1030, gfx90a").unwrap();
    assert!(s.selects(&p("gfx10-3-generic")) && s.selects(&p("gfx90a")));
    assert!(!s.selects(&p("gfx9-generic")));
    assert!(s.selects_db("gfx90a", Some(true)));
    let s = Selection::parse("gfx90a:xnack-").unwrap();
    assert!(!s.selects_db("gfx90a", Some(true)) && s.selects_db("gfx90a", None));
    assert!(Selection::parse(" , ").is_err());
}
