//! The GPU targets of this machine (`--arch auto`), read from the kernel's
//! KFD topology the way the HSA runtime reads it, so that `auto` names each
//! GPU exactly as the runtime will when it loads code objects
//! (`gfx90a:sramecc+:xnack-`). docs/gpu-detection.md gives the rules and
//! where they come from.
//!
//! Only files are read (no ioctl, no `/dev/kfd`): a sysfs tree copied
//! elsewhere, or a test fixture, works the same as `/sys`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::formats::target::{has_sramecc, has_xnack, TargetId};

/// The KFD topology's node directories, under a sysfs root.
pub const NODES_DIR: &str = "class/kfd/kfd/topology/nodes";
/// amdgpu's `noretry` module parameter, under a sysfs root: it decides
/// whether a process starts with XNACK on.
pub const NORETRY_PARAM: &str = "module/amdgpu/parameters/noretry";
/// `capability` bit saying the GPU's SRAM ECC is on (KFD's
/// `HSA_CAP_SRAM_EDCSUPPORTED`).
const CAP_SRAM_EDC: u64 = 1 << 26;

#[derive(Debug, Error)]
pub enum MachineError {
    #[error("no AMD GPU found: no KFD topology at {0} (is the amdgpu driver loaded?)")]
    NoTopology(PathBuf),
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("no AMD GPU found: {} lists {detail}", .path.display())]
    NoGpu { path: PathBuf, detail: String },
    #[error("{var}={value:?}: expected MAJOR.MINOR.STEPPING (e.g. 10.3.0), as the HSA runtime does")]
    BadOverride { var: String, value: String },
}

/// A GFX IP version as the runtime keys its ISAs: 9.0.10 is gfx90a.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GfxVersion {
    pub major: u32,
    pub minor: u32,
    pub stepping: u32,
}

impl GfxVersion {
    /// KFD's `gfx_target_version`, decimal digit pairs `MMmmss` (90010 is
    /// 9.0.10). 0 (CPU nodes, or a kernel that does not know the GPU) and
    /// values with more than six digits are no version.
    pub fn from_kfd(v: u64) -> Option<GfxVersion> {
        if v == 0 || v > 99_99_99 {
            return None;
        }
        let (major, minor, stepping) = (v / 10000, (v / 100) % 100, v % 100);
        Some(GfxVersion { major: major as u32, minor: minor as u32, stepping: stepping as u32 })
    }

    /// `HSA_OVERRIDE_GFX_VERSION`'s `11.0.0` form (decimal fields, the
    /// ranges the runtime accepts).
    pub fn parse_override(s: &str) -> Option<GfxVersion> {
        let mut it = s.split('.');
        let mut field = |max: u32| it.next().and_then(|f| f.parse::<u32>().ok()).filter(|v| *v <= max);
        let v = GfxVersion { major: field(63)?, minor: field(255)?, stepping: field(255)? };
        it.next().is_none().then_some(v)
    }

    /// The processor name: `gfx`, the major version in decimal, minor and
    /// stepping as one hex digit each. `None` when they do not fit one digit.
    pub fn processor(&self) -> Option<String> {
        (self.major > 0 && self.minor < 16 && self.stepping < 16).then(|| format!("gfx{}{:x}{:x}", self.major, self.minor, self.stepping))
    }

    fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// What the HSA runtime takes from its environment when it names a GPU;
/// `auto` honours the same variables in kpackfs's own environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeEnv {
    /// `HSA_XNACK`: `1` asks for XNACK on, `0` for off; other values are
    /// ignored (as the runtime ignores them).
    pub xnack: Option<bool>,
    /// `HSA_ENABLE_SRAMECC`: `1`/`0` replace what the GPU reports.
    pub sramecc: Option<bool>,
    /// `HSA_OVERRIDE_GFX_VERSION`: every GPU poses as this version.
    pub gfx_override: Option<GfxVersion>,
    /// `HSA_OVERRIDE_GFX_VERSION_<node>`: one GPU poses as this version.
    pub node_overrides: Vec<(u32, GfxVersion)>,
}

impl RuntimeEnv {
    /// Reads the `HSA_*` variables from `vars`; a malformed override is an
    /// error, as it makes the runtime fail too.
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Result<RuntimeEnv, MachineError> {
        let mut env = RuntimeEnv::default();
        let flag = |v: &str| match v {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        };
        for (k, v) in vars {
            let over = || GfxVersion::parse_override(&v).ok_or_else(|| MachineError::BadOverride { var: k.clone(), value: v.clone() });
            match k.as_str() {
                "HSA_XNACK" => env.xnack = flag(&v),
                "HSA_ENABLE_SRAMECC" => env.sramecc = flag(&v),
                "HSA_OVERRIDE_GFX_VERSION" => env.gfx_override = Some(over()?),
                _ => {
                    if let Some(n) = k.strip_prefix("HSA_OVERRIDE_GFX_VERSION_").and_then(|n| n.parse::<u32>().ok()) {
                        env.node_overrides.push((n, over()?));
                    }
                }
            }
        }
        env.node_overrides.sort_by_key(|(n, _)| *n);
        Ok(env)
    }

    /// The variables of this process.
    pub fn from_process() -> Result<RuntimeEnv, MachineError> {
        RuntimeEnv::from_vars(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))))
    }

    fn override_for(&self, node: u32) -> Option<GfxVersion> {
        self.node_overrides.iter().find(|(n, _)| *n == node).map(|(_, v)| *v).or(self.gfx_override)
    }
}

/// One GPU node of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNode {
    /// The node's directory number.
    pub node: u32,
    pub gfx_target_version: u64,
    pub device_id: Option<u64>,
    pub capability: u64,
    /// The target ID the runtime gives this GPU in a process with the
    /// environment [`Machine::read`] was given.
    pub isa: TargetId,
}

/// The machine-wide XNACK mode. XNACK is a per-process setting the kernel
/// chooses for all of a process's GPUs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xnack {
    /// What a process gets without asking.
    pub default_on: bool,
    /// Whether a process that asks (`HSA_XNACK=1`) gets it on.
    pub can_enable: bool,
    /// The mode the GPUs' target IDs carry (with `HSA_XNACK` applied).
    pub on: bool,
    /// Whether `HSA_XNACK` decided [`Xnack::on`].
    pub from_env: bool,
}

/// This machine's GPUs as the KFD topology lists them.
#[derive(Debug, Clone)]
pub struct Machine {
    pub nodes_dir: PathBuf,
    pub gpus: Vec<GpuNode>,
    /// Nodes without SIMDs (CPUs).
    pub cpu_nodes: usize,
    /// Nodes left out with a warning (unreadable or unusable properties).
    pub skipped: usize,
    pub xnack: Xnack,
}

/// The properties a node's `properties` file gives that matter here.
#[derive(Debug, Default, PartialEq, Eq)]
struct Props {
    simd_count: u64,
    gfx_target_version: u64,
    capability: u64,
    device_id: Option<u64>,
}

/// The most a topology file may hold. KFD's `properties` files are under
/// 2 KiB; a larger one is not a topology file (and a sysfs tree given by
/// `KPACKFS_SYSFS_ROOT` may hold anything).
pub const MAX_TOPOLOGY_FILE: u64 = 64 * 1024;

/// Reads a small text file of the topology: only a regular file (a FIFO
/// would block the open or the read forever, a device such as `/dev/zero`
/// never ends) and at most [`MAX_TOPOLOGY_FILE`] bytes. The open does not
/// wait (`O_NONBLOCK`), so a FIFO is refused, not waited on; symlinks are
/// followed (sysfs itself is made of them) and their target judged.
fn read_topology_file(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    let file = opts.open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, format!("not a regular file ({}); refused", kind_name(kind))));
    }
    let mut buf = Vec::new();
    file.take(MAX_TOPOLOGY_FILE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_TOPOLOGY_FILE {
        return Err(Error::new(ErrorKind::InvalidData, format!("larger than {} KiB, not a KFD topology file; refused", MAX_TOPOLOGY_FILE / 1024)));
    }
    String::from_utf8(buf).map_err(|_| Error::new(ErrorKind::InvalidData, "not text"))
}

fn kind_name(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Parses a `properties` file: one `name value` line each, values decimal.
/// Lines this module does not use are not checked.
fn parse_properties(text: &str) -> Result<Props, String> {
    let mut p = Props::default();
    let mut simd = None;
    for (i, line) in text.lines().enumerate() {
        let mut f = line.split_whitespace();
        let Some(key) = f.next() else { continue };
        if !matches!(key, "simd_count" | "gfx_target_version" | "capability" | "device_id") {
            continue;
        }
        let v = f.next().and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| format!("line {}: {key} has no decimal value", i + 1))?;
        match key {
            "simd_count" => simd = Some(v),
            "gfx_target_version" => p.gfx_target_version = v,
            "capability" => p.capability = v,
            _ => p.device_id = Some(v),
        }
    }
    p.simd_count = simd.ok_or("no simd_count line")?;
    Ok(p)
}

/// Reads `noretry` (`-1`: each GPU's default). A missing or odd file
/// counts as `-1`: the parameter is read-only to us and usually absent only
/// in copied trees.
fn read_noretry(sysfs_root: &Path) -> i64 {
    let path = sysfs_root.join(NORETRY_PARAM);
    match read_topology_file(&path) {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| {
            let shown: String = s.trim().chars().take(40).collect();
            log::warn!("{}: {shown:?} is not a number; taking -1 (the driver's default)", path.display());
            -1
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            log::debug!("{}: {e}; taking -1 (the driver's default)", path.display());
            -1
        }
        Err(e) => {
            log::warn!("{}: {e}; taking -1 (the driver's default)", path.display());
            -1
        }
    }
}

/// The kernel's per-GPU facts behind the XNACK mode (amdgpu/amdkfd).
mod kernel {
    use super::GfxVersion;

    /// amdgpu's own `noretry` choice when the parameter is -1: retry off for
    /// the data-center GFX9 parts and everything from GFX10.3 on.
    pub fn noretry_default(v: GfxVersion) -> bool {
        matches!((v.major, v.minor, v.stepping), (9, 0, 0) | (9, 0, 6) | (9, 0, 8) | (9, 0, 10) | (9, 4, _) | (9, 5, _)) || v.at_least(10, 3)
    }

    /// GPUs whose shaders cannot be preempted during a page fault: KFD
    /// never gives a process XNACK on while it uses one (GFX10.1 to 12.0).
    pub fn retry_unsupported(v: GfxVersion) -> bool {
        v.at_least(10, 1) && !v.at_least(12, 1)
    }

    /// GPUs that switch XNACK per process whatever the boot-time setting.
    pub fn per_process(v: GfxVersion) -> bool {
        matches!((v.major, v.minor, v.stepping), (9, 0, 10) | (9, 4, _) | (9, 5, 0))
    }
}

/// KFD's choice for a process that uses all of `gpus` (only GFX9 and later
/// count): (on by default, can be turned on).
fn xnack_rules(gpus: &[GfxVersion], noretry_param: i64) -> (bool, bool) {
    let mut default_on = true;
    let mut can_enable = true;
    for v in gpus.iter().filter(|v| v.major >= 9) {
        let noretry = if noretry_param == -1 { kernel::noretry_default(*v) } else { noretry_param != 0 };
        let retry_ok = !kernel::retry_unsupported(*v) && !noretry;
        default_on &= retry_ok;
        can_enable &= retry_ok || kernel::per_process(*v);
    }
    (default_on, can_enable)
}

/// Node directories (numeric names), in numeric order.
fn node_dirs(nodes_dir: &Path) -> Result<Vec<(u32, PathBuf)>, MachineError> {
    let entries = std::fs::read_dir(nodes_dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MachineError::NoTopology(nodes_dir.to_path_buf()),
        _ => MachineError::Io { path: nodes_dir.to_path_buf(), source: e },
    })?;
    let mut nodes = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| MachineError::Io { path: nodes_dir.to_path_buf(), source: e })?;
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
            nodes.push((n, entry.path()));
        }
    }
    nodes.sort();
    Ok(nodes)
}

impl Machine {
    /// Reads the topology under `sysfs_root` (normally `/sys`) and names
    /// each GPU as the runtime would in a process with `env`. A node whose
    /// properties cannot be read or used is skipped with a warning.
    pub fn read(sysfs_root: &Path, env: &RuntimeEnv) -> Result<Machine, MachineError> {
        let nodes_dir = sysfs_root.join(NODES_DIR);
        let mut found: Vec<(u32, Props, GfxVersion)> = Vec::new();
        let (mut cpu_nodes, mut skipped) = (0, 0);
        for (n, dir) in node_dirs(&nodes_dir)? {
            let path = dir.join("properties");
            let props = read_topology_file(&path).map_err(|e| e.to_string()).and_then(|t| parse_properties(&t));
            let props = match props {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("KFD node {n} skipped: {}: {e}", path.display());
                    skipped += 1;
                    continue;
                }
            };
            if props.simd_count == 0 {
                cpu_nodes += 1;
                continue;
            }
            match GfxVersion::from_kfd(props.gfx_target_version) {
                Some(v) => found.push((n, props, v)),
                None => {
                    log::warn!("KFD node {n} skipped: gfx_target_version {} names no GPU (kernel too old for it?)", props.gfx_target_version);
                    skipped += 1;
                }
            }
        }
        // XNACK is decided by the real hardware, whatever version it poses as.
        let real: Vec<GfxVersion> = found.iter().map(|(_, _, v)| *v).collect();
        let (default_on, can_enable) = xnack_rules(&real, read_noretry(sysfs_root));
        let on = match env.xnack {
            Some(true) => can_enable,
            Some(false) => false,
            None => default_on,
        };
        let xnack = Xnack { default_on, can_enable, on, from_env: env.xnack.is_some() };
        let mut gpus = Vec::new();
        for (n, props, real) in found {
            let v = env.override_for(n).unwrap_or(real);
            let Some(processor) = v.processor() else {
                log::warn!("KFD node {n} skipped: GFX version {}.{}.{} has no gfx name", v.major, v.minor, v.stepping);
                skipped += 1;
                continue;
            };
            let mut isa = TargetId::bare(&processor);
            if has_sramecc(&processor) {
                let on = env.sramecc.unwrap_or(props.capability & CAP_SRAM_EDC != 0);
                isa.features.push(("sramecc".into(), on));
            }
            if has_xnack(&processor) {
                isa.features.push(("xnack".into(), xnack.on));
            }
            gpus.push(GpuNode { node: n, gfx_target_version: props.gfx_target_version, device_id: props.device_id, capability: props.capability, isa });
        }
        Ok(Machine { nodes_dir, gpus, cpu_nodes, skipped, xnack })
    }

    /// The distinct target IDs of the GPUs, in node order; no GPU is an error.
    pub fn targets(&self) -> Result<Vec<TargetId>, MachineError> {
        if self.gpus.is_empty() {
            let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
            let detail = match self.skipped {
                0 => format!("{} and no GPU", plural(self.cpu_nodes, "CPU node")),
                k => format!("{} and no usable GPU ({} skipped, see the warnings)", plural(self.cpu_nodes, "CPU node"), plural(k, "node")),
            };
            return Err(MachineError::NoGpu { path: self.nodes_dir.clone(), detail });
        }
        let mut out: Vec<TargetId> = Vec::new();
        for g in &self.gpus {
            if !out.contains(&g.isa) {
                out.push(g.isa.clone());
            }
        }
        Ok(out)
    }

    /// `kpackfs archs --machine`: one line per GPU node, the XNACK mode when
    /// a GPU has one, and what `auto` resolves to.
    pub fn report(&self) -> Result<String, MachineError> {
        let targets = self.targets()?;
        let mut s = String::new();
        for g in &self.gpus {
            let _ = write!(s, "node {}: {} (gfx_target_version {}", g.node, g.isa, g.gfx_target_version);
            if let Some(d) = g.device_id {
                let _ = write!(s, ", device 0x{d:04x}");
            }
            s.push_str(")\n");
        }
        if self.gpus.iter().any(|g| g.isa.feature("xnack").is_some()) {
            let x = &self.xnack;
            let why = match (x.on, x.from_env, x.can_enable) {
                (true, true, _) => "on (HSA_XNACK=1)",
                (true, false, _) => "on (amdgpu.noretry=0)",
                (false, true, true) => "off (HSA_XNACK=0)",
                (false, true, false) => "off (HSA_XNACK=1, but this machine cannot turn it on)",
                (false, false, true) => "off (a process with HSA_XNACK=1 gets xnack+)",
                (false, false, false) => "off (this machine cannot turn it on)",
            };
            let _ = writeln!(s, "xnack: {why}");
        }
        let list: Vec<String> = targets.iter().map(ToString::to_string).collect();
        let _ = writeln!(s, "auto: {}", list.join(","));
        Ok(s)
    }
}

/// The target IDs `--arch auto` resolves to on the machine whose sysfs is
/// at `sysfs_root`, for a process with `env`.
#[cfg(test)]
pub(crate) fn machine_targets(sysfs_root: &Path, env: &RuntimeEnv) -> Result<Vec<TargetId>, MachineError> {
    Machine::read(sysfs_root, env)?.targets()
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
