use std::path::Path;

use super::*;

fn p(processor: &str, xnack: Option<bool>) -> Option<DbArch> {
    Some(DbArch::Processor { processor: processor.into(), xnack })
}

fn fam(prefix: &str) -> Option<DbArch> {
    Some(DbArch::Family(prefix.into()))
}

fn c(rel: &str) -> Option<DbArch> {
    Rules::builtin().classify(Path::new(rel))
}

fn cdir(rel: &str) -> Option<DbArch> {
    Rules::builtin().classify_dir(Path::new(rel))
}

fn sel(s: &str) -> Selection {
    Selection::parse(s).unwrap()
}

#[test]
fn builtin_table_parses() {
    assert_eq!(Rules::builtin().len(), 12);
    assert_eq!(Rules::default().len(), Rules::builtin().len());
}

#[test]
fn tensile_flat_layout_at_any_depth() {
    for dir in ["lib/rocblas/library", "lib/x86_64-linux-gnu/rocblas/2.47.0/library", "opt/x/hipblaslt/a/b/library", "lib/hipsparselt/library"] {
        let f = |n: &str| c(&format!("{dir}/{n}"));
        assert_eq!(f("TensileLibrary_gfx90a.co"), p("gfx90a", None), "{dir}");
        assert_eq!(f("TensileLibrary_gfx90a.dat"), p("gfx90a", None));
        assert_eq!(f("Kernels.so-000-gfx1030.hsaco"), p("gfx1030", None));
        assert_eq!(f("Kernels.so-000-gfx90a-xnack-.hsaco"), p("gfx90a", Some(false)));
        assert_eq!(f("Kernels.so-000-gfx90a-xnack+.hsaco"), p("gfx90a", Some(true)));
        assert_eq!(f("TensileLibrary_lazy_gfx90a-xnack+.co"), p("gfx90a", Some(true)));
        assert_eq!(f("TensileLiteLibrary_lazy_gfx942_Mapping.dat"), p("gfx942", None));
        assert_eq!(f("TensileLibrary_gfx1250-strict.dat"), p("gfx1250-strict", None));
        // Generic: no architecture, or not a Tensile suffix.
        assert_eq!(f("TensileLibrary.dat"), None);
        assert_eq!(f("TensileLibrary_fallback.dat"), None);
        assert_eq!(f("TensileManifest.txt"), None);
        assert_eq!(f("gfx90a.txt"), None);
        assert_eq!(f("Kernels.so-000-gfx90a.hsaco.bak"), None);
        assert_eq!(f("TensileLibrary_gfx103612.dat"), None, "no processor has 6 digits");
    }
    // One directory below library/ that is not an architecture's: the name
    // decides (upstream's flat test applies beneath library/ too).
    assert_eq!(c("lib/rocblas/library/extra/TensileLibrary_gfx942.co"), p("gfx942", None));
    assert_eq!(c("lib/x86_64-linux-gnu/rocblas/2.47.0/library/lazy/Kernels.so-000-gfx90a-xnack+.hsaco"), p("gfx90a", Some(true)));
    assert_eq!(c("lib/rocblas/library/extra/TensileManifest.txt"), None);
    assert_eq!(c("lib/rocblas/library/extra/TensileLibrary.dat"), None);
    // Inside library/<arch>/ the directory decides, not the name.
    assert_eq!(c("lib/rocblas/library/gfx90a/Kernels.so-000-gfx90a-xnack-.hsaco"), p("gfx90a", None));
    // Two levels down is not read (upstream: any depth; a third `**` would
    // make a deep decoy tree cost depth³ with this matcher).
    assert_eq!(c("lib/rocblas/library/a/b/TensileLibrary_gfx942.co"), None);
    // `library` must come after the library's own directory.
    assert_eq!(c("lib/library/rocblas/TensileLibrary_gfx90a.co"), None);
    assert_eq!(c("lib/rocblaslib/library/TensileLibrary_gfx90a.co"), None);
}

#[test]
fn tensile_per_arch_directories() {
    assert_eq!(c("lib/hipblaslt/library/gfx942/TensileManifest.txt"), p("gfx942", None));
    assert_eq!(c("lib/hipblaslt/library/gfx942/sub/fallback.dat"), p("gfx942", None));
    assert_eq!(c("lib/x86_64-linux-gnu/hipblaslt/1.0/library/gfx1100/x.co"), p("gfx1100", None));
    assert_eq!(c("lib/rocblas/library/gfx1250-strict/TensileLibrary.dat"), p("gfx1250-strict", None));
    assert_eq!(c("lib/hipsparselt/library/gfx90a-xnack-/k.co"), p("gfx90a", Some(false)));
    // A file named like an architecture is no directory of one.
    assert_eq!(c("lib/hipblaslt/library/gfx942"), None);
    // A directory that only starts with gfx is not an architecture.
    assert_eq!(c("lib/hipblaslt/library/gfx942_old/TensileManifest.txt"), None);
    assert_eq!(cdir("lib/hipblaslt/library/gfx942"), p("gfx942", None));
    assert_eq!(cdir("lib/hipblaslt/library/gfx942/sub"), p("gfx942", None));
    assert_eq!(cdir("lib/hipblaslt/library"), None);
    assert_eq!(cdir("lib/hipblaslt"), None);
}

#[test]
fn miopen_databases() {
    let d = "share/miopen/db";
    let f = |n: &str| c(&format!("{d}/{n}"));
    assert_eq!(f("gfx942.tn.model"), p("gfx942", None));
    assert_eq!(f("gfx908_ConvAsm1x1U_decoder.ktn.model"), p("gfx908", None));
    assert_eq!(f("gfx90878.db.txt"), p("gfx908", None));
    assert_eq!(f("gfx90a68.HIP.fdb.txt"), p("gfx90a", None));
    assert_eq!(f("gfx1030_36.kdb"), p("gfx1030", None));
    assert_eq!(f("gfx1250-strict_256.db.txt"), p("gfx1250-strict", None));
    assert_eq!(f("gfx1250-strict256.HIP.fdb.txt"), p("gfx1250-strict", None));
    assert_eq!(f("gfx1250256.HIP.fdb.txt"), p("gfx1250", None));
    // Not in the fixed list: read like {arch}.
    assert_eq!(f("gfx1152_16.kdb"), p("gfx1152", None));
    assert_eq!(f("gfx1103_14.kdb"), p("gfx1103", None));
    // An unknown processor run into its CU count reads as a digit run no
    // processor has (more than 4 digits): generic, served in every view,
    // as upstream's handler leaves names outside its list.
    assert_eq!(f("gfx103612.db.txt"), None);
    assert_eq!(f("gfx11036.HIP.fdb.txt"), None);
    assert_eq!(f("gfx110012.kdb"), p("gfx1100", None));
    assert_eq!(f("readme.txt"), None);
    assert_eq!(f("gfx942.txt"), None);
    assert_eq!(c("share/miopen/other/gfx942.kdb"), None);
}

#[test]
fn miopen_ck_libraries() {
    assert_eq!(c("lib/libMIOpenCKGroupedConv_gfx942.so"), p("gfx942", None));
    assert_eq!(c("lib/libMIOpenCKGroupedConv_gfx942.so.1.0"), p("gfx942", None));
    assert_eq!(c("bin/MIOpenCKGroupedConv_gfx1151.dll"), p("gfx1151", None));
    assert_eq!(c("lib/libMIOpenCK_a_gfx90a_gfx1250-strict.so"), p("gfx1250-strict", None));
    assert_eq!(c("lib/libMIOpenCKGroupedConv.so"), None);
    assert_eq!(c("lib/libfoo_gfx90a.so"), None);
}

#[test]
fn ck_static_libraries() {
    let f = |tok: &str| c(&format!("lib/libdevice_conv_operations_{tok}.a"));
    assert_eq!(f("gfx942"), p("gfx942", None));
    assert_eq!(f("gfx90a_xnack_"), p("gfx90a", Some(false)));
    assert_eq!(f("gfx90a_xnackp"), p("gfx90a", Some(true)));
    assert_eq!(f("gfx942_srameccp_xnack_"), p("gfx942", Some(false)));
    assert_eq!(f("gfx942_sramecc__xnackp"), p("gfx942", Some(true)));
    assert_eq!(f("gfx1250_strict"), p("gfx1250-strict", None));
    assert_eq!(f("gfx942_other"), None);
    assert_eq!(c("lib/device_conv_operations_gfx1100.lib"), p("gfx1100", None));
    assert_eq!(c("lib/libdevice_conv_operations.a"), None);
    assert_eq!(c("lib/libdevice_conv_operations_gfx942.so"), None);
}

#[test]
fn hipkernelprovider_engines() {
    assert_eq!(c("lib/rocke/engines/arch_content/gemm/gfx942/k.co"), p("gfx942", None));
    assert_eq!(c("lib/rocke/engines/test_arch_content/gemm/gfx1100/a/b.json"), p("gfx1100", None));
    // The first architecture directory decides.
    assert_eq!(c("engines/arch_content/gfx90a/gfx942/k.co"), p("gfx90a", None));
    assert_eq!(c("lib/rocke/engines/arch_content/gemm/manifest.json"), None);
    assert_eq!(c("lib/rocke/engines/other/gemm/gfx942/k.co"), None);
    assert_eq!(cdir("lib/rocke/engines/arch_content/gemm/gfx942"), p("gfx942", None));
    assert_eq!(cdir("lib/rocke/engines/arch_content/gemm"), None);
}

#[test]
fn hotswap_translations() {
    let hex = "0123456789abcdef".repeat(4);
    let t = |domain: &str, name: &str| c(&format!("share/rocjitsu/translations/{domain}/v1/{name}"));
    assert_eq!(t("gfx1250-b0-a0", &format!("{hex}.man")), p("gfx1250", None));
    assert_eq!(t("gfx1250-b0-a0", &format!("{hex}.obj")), p("gfx1250", None));
    // Only domains known to name an architecture (upstream's explicit map):
    // a translator profile that merely looks like one stays generic.
    assert_eq!(t("gfx950", &format!("{hex}.obj")), None);
    assert_eq!(t("gfx950-a0", &format!("{hex}.obj")), None);
    assert_eq!(t("gfx1250-strict-b0", &format!("{hex}.man")), None);
    assert_eq!(t("gfx1250-b0-a0x", &format!("{hex}.man")), None);
    assert_eq!(t("gfx1250-b0-a0", "index.man"), None);
    assert_eq!(t("gfx1250-b0-a0", &format!("{}.man", &hex[1..])), None);
    assert_eq!(t("gfx1250-b0-a0", &format!("{hex}0.man")), None);
    assert_eq!(t("gfx1250-b0-a0", &format!("{hex}.txt")), None);
    assert_eq!(c(&format!("share/rocjitsu/translations/gfx1250-b0-a0/v2/{hex}.man")), None);
}

#[test]
fn aotriton_layouts() {
    assert_eq!(c("lib/aotriton/kernels/gfx90a/flash.hsaco"), p("gfx90a", None));
    assert_eq!(c("lib/aotriton/kernels/gfx90a_mi200/flash.hsaco"), p("gfx90a", None));
    assert_eq!(c("lib/aotriton/kernels/gfx942.aks2"), p("gfx942", None));
    assert_eq!(c("lib/aotriton/kernels/README"), None);
    assert_eq!(cdir("lib/aotriton/kernels/gfx90a"), p("gfx90a", None));
    let img = |d: &str| c(&format!("lib/aotriton.images/{d}/flash/a.aks2"));
    assert_eq!(img("amd-gfx11xx"), fam("gfx11"));
    assert_eq!(img("amd-gfx120x"), fam("gfx120"));
    // One processor's image is that processor's prefix family: AOTriton
    // picks `amd-gfx1250` on a gfx1250-strict device too (docs §6, C4).
    assert_eq!(img("amd-gfx942"), fam("gfx942"));
    assert_eq!(img("amd-gfx950"), fam("gfx950"));
    assert_eq!(img("amd-gfx1250"), fam("gfx1250"));
    assert_eq!(img("amd-gfx1250-strict"), fam("gfx1250-strict"));
    assert_eq!(img("amd-other"), None);
    assert_eq!(img("nv-gfx942"), None);
    assert_eq!(c("lib/aotriton.images/amd-gfx942"), None);
    assert_eq!(cdir("lib/aotriton.images/amd-gfx11xx"), fam("gfx11"));
    assert!(DbArch::Family("gfx11".into()).selected_by(&sel("gfx1100")));
    assert!(DbArch::Family("gfx120".into()).selected_by(&sel("gfx1201")));
    assert!(!DbArch::Family("gfx120".into()).selected_by(&sel("gfx1250")));
    assert!(!DbArch::Family("gfx11".into()).selected_by(&sel("gfx90a")));
}

/// AOTriton matches its image directories by a pattern that accepts a
/// longer identity of the same processor, so the gfx1250 image serves
/// gfx1250-strict devices (ROCm/pytorch #3639 keeps relying on it); a
/// strict-only image stays strict-only.
#[test]
fn aotriton_images_serve_strict_devices() {
    let shown = |rel: &str, s: &str| c(rel).unwrap_or_else(|| panic!("{rel}")).selected_by(&sel(s));
    let g1250 = "lib/aotriton.images/amd-gfx1250/flash/attn_fwd/k.aks2";
    assert!(shown(g1250, "gfx1250") && shown(g1250, "gfx1250-strict"));
    assert!(!shown(g1250, "gfx942") && !shown(g1250, "gfx1200"));
    let g942 = "lib/aotriton.images/amd-gfx942/flash/k.aks2";
    assert!(shown(g942, "gfx942") && shown(g942, "gfx942:xnack+"));
    assert!(!shown(g942, "gfx950") && !shown(g942, "gfx90a"));
    let strict = "lib/aotriton.images/amd-gfx1250-strict/flash/k.aks2";
    assert!(shown(strict, "gfx1250-strict") && !shown(strict, "gfx1250"));
    // Images named with an xnack setting keep it.
    assert_eq!(c("lib/aotriton.images/amd-gfx90a-xnack-/k.aks2"), p("gfx90a", Some(false)));
    assert_eq!(cdir("lib/aotriton.images/amd-gfx1250"), fam("gfx1250"));
}

#[test]
fn other_paths_are_generic() {
    for rel in ["bin/gfx90a.dat", "lib/libamdhip64.so", "share/doc/gfx942/README", "", "lib/rocblas/library"] {
        assert_eq!(c(rel), None, "{rel}");
    }
}

#[test]
fn xnack_follows_the_loader() {
    let (bare, minus, plus) = (
        c("lib/rocblas/library/Kernels.so-000-gfx90a.hsaco").unwrap(),
        c("lib/rocblas/library/Kernels.so-000-gfx90a-xnack-.hsaco").unwrap(),
        c("lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco").unwrap(),
    );
    let s = sel("gfx90a:xnack-");
    assert!(bare.selected_by(&s) && minus.selected_by(&s) && !plus.selected_by(&s));
    let s = sel("gfx90a:xnack+");
    assert!(bare.selected_by(&s) && !minus.selected_by(&s) && plus.selected_by(&s));
    let s = sel("gfx90a");
    assert!(bare.selected_by(&s) && minus.selected_by(&s) && plus.selected_by(&s));
    assert!(!bare.selected_by(&sel("gfx1030")));
}

/// `gfx1250-strict` is its own target for every rule that reads it:
/// neither view shows the other's files (UPSTREAM-NEWEST.md §6).
#[test]
fn strict_identity_is_distinct() {
    let strict = [
        "lib/rocblas/library/TensileLibrary_gfx1250-strict.dat",
        "lib/hipblaslt/library/gfx1250-strict/TensileManifest.txt",
        "share/miopen/db/gfx1250-strict_256.db.txt",
        "share/miopen/db/gfx1250-strict256.HIP.fdb.txt",
        "lib/libMIOpenCKGroupedConv_gfx1250-strict.so",
        "lib/libdevice_conv_operations_gfx1250_strict.a",
    ];
    let plain = strict.map(|s| s.replace("gfx1250-strict", "gfx1250").replace("gfx1250_strict", "gfx1250"));
    let (s_strict, s_plain) = (sel("gfx1250-strict"), sel("gfx1250"));
    for (st, pl) in strict.iter().zip(&plain) {
        let (a, b) = (c(st).unwrap_or_else(|| panic!("{st}")), c(pl).unwrap_or_else(|| panic!("{pl}")));
        assert_eq!(a, DbArch::Processor { processor: "gfx1250-strict".into(), xnack: None }, "{st}");
        assert_eq!(b, DbArch::Processor { processor: "gfx1250".into(), xnack: None }, "{pl}");
        assert!(a.selected_by(&s_strict) && !a.selected_by(&s_plain), "{st}");
        assert!(b.selected_by(&s_plain) && !b.selected_by(&s_strict), "{pl}");
    }
}

#[test]
fn operator_rules_come_first() {
    let text = "\
# site rules
**/mylib/kernels/{arch}/**          # per-arch dirs of a site library
**/rocblas/**/library/TensileLibrary_gfx90a.dat -> generic
**/miopen/db/custom_*.kdb -> gfx1151

**/tables/#notacomment_{arch}.bin
";
    let rules = Rules::with_operator_rules(&[], &[]).unwrap();
    assert_eq!(rules.len(), Rules::builtin().len());
    let dir = std::env::temp_dir().join(format!("kpackfs-dbrules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("site.rules");
    std::fs::write(&file, text).unwrap();
    let rules = Rules::with_operator_rules(&["**/extra/*.bin -> gfx90a:xnack-".into()], &[file]).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(rules.len(), Rules::builtin().len() + 5);
    let f = |r: &str| rules.classify(Path::new(r));
    assert_eq!(f("opt/mylib/kernels/gfx942/a.bin"), p("gfx942", None));
    assert_eq!(rules.classify_dir(Path::new("opt/mylib/kernels/gfx942")), p("gfx942", None));
    // An operator's generic rule overrides a built-in one; its neighbours still follow the built-ins.
    assert_eq!(f("lib/rocblas/library/TensileLibrary_gfx90a.dat"), None);
    assert_eq!(f("lib/rocblas/library/TensileLibrary_gfx942.dat"), p("gfx942", None));
    assert_eq!(f("share/miopen/db/custom_x.kdb"), p("gfx1151", None));
    assert_eq!(f("share/miopen/db/gfx942.kdb"), p("gfx942", None));
    assert_eq!(f("a/tables/#notacomment_gfx1100.bin"), p("gfx1100", None));
    assert_eq!(f("x/extra/k.bin"), p("gfx90a", Some(false)));
    assert_eq!(f("x/extra/k.txt"), None);
}

#[test]
fn bad_rules_name_their_line() {
    let cases: &[(&str, RuleErrorKind)] = &[
        ("**/lib/{arh}/**", RuleErrorKind::Pattern(PatternError::UnknownName("arh".into()))),
        ("**/lib/*.dat", RuleErrorKind::NoArchitecture),
        ("**/lib/{arch}/** -> gfx90a", RuleErrorKind::CaptureAndTarget),
        ("**/lib/x.dat ->", RuleErrorKind::MissingTarget),
        ("**/lib/x.dat -> nvidia", RuleErrorKind::BadTarget(TargetError::BadProcessor("nvidia".into()))),
        ("**/lib/x.dat gfx90a", RuleErrorKind::Unexpected("gfx90a".into())),
        ("**/lib/x.dat -> generic now", RuleErrorKind::Unexpected("now".into())),
        ("/opt/rocm/{arch}/**", RuleErrorKind::Pattern(PatternError::Absolute)),
        ("lib//{arch}", RuleErrorKind::Pattern(PatternError::EmptyComponent)),
        ("lib/{arch}/", RuleErrorKind::Pattern(PatternError::EmptyComponent)),
        ("lib/**{arch}", RuleErrorKind::Pattern(PatternError::DoubleStarInName)),
        ("lib/{arch", RuleErrorKind::Pattern(PatternError::Unclosed)),
        ("lib/}{arch}", RuleErrorKind::Pattern(PatternError::StrayClose)),
        ("lib/{a*,b}/{arch}", RuleErrorKind::Pattern(PatternError::BadAlternative("a*,b".into()))),
        ("lib/{arch}/{family}", RuleErrorKind::Pattern(PatternError::TwoCaptures)),
    ];
    for (rule, want) in cases {
        let text = format!("# ok\n**/fine/{{arch}}/**\n\n  {rule}   # comment\n");
        match Rules::parse(&text, "site.rules") {
            Err(RuleError::Bad { at, text, kind }) => {
                assert_eq!((at.as_str(), text.as_str(), &kind), ("site.rules:4", *rule, want));
            }
            other => panic!("{rule}: {other:?}"),
        }
        let e = Rules::parse_arg(rule).unwrap_err();
        assert!(e.to_string().starts_with("--db-rule: "), "{e}");
    }
    assert!(matches!(Rules::parse_arg("  # only a comment"), Err(RuleError::Bad { kind: RuleErrorKind::Pattern(PatternError::Empty), .. })));
    let missing = Path::new("/nonexistent/kpackfs/site.rules").to_path_buf();
    let e = Rules::with_operator_rules(&[], &[missing]).unwrap_err();
    assert!(matches!(e, RuleError::Read { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/kpackfs/site.rules"), "{e}");
}

#[test]
fn pattern_language() {
    let one = |rule: &str, rel: &str| Rules::parse(rule, "t").unwrap().classify(Path::new(rel));
    let g = p("gfx90a", None);
    // `**` in front or between: zero or more directories.
    assert_eq!(one("**/a/{arch}.x", "a/gfx90a.x"), g);
    assert_eq!(one("**/a/**/{arch}.x", "q/a/b/c/gfx90a.x"), g);
    // `**` last: at least one entry beneath.
    assert_eq!(one("a/{arch}/**", "a/gfx90a"), None);
    assert_eq!(one("a/{arch}/**", "a/gfx90a/f"), g);
    // Patterns match the whole path.
    assert_eq!(one("a/{arch}.x", "z/a/gfx90a.x"), None);
    assert_eq!(one("a/?{arch}.x", "a/ügfx90a.x"), g);
    assert_eq!(one("a/?{arch}.x", "a/ab_gfx90a.x"), None);
    assert_eq!(one("a/{lib,}{arch}.x", "a/libgfx90a.x"), g);
    assert_eq!(one("a/{lib,}{arch}.x", "a/gfx90a.x"), g);
    assert_eq!(one("a/*ü*{arch}.x", "a/1ü2gfx90a.x"), g);
    assert_eq!(one("a/{arch}.x", "./a/gfx90a.x"), g);
    assert_eq!(one("a/{arch}.x", "a/../a/gfx90a.x"), None);
}

#[test]
fn hostile_paths_pass_through() {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"lib/rocblas/library/TensileLibrary_gfx90a\xff.dat");
        assert_eq!(Rules::builtin().classify(Path::new(name)), None);
    }
    assert_eq!(c("/lib/rocblas/library/TensileLibrary_gfx90a.dat"), None);
    for name in ["gfx", "gfx-", "gfx_", "gfxx", "gfx90a-xnack", "gfx90a-strict-xnack", "\u{0}gfx90a", "gfx9\u{301}0a.dat"] {
        let _ = c(&format!("lib/rocblas/library/{name}.dat"));
        let _ = c(&format!("lib/libdevice_conv_operations_{name}.a"));
        let _ = c(&format!("lib/aotriton.images/amd-{name}/x"));
        let _ = c(&format!("share/miopen/db/{name}.kdb"));
    }
    // Deep trees of decoy names stay cheap: the work is within the
    // matcher's bound (a constant × pattern length × path length, summed
    // over the rules tried) and grows in proportion to the depth, where a
    // backtracking `**/…/**` pair took the square of it. The tail holds
    // every text the Tensile rules look for (`library`, `.`, `gfx`), so the
    // prefilter passes them and the walk is what is measured.
    let work = |depth: usize| {
        let deep = "rocblas/".repeat(depth) + "library/gfx/x.dat";
        let before = pattern::steps();
        assert_eq!(c(&deep), None);
        let work = pattern::steps() - before;
        assert!(work > 0, "the Tensile rules were walked");
        let patterns: usize = Rules::builtin().rules.iter().map(|r| r.text.len() + 2).sum();
        assert!(work <= 8 * patterns as u64 * (deep.len() as u64 + 2), "{work} steps at depth {depth}");
        work
    };
    let (w1, w2) = (work(1500), work(3000));
    assert!(w2 <= w1 * 21 / 10, "depth 1500: {w1} steps, depth 3000: {w2}");
}

/// What the rule table shows of itself, written by hand: the `archs` key
/// of each kind of architecture, a rule set's debug form (where each rule
/// came from), trailing comments (a `#` at the start or after white space;
/// inside a name it is part of it) and emptiness.
#[test]
fn names_comments_and_listing_by_hand() {
    let proc = |x| DbArch::Processor { processor: "gfx90a".into(), xnack: x };
    assert_eq!(proc(None).to_string(), "gfx90a");
    assert_eq!(proc(Some(false)).to_string(), "gfx90a:xnack-");
    assert_eq!(proc(Some(true)).to_string(), "gfx90a:xnack+");
    assert_eq!(DbArch::Family("gfx11".into()).to_string(), "gfx11*");

    let rules = Rules::parse("# header\na/{arch}.db   # trailing\n\nb#1/{arch} -> generic\n", "f.rules");
    assert!(rules.is_err(), "a capture and a target");
    let rules = Rules::parse("# header\na/{arch}.db   # trailing\n\nb#1/{arch}.db\t# tab -> gfx942\nc/y.db -> gfx942 #x\n", "f.rules").unwrap();
    assert_eq!(format!("{rules:?}"), r#"["f.rules:2: a/{arch}.db", "f.rules:4: b#1/{arch}.db", "f.rules:5: c/y.db -> gfx942"]"#);
    assert!(!rules.is_empty() && !Rules::builtin().is_empty());
    assert!(Rules::parse("# only a comment\n\n", "f").unwrap().is_empty());
    // An architecture is `gfx` and at least one digit: names without a
    // digit are generic, under every capture kind.
    for name in ["gfx", "gfxx", "gfx-xnack+", "gfx_strict"] {
        assert_eq!(c(&format!("lib/rocblas/library/TensileLibrary_{name}.dat")), None, "{name}");
        assert_eq!(c(&format!("lib/libdevice_conv_operations_{name}.a")), None, "{name}");
        assert_eq!(cdir(&format!("lib/aotriton.images/amd-{name}")), None, "{name}");
        assert_eq!(c(&format!("share/miopen/db/{name}.kdb")), None, "{name}");
    }
    assert_eq!(strip_comment("x#"), "x#");
    assert_eq!(strip_comment("#"), "");
    assert_eq!(strip_comment(" x # y # z"), "x");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Pieces that steer random text towards the interesting parts of the
    /// grammar (captures, arch tokens, separators) instead of noise.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("gfx".to_string()),
            Just("gfx90a".to_string()),
            Just("-xnack".to_string()),
            Just("-strict".to_string()),
            Just("_".to_string()),
            Just("/".to_string()),
            Just("**".to_string()),
            Just("*".to_string()),
            Just("?".to_string()),
            Just("{".to_string()),
            Just("}".to_string()),
            Just(",".to_string()),
            Just("{arch}".to_string()),
            Just("{ck_arch}".to_string()),
            Just("{family}".to_string()),
            Just(" -> ".to_string()),
            Just("x".to_string()),
            "[0-9]{1,3}".prop_map(String::from),
            any::<char>().prop_map(String::from),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(piece(), 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        /// Any rule text parses or fails with an error; any path is
        /// classified or not; nothing panics.
        #[test]
        fn rules_and_paths_never_panic(rule in text(), path in text()) {
            if let Ok(rules) = Rules::parse(&rule, "fuzz") {
                let _ = rules.classify(Path::new(&path));
                let _ = rules.classify_dir(Path::new(&path));
            }
            let _ = Rules::parse_arg(&rule);
            let _ = Rules::builtin().classify(Path::new(&path));
            let _ = Rules::builtin().classify_dir(Path::new(&path));
        }
    }
}
