//! `shoal-oci`: shoal as an OCI runtime (docs/design.md "Serving functions"). podman, containerd's
//! runc shim and through them Kubernetes start containers by calling a
//! runtime binary with runc's command line; `shoal-oci` answers it, and
//! each container is one shoal instance: the image named by
//! `process.args[0]` inside the bundle's root file system, run by
//! `shoal-tender` on spt or hvt.
//!
//! Where things are: `config` (config.json and its mapping), `state`
//! (`--root` and the status), `lifecycle` (create/start/kill/delete),
//! `hooks`, `cgroup`, `sys` (FIFO, terminal, signals).
//!
//! Errors are printed as one line on stderr (`shoal-oci: …`) and, with
//! `--log`, appended to the log in `--log-format` (containerd's shim
//! reads the last JSON line of its log.json to report a failure).

mod cgroup;
mod config;
mod exec;
mod hooks;
mod lifecycle;
mod seccomp;
mod state;
mod sys;
mod syscalls;

use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "shoal-oci", about = "Runs shoal images as OCI containers (runc's command line).", disable_version_flag = true)]
struct Cli {
    /// Where container state is kept (a tmpfs, as for runc).
    #[arg(long, global = true, default_value = "/run/shoal-oci")]
    root: PathBuf,
    /// Append errors and warnings to this file.
    #[arg(long, global = true)]
    log: Option<PathBuf>,
    /// The format of --log.
    #[arg(long = "log-format", global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Accepted: systemd's `slice:prefix:name` cgroup paths are placed
    /// where systemd would put them, without asking systemd.
    #[arg(long = "systemd-cgroup", global = true)]
    systemd_cgroup: bool,
    /// Accepted for compatibility (nothing more is logged).
    #[arg(long, global = true)]
    debug: bool,
    /// Accepted for compatibility (shoal-oci runs as root).
    #[arg(long, global = true)]
    rootless: Option<String>,
    /// Print the version.
    #[arg(short = 'v', long)]
    version: bool,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a container: its process waits for `start`.
    Create {
        /// The bundle directory (config.json and the root file system).
        #[arg(short, long, default_value = ".")]
        bundle: PathBuf,
        /// Write the container process's pid here.
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// A unix socket that receives the terminal's master (process.terminal).
        #[arg(long)]
        console_socket: Option<PathBuf>,
        /// Keep descriptors 3..3+N open for the container.
        #[arg(long, default_value_t = 0)]
        preserve_fds: u32,
        /// Accepted: there is no pivot_root (the instance confines itself).
        #[arg(long)]
        no_pivot: bool,
        /// Accepted: the guest has no session keyring.
        #[arg(long)]
        no_new_keyring: bool,
        /// The container id.
        id: String,
    },
    /// Start a created container's program.
    Start {
        /// The container id.
        id: String,
    },
    /// Print a container's state (the OCI state JSON).
    State {
        /// The container id.
        id: String,
    },
    /// Send a signal to a container's process.
    Kill {
        /// Signal every process of the container, not only the tender.
        #[arg(short, long)]
        all: bool,
        /// The container id.
        id: String,
        /// A signal name (TERM, SIGKILL) or number.
        #[arg(default_value = "TERM")]
        signal: String,
    },
    /// Delete a stopped container (--force: kill it first).
    Delete {
        /// Kill a running container first.
        #[arg(short, long)]
        force: bool,
        /// The container id.
        id: String,
    },
    /// Print what this runtime supports (JSON).
    Features,
    /// List the container's processes: the tender and its instance.
    Ps {
        /// `table` (default) or `json` (a list of pids, as containerd asks).
        #[arg(long, default_value = "table")]
        format: String,
        /// The container id.
        id: String,
    },
    /// Set new resource limits (the container's cgroups).
    Update {
        /// The `linux.resources` JSON to apply, from a file or `-` (stdin).
        #[arg(short, long)]
        resources: Option<PathBuf>,
        /// Memory limit in bytes.
        #[arg(short, long)]
        memory: Option<i64>,
        /// CPU shares (relative weight).
        #[arg(long)]
        cpu_shares: Option<u64>,
        /// CPU CFS period in microseconds.
        #[arg(long)]
        cpu_period: Option<u64>,
        /// CPU CFS quota in microseconds per period.
        #[arg(long)]
        cpu_quota: Option<i64>,
        /// Most tasks.
        #[arg(long)]
        pids_limit: Option<i64>,
        /// The container id.
        id: String,
    },
    /// Run another program in a container: a sibling instance with the
    /// container's root file system, mounts, network and cgroups.
    Exec {
        /// An OCI process JSON file (args, env, cwd, user, terminal).
        #[arg(short, long)]
        process: Option<PathBuf>,
        /// Write the new process's pid here.
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// A unix socket that receives the terminal's master.
        #[arg(long)]
        console_socket: Option<PathBuf>,
        /// Return once the program runs (the caller reaps it).
        #[arg(short, long)]
        detach: bool,
        /// Give the program a pseudo-terminal.
        #[arg(short, long)]
        tty: bool,
        /// The working directory in the container.
        #[arg(long)]
        cwd: Option<String>,
        /// More environment, NAME=VALUE.
        #[arg(short, long)]
        env: Vec<String>,
        /// UID[:GID] the program sees.
        #[arg(short, long)]
        user: Option<String>,
        /// Keep descriptors 3..3+N open for the program.
        #[arg(long, default_value_t = 0)]
        preserve_fds: u32,
        /// Accepted: the instance confines itself (no capabilities, seccomp or LSM labels to set).
        #[arg(long)]
        no_new_privs: bool,
        /// Accepted and ignored, as above.
        #[arg(short, long)]
        cap: Vec<String>,
        /// Accepted and ignored, as above.
        #[arg(long)]
        apparmor: Option<String>,
        /// Accepted and ignored, as above.
        #[arg(long)]
        process_label: Option<String>,
        /// The container id.
        id: String,
        /// The program and its arguments (without --process).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Anything else runc has (pause, checkpoint, …).
    #[command(external_subcommand)]
    Other(Vec<String>),
}

/// Where errors and warnings go.
struct Log {
    path: Option<PathBuf>,
    format: LogFormat,
}

impl Log {
    fn write(&self, level: &str, msg: &str) {
        let msg = msg.replace('\n', " ");
        let line = match self.format {
            LogFormat::Json => serde_json::json!({"level": level, "msg": msg, "time": state::now_rfc3339()}).to_string(),
            LogFormat::Text => format!("time=\"{}\" level={level} msg={:?}", state::now_rfc3339(), msg),
        };
        if let Some(p) = &self.path {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
                let _ = writeln!(f, "{line}");
            }
        }
    }
}

fn features() -> serde_json::Value {
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": state::OCI_VERSION,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": [],
        "linux": {
            "namespaces": ["network"],
            "capabilities": [],
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {"enabled": true, "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_LOG", "SCMP_ACT_TRACE"], "operators": []},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": {
            "org.shoal.tenders": "spt,hvt",
            "org.shoal.mem-modes": "copy,ksm,pool"
        }
    })
}

fn run(cli: &Cli, log: &Log) -> anyhow::Result<ExitCode> {
    let root = state::Root(cli.root.clone());
    let warn = |m: &str| {
        if log.path.is_some() {
            log.write("warning", m);
        } else {
            eprintln!("shoal-oci: warning: {m}");
        }
    };
    match cli.cmd.as_ref() {
        None => {
            anyhow::bail!("no command given (see --help)");
        }
        Some(Cmd::Create { bundle, pid_file, console_socket, preserve_fds, id, .. }) => lifecycle::create(
            &root,
            &lifecycle::CreateArgs { id, bundle, pid_file: pid_file.as_deref(), console_socket: console_socket.as_deref(), preserve_fds: *preserve_fds },
            &warn,
        )?,
        Some(Cmd::Start { id }) => lifecycle::start(&root, id, &warn)?,
        Some(Cmd::State { id }) => println!("{}", lifecycle::state(&root, id)?),
        Some(Cmd::Kill { all, id, signal }) => lifecycle::kill(&root, id, signal, *all)?,
        Some(Cmd::Delete { force, id }) => lifecycle::delete(&root, id, *force, &warn)?,
        Some(Cmd::Features) => println!("{}", serde_json::to_string_pretty(&features())?),
        Some(Cmd::Ps { format, id }) => {
            let pids = lifecycle::pids(&root, id)?;
            match format.as_str() {
                "json" => println!("{}", serde_json::to_string(&pids)?),
                "table" => {
                    println!("PID");
                    for p in pids {
                        println!("{p}");
                    }
                }
                f => anyhow::bail!("invalid format option {f:?} (table or json)"),
            }
        }
        Some(Cmd::Update { resources, memory, cpu_shares, cpu_period, cpu_quota, pids_limit, id }) => {
            let mut res = match resources.as_deref() {
                Some(p) => {
                    let text = if p == std::path::Path::new("-") {
                        let mut t = Vec::new();
                        std::io::Read::read_to_end(&mut std::io::stdin(), &mut t).map_err(|e| anyhow::anyhow!("cannot read the resources from stdin: {e}"))?;
                        t
                    } else {
                        std::fs::read(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?
                    };
                    serde_json::from_slice(&text).map_err(|e| anyhow::anyhow!("the resources are not valid linux.resources JSON: {e}"))?
                }
                None => config::Resources::default(),
            };
            if let Some(m) = memory {
                res.memory.get_or_insert_with(Default::default).limit = Some(*m);
            }
            if cpu_shares.is_some() || cpu_period.is_some() || cpu_quota.is_some() {
                let cpu = res.cpu.get_or_insert_with(Default::default);
                cpu.shares = cpu_shares.or(cpu.shares);
                cpu.period = cpu_period.or(cpu.period);
                cpu.quota = cpu_quota.or(cpu.quota);
            }
            if let Some(l) = pids_limit {
                res.pids = Some(config::Pids { limit: *l });
            }
            lifecycle::update(&root, id, &res)?
        }
        Some(Cmd::Exec { process, pid_file, console_socket, detach, tty, cwd, env, user, preserve_fds, id, command, .. }) => {
            let a = exec::ExecArgs {
                id,
                process: process.as_deref(),
                args: command,
                pid_file: pid_file.as_deref(),
                console_socket: console_socket.as_deref(),
                detach: *detach,
                tty: *tty,
                cwd: cwd.as_deref(),
                env,
                user: user.as_deref(),
                preserve_fds: *preserve_fds,
            };
            let code = exec::exec(&root, &a, &warn)?;
            if code != 0 {
                return Ok(ExitCode::from(u8::try_from(code).unwrap_or(255)));
            }
        }
        Some(Cmd::Other(args)) => {
            let name = args.first().map(String::as_str).unwrap_or_default();
            anyhow::bail!("shoal-oci does not support {name:?}: a shoal container runs one program, its image, in a unikernel guest (no pause or checkpoint)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.version {
        println!("shoal-oci version {}\nspec: {}", env!("CARGO_PKG_VERSION"), state::OCI_VERSION);
        return ExitCode::SUCCESS;
    }
    let _ = (cli.systemd_cgroup, cli.debug, &cli.rootless);
    let log = Log { path: cli.log.clone(), format: cli.log_format };
    match run(&cli, &log) {
        Ok(code) => code,
        Err(e) => {
            let msg = e.to_string();
            log.write("error", &msg);
            eprintln!("shoal-oci: {}", msg.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}
