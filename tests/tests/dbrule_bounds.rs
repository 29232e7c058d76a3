//! Operator rules cannot stall a mount (issue 18 item 8): with
//! `--db-rule '*a*a*a*a*b{arch}'` a listing holding one 250-character name
//! took 107 s, and ten `**/` against a 41-deep path 86 s, of backtracking.
//! Here both are listed and walked in a real mount; the walk runs on a
//! thread and is waited for with a bound, so a regression fails instead of
//! hanging the suite. The long name holds every text the first rule needs
//! (`a`, `b`, `gfx`), so the matcher's prefilter lets it through and the
//! name is walked.

use std::fs;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use kpackfs_tests::*;

#[test]
fn pathological_operator_rules_do_not_stall_listings() {
    require_root();
    let src = tempdir();
    // The one `b` stands before every `a`: every placement of the four
    // `*a` is a candidate and none leaves a `b` to follow.
    let long = "gfxb".to_string() + &"a".repeat(246);
    fs::write(src.path().join(&long), b"x").unwrap();
    let deep: PathBuf = std::iter::repeat_n("d", 41).collect();
    fs::create_dir_all(src.path().join(&deep)).unwrap();
    fs::write(src.path().join(&deep).join("gfx942"), b"x").unwrap();

    let many = "**/".repeat(10) + "x/{arch}";
    let m = Mount::new(Some(src.path()), "gfx90a", &["--db-rule", "*a*a*a*a*b{arch}", "--db-rule", &many, "--cache-dir", "none"]);
    let (root, deep_file) = (m.mnt.clone(), m.path(deep.join("gfx942")));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let names: Vec<String> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        let _ = tx.send((names, fs::read(&deep_file).ok()));
    });
    let (mut names, deep_data) = rx.recv_timeout(Duration::from_secs(120)).expect("listing stalled for 120 s");
    names.sort();
    // Neither rule matches: both files are generic and shown.
    assert_eq!(names, ["d".to_string(), long]);
    assert_eq!(deep_data.as_deref(), Some(&b"x"[..]));
}
