//! `shoal-tender`: the lean command that runs one shoal image and nothing
//! else (the tenders and the loader only, as Solo5's `solo5-spt`/`solo5-hvt`).
//!
//! `shoal run` is the same operation inside the full `shoal` command,
//! which also carries the toolchain, the benchmarks and their dependencies.
//! Every instance is a tender process for as long as the guest lives, and
//! the pages of the binary it runs from are part of what the instance
//! costs: for many small instances (the memory experiment, a FaaS gateway)
//! a binary that holds only the tenders and the loader is resident in a
//! fraction of the memory and starts sooner.
//!
//! The run options are defined once, here: [`RunOpts`] and its table
//! [`OPTIONS`] (spellings, value names, allowed words, help). `shoal run`
//! takes them through clap (feature `clap`: `#[command(flatten)]`),
//! `shoal-tender` through the hand-written [`RunArgs::parse`] (clap's code
//! would be most of the lean binary), and `shoal serve` and `shoal-oci`
//! fill a [`RunOpts`] and spell it with [`RunOpts::to_args`]. All of them
//! check it with [`RunArgs::from_opts`], which makes the loader's
//! [`RunConfig`]. A new option is one line of `run_options!` plus its use.
#![deny(missing_docs)]

use shoal_loader::{FsSource, MemoryMode, RunConfig};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `--mount HOSTDIR:GUESTDIR:ro`, parsed and checked as `shoal run` does
/// (for the gateway's deployments).
pub use shoal_loader::mount::{check_all as check_mounts, Mount};

/// A command line that cannot be run, in one sentence.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// An option this command does not know.
    #[error("unknown option {0} (see --help)")]
    UnknownOption(String),
    /// An option given without its value.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// An option value that is not one of the allowed words.
    #[error("{option} {value}: expected one of {allowed}")]
    BadChoice {
        /// The option.
        option: &'static str,
        /// What was given.
        value: String,
        /// The allowed values.
        allowed: String,
    },
    /// A `--mem` value that is not a size.
    #[error("--mem {0} is not a size (bytes, or a number with K, M or G)")]
    BadSize(String),
    /// A `--mem` value below a megabyte: most likely a unit left out.
    #[error("--mem {0} is too small for any instance (at least 1M; {1})")]
    SizeTooSmall(String, String),
    /// An executable given, but the kernel image it runs on is not built.
    #[error("{exe} is a Linux executable, which runs on shoal's kernel image {kernel}: it is not built yet (`shoal run {exe}` or `shoal serve` builds it)")]
    NoExecKernel {
        /// The executable.
        exe: String,
        /// Where the kernel image is expected.
        kernel: String,
    },
    /// An executable that cannot run as an instance.
    #[error(transparent)]
    Exec(#[from] shoal_exec::ExecError),
    /// The image path is a directory.
    #[error("{0} is a directory, not an image")]
    ImageIsDirectory(PathBuf),
    /// The same host port given to two `--publish` options.
    #[error("--publish {0}: host port {1} is published twice")]
    PublishedTwice(String, String),
    /// A `--mem` value that does not fit in 64 bits.
    #[error("--mem {0} is too large")]
    SizeTooLarge(String),
    /// An `--env` value without `=`.
    #[error("--env {0}: expected KEY=VALUE")]
    BadEnv(String),
    /// An `--fs` that is not a directory.
    #[error("--fs {0}: no such directory")]
    NoFsDir(PathBuf),
    /// No image given.
    #[error("no image given (usage: shoal-tender [OPTIONS] IMAGE [-- ARGS...])")]
    NoImage,
    /// A `--publish` value that does not parse.
    #[error(transparent)]
    Net(#[from] shoal_loader::net::NetError),
    /// A `--listen-fd` that is not a number.
    #[error("--listen-fd {0}: expected the number of an open descriptor")]
    BadFd(String),
    /// A `--volume` that cannot be used.
    #[error(transparent)]
    Volume(#[from] shoal_loader::volume::VolumeError),
    /// A `--mount` that cannot be used.
    #[error(transparent)]
    Mount(#[from] shoal_loader::mount::MountError),
    /// `--net-bind-any` with `--single-process` on spt.
    #[error("--net-bind-any cannot be used with --single-process on spt: the waiting parent process binds the host sockets the guest asks for")]
    BindAnySingleProcess,
    /// `--uid-range` that does not parse.
    #[error(transparent)]
    Uid(#[from] shoal_loader::uids::UidError),
    /// `--uid-range` with hvt.
    #[error("--uid-range is for --tender spt: hvt's VMM runs as the user who starts it")]
    UidRangeHvt,
    /// `--uid-range` with `--single-process` on spt.
    #[error("--uid-range cannot be used with --single-process on spt: the waiting parent process holds the instance's uid while it runs")]
    UidRangeSingleProcess,
    /// `--volume` with `--single-process` on spt.
    #[error("--volume cannot be used with --single-process on spt: the waiting parent process writes the host directory when the instance ends")]
    VolumeSingleProcess,
    /// An `--inject` that does not parse.
    #[error(transparent)]
    Inject(#[from] shoal_loader::inject::InjectError),
    /// A `--rejuvenate-every` that does not parse.
    #[error(transparent)]
    Period(#[from] shoal_loader::inject::PeriodError),
    /// A `--watchdog` that does not parse.
    #[error(transparent)]
    Watchdog(#[from] shoal_loader::inject::WatchdogError),
    /// A `--stop-timeout` that does not parse.
    #[error(transparent)]
    StopTimeout(#[from] shoal_loader::stop::StopTimeoutError),
    /// A `--log-shrink` that does not parse.
    #[error(transparent)]
    LogShrink(#[from] shoal_loader::inject::LogShrinkError),
    /// `--no-recover` with an option that needs the gates.
    #[error("--no-recover turns component recovery off; it cannot be used with {0}")]
    NoRecover(&'static str),
    /// A `--cwd` that is not an absolute path.
    #[error("--cwd {0}: expected an absolute path of at most 255 bytes")]
    Cwd(String),
    /// A `--user` that is not `UID:GID`.
    #[error("--user {0}: expected UID:GID (two numbers)")]
    User(String),
    /// A `--seccomp-deny` that does not parse.
    #[error("--seccomp-deny {0}: expected NR=ERRNO pairs separated by commas (system-call numbers below 512, errnos from 1 to 255)")]
    SeccompDeny(String),
    /// A `--hostname` Linux would refuse.
    #[error("--hostname {0:?}: expected 1 to 63 bytes without NUL or '/'")]
    Hostname(String),
    /// More than one image given.
    #[error("more than one image given ({0} and {1}); program arguments go after --")]
    TwoImages(PathBuf, PathBuf),
}

/// Which tender runs the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tender {
    /// The seccomp-sandboxed process (`shoal-spt`).
    #[default]
    Spt,
    /// The KVM virtual machine (`shoal-hvt`).
    Hvt,
}

/// What to run and how: the options of `shoal run` and `shoal-tender`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunArgs {
    /// Which tender.
    pub tender: Tender,
    /// The guest's `argv[0]` (default: the image path). `shoal-oci` passes
    /// the image as a descriptor (`/proc/self/fd/N`) and the name the
    /// container asked for here, as runc gives `process.args[0]`.
    pub argv0: Option<OsString>,
    /// A directory served as the root file system.
    pub fs: Option<PathBuf>,
    /// Guest memory in bytes, rounded up to whole pages.
    pub mem: u64,
    /// `KEY=VALUE` strings for the program's environment.
    pub env: Vec<String>,
    /// How guest memory is filled.
    pub mode: MemoryMode,
    /// With `pool`: fall back to `copy` when the pool cannot serve the image.
    pub pool_fallback: bool,
    /// spt: run the guest in this process, with no waiting parent
    /// ([`shoal_spt::run_in_place`]). hvt is always one process.
    pub single_process: bool,
    /// Ports to publish (`--publish`).
    pub publish: Vec<shoal_loader::net::Publish>,
    /// Listening sockets handed over by the caller (`--listen-fd`).
    pub listen_fds: Vec<i32>,
    /// `--net-outbound`.
    pub net_outbound: bool,
    /// `--net-allow` rules (hvt; they imply outbound, limited to them).
    pub net_allow: Vec<shoal_loader::net::Allow>,
    /// `--net-bind-any`: a guest `bind` on any port binds the host socket
    /// then (for an instance in a network namespace of its own).
    pub net_bind_any: bool,
    /// A host directory kept across runs (`--volume HOSTDIR:GUESTDIR`).
    pub volume: Option<shoal_loader::volume::Volume>,
    /// Read-only host directories (`--mount HOSTDIR:GUESTDIR:ro`).
    pub mounts: Vec<shoal_loader::mount::Mount>,
    /// A fault to inject into a kernel component (`--inject COMPONENT:KIND@N`).
    pub inject: Option<shoal_loader::inject::Inject>,
    /// `--rejuvenate-every SECONDS`, in nanoseconds (0: none).
    pub rejuvenate_ns: u64,
    /// `--watchdog MS`, in nanoseconds (0: off).
    pub watchdog_ns: u64,
    /// `--stop-timeout SECONDS`, in nanoseconds.
    pub stop_timeout_ns: u64,
    /// `--no-recover`.
    pub no_recover: bool,
    /// `--recover-stateful`.
    pub recover_stateful: bool,
    /// `--log-shrink` (0: not given).
    pub log_shrink: u32,
    /// `--log-report`.
    pub log_report: bool,
    /// `--uid-range` (spt).
    pub uid_range: Option<shoal_loader::uids::UidRange>,
    /// `--cwd` (empty: `/`).
    pub cwd: Vec<u8>,
    /// `--user`: the uid and gid the program sees.
    pub user: (u32, u32),
    /// `--hostname` (empty: the default, `shoal`).
    pub hostname: Vec<u8>,
    /// `--seccomp-deny`: the errno each system call is refused with, by
    /// number (0: runs); empty: none refused.
    pub syscall_errno: Vec<u8>,
    /// The image (for an executable given: the instance image built
    /// around it, see [`executable_image`]).
    pub image: PathBuf,
    /// The Linux executable given in place of an image, if one was.
    pub executable: Option<PathBuf>,
    /// The program's arguments (after `--`).
    pub args: Vec<OsString>,
}

/// The default guest memory size, as `shoal run` documents it.
pub const DEFAULT_MEM: &str = "256M";

/// How an option takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// A switch: present or not.
    Flag,
    /// One value (`--opt V` or `--opt=V`).
    One,
    /// A value each time it is given (repeatable).
    Many,
}

/// One option of [`RunOpts`]: its spellings, its help and how it takes its
/// value. The hand-written parser, `shoal-tender`'s usage text, clap's
/// `shoal run` arguments and [`RunOpts::to_args`] all read this table.
#[derive(Clone, Copy, Debug)]
pub struct OptSpec {
    /// `--name`.
    pub long: &'static str,
    /// `-c`, if the option has a short form.
    pub short: Option<&'static str>,
    /// What the value is called in help texts (empty for a flag).
    pub value_name: &'static str,
    /// The allowed values, when the value is one of a few words.
    pub choices: &'static [&'static str],
    /// One sentence (or two) for the help texts.
    pub help: &'static str,
    /// Flag, one value or repeatable.
    pub takes: Takes,
}

impl OptSpec {
    /// The id clap knows the option by: the long name without `--`.
    pub fn id(&self) -> &'static str {
        &self.long[2..]
    }
}

/// A field of [`RunOpts`]: how a value given on the command line is kept
/// and given back.
trait OptValue {
    /// Takes one occurrence (`None` for a flag).
    fn put(&mut self, v: Option<OsString>);
    /// The occurrences, for [`RunOpts::to_args`] (`None` for a flag that is on).
    fn each(&self) -> Vec<Option<&OsString>>;
}

/// Flag, one value or repeatable, from a [`RunOpts`] field's type.
trait OptKind {
    const TAKES: Takes;
}

impl OptKind for bool {
    const TAKES: Takes = Takes::Flag;
}

impl OptKind for Option<OsString> {
    const TAKES: Takes = Takes::One;
}

impl OptKind for Vec<OsString> {
    const TAKES: Takes = Takes::Many;
}

impl OptValue for bool {
    fn put(&mut self, _: Option<OsString>) {
        *self = true;
    }
    fn each(&self) -> Vec<Option<&OsString>> {
        if *self {
            vec![None]
        } else {
            Vec::new()
        }
    }
}

impl OptValue for Option<OsString> {
    fn put(&mut self, v: Option<OsString>) {
        *self = v;
    }
    fn each(&self) -> Vec<Option<&OsString>> {
        self.iter().map(Some).collect()
    }
}

impl OptValue for Vec<OsString> {
    fn put(&mut self, v: Option<OsString>) {
        self.extend(v);
    }
    fn each(&self) -> Vec<Option<&OsString>> {
        self.iter().map(Some).collect()
    }
}

/// Defines [`RunOpts`] and its table [`OPTIONS`] from one list, so that an
/// option is added in one place: its field, spellings, value name,
/// allowed words and help.
macro_rules! run_options {
    ($($field:ident: $ty:ty = ($long:literal, $short:expr, $value_name:literal, [$($choice:literal),*], $help:literal);)*) => {
        /// The run options as given, before they are checked: the one
        /// definition `shoal run` (through clap), `shoal-tender`,
        /// `shoal serve`'s instances and `shoal-oci` share. [`RunArgs::from_opts`]
        /// checks them; [`RunOpts::to_args`] spells them for `shoal-tender`.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct RunOpts {
            $(#[doc = $help] pub $field: $ty,)*
        }

        /// Every run option, in the order help texts list them.
        pub const OPTIONS: &[OptSpec] = &[
            $(OptSpec { long: $long, short: $short, value_name: $value_name, choices: &[$($choice),*], help: $help, takes: <$ty as OptKind>::TAKES },)*
        ];

        impl RunOpts {
            fn slot(&mut self, long: &str) -> Option<&mut dyn OptValue> {
                match long {
                    $($long => Some(&mut self.$field),)*
                    _ => None,
                }
            }

            fn given(&self, long: &str) -> Vec<Option<&OsString>> {
                match long {
                    $($long => self.$field.each(),)*
                    _ => Vec::new(),
                }
            }
        }
    };
}

run_options! {
    tender: Option<OsString> = ("--tender", None, "TENDER", ["spt", "hvt"], "Which tender runs the image: spt, a seccomp-sandboxed process, or hvt, a KVM virtual machine (default spt).");
    fs: Option<OsString> = ("--fs", None, "DIR", [], "A directory to serve as the root file system (read-only archive; writes stay in memory).");
    argv0: Option<OsString> = ("--argv0", None, "NAME", [], "The program's argv[0] (default: the image path).");
    mem: Option<OsString> = ("--mem", None, "SIZE", [], "Guest memory: bytes, or a number with K, M or G (default 256M).");
    env: Vec<OsString> = ("--env", Some("-e"), "KEY=VALUE", [], "An environment variable for the program (repeatable).");
    mem_mode: Option<OsString> = ("--mem-mode", None, "MEM_MODE", ["copy", "ksm", "pool"], "How guest memory is filled: copy, ksm (copy + MADV_MERGEABLE) or pool (code and rodata from the library pool) (default copy).");
    pool_fallback: bool = ("--pool-fallback", None, "", [], "With --mem-mode pool: run in copy mode (with a warning) if the pool cannot serve the image.");
    single_process: bool = ("--single-process", None, "", [], "spt: this process becomes the instance, with no waiting parent (less memory per instance; a kill from outside gets no message).");
    publish: Vec<OsString> = ("--publish", Some("-p"), "[HOSTADDR:]HOSTPORT:GUESTPORT[/udp]", [], "Open HOSTPORT (on 127.0.0.1 unless HOSTADDR) for the guest's GUESTPORT (repeatable).");
    listen_fd: Vec<OsString> = ("--listen-fd", None, "N", [], "A listening socket inherited as descriptor N, attached to the guest's first listen (repeatable).");
    net_outbound: bool = ("--net-outbound", None, "", [], "Let the guest open sockets of its own and connect out.");
    net_allow: Vec<OsString> = ("--net-allow", None, "CIDR[:PORT]", [], "hvt: outbound connections and datagrams only to these destinations (repeatable; implies --net-outbound).");
    net_bind_any: bool = ("--net-bind-any", None, "", [], "The guest may bind any port: the tender binds that host address and port when the guest does, with its own rights (for an instance in a network namespace of its own, as shoal-oci runs containers; on the host's namespace the guest may take any free port).");
    volume: Option<OsString> = ("--volume", None, "HOSTDIR:GUESTDIR", [], "HOSTDIR's files at GUESTDIR in the guest; what the program leaves there is written back to HOSTDIR when it exits (not after a crash or a kill).");
    mount: Vec<OsString> = ("--mount", None, "HOSTDIR:GUESTDIR:ro|rw", [], "HOSTDIR served live at GUESTDIR in the guest (repeatable): lookups, stat, directory listings, reads and private mappings; with `:rw` also creating, writing, truncating, removing, renaming and making directories beneath it; nothing outside HOSTDIR is reached (symbolic links and `..` are resolved inside the guest's own file system).");
    inject: Option<OsString> = ("--inject", None, "COMPONENT:KIND@N", [], "Make kernel COMPONENT fail at its N-th call, for tests of component recovery: KIND panic, wild-write or hang.");
    rejuvenate_every: Option<OsString> = ("--rejuvenate-every", None, "SECONDS", [], "Reboot the rebootable kernel components (vfs, ramfs, time, process, sysinfo, user, net; implies --recover-stateful) one by one, one every SECONDS (software rejuvenation).");
    watchdog: Option<OsString> = ("--watchdog", None, "MS", [], "Reboot a rebootable kernel component whose call runs longer than MS milliseconds (the hang watchdog; default 1000; `off` turns it off).");
    stop_timeout: Option<OsString> = ("--stop-timeout", None, "SECONDS", [], "Stop the guest from the host when a SIGTERM or SIGHUP sent to this process is still untaken by its kernel after SECONDS (default 5; a second signal while one is untaken stops it at once); status 128+n as a death by it.");
    no_recover: bool = ("--no-recover", None, "", [], "No component gates: system calls go straight to the kernel components; nothing is rebooted (a component's failure ends the instance).");
    recover_stateful: bool = ("--recover-stateful", None, "", [], "Make vfs, ramfs, process and net rebootable too: their calls are logged and replayed after a reboot (costs about 1.25x CPU on file-system-heavy programs; implied by --inject into one of them and by --rejuvenate-every).");
    log_shrink: Option<OsString> = ("--log-shrink", None, "N", [], "vfs's call log drops the records of closed descriptors when N of them are pending (VampOS's log-shrink threshold); default 1 (at close); `never` keeps them (implies --recover-stateful).");
    log_report: bool = ("--log-report", None, "", [], "When the instance ends, print the size of vfs's call log on stderr (implies --recover-stateful).");
    uid_range: Option<OsString> = ("--uid-range", None, "START:COUNT", [], "spt, as root: run the instance as a uid and gid of its own from START..START+COUNT-1, one no other running instance holds (default: every instance runs as nobody).");
    cwd: Option<OsString> = ("--cwd", None, "DIR", [], "The program's working directory at start: an absolute path in the guest's file system, which must be a directory there (default /).");
    user: Option<OsString> = ("--user", None, "UID:GID", [], "The user and group ids the program sees (getuid, getgid and their kin; default 0:0). The instance's host identity does not change.");
    seccomp_deny: Option<OsString> = ("--seccomp-deny", None, "NR=ERRNO,...", [], "System calls of the program the guest's kernel refuses with ERRNO instead of running them (a container's seccomp profile; shoal-oci sets it).");
    hostname: Option<OsString> = ("--hostname", None, "NAME", [], "The guest's host name: uname's node name, what `hostname` prints (default shoal). A guest's sethostname changes only its own.");
}

impl RunOpts {
    /// The options as `shoal-tender` arguments (long spellings, in
    /// [`OPTIONS`]' order), for a caller that runs the lean command.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out = Vec::new();
        for o in OPTIONS {
            for v in self.given(o.long) {
                out.push(OsString::from(o.long));
                out.extend(v.cloned());
            }
        }
        out
    }
}

/// `shoal-tender`'s usage text, from [`OPTIONS`].
pub fn usage() -> String {
    const COLUMN: usize = 29;
    const WIDTH: usize = 100;
    let mut s = String::from("usage: shoal-tender [OPTIONS] IMAGE [-- ARGS...]\nRuns one shoal image (the lean form of `shoal run`).\n");
    for o in OPTIONS {
        let mut left = format!("  {}{}", o.short.map(|c| format!("{c}, ")).unwrap_or_default(), o.long);
        match (o.takes, o.choices.is_empty()) {
            (Takes::Flag, _) => {}
            (_, false) => left.push_str(&format!(" {}", o.choices.join("|"))),
            (_, true) => left.push_str(&format!(" {}", o.value_name)),
        }
        let mut line = if left.len() < COLUMN { format!("{left:COLUMN$}") } else { format!("{left}\n{:COLUMN$}", "") };
        let mut used = COLUMN;
        for word in o.help.split(' ') {
            if used + word.len() + 1 > WIDTH && used > COLUMN {
                line.push_str(&format!("\n{:COLUMN$}", ""));
                used = COLUMN;
            }
            if used > COLUMN {
                line.push(' ');
                used += 1;
            }
            line.push_str(word);
            used += word.len();
        }
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// `shoal run`'s options through clap: the same table, so that the full
/// command and the lean one cannot drift apart.
#[cfg(feature = "clap")]
mod clap_args {
    use super::{OptSpec, RunOpts, Takes, OPTIONS};
    use clap::{Arg, ArgAction, ArgMatches, Command};

    fn arg(o: &OptSpec) -> Arg {
        let mut a = Arg::new(o.id()).long(o.id()).help(o.help);
        if let Some(s) = o.short.and_then(|s| s.chars().nth(1)) {
            a = a.short(s);
        }
        match o.takes {
            Takes::Flag => return a.action(ArgAction::SetTrue),
            Takes::One => a = a.action(ArgAction::Set),
            Takes::Many => a = a.action(ArgAction::Append),
        }
        a = a.value_name(o.value_name);
        if o.choices.is_empty() {
            a.value_parser(clap::value_parser!(std::ffi::OsString))
        } else {
            a.value_parser(clap::builder::PossibleValuesParser::new(o.choices))
        }
    }

    impl clap::Args for RunOpts {
        fn augment_args(cmd: Command) -> Command {
            OPTIONS.iter().fold(cmd, |c, o| c.arg(arg(o)))
        }
        fn augment_args_for_update(cmd: Command) -> Command {
            Self::augment_args(cmd)
        }
    }

    impl clap::FromArgMatches for RunOpts {
        fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
            let mut opts = RunOpts::default();
            opts.update_from_arg_matches(m)?;
            Ok(opts)
        }
        fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
            for o in OPTIONS {
                let Some(slot) = self.slot(o.long) else { continue };
                match o.takes {
                    Takes::Flag if m.get_flag(o.id()) => slot.put(None),
                    Takes::Flag => {}
                    Takes::One | Takes::Many => {
                        for v in m.get_raw(o.id()).into_iter().flatten() {
                            slot.put(Some(v.to_os_string()));
                        }
                    }
                }
            }
            Ok(())
        }
    }
}

/// Parses a size: bytes, or a number with a K, M or G suffix.
pub fn parse_size(s: &str) -> Result<u64, ArgsError> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(ArgsError::BadSize(s.into())),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| ArgsError::BadSize(s.into()))?;
    n.checked_mul(mult).and_then(|b| b.checked_next_multiple_of(4096)).ok_or_else(|| ArgsError::SizeTooLarge(s.into()))
}

/// Checks a value against an option's allowed words ([`OptSpec::choices`]).
fn choice<'a>(long: &str, value: &'a str) -> Result<&'a str, ArgsError> {
    let o = OPTIONS.iter().find(|o| o.long == long).filter(|o| !o.choices.is_empty());
    match o {
        Some(o) if !o.choices.contains(&value) => Err(ArgsError::BadChoice { option: o.long, value: value.into(), allowed: o.choices.join(", ") }),
        _ => Ok(value),
    }
}

/// Parses a memory mode name.
pub fn parse_mode(s: &str) -> Result<MemoryMode, ArgsError> {
    Ok(match choice("--mem-mode", s)? {
        "ksm" => MemoryMode::Ksm,
        "pool" => MemoryMode::Pool,
        _ => MemoryMode::Copy,
    })
}

/// Parses a tender name.
pub fn parse_tender(s: &str) -> Result<Tender, ArgsError> {
    Ok(match choice("--tender", s)? {
        "hvt" => Tender::Hvt,
        _ => Tender::Spt,
    })
}

/// An option's value as text (a path keeps its bytes elsewhere).
fn text(v: &Option<OsString>) -> Option<String> {
    v.as_ref().map(|v| v.to_string_lossy().into_owned())
}

fn texts(v: &[OsString]) -> Vec<String> {
    v.iter().map(|v| v.to_string_lossy().into_owned()).collect()
}

impl RunArgs {
    /// Checks and assembles the first options; the `with_*` steps add the rest.
    #[allow(clippy::too_many_arguments)]
    fn new(
        tender: Tender,
        fs: Option<PathBuf>,
        mem: &str,
        env: Vec<String>,
        mode: MemoryMode,
        pool_fallback: bool,
        single_process: bool,
        image: PathBuf,
        args: Vec<OsString>,
    ) -> Result<RunArgs, ArgsError> {
        let bytes = parse_size(mem)?;
        if bytes < 1 << 20 {
            let m = mem.trim();
            let hint = if m.bytes().all(|b| b.is_ascii_digit()) {
                format!("a size without K, M or G is in bytes: did you mean {m}M?")
            } else {
                "a size is bytes, or a number with K, M or G".into()
            };
            return Err(ArgsError::SizeTooSmall(m.to_string(), hint));
        }
        let mem = bytes;
        if image.is_dir() {
            return Err(ArgsError::ImageIsDirectory(image));
        }
        if let Some(e) = env.iter().find(|e| !e.contains('=')) {
            return Err(ArgsError::BadEnv(e.clone()));
        }
        if let Some(dir) = fs.as_ref().filter(|d| !d.is_dir()) {
            return Err(ArgsError::NoFsDir(dir.clone()));
        }
        Ok(RunArgs {
            tender,
            argv0: None,
            fs,
            mem,
            env,
            mode,
            pool_fallback,
            single_process,
            publish: Vec::new(),
            listen_fds: Vec::new(),
            net_outbound: false,
            net_allow: Vec::new(),
            net_bind_any: false,
            volume: None,
            mounts: Vec::new(),
            inject: None,
            rejuvenate_ns: 0,
            watchdog_ns: shoal_loader::inject::DEFAULT_WATCHDOG_NS,
            stop_timeout_ns: shoal_loader::stop::DEFAULT_STOP_TIMEOUT_NS,
            no_recover: false,
            recover_stateful: false,
            log_shrink: 0,
            log_report: false,
            uid_range: None,
            cwd: Vec::new(),
            user: (0, 0),
            hostname: Vec::new(),
            syscall_errno: Vec::new(),
            image,
            executable: None,
            args,
        })
    }

    /// Checks the options as given ([`RunOpts`]) for `image` and the
    /// program's arguments: the one check `shoal run`, `shoal-tender` and
    /// `shoal serve` share.
    pub fn from_opts(o: &RunOpts, image: PathBuf, args: Vec<OsString>) -> Result<RunArgs, ArgsError> {
        let tender = text(&o.tender).map(|t| parse_tender(&t)).transpose()?.unwrap_or_default();
        let asked = text(&o.mem_mode).map(|m| parse_mode(&m)).transpose()?;
        let mode = asked.unwrap_or(MemoryMode::Copy);
        let mem = text(&o.mem).unwrap_or_else(|| DEFAULT_MEM.into());
        let fs = o.fs.clone().map(PathBuf::from);
        let mut a = RunArgs::new(tender, fs, &mem, texts(&o.env), mode, o.pool_fallback, o.single_process, image, args)?;
        a.argv0 = o.argv0.clone();
        if let Some(built) = executable_image(&a.image)? {
            // The program's argv[0] stays the path given, as Linux gives it.
            a.argv0 = a.argv0.or_else(|| Some(a.image.clone().into_os_string()));
            if asked.is_none() && a.tender == Tender::Spt && std::fs::metadata(&a.image).is_ok_and(|m| m.len() >= POOL_DEFAULT_MIN) {
                // A large executable (Node's 99 MB): pool mode unless asked
                // otherwise (docs/design.md "Memory and sharing").
                a.mode = MemoryMode::Pool;
                a.pool_fallback = true;
            }
            a.executable = Some(std::mem::replace(&mut a.image, built));
        }
        a.with_net(&texts(&o.publish), &texts(&o.listen_fd), o.net_outbound)?
            .with_allow(&texts(&o.net_allow))?
            .with_bind_any(o.net_bind_any)?
            .with_volume(text(&o.volume).as_deref())?
            .with_mounts(&texts(&o.mount))?
            .with_inject(text(&o.inject).as_deref())?
            .with_rejuvenation(text(&o.rejuvenate_every).as_deref())?
            .with_watchdog(text(&o.watchdog).as_deref(), o.no_recover)?
            .with_stateful_recovery(o.recover_stateful)?
            .with_stop_timeout(text(&o.stop_timeout).as_deref())?
            .with_log_shrink(text(&o.log_shrink).as_deref(), o.log_report)?
            .with_uid_range(text(&o.uid_range).as_deref())?
            .with_identity(text(&o.cwd).as_deref(), text(&o.user).as_deref())?
            .with_hostname(text(&o.hostname).as_deref())?
            .with_seccomp_deny(text(&o.seccomp_deny).as_deref())
    }

    /// Adds `--seccomp-deny NR=ERRNO,...`.
    pub fn with_seccomp_deny(mut self, deny: Option<&str>) -> Result<RunArgs, ArgsError> {
        let Some(d) = deny else { return Ok(self) };
        let mut table = vec![0u8; shoal_loader::SECCOMP_CALLS];
        for pair in d.split(',') {
            let parsed = pair.split_once('=').and_then(|(n, e)| Some((n.parse::<usize>().ok()?, e.parse::<u8>().ok()?)));
            match parsed {
                Some((n, e)) if n < table.len() && e != 0 => table[n] = e,
                _ => return Err(ArgsError::SeccompDeny(d.into())),
            }
        }
        self.syscall_errno = table;
        Ok(self)
    }

    /// Adds `--hostname NAME`, checked as Linux's sethostname checks a
    /// name (at most `HOST_NAME_MAX` bytes), and without what no host name
    /// holds (NUL, `/`).
    pub fn with_hostname(mut self, name: Option<&str>) -> Result<RunArgs, ArgsError> {
        if let Some(n) = name {
            if n.is_empty() || n.len() > shoal_loader::HOSTNAME_MAX || n.contains(['\0', '/']) {
                return Err(ArgsError::Hostname(n.into()));
            }
            self.hostname = n.as_bytes().to_vec();
        }
        Ok(self)
    }

    /// Adds `--cwd DIR` and `--user UID:GID`: where the program starts and
    /// the ids it sees (the guest's kernel checks DIR at boot).
    pub fn with_identity(mut self, cwd: Option<&str>, user: Option<&str>) -> Result<RunArgs, ArgsError> {
        if let Some(c) = cwd {
            if !c.starts_with('/') || c.len() > shoal_loader::CWD_PATH_MAX || c.contains('\0') {
                return Err(ArgsError::Cwd(c.into()));
            }
            self.cwd = c.as_bytes().to_vec();
        }
        if let Some(u) = user {
            let ids = u.split_once(':').and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
            self.user = ids.ok_or_else(|| ArgsError::User(u.into()))?;
        }
        Ok(self)
    }

    /// Parses `shoal-tender`'s arguments (without the program name).
    /// `Ok(None)` means `--help` was asked for.
    pub fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<Option<RunArgs>, ArgsError> {
        let mut it = argv.into_iter();
        let mut opts = RunOpts::default();
        let (mut image, mut args): (Option<PathBuf>, Vec<OsString>) = (None, Vec::new());
        while let Some(a) = it.next() {
            let text = a.to_string_lossy().into_owned();
            // `--opt=value` and `--opt value` are both accepted.
            let (opt, inline) = match text.split_once('=') {
                Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(OsString::from(v))),
                _ => (text.clone(), None),
            };
            if opt == "-h" || opt == "--help" {
                return Ok(None);
            }
            if text == "--" {
                args.extend(it.by_ref());
                break;
            }
            let spec = OPTIONS.iter().find(|o| o.long == opt || o.short == Some(opt.as_str()));
            match spec {
                // A flag given a value (`--net-outbound=1`) is no option.
                Some(o) if o.takes == Takes::Flag && inline.is_some() => return Err(ArgsError::UnknownOption(text)),
                Some(o) => {
                    let value = match o.takes {
                        Takes::Flag => None,
                        _ => Some(inline.or_else(|| it.next()).ok_or_else(|| ArgsError::MissingValue(opt.clone()))?),
                    };
                    if let Some(v) = &value {
                        choice(o.long, &v.to_string_lossy())?;
                    }
                    if let Some(slot) = opts.slot(o.long) {
                        slot.put(value);
                    }
                }
                None if text.starts_with('-') && text != "-" => return Err(ArgsError::UnknownOption(text)),
                None => match image.take() {
                    None => image = Some(PathBuf::from(a)),
                    Some(first) => return Err(ArgsError::TwoImages(first, PathBuf::from(a))),
                },
            }
        }
        let image = image.ok_or(ArgsError::NoImage)?;
        RunArgs::from_opts(&opts, image, args).map(Some)
    }

    /// Adds `--volume HOSTDIR:GUESTDIR` (HOSTDIR must exist; refused with
    /// `--single-process` on spt, where no parent is left to write it).
    pub fn with_volume(mut self, spec: Option<&str>) -> Result<RunArgs, ArgsError> {
        if let Some(spec) = spec {
            let v = shoal_loader::volume::Volume::parse(spec)?;
            if self.single_process && self.tender == Tender::Spt {
                return Err(ArgsError::VolumeSingleProcess);
            }
            self.volume = Some(v);
        }
        Ok(self)
    }

    /// Adds `--mount HOSTDIR:GUESTDIR:ro` (each HOSTDIR must exist).
    pub fn with_mounts(mut self, specs: &[String]) -> Result<RunArgs, ArgsError> {
        let mounts = specs.iter().map(|s| shoal_loader::mount::Mount::parse(s)).collect::<Result<Vec<_>, _>>()?;
        shoal_loader::mount::check_all(&mounts)?;
        self.mounts = mounts;
        Ok(self)
    }

    /// Adds `--inject COMPONENT:KIND@N` (a fault the kernel injects into
    /// one of its components, for tests of recovery).
    pub fn with_inject(mut self, spec: Option<&str>) -> Result<RunArgs, ArgsError> {
        self.inject = spec.map(shoal_loader::inject::parse).transpose()?;
        Ok(self)
    }

    /// Adds `--rejuvenate-every SECONDS` (software rejuvenation of the
    /// rebootable kernel components).
    pub fn with_rejuvenation(mut self, period: Option<&str>) -> Result<RunArgs, ArgsError> {
        self.rejuvenate_ns = period.map(shoal_loader::inject::parse_period).transpose()?.unwrap_or(0);
        Ok(self)
    }

    /// Adds `--watchdog MS|off` and `--no-recover` (refused with
    /// `--inject`, `--rejuvenate-every` or `--watchdog`, which need the
    /// gates).
    pub fn with_watchdog(mut self, limit: Option<&str>, no_recover: bool) -> Result<RunArgs, ArgsError> {
        if let Some(l) = limit {
            self.watchdog_ns = shoal_loader::inject::parse_watchdog(l)?;
        }
        if no_recover {
            let clash = [(self.inject.is_some(), "--inject"), (self.rejuvenate_ns != 0, "--rejuvenate-every"), (limit.is_some(), "--watchdog")];
            if let Some((_, opt)) = clash.iter().find(|(on, _)| *on) {
                return Err(ArgsError::NoRecover(opt));
            }
            self.watchdog_ns = 0;
        }
        self.no_recover = no_recover;
        Ok(self)
    }

    /// Adds `--stop-timeout SECONDS`: how long a forwarded SIGTERM or
    /// SIGHUP may wait untaken by the guest's kernel before the tender
    /// stops the guest itself (`shoal_loader::stop`).
    pub fn with_stop_timeout(mut self, secs: Option<&str>) -> Result<RunArgs, ArgsError> {
        if let Some(s) = secs {
            self.stop_timeout_ns = shoal_loader::stop::parse_stop_timeout(s)?;
        }
        Ok(self)
    }

    /// Adds `--recover-stateful` (vfs, ramfs, process and net rebootable too,
    /// their calls logged; refused with `--no-recover`).
    pub fn with_stateful_recovery(mut self, on: bool) -> Result<RunArgs, ArgsError> {
        if on && self.no_recover {
            return Err(ArgsError::NoRecover("--recover-stateful"));
        }
        self.recover_stateful = on;
        Ok(self)
    }

    /// Adds `--log-shrink N|never` (vfs's log keeps closed sessions until
    /// N are pending) and `--log-report` (the log's size at exit); each
    /// implies `--recover-stateful` and is refused with `--no-recover`.
    pub fn with_log_shrink(mut self, n: Option<&str>, report: bool) -> Result<RunArgs, ArgsError> {
        if report && self.no_recover {
            return Err(ArgsError::NoRecover("--log-report"));
        }
        self.log_report = report;
        if let Some(n) = n {
            if self.no_recover {
                return Err(ArgsError::NoRecover("--log-shrink"));
            }
            self.log_shrink = shoal_loader::inject::parse_log_shrink(n)?;
        }
        Ok(self)
    }

    /// Adds the network options: `--publish` specs, `--listen-fd`
    /// descriptor numbers (which must be open, above 2), `--net-outbound`.
    pub fn with_net(mut self, publish: &[String], listen_fds: &[String], outbound: bool) -> Result<RunArgs, ArgsError> {
        for p in publish {
            let new = shoal_loader::net::Publish::parse(p)?;
            // Two sockets cannot take one host port: say so, rather than
            // "in use" from the second bind. Port 0 (any free port) can
            // be given any number of times.
            let twice = self.publish.iter().any(|o| {
                new.host_port != 0
                    && o.host_port == new.host_port
                    && o.udp == new.udp
                    && (o.host == new.host || o.host.is_unspecified() || new.host.is_unspecified())
            });
            if twice {
                let proto = if new.udp { "/udp" } else { "" };
                return Err(ArgsError::PublishedTwice(p.clone(), format!("{}{proto}", std::net::SocketAddr::new(new.host, new.host_port))));
            }
            self.publish.push(new);
        }
        for v in listen_fds {
            // SAFETY: F_GETFD only asks whether the descriptor is open.
            let open = |n: &i32| unsafe { libc::fcntl(*n, libc::F_GETFD) } >= 0;
            self.listen_fds.push(v.parse::<i32>().ok().filter(|n| *n > 2 && open(n)).ok_or_else(|| ArgsError::BadFd(v.clone()))?);
        }
        self.net_outbound = outbound;
        Ok(self)
    }

    /// Adds the `--net-allow CIDR[:PORT]` rules: outbound connections and
    /// datagrams only to these destinations (enforced by the hvt VMM).
    pub fn with_allow(mut self, allow: &[String]) -> Result<RunArgs, ArgsError> {
        for a in allow {
            self.net_allow.push(shoal_loader::net::Allow::parse(a)?);
        }
        Ok(self)
    }

    /// Adds `--uid-range START:COUNT` (spt only, and not with
    /// `--single-process`: the waiting parent holds the uid).
    pub fn with_uid_range(mut self, spec: Option<&str>) -> Result<RunArgs, ArgsError> {
        if let Some(spec) = spec {
            let r = shoal_loader::uids::UidRange::parse(spec)?;
            if self.tender == Tender::Hvt {
                return Err(ArgsError::UidRangeHvt);
            }
            if self.single_process {
                return Err(ArgsError::UidRangeSingleProcess);
            }
            self.uid_range = Some(r);
        }
        Ok(self)
    }

    /// Adds `--net-bind-any` (refused with `--single-process` on spt,
    /// where no parent is left to bind the host sockets).
    pub fn with_bind_any(mut self, on: bool) -> Result<RunArgs, ArgsError> {
        if on && self.single_process && self.tender == Tender::Spt {
            return Err(ArgsError::BindAnySingleProcess);
        }
        self.net_bind_any = on;
        Ok(self)
    }

    /// The loader's configuration for these arguments. A `--listen-fd`
    /// descriptor is taken over: this process must not use it afterwards.
    pub fn config(&self) -> RunConfig {
        let mut cfg = RunConfig::new(self.image.clone(), self.mem);
        if let Some(a0) = &self.argv0 {
            cfg.argv = vec![a0.clone()];
        }
        cfg.argv.extend(self.args.iter().cloned());
        cfg.env = self.env.iter().map(Into::into).collect();
        cfg.fs = self.fs.clone().map(FsSource::Dir);
        cfg.mode = self.mode;
        cfg.pool_fallback = self.pool_fallback;
        cfg.net.publish = self.publish.clone();
        cfg.net.outbound = self.net_outbound || !self.net_allow.is_empty();
        cfg.net.allow = self.net_allow.clone();
        cfg.net.bind_any = self.net_bind_any;
        cfg.volume = self.volume.clone();
        cfg.mounts = self.mounts.clone();
        cfg.inject = self.inject;
        cfg.rejuvenate_ns = self.rejuvenate_ns;
        cfg.watchdog_ns = self.watchdog_ns;
        cfg.stop_timeout_ns = self.stop_timeout_ns;
        cfg.no_recover = self.no_recover;
        cfg.recover_stateful = self.recover_stateful;
        cfg.log_shrink = self.log_shrink;
        cfg.log_report = self.log_report;
        cfg.uid_range = self.uid_range;
        cfg.cwd = self.cwd.clone();
        (cfg.guest_uid, cfg.guest_gid) = self.user;
        cfg.hostname = self.hostname.clone();
        cfg.syscall_errno = self.syscall_errno.clone();
        cfg.net.listen_fds = self
            .listen_fds
            .iter()
            // SAFETY: the caller handed descriptor N over with --listen-fd N
            // (checked open by `parse`); nothing else in this process owns
            // it.
            .map(|&fd| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
            .collect();
        cfg
    }
}

/// Where executables' instance images and the kernel image they are
/// built on are kept: `$SHOAL_CACHE/exec`, by default
/// `~/.cache/shoal/exec` (where `shoal run` builds them).
pub fn exec_cache_dir() -> Option<PathBuf> {
    let cache = match std::env::var_os("SHOAL_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/shoal"),
    };
    Some(std::path::absolute(&cache).unwrap_or(cache).join("exec"))
}

/// The kernel image this process chose with [`use_exec_kernel`].
static EXEC_KERNEL: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes [`exec_kernel_image`] answer `image` in this process: `shoal`
/// builds (or finds) the kernel image of the kernel it was pointed at and
/// runs executables on that very file, whatever another command did to
/// [`exec_kernel_link`] since. Only the first call counts.
pub fn use_exec_kernel(image: PathBuf) {
    let _ = EXEC_KERNEL.set(image);
}

/// The link in [`exec_cache_dir`] to the kernel image that `shoal` built
/// from this command's source tree last (`kernel-TREE.img`, named by a
/// hash of the tree's path): where the lean `shoal-tender`, `shoal-oci`
/// and a `shoal` that did not build one look. The images themselves are
/// named by the content of what goes into them
/// (`kernel-<SHA-256>.img`, `shoal`'s `exec_cmd.rs`), so a kernel
/// image is never stale, and two checkouts sharing the cache — whose
/// kernels and tenders may speak different hypercall sets — each point
/// at their own.
pub fn exec_kernel_link() -> Option<PathBuf> {
    // FNV-1a: a name, not a defence (the cache is the user's own).
    let tree = env!("CARGO_MANIFEST_DIR").bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    exec_cache_dir().map(|d| d.join(format!("kernel-{tree:016x}.img")))
}

/// The kernel image executables run on: the one chosen with
/// [`use_exec_kernel`], else the file [`exec_kernel_link`] points at
/// (resolved, so that what is cached by its path and times, and the
/// manifest beside it, are the image's own).
pub fn exec_kernel_image() -> Option<PathBuf> {
    if let Some(k) = EXEC_KERNEL.get() {
        return Some(k.clone());
    }
    let link = exec_kernel_link()?;
    Some(std::fs::canonicalize(&link).unwrap_or(link))
}

/// Whether `image` is an ELF file that is not a shoal image: what
/// [`executable_image`] builds an instance image around.
pub fn is_executable(image: &Path) -> bool {
    shoal_exec::is_linux_executable_file(image)
}

/// If `image` is an unmodified Linux executable rather than a shoal
/// image: the instance image `shoal-exec` builds around it (once; later
/// calls find it in the cache by the file's inode, size and times, or by
/// content). `None` for anything else,
/// including a file that cannot be read (the tender says why).
/// Every command that takes an image passes here, through
/// [`RunArgs::from_opts`].
pub fn executable_image(image: &Path) -> Result<Option<PathBuf>, ArgsError> {
    // An executable started before, unchanged: found by its inode, size
    // and times, neither read nor hashed again.
    if let (Some(dir), Some(kernel)) = (exec_cache_dir(), exec_kernel_image()) {
        if let Some(built) = shoal_exec::cached(image, &kernel, &dir) {
            return Ok(Some(built));
        }
    }
    if !is_executable(image) {
        return Ok(None);
    }
    let no_kernel = |k: &Path| ArgsError::NoExecKernel { exe: image.display().to_string(), kernel: k.display().to_string() };
    let (Some(dir), Some(kernel)) = (exec_cache_dir(), exec_kernel_image()) else {
        return Err(no_kernel(Path::new("~/.cache/shoal/exec (no HOME or SHOAL_CACHE)")));
    };
    if !kernel.is_file() {
        return Err(no_kernel(&kernel));
    }
    Ok(Some(shoal_exec::prepared(image, &kernel, &dir)?))
}

/// A run that could not start or failed in its tender.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The spt tender's error.
    #[error(transparent)]
    Spt(#[from] shoal_spt::SptError),
    /// The hvt tender's error.
    #[error(transparent)]
    Hvt(#[from] shoal_hvt::HvtError),
    /// An executable's instance image could not be added to the pool.
    #[error("cannot add the instance image of {0} to the library pool: {1}")]
    Pool(PathBuf, shoal_loader::pool::PoolError),
    /// An allow-list asked of spt, which cannot enforce it.
    #[error("--net-allow needs --tender hvt: on spt the guest makes its socket calls on the host itself, which can limit ports but not addresses")]
    SptAllow,
}

/// Executables at least this large run in memory mode `pool` on spt
/// unless `--mem-mode` says otherwise: copying them into every instance
/// was most of a start (67 % of `node -e 0`) and of an idle instance's
/// memory, while the pool maps the same pages into every instance from
/// one copy in /dev/shm. Smaller ones are copied: the pool keeps its
/// copy in memory until `shoal pool gc`, which pays only for a large
/// executable.
pub const POOL_DEFAULT_MIN: u64 = 32 << 20;

/// Runs the image; returns the guest's exit status. With
/// [`RunArgs::single_process`] on spt it returns only errors: the process
/// ends with the instance.
pub fn run(args: &RunArgs) -> Result<i32, RunError> {
    if let (Some(exe), MemoryMode::Pool) = (&args.executable, args.mode) {
        // An executable's instance image is built on demand, so its
        // read-only pages (the kernel's and the rewritten executable's)
        // go to the pool here, once, like `shoal pool add` of an image
        // (and again if a file was removed since).
        let pool = shoal_loader::pool::Pool::default_pool();
        if !pool.holds(&args.image) {
            match pool.add(&args.image) {
                Ok(_) => {}
                // With the fallback (the default for a large executable)
                // the pool's refusal comes as its warning, in copy mode.
                Err(_) if args.pool_fallback => {}
                Err(e) => return Err(RunError::Pool(exe.clone(), e)),
            }
        }
    }
    let cfg = args.config();
    Ok(match args.tender {
        Tender::Spt if !args.net_allow.is_empty() => return Err(RunError::SptAllow),
        Tender::Spt if args.single_process => match shoal_spt::run_in_place(&cfg)? {},
        Tender::Spt => shoal_spt::run(&cfg)?,
        Tender::Hvt => shoal_hvt::run(&cfg)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Option<RunArgs>, ArgsError> {
        RunArgs::parse(v.iter().map(OsString::from))
    }

    #[test]
    fn parses_the_options_of_shoal_run() {
        let a = parse(&[
            "--tender",
            "hvt",
            "--mem=64M",
            "-e",
            "A=1",
            "--env",
            "B=2",
            "--mem-mode",
            "pool",
            "--pool-fallback",
            "--single-process",
            "img",
            "--",
            "x",
            "--y",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(a.tender, Tender::Hvt);
        assert_eq!(a.mem, 64 << 20);
        assert_eq!(a.env, ["A=1", "B=2"]);
        assert_eq!(a.mode, MemoryMode::Pool);
        assert!(a.pool_fallback);
        assert!(a.single_process);
        assert_eq!(a.image, PathBuf::from("img"));
        assert_eq!(a.args, [OsString::from("x"), OsString::from("--y")]);
        assert_eq!(a.config().argv, [OsString::from("img"), OsString::from("x"), OsString::from("--y")], "argv[0] is the image by default");
        let named = parse(&["--argv0", "sleep", "/proc/self/fd/5", "--", "1"]).unwrap().unwrap();
        assert_eq!(named.config().argv, [OsString::from("sleep"), OsString::from("1")]);
        let d = parse(&["img"]).unwrap().unwrap();
        assert_eq!((d.tender, d.mem, d.mode, d.single_process), (Tender::Spt, 256 << 20, MemoryMode::Copy, false));
        assert!(parse(&["--help"]).unwrap().is_none());
        let n = parse(&["--net-allow", "127.0.0.1/32:80", "--net-allow=10.0.0.0/8", "img"]).unwrap().unwrap();
        assert_eq!(n.net_allow.len(), 2);
        assert!(!n.net_outbound && n.config().net.outbound, "--net-allow implies outbound");
        let b = parse(&["--net-bind-any", "img"]).unwrap().unwrap();
        assert!(b.net_bind_any && b.config().net.bind_any && !b.config().net.outbound, "--net-bind-any is inbound only");
        assert!(!d.net_bind_any);
    }

    #[test]
    fn options_spelled_back_parse_to_the_same() {
        let given = [
            "--tender=hvt",
            "--mem",
            "64M",
            "-e",
            "A=1",
            "--mem-mode",
            "ksm",
            "--net-outbound",
            "-p",
            "0:80",
            "--watchdog",
            "250",
            "--log-shrink",
            "4",
            "--log-report",
            "img",
        ];
        let a = parse(&given).unwrap().unwrap();
        let mut opts = RunOpts { tender: Some("hvt".into()), mem: Some("64M".into()), mem_mode: Some("ksm".into()), net_outbound: true, ..Default::default() };
        opts.env.push("A=1".into());
        opts.publish.push("0:80".into());
        opts.watchdog = Some("250".into());
        opts.log_shrink = Some("4".into());
        opts.log_report = true;
        let mut spelled = opts.to_args();
        assert_eq!(spelled[..4], [OsString::from("--tender"), "hvt".into(), "--mem".into(), "64M".into()]);
        spelled.push("img".into());
        assert_eq!(RunArgs::parse(spelled).unwrap().unwrap(), a);
        assert_eq!(RunArgs::from_opts(&opts, "img".into(), Vec::new()).unwrap(), a);
        assert!(a.log_report && a.log_shrink == 4, "shoal-tender takes every option shoal run takes");
        let help = usage();
        assert!(help.starts_with("usage: shoal-tender"));
        for o in OPTIONS {
            assert!(help.contains(o.long), "{} missing from the usage text", o.long);
        }
    }

    #[test]
    fn bad_arguments_are_one_sentence_errors() {
        let msg = |v: &[&str]| parse(v).unwrap_err().to_string();
        assert_eq!(msg(&["--bogus", "img"]), "unknown option --bogus (see --help)");
        assert_eq!(msg(&["--mem"]), "--mem needs a value");
        assert_eq!(msg(&["--mem", "12Q", "img"]), "--mem 12Q is not a size (bytes, or a number with K, M or G)");
        assert_eq!(msg(&["--mem", "99999999999G", "img"]), "--mem 99999999999G is too large");
        assert_eq!(msg(&["--tender", "xen", "img"]), "--tender xen: expected one of spt, hvt");
        assert_eq!(msg(&["--mem-mode", "dedup", "img"]), "--mem-mode dedup: expected one of copy, ksm, pool");
        assert_eq!(msg(&["-e", "NOEQUALS", "img"]), "--env NOEQUALS: expected KEY=VALUE");
        assert_eq!(msg(&["--fs", "/nonexistent-shoal-dir", "img"]), "--fs /nonexistent-shoal-dir: no such directory");
        assert!(msg(&[]).starts_with("no image given"));
        assert!(msg(&["--single-process", "--net-bind-any", "img"]).starts_with("--net-bind-any cannot be used with --single-process on spt"));
        assert!(parse(&["--tender", "hvt", "--single-process", "--net-bind-any", "img"]).is_ok(), "hvt is one process anyway");
        assert!(msg(&["a", "b"]).starts_with("more than one image given"));
        assert!(msg(&["--net-allow", "10.0.0.0/40", "img"]).starts_with("--net-allow 10.0.0.0/40: expected CIDR[:PORT]"));
        assert_eq!(msg(&["--volume", "/tmp", "img"]), "--volume /tmp: expected HOSTDIR:GUESTDIR (GUESTDIR absolute)");
        assert_eq!(msg(&["--volume", "/tmp:/data", "--single-process", "img"]), ArgsError::VolumeSingleProcess.to_string());
        assert!(parse(&["--volume", "/tmp:/data", "--single-process", "--tender", "hvt", "img"]).is_ok());
        assert!(msg(&["--uid-range", "0:5", "img"]).starts_with("--uid-range 0:5: expected START:COUNT"));
        assert_eq!(msg(&["--cwd", "srv", "img"]), "--cwd srv: expected an absolute path of at most 255 bytes");
        assert_eq!(msg(&["--user", "1000", "img"]), "--user 1000: expected UID:GID (two numbers)");
        let c = parse(&["--cwd", "/srv", "--user", "5:6", "img"]).unwrap().unwrap().config();
        assert_eq!((c.cwd.as_slice(), c.guest_uid, c.guest_gid), (&b"/srv"[..], 5, 6));
        assert_eq!(parse(&["--hostname", "web-1", "img"]).unwrap().unwrap().config().hostname, b"web-1");
        let e = parse(&["--seccomp-deny", "170=1,90=13", "img"]).unwrap().unwrap().config().syscall_errno;
        assert_eq!((e.len(), e[170], e[90], e[0]), (shoal_abi::SECCOMP_CALLS, 1, 13, 0));
        for bad in ["170", "512=1", "170=0", "170=256", "x=1"] {
            assert!(msg(&["--seccomp-deny", bad, "img"]).starts_with(&format!("--seccomp-deny {bad}: expected NR=ERRNO")), "{bad}");
        }
        assert_eq!(msg(&["--hostname", "a/b", "img"]), "--hostname \"a/b\": expected 1 to 63 bytes without NUL or '/'");
        assert_eq!(msg(&["--hostname", &"x".repeat(64), "img"]), format!("--hostname {:?}: expected 1 to 63 bytes without NUL or '/'", "x".repeat(64)));
        assert_eq!(msg(&["--uid-range", "100000:10", "--single-process", "img"]), ArgsError::UidRangeSingleProcess.to_string());
        assert_eq!(msg(&["--uid-range", "100000:10", "--tender", "hvt", "img"]), ArgsError::UidRangeHvt.to_string());
        assert_eq!(
            parse(&["--uid-range", "100000:10", "img"]).unwrap().unwrap().config().uid_range,
            Some(shoal_loader::uids::UidRange { start: 100000, count: 10 })
        );
        assert_eq!(msg(&["--inject", "disk:panic@1", "img"]).lines().count(), 1);
        assert!(msg(&["--inject", "time:spin@1", "img"]).contains("fault kind `spin` is not supported"));
        assert_eq!(
            parse(&["--inject", "time:hang@1", "img"]).unwrap().unwrap().inject.map(|i| i.kind),
            Some(shoal_loader::inject::Inject { component: 6, kind: 3, at: 1 }.kind)
        );
        assert_eq!(msg(&["--watchdog", "0", "img"]), "--watchdog 0: expected milliseconds, 1 to 3600000, or `off` (e.g. 1000)");
        assert_eq!(
            msg(&["--no-recover", "--rejuvenate-every", "1", "img"]),
            "--no-recover turns component recovery off; it cannot be used with --rejuvenate-every"
        );
        assert_eq!(msg(&["--stop-timeout", "0", "img"]), "--stop-timeout 0: expected whole seconds, 1 to 86400 (e.g. 5)");
        assert_eq!(parse(&["img"]).unwrap().unwrap().config().stop_timeout_ns, 5_000_000_000);
        assert_eq!(parse(&["--stop-timeout=30", "img"]).unwrap().unwrap().config().stop_timeout_ns, 30_000_000_000);
        let w = parse(&["--watchdog", "250", "img"]).unwrap().unwrap();
        assert_eq!((w.config().watchdog_ns, w.config().no_recover), (250_000_000, false));
        let off = parse(&["--no-recover", "img"]).unwrap().unwrap();
        assert_eq!((off.config().watchdog_ns, off.config().no_recover), (0, true));
        // Logging the stateful components: asked for, or implied by what needs it.
        let flags = |args: &[&str]| parse(args).unwrap().unwrap().config().recover_flags();
        assert_eq!(flags(&["img"]), 0);
        assert_eq!(flags(&["--inject", "time:panic@1", "img"]), 0);
        assert_eq!(flags(&["--recover-stateful", "img"]), shoal_abi::RECOVER_STATEFUL);
        assert_eq!(flags(&["--inject", "ramfs:panic@1", "img"]), shoal_abi::RECOVER_STATEFUL);
        assert_eq!(flags(&["--inject", "process:hang@1", "img"]), shoal_abi::RECOVER_STATEFUL);
        assert_eq!(flags(&["--inject", "net:wild-write@9", "img"]), shoal_abi::RECOVER_STATEFUL);
        assert_eq!(flags(&["--inject", "mm:panic@1", "img"]), 0);
        assert_eq!(flags(&["--rejuvenate-every", "1", "img"]), shoal_abi::RECOVER_STATEFUL);
        assert_eq!(flags(&["--no-recover", "img"]), shoal_abi::RECOVER_OFF);
        assert_eq!(msg(&["--no-recover", "--recover-stateful", "img"]), "--no-recover turns component recovery off; it cannot be used with --recover-stateful");
        assert!(msg(&["--rejuvenate-every", "0", "img"]).starts_with("--rejuvenate-every 0: expected seconds"));
        assert_eq!(parse(&["--rejuvenate-every", "0.25", "img"]).unwrap().unwrap().rejuvenate_ns, 250_000_000);
        let a = parse(&["--inject=time:panic@2", "img"]).unwrap().unwrap();
        assert_eq!(a.inject, Some(shoal_loader::inject::Inject { component: 6, kind: 1, at: 2 }));
        assert_eq!(parse_size("1000").unwrap(), 4096);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("M").is_err());
        assert_eq!(
            msg(&["--mem", "10", "img"]),
            "--mem 10 is too small for any instance (at least 1M; a size without K, M or G is in bytes: did you mean 10M?)"
        );
        assert_eq!(msg(&["--mem", "512K", "img"]), "--mem 512K is too small for any instance (at least 1M; a size is bytes, or a number with K, M or G)");
        assert_eq!(msg(&["-p", "18096:8080", "-p", "18096:8081", "img"]), "--publish 18096:8081: host port 127.0.0.1:18096 is published twice");
        assert_eq!(
            msg(&["-p", "0.0.0.0:18096:80", "-p", "127.0.0.1:18096:81", "img"]),
            "--publish 127.0.0.1:18096:81: host port 127.0.0.1:18096 is published twice"
        );
        assert!(parse(&["-p", "18096:80", "-p", "18096:80/udp", "-p", "0:81", "-p", "0:82", "img"]).unwrap().is_some(), "TCP and UDP, and any free port twice");
        let dir = std::env::temp_dir();
        assert_eq!(msg(&[dir.to_str().unwrap()]), format!("{} is a directory, not an image", dir.display()));
    }
}
