//! `kpackfs doctor`: the command-line glue around [`kpackfs_core::tools::doctor`] (the
//! checks and the report live there).

use std::path::PathBuf;

use clap::Args;

use kpackfs_core::formats::target::{Selection, TargetId};
use kpackfs_core::tools::doctor::{Device, DoctorConfig, DoctorError};
use kpackfs_core::tools::resolve::LoaderEnv;

use crate::{emit, expand_auto, targets, Failure};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// An install, a site-packages, a kpackfs mount or a baked tree (or
    /// one binary) [default: $ROCM_PATH, else /opt/rocm].
    pub prefix: Option<PathBuf>,
    /// The GPUs to check for: `auto` (this machine's, as the HIP runtime
    /// names them) or target IDs, several separated by commas; a bare
    /// processor (`gfx90a`) stands for any of its feature variants.
    #[arg(long, short = 'a', default_value = "auto", value_name = "auto|TARGET[,TARGET…]")]
    pub arch: String,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn doctor_cmd(a: DoctorArgs) -> Result<(), Failure> {
    let prefix = a.prefix.clone().unwrap_or_else(|| std::env::var_os("ROCM_PATH").map_or_else(|| PathBuf::from("/opt/rocm"), PathBuf::from));
    let arch = expand_auto(&a.arch)?;
    let mut devices = Vec::new();
    for part in arch.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let t =
            TargetId::parse(part).map_err(|e| Failure::usage(format!("--arch {part:?}: {e} (give a GPU target such as gfx90a:sramecc+:xnack-, or auto)")))?;
        if !devices.contains(&t) {
            devices.push(t);
        }
    }
    if devices.is_empty() {
        return Err(Failure::usage("--arch is empty: give a GPU target such as gfx90a:sramecc+:xnack-, or auto"));
    }
    let cfg = DoctorConfig {
        devices: devices.iter().map(|t| Device { name: t.clone(), variants: targets::device_variants(t) }).collect(),
        env: LoaderEnv::from_env(),
    };
    let r = kpackfs_core::tools::doctor::doctor(&prefix, &cfg).map_err(|e| match e {
        DoctorError::Prefix(..) => Failure::usage(format!("{e}; name an install, a site-packages, a kpackfs mount or a baked tree")),
    })?;
    if a.json {
        emit(&format!("{}\n", r.json()))?;
    } else {
        emit(&r.text())?;
    }
    if r.ok() {
        return Ok(());
    }
    if r.binaries.is_empty() {
        return Err(Failure::runtime(format!("{}: no HIP binary found; nothing was checked (is it the install's prefix?)", r.prefix.display())));
    }
    // A GPU nothing here carries code for: a mistyped target, or a tree
    // made for other GPUs than this machine's.
    let what = if a.arch.split(',').any(|p| p.trim() == "auto") { "this machine's GPU" } else { "--arch" };
    let hint = targets::not_carried(what, &Selection { targets: devices }, &r.prefix, &r.carried());
    Err(Failure::runtime(hint.unwrap_or_else(|| "a GPU gets no code from some binaries (the PROBLEM lines above)".into())))
}
