//! The matcher's work bound, and a differential test against the plain
//! backtracking matcher it replaced (kept here only, as the reference for
//! which match — and which capture — a pattern gives).

use proptest::prelude::*;

use super::*;

/// The documented bound with its constant: states and `*`/`**` positions
/// tried, per (pattern byte) × (path byte or component).
fn bound(pattern: &str, path: &[PathComp<'_>]) -> u64 {
    let path_len: usize = path.iter().map(|c| if let PathComp::Name(n) = c { n.len() + 1 } else { 1 }).sum();
    8 * (pattern.len() as u64 + 2) * (path_len as u64 + 2)
}

/// Matches and returns the answer with the work it took.
fn counted(pattern: &str, path: &[PathComp<'_>]) -> (Option<Found>, u64) {
    let pat = Pattern::parse(pattern).unwrap();
    let before = steps();
    let found = pat.matches(path);
    (found, steps() - before)
}

fn names(path: &str) -> Vec<PathComp<'_>> {
    path.split('/').map(|n| PathComp::Name(n.as_bytes())).collect()
}

/// Issue 18 item 8: one `*a*a*a*a*b{arch}` against a 250-character name
/// took 47 s of backtracking; `**/` ten times against a 41-deep path 86 s.
/// Both now take work within the bound (a few thousand steps), and still
/// give the backtracking answer where one exists. The paths hold every
/// text the rule needs (`a`, `b`, `gfx`; `x`, `gfx`), so the prefilter lets
/// them through and the walk itself is measured; a short case comes first,
/// so that a matcher that stops remembering failures fails the bound here
/// instead of running for minutes.
#[test]
fn pathological_rules_stay_linear() {
    let stars = "*a*a*a*a*b{arch}";
    for len in [40, 250] {
        // The one `b` stands before every `a`: no placement of the four
        // `*a` leaves a `b` to follow, and every placement is a candidate.
        let name = "gfxb".to_string() + &"a".repeat(len - 4);
        let path = names(&name);
        let (found, work) = counted(stars, &path);
        assert_eq!(found, None);
        assert!(work > 0, "the prefilter let the name through: the walk ran");
        assert!(work <= bound(stars, &path), "{work} steps at length {len}");
    }

    let yes = "a".repeat(240) + "bgfx90a";
    let (found, work) = counted(stars, &names(&yes));
    assert_eq!(found, Some(Some(DbArch::Processor { processor: "gfx90a".into(), xnack: None })));
    assert!(work <= bound(stars, &names(&yes)), "{work} steps");

    let rule = "**/".repeat(10) + "x/{arch}";
    for depth in [12, 41] {
        // `gfx` holds both needles; no component is `x`.
        let deep = "gfx/".to_string() + &vec!["d"; depth].join("/");
        let (found, work) = counted(&rule, &names(&deep));
        assert_eq!(found, None);
        assert!(work > 0);
        assert!(work <= bound(&rule, &names(&deep)), "{work} steps at depth {depth}");
    }
    let hit = vec!["d"; 41].join("/") + "/x/gfx942";
    let (found, work) = counted(&rule, &names(&hit));
    assert_eq!(found, Some(Some(DbArch::Processor { processor: "gfx942".into(), xnack: None })));
    assert!(work <= bound(&rule, &names(&hit)), "{work} steps");

    // The same through the rule table, as a listing would call it.
    let rules = crate::plan::db::Rules::parse_arg(stars).unwrap();
    assert_eq!(rules.classify(std::path::Path::new(&("gfxb".to_string() + &"a".repeat(246)))), None);
}

/// A `*` can be reached at a position after the positions just past it
/// have failed: `{a,}` tries the longer text first, so after
/// `*{a,}*{a,}…` fails from one position it is tried again from the one
/// before. The `*`'s loop stops where the known failures begin; a loop that
/// went on to the end of the name each time would cost (number of `*`)² ×
/// name length, over the bound from 40 or so alternatives on. Here 60, on a
/// name holding every text the pattern needs, with no match (after a
/// small case, which a matcher that forgets failures fails at once).
#[test]
fn star_stops_where_known_failures_begin() {
    for (alternatives, len) in [(4, 16), (60, 300)] {
        let pattern = "*{a,}".repeat(alternatives) + "*x";
        let name = "a".repeat(len) + "xb";
        let path = names(&name);
        let (found, work) = counted(&pattern, &path);
        assert_eq!(found, None);
        assert!(work > 0);
        assert!(work <= bound(&pattern, &path), "{work} steps, bound {}", bound(&pattern, &path));
    }
}

/// The prefilter: a path lacking one of the pattern's literal runs within
/// a single component, or lacking `gfx` where the pattern captures, is
/// dismissed before any matching work (no steps); a path holding them all
/// is walked, and the walk decides. Answers written from the pattern by
/// hand (the built-in Tensile rule of docs/database-files.md).
#[test]
fn prefilter_dismisses_paths_lacking_a_literal() {
    let rule = "**/{rocblas,hipblaslt,hipsparselt}/**/library/*{arch}*.{co,hsaco,dat}";
    let gfx942 = Some(Some(DbArch::Processor { processor: "gfx942".into(), xnack: None }));
    // (path, answer, walked)
    let table: &[(&str, Option<Found>, bool)] = &[
        ("opt/rocm/lib/rocblas/library/TensileLibrary_gfx942.dat", gfx942.clone(), true),
        ("rocblas/2.47.0/library/Kernels.so-000-gfx942.hsaco", gfx942, true),
        // No `library` (only `Library`), no `.`, no `gfx`.
        ("opt/rocm/lib/rocblas/libs/TensileLibrary_gfx942.dat", None, false),
        ("opt/rocm/lib/rocblas/library/TensileLibrary_gfx942_dat", None, false),
        ("opt/rocm/lib/rocblas/library/TensileLibrary_lazy.dat", None, false),
        // `library` split over two components is not in one of them.
        ("opt/rocm/lib/rocblas/lib/rary/TensileLibrary_gfx942.dat", None, false),
        // Every text present, but in the wrong order: the walk says no.
        ("opt/library/rocblas/TensileLibrary_gfx942.dat", None, true),
        ("opt/rocm/lib/rocblas/library/gfx942/TensileLibrary.dat", None, true),
    ];
    for (path, want, walked) in table {
        let (found, work) = counted(rule, &names(path));
        assert_eq!(&found, want, "{path}");
        assert_eq!(work > 0, *walked, "{path}: {work} steps");
    }
    // A directory: `Beneath` holds no text.
    let mut dir = names("opt/rocm/lib/rocblas");
    dir.push(PathComp::Beneath);
    assert_eq!(counted("**/rocblas/**/library/**", &dir), (None, 0));
}

/// `**` as the last component needs at least one component, so it never
/// matches an empty path (the served root itself) and matches anything
/// beneath (docs/database-files.md, the pattern language).
#[test]
fn last_double_star_needs_a_component() {
    assert_eq!(counted("**", &[]).0, None);
    assert_eq!(counted("**", &names("a")).0, Some(None));
    assert_eq!(counted("**", &[PathComp::Beneath]).0, Some(None));
    assert_eq!(counted("a/**", &names("a")).0, None);
    assert_eq!(counted("a/**", &[PathComp::Name(b"a"), PathComp::Beneath]).0, Some(None));
    assert_eq!(counted("**/**", &[]).0, None);
    assert_eq!(counted("**/**", &names("a/b")).0, Some(None));
    // The `**` loop stops at the end of the path and never asks about a
    // state past it: with 63 `**` and the empty path the walk's table is
    // exactly 64 bits, and a fresh thread's table is no larger.
    let only_stars = vec!["**"; 63].join("/");
    let fresh = std::thread::spawn(move || counted(&only_stars, &[]).0).join();
    assert_eq!(fresh.ok(), Some(None));
}

#[test]
fn overlong_patterns_are_refused() {
    let long = "*a".repeat(MAX_PATTERN / 2) + "{arch}";
    assert_eq!(Pattern::parse(&long), Err(PatternError::TooLong));
    assert!(Pattern::parse(&long[long.len() - MAX_PATTERN..]).is_ok());
}

/// A name's literal runs are one token each, and no empty literal is made
/// before a wildcard or a brace: the matcher's states are counted in
/// tokens, so a literal split byte by byte would multiply them.
#[test]
fn segments_parse_to_whole_literal_runs() {
    let lit = |s: &str| Tok::Lit(s.as_bytes().to_vec());
    assert_eq!(parse_segment("lib*x{arch}.db").unwrap(), [lit("lib"), Tok::Star, lit("x"), Tok::Cap(Capture::Arch), lit(".db")]);
    assert_eq!(parse_segment("*?{a,bc}").unwrap(), [Tok::Star, Tok::One, Tok::Alt(vec![b"a".to_vec(), b"bc".to_vec()])]);
    assert_eq!(parse_segment("ü").unwrap(), [lit("ü")]);
}

// ---------------------------------------------------------------------------
// The reference: the backtracking matcher as it was (commit bb188db).
// ---------------------------------------------------------------------------

fn ref_walk(pat: &[Comp], path: &[PathComp<'_>]) -> Option<Found> {
    match pat.split_first() {
        None => path.is_empty().then_some(None),
        Some((Comp::Any, rest)) => {
            let min = usize::from(rest.is_empty());
            (min..=path.len()).find_map(|k| ref_walk(rest, &path[k..]))
        }
        Some((Comp::Seg(toks), rest)) => {
            let (PathComp::Name(name), tail) = path.split_first().map(|(c, t)| (*c, t))? else { return None };
            let here = ref_segment(toks, name)?;
            let later = ref_walk(rest, tail)?;
            Some(here.or(later))
        }
    }
}

fn ref_segment(toks: &[Tok], s: &[u8]) -> Option<Found> {
    let Some((tok, rest)) = toks.split_first() else {
        return s.is_empty().then_some(None);
    };
    match tok {
        Tok::Lit(l) => ref_segment(rest, s.strip_prefix(l.as_slice())?),
        Tok::One => {
            let w = (1..=s.len()).find(|&i| boundary(s, i))?;
            ref_segment(rest, &s[w..])
        }
        Tok::Star => (0..=s.len()).filter(|&i| boundary(s, i)).find_map(|i| ref_segment(rest, &s[i..])),
        Tok::Alt(opts) => opts.iter().find_map(|o| ref_segment(rest, s.strip_prefix(o.as_slice())?)),
        Tok::Hex64 => {
            let digits = s.get(..64).filter(|d| d.iter().all(u8::is_ascii_hexdigit))?;
            ref_segment(rest, &s[digits.len()..])
        }
        Tok::Cap(kind) => {
            let (n, arch) = ref_read(*kind, s)?;
            ref_segment(rest, &s[n..])?;
            Some(Some(arch))
        }
    }
}

/// The capture readers are pattern.rs's own: this reference is for the
/// matcher (which match, and where the capture stands), and the readers
/// have hand-written tables of their own in tests.rs.
fn ref_read(kind: Capture, s: &[u8]) -> Option<(usize, DbArch)> {
    read(kind, s).map(|r| (r.len, r.arch(s)))
}

// ---------------------------------------------------------------------------
// Random patterns, each with a path made by filling it in (what `*`, `?`,
// an alternative or a capture stands for), then perhaps damaged by one
// edit, so that matches, captures and near misses are all common.
// ---------------------------------------------------------------------------

fn filler() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => Just("a"),
        1 => Just("b"),
        1 => Just("ab"),
        1 => Just("gfx90a"),
        1 => Just("gfx1100"),
        1 => Just("-xnack+"),
        1 => Just("_"),
        1 => Just("ü"),
    ];
    proptest::collection::vec(piece, 0..5).prop_map(|v| v.concat())
}

/// A token of a name and the text it stands for in the path.
fn token() -> impl Strategy<Value = (&'static str, String)> {
    let s = |v: &'static [&'static str]| proptest::sample::select(v).prop_map(String::from);
    prop_oneof![
        4 => filler().prop_map(|f| ("*", f)),
        1 => s(&["a", "ü", "_"]).prop_map(|f| ("?", f)),
        2 => Just(("a", "a".to_string())),
        1 => Just(("b", "b".to_string())),
        1 => Just(("gfx", "gfx".to_string())),
        1 => Just(("-", "-".to_string())),
        1 => s(&["", "a", "ab"]).prop_map(|f| ("{a,ab,}", f)),
        1 => s(&["b", "gfx"]).prop_map(|f| ("{b,gfx}", f)),
        1 => Just(("{hex64}", "0123456789abcdef".repeat(4))),
        2 => s(&["gfx90a", "gfx90a-xnack-", "gfx1250-strict", "gfx1250-strict-xnack+", "gfx9", "gfx1100"]).prop_map(|f| ("{arch}", f)),
        1 => s(&["gfx90878", "gfx1030", "gfx1250-strict256", "gfx1152"]).prop_map(|f| ("{arch_cu}", f)),
        1 => s(&["gfx90a_xnackp", "gfx942_sramecc__xnack_", "gfx1250_strict", "gfx942"]).prop_map(|f| ("{ck_arch}", f)),
        1 => s(&["gfx11xx", "gfx120x", "gfx942"]).prop_map(|f| ("{family}", f)),
    ]
}

#[derive(Debug, Clone)]
enum Part {
    /// `**` and the components it stands for.
    Any(Vec<String>),
    Seg(Vec<(&'static str, String)>),
}

fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        1 => proptest::collection::vec(filler(), 0..3).prop_map(Part::Any),
        4 => proptest::collection::vec(token(), 1..5).prop_map(Part::Seg),
    ]
}

/// An edit to the filled-in path: (where, what); `None` leaves it whole.
fn damage() -> impl Strategy<Value = Option<(usize, &'static str)>> {
    proptest::option::of((any::<usize>(), proptest::sample::select(&["a", "x", "-", "/", "", "gfx9"][..])))
}

/// The pattern text and its path (with the edit applied). Captures after
/// the first are written as `*` (a pattern holds one).
fn case(parts: &[Part], edit: Option<(usize, &str)>) -> (String, String) {
    let (mut pat, mut path) = (Vec::new(), Vec::new());
    let mut captured = false;
    for p in parts {
        match p {
            Part::Any(names) => {
                pat.push("**".to_string());
                path.extend(names.iter().cloned());
            }
            Part::Seg(toks) => {
                let mut text = String::new();
                for (t, _) in toks {
                    let cap = matches!(*t, "{arch}" | "{arch_cu}" | "{ck_arch}" | "{family}");
                    let t = if cap && std::mem::replace(&mut captured, true) { "*" } else { t };
                    // `**` inside a name is refused; two `*` in a row match what one does.
                    if !(t == "*" && text.ends_with('*')) {
                        text.push_str(t);
                    }
                }
                pat.push(text);
                path.push(toks.iter().map(|(_, f)| f.as_str()).collect());
            }
        }
    }
    let mut path = path.join("/");
    if let Some((at, what)) = edit {
        // Replace one character (or insert, at the end) on a boundary.
        let mut at = at % (path.len() + 1);
        while !path.is_char_boundary(at) {
            at -= 1;
        }
        let end = path[at..].chars().next().map_or(at, |c| at + c.len_utf8());
        path.replace_range(at..end, what);
    }
    (pat.join("/"), path)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Same answer and capture as the backtracking matcher, for files and
    /// for directories (`Beneath`), within the work bound.
    #[test]
    fn same_answers_as_backtracking(parts in proptest::collection::vec(part(), 1..5), edit in damage(), dir in any::<bool>()) {
        let (pat, path) = case(&parts, edit);
        let p = Pattern::parse(&pat).map_err(|e| TestCaseError::fail(format!("{pat}: {e}")))?;
        let mut comps: Vec<PathComp<'_>> = path.split('/').map(|n| PathComp::Name(n.as_bytes())).collect();
        if dir {
            comps.push(PathComp::Beneath);
        }
        let before = steps();
        let got = p.matches(&comps);
        let work = steps() - before;
        prop_assert_eq!(&got, &ref_walk(&p.comps, &comps), "pattern {} path {}", pat, path);
        prop_assert!(work <= bound(&pat, &comps), "{} steps for {} on {}", work, pat, path);
    }
}
