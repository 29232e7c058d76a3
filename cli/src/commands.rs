//! The commands every platform shares that are not packaging: bake,
//! inspect, archs, resolve and recompress — each parses nothing itself
//! (clap did), calls one engine entry point and prints its report.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use kpackfs_core::formats::bundle::CcobMethod;
use kpackfs_core::formats::target::{Selection, TargetId};
use kpackfs_core::formats::wrapper::WrapperKind;
use kpackfs_core::tools::resolve::{self, LoaderEnv, LoaderGen};
use kpackfs_core::view::CopyPolicy;

use crate::*;

pub(crate) fn bake(args: BakeArgs, default_naming: Naming) -> Result<(), Failure> {
    not_a_directory("DEST", &args.dest)?;
    let src = source_dir(Some(&args.source))?;
    let cfg = view_config(src.clone(), &args.view, default_naming)?;
    // A target the install does not carry would bake libraries without
    // device code for it: refused before anything is written.
    targets::require_carried("--arch", &cfg.selection, &src, &cfg.db_rules)?;
    let view = open_view(cfg, &args.view, CopyPolicy::Never)?;
    let start = Instant::now();
    let mut last = Instant::now();
    // Progress only for a person: piped or logged output gets the summary
    // line alone, without carriage returns.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let quiet = args.quiet;
    let mut progress = |p: &kpackfs_core::tools::bake::Progress<'_>| {
        if !tty {
            return;
        }
        if !quiet && last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            eprint!("{}", status_line(&format!("baking: {} files, {} written — {}", p.report.files, human(p.report.bytes), p.current.display())));
            let _ = std::io::stderr().flush();
        }
    };
    let r = kpackfs_core::tools::bake::bake(&view, &args.dest, &mut progress).map_err(|e| match e {
        e if e.is_usage() => Failure::usage(e.to_string()),
        other => Failure::runtime(format!("{other} ({} left as it was)", args.dest.display())),
    })?;
    if !quiet {
        let line = format!(
            "baked {} in {:.2}s: {} ({} transformed, {}), {}, {}, {}",
            args.dest.display(),
            start.elapsed().as_secs_f64(),
            count(r.files, "file", "files"),
            r.transformed,
            count(r.archives, "archive", "archives"),
            count(r.symlinks, "symlink", "symlinks"),
            count(r.dirs, "directory", "directories"),
            human(r.bytes)
        );
        if tty {
            eprintln!("{}", status_line(&line));
        } else {
            eprintln!("{line}");
        }
    }
    Ok(())
}

pub(crate) fn inspect(file: &Path) -> Result<(), Failure> {
    let report = kpackfs_core::tools::inspect::inspect(file).map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    emit(&report)
}

pub(crate) fn archs(source: Option<&Path>, demo: bool, machine: bool, db: &DbRuleArgs) -> Result<(), Failure> {
    if machine {
        let report = this_machine("archs --machine")?.report().map_err(|e| Failure::usage(format!("archs --machine: {e}")))?;
        return emit(&report);
    }
    // The demo is described only when asked for by name: a forgotten
    // SOURCE must not answer for an install the user never named.
    if source.is_none() && !demo {
        return Err(Failure::usage(
            "archs: name the install to scan (kpackfs archs SOURCE), or --demo for the embedded demo install, --machine for this machine's GPUs",
        ));
    }
    let src = source_dir(source)?;
    let rules = db.rules()?;
    let r = kpackfs_core::tools::archs::archs(&src, &rules).map_err(|e| Failure::usage(format!("{}: {e}", src.display())))?;
    emit(&r.to_string())
}

/// Short content fingerprint for the resolve table (FNV-1a, not security).
pub(crate) fn short_hash(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// One device's resolution by every loader generation asked for.
type Runs = Vec<(LoaderGen, Vec<resolve::WrapperResolution>)>;

/// Whether every wrapper resolved, identically with every loader.
pub(crate) fn all_resolved(runs: &Runs) -> bool {
    let (_, first) = &runs[0];
    first.iter().enumerate().all(|(i, w)| {
        let Ok(a) = &w.result else { return false };
        runs[1..].iter().all(|(_, o)| matches!(o.get(i).map(|o| &o.result), Some(Ok(b)) if a.bytes == b.bytes && a.archive == b.archive))
    })
}

pub(crate) fn resolve_cmd(args: ResolveArgs) -> Result<(), Failure> {
    if args.binary.is_dir() {
        return Err(Failure::usage(format!(
            "{}: is a directory; resolve reads one host binary (e.g. {}/lib/libamdhip64.so)",
            args.binary.display(),
            args.binary.display()
        )));
    }
    let expanded = expand_auto(&args.arch)?;
    let mut devices = Vec::new();
    for part in expanded.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let isa = TargetId::parse(part).map_err(|e| {
            Failure::usage(format!("--arch {part:?}: {e} (give a device ISA such as gfx90a:sramecc+:xnack-, several separated by commas, or auto)"))
        })?;
        devices.push(isa);
    }
    if devices.is_empty() {
        return Err(Failure::usage("--arch is empty: give a device ISA such as gfx90a:sramecc+:xnack-, or auto"));
    }
    let env = LoaderEnv::from_env();
    let gens: &[LoaderGen] = match args.loader {
        Loader::Feb2026 => &[LoaderGen::Feb2026],
        Loader::Newest => &[LoaderGen::Newest],
        Loader::Both => &[LoaderGen::Feb2026, LoaderGen::Newest],
    };
    let mut chosen: Vec<(TargetId, Runs)> = Vec::new();
    for named in &devices {
        // A bare processor: the first feature variant under which every
        // wrapper resolves (else the first variant, to show what fails).
        let mut tried: Vec<(TargetId, Runs)> = Vec::new();
        let mut any = false;
        for v in targets::device_variants(named) {
            let mut runs = Vec::new();
            for g in gens {
                let r = resolve::resolve(&args.binary, &v, *g, &env)
                    .map_err(|e| Failure::usage(format!("{e}; resolve reads a HIP host binary (a library or executable with device code)")))?;
                runs.push((*g, r));
            }
            any |= runs.iter().any(|(_, r)| r.iter().any(|w| w.result.is_ok()));
            let ok = all_resolved(&runs);
            tried.push((v, runs));
            if ok {
                let (v, runs) = tried.pop().expect("just pushed");
                if &v != named {
                    log::info!("--arch {named}: resolved for a {v} device");
                }
                tried = vec![(v, runs)];
                break;
            }
        }
        if !any {
            // Nothing at all for this device: say what the binary carries
            // instead of one ARCHIVE_NOT_FOUND line per wrapper.
            let c = resolve::carried(&args.binary, &env).map_err(|e| Failure::usage(e.to_string()))?;
            let sel = Selection { targets: vec![named.clone()] };
            let looked: Vec<String> = c.searched.iter().map(|p| p.display().to_string()).collect();
            let looked = if looked.is_empty() { String::new() } else { format!("; archives looked for: {}", looked.join(", ")) };
            if let Some(msg) = targets::not_carried("--arch", &sel, &args.binary, &c.targets) {
                return Err(Failure::usage(format!("{msg}{looked}")));
            }
            if c.targets.is_empty() && !c.searched.is_empty() {
                return Err(Failure::runtime(format!(
                    "--arch {named}: ARCHIVE_NOT_FOUND for every wrapper: no archive of {} was found{looked}; install its device package or set ROCM_KPACK_PATH",
                    args.binary.display()
                )));
            }
        }
        let first = tried.into_iter().next().expect("at least one variant");
        chosen.push(first);
    }
    if let Some(dir) = &args.out {
        not_a_directory("--out", dir)?;
    }
    // Objects are staged and moved into DIR only when every wrapper
    // resolved: a failed run writes nothing (kpackfs_core::staging).
    let staging = args
        .out
        .as_deref()
        .map(|d| kpackfs_core::staging::Staging::begin(d, "resolve").map_err(|e| Failure::runtime(format!("{}: {e}", d.display()))))
        .transpose()?;
    let mut failed = false;
    let mut text = String::new();
    use std::fmt::Write as _;
    for (device, runs) in &chosen {
        if chosen.len() > 1 || devices.iter().all(|d| d != device) {
            let _ = writeln!(text, "device {device}");
        }
        let out = match (&staging, chosen.len()) {
            (Some(st), 1) => Some(st.path().to_path_buf()),
            (Some(st), _) => {
                let sub = st.path().join(device.to_string().replace(':', "_"));
                std::fs::create_dir_all(&sub).map_err(|e| Failure::runtime(format!("{}: {e}", sub.display())))?;
                Some(sub)
            }
            (None, _) => None,
        };
        failed |= !resolve_table(&mut text, runs, out.as_deref())?;
    }
    emit(&text)?;
    if failed {
        let none = args.out.as_ref().map(|d| format!("; nothing written to {}", d.display())).unwrap_or_default();
        return Err(Failure::runtime(format!("not every wrapper resolved (identically with every loader){none}")));
    }
    if let (Some(st), Some(dir)) = (staging, &args.out) {
        st.commit(true).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    }
    Ok(())
}

/// Appends the table of one device's resolution to `text` (and writes the
/// code objects to `out`); false when a wrapper failed or loaders disagree.
pub(crate) fn resolve_table(text: &mut String, runs: &Runs, out: Option<&Path>) -> Result<bool, Failure> {
    use std::fmt::Write as _;
    let mut ok = true;
    let (_, first) = &runs[0];
    let _ = writeln!(text, "{:<6} {:<5} {:<6} {:<60} {:<44} {:<24} {:>10}  fnv64", "wrapper", "magic", "co", "archive", "key", "arch", "bytes");
    for (i, w) in first.iter().enumerate() {
        let magic = match w.kind {
            WrapperKind::Fat => "HIPF",
            WrapperKind::Kpacked => "HIPK",
            WrapperKind::Other(_) => "????",
        };
        match &w.result {
            Ok(r) => {
                let archive = r.archive.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(fat bundle)".into());
                let _ = writeln!(
                    text,
                    "{:<6} {:<5} {:<6} {:<60} {:<44} {:<24} {:>10}  {}",
                    w.index,
                    magic,
                    w.co_index,
                    archive,
                    r.key,
                    if r.arch == kpackfs_core::formats::target::SPIRV_ARCH { format!("{} (JIT)", r.arch) } else { r.arch.clone() },
                    r.bytes.len(),
                    short_hash(&r.bytes)
                );
                if let Some(dir) = out {
                    let p = dir.join(format!("{}.co", w.index));
                    std::fs::write(&p, &r.bytes).map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
                }
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(text, "{:<6} {:<5} {:<6} {e}", w.index, magic, w.co_index);
            }
        }
        for (g, other) in &runs[1..] {
            let same = match (&w.result, other.get(i).map(|o| &o.result)) {
                (Ok(a), Some(Ok(b))) => a.bytes == b.bytes && a.archive == b.archive,
                (Err(a), Some(Err(b))) => a == b,
                _ => false,
            };
            if !same {
                ok = false;
                let desc = match other.get(i).map(|o| &o.result) {
                    Some(Ok(b)) => format!("{} / {}", b.archive.as_ref().map(|p| p.display().to_string()).unwrap_or_default(), b.arch),
                    Some(Err(e)) => e.to_string(),
                    None => "missing".into(),
                };
                let _ = writeln!(text, "       {g:?} loader disagrees: {desc}");
            }
        }
    }
    Ok(ok)
}

pub(crate) fn recompress(a: RecompressArgs) -> Result<(), Failure> {
    let method = match a.method.as_str() {
        "zstd" => CcobMethod::Zstd,
        "zlib" => CcobMethod::Zlib,
        m => return Err(Failure::usage(format!("--method {m:?}: use zstd or zlib"))),
    };
    let r = kpackfs_core::tools::recompress::recompress(&a.input, &a.output, a.ccob_version, method, a.level)
        .map_err(|e| Failure::usage(format!("{}: {e}", a.input.display())))?;
    eprintln!("{}: {} of {} bundles compressed ({} -> {})", a.output.display(), r.compressed, r.bundles, human(r.bytes_before), human(r.bytes_after));
    Ok(())
}
